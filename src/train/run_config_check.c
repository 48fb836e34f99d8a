/* A run's config.json, checked as set-up would check its options (run_config_check.h). */
#include "run_config_check.h"

#include "sdp/check.h"
#include "sdp/data.h"
#include "sdp/ops.h"
#include "sdp/plan.h"
#include "sdp/resnet.h"
#include "sdp/transformer.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* A value as the file has it, for the message: 12, 0.5, "text". */
typedef struct {
    char s[OPT_STR_MAX + 8];
} value_text;

static value_text int_v(int v) {
    value_text t;
    snprintf(t.s, sizeof t.s, "%d", v);
    return t;
}

static value_text num_v(double v) {
    value_text t;
    snprintf(t.s, sizeof t.s, "%g", v);
    return t;
}

static value_text str_v(const char *v) {
    value_text t;
    snprintf(t.s, sizeof t.s, "\"%s\"", v);
    return t;
}

__attribute__((format(printf, 4, 5))) static _Noreturn void
bad(const char *path, const char *key, const value_text *value, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    sdp_fatal("%s: \"%s\" is %s, which %s: the file is damaged or was edited; restore it or start "
              "a new run",
              path, key, value->s, why);
}

#define BAD_INT(key, v, ...)                                                                       \
    do {                                                                                           \
        const value_text t_ = int_v(v);                                                            \
        bad(path, key, &t_, __VA_ARGS__);                                                          \
    } while (0)
#define BAD_NUM(key, v, ...)                                                                       \
    do {                                                                                           \
        const value_text t_ = num_v(v);                                                            \
        bad(path, key, &t_, __VA_ARGS__);                                                          \
    } while (0)
#define BAD_STR(key, v, ...)                                                                       \
    do {                                                                                           \
        const value_text t_ = str_v(v);                                                            \
        bad(path, key, &t_, __VA_ARGS__);                                                          \
    } while (0)

/* The image datasets sdp reads, and the images of their official training splits. */
static const struct {
    const char *name;
    int channels, size, classes, train_images;
} DATASETS[] = {{"fashion-mnist", 1, 28, 10, 60000},
                {"mnist", 1, 28, 10, 60000},
                {"cifar10", 3, 32, 10, 50000},
                {"cifar100", 3, 32, 100, 50000}};
enum { NDATASETS = sizeof DATASETS / sizeof *DATASETS };

static int find_dataset(const char *name) {
    for (int i = 0; i < NDATASETS; i++)
        if (!strcmp(name, DATASETS[i].name)) return i;
    return -1;
}

bool train_run_dataset_lookup(const char *name, run_data_shape *out) {
    const int i = find_dataset(name);
    if (i < 0) return false;
    *out = (run_data_shape){.channels = DATASETS[i].channels,
                            .image_size = DATASETS[i].size,
                            .classes = DATASETS[i].classes};
    return true;
}

bool train_run_image_shape_known(double channels, double size, double classes) {
    for (int i = 0; i < NDATASETS; i++)
        if (channels == DATASETS[i].channels && size == DATASETS[i].size &&
            classes == DATASETS[i].classes)
            return true;
    return false;
}

static bool one_of(const char *s, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(s, *names)) return true;
    return false;
}

/* ---- string options: among their allowed values ------------------------------------------- */

static void check_choices(const train_opts *o, const char *path) {
    char names[128];
    if (!sdp_model_family_find(o->model))
        BAD_STR("model", o->model, "is not a model sdp knows (%s)",
                sdp_model_family_names(names, sizeof names));
    static const char *const OPTIMIZERS[] = {"adamw", "sgd", NULL};
    static const char *const DEVICES[] = {"cpu", "cuda", "emulated", "emulated-shared", NULL};
    static const char *const PRECISIONS[] = {"fp32", "bf16", NULL};
    if (!one_of(o->optimizer, OPTIMIZERS))
        BAD_STR("optimizer", o->optimizer, "is not adamw or sgd");
    sdp_mask_mode mask;
    sdp_unit_kind unit;
    sdp_assign_kind assign;
    sdp_branch_scale scale;
    sdp_gemm_provider gemm;
    if (!sdp_mask_mode_parse(o->sdp_mask, &mask))
        BAD_STR("sdp-mask", o->sdp_mask, "is not none, forward or backward");
    if (!sdp_unit_kind_parse(o->sdp_unit, &unit))
        BAD_STR("sdp-unit", o->sdp_unit, "is not neuron or block");
    if (!sdp_assign_kind_parse(o->sdp_assign, &assign))
        BAD_STR("sdp-assign", o->sdp_assign, "is not cyclic or random");
    if (strcmp(o->branch_scale, "auto") && !sdp_branch_scale_parse(o->branch_scale, &scale))
        BAD_STR("branch-scale", o->branch_scale, "is not auto, none or inverse");
    if (!sdp_gemm_provider_parse(o->gemm, &gemm))
        BAD_STR("gemm", o->gemm, "is not dnnl or openblas");
    if (!one_of(o->device, DEVICES))
        BAD_STR("device", o->device, "is not cpu, cuda, emulated or emulated-shared");
    static const char *const RECOMPUTE[] = {"none", "layer", NULL};
    if (!one_of(o->recompute, RECOMPUTE))
        BAD_STR("recompute", o->recompute, "is not none or layer");
    if (!one_of(o->precision, PRECISIONS))
        BAD_STR("precision", o->precision, "is not fp32 or bf16");
    if (o->zero < 0 || o->zero > 2) BAD_INT("zero", o->zero, "is not 0, 1 or 2");
    if (!strcmp(o->precision, "bf16") && strcmp(o->device, "cuda"))
        BAD_STR("precision", o->precision, "needs \"device\" \"cuda\", and \"device\" is \"%s\"",
                o->device);
}

/* ---- the optimizer, the schedule, the plan, the simulation ------------------------------- */

/* Whether train_run_load_data would read o->data as text (and so use --val-frac): not a glob, not a
 * .bin name, not a file that starts with the shard magic. */
static bool data_is_text(const train_opts *o) {
    const size_t n = strlen(o->data);
    if (!n || strpbrk(o->data, "*?[") || (n >= 4 && !strcmp(o->data + n - 4, ".bin"))) return false;
    struct stat st;
    FILE *f = stat(o->data, &st) == 0 && S_ISREG(st.st_mode) ? fopen(o->data, "rb") : NULL;
    if (!f) return true; /* the loader says what is wrong with it */
    int32_t magic = 0;
    const bool shard = fread(&magic, sizeof magic, 1, f) == 1 && magic == SDP_SHARD_MAGIC;
    fclose(f);
    return !shard;
}

static void check_training(const train_opts *o, const char *path) {
    if (!(o->beta1 < 1)) BAD_NUM("beta1", o->beta1, "is not below 1");
    if (!(o->beta2 < 1)) BAD_NUM("beta2", o->beta2, "is not below 1");
    if (o->warmup > o->steps) BAD_INT("warmup", o->warmup, "exceeds \"steps\" (%d)", o->steps);
    if (o->lr_min > o->lr) BAD_NUM("lr-min", o->lr_min, "exceeds \"lr\" (%g)", o->lr);
    if (strcmp(o->sdp_mask, "none") && o->sdp_owners == 0 &&
        !(o->sdp_coverage > 0 && o->sdp_coverage <= 1))
        BAD_NUM("sdp-coverage", o->sdp_coverage, "is not a fraction of the workers in (0, 1]");
    if (o->sim_world == 0 && o->sim_rank != 0)
        BAD_INT("sim-rank", o->sim_rank, "needs \"sim-world\", which is 0");
    if (o->sim_world > 0 && o->sim_rank >= o->sim_world)
        BAD_INT("sim-rank", o->sim_rank, "is not a worker of \"sim-world\" %d", o->sim_world);
    if (!sdp_model_family_find(o->model)->images && !(o->val_frac < 1) && data_is_text(o))
        BAD_NUM("val-frac", o->val_frac, "is not below 1");
}

/* ---- the model: sizes it can describe, batches it can build ------------------------------- */

static void check_resnet(const train_opts *o, const char *path) {
    if (!sdp_resnet_depth_ok(o->arch.depth))
        BAD_INT("depth", o->arch.depth,
                "is not a CIFAR ResNet depth (18 or 34, or 6n+2 such as 20, 32, 44, 56 or 110, "
                "at most %d)",
                SDP_RESNET_MAX_DEPTH);
    const int most = sdp_resnet_max_width(o->arch.depth);
    if (o->arch.channels > most)
        BAD_INT("channels", o->arch.channels,
                "makes the last stage wider than 65536 channels (at most %d at depth %d)", most,
                o->arch.depth);
}

static void check_transformer(const train_opts *o, const run_data_shape *data, bool images,
                              const char *path) {
    sdp_tf_config t = {.model = o->arch};
    snprintf(t.model.arch, sizeof t.model.arch, "%s", sdp_model_family_find(o->model)->arch);
    SDP_ASSERT(sdp_tf_style_parse(o->model, &t.style));
    if (o->arch.layers > SDP_TF_MAX_LAYERS)
        BAD_INT("layers", o->arch.layers, "is more than sdp describes (at most %d)",
                SDP_TF_MAX_LAYERS);
    if (o->arch.width > SDP_TF_MAX_WIDTH)
        BAD_INT("width", o->arch.width, "is more than sdp describes (at most %d)",
                SDP_TF_MAX_WIDTH);
    if (o->arch.d_ff > SDP_TF_MAX_D_FF)
        BAD_INT("d-ff", o->arch.d_ff, "is more than sdp describes (at most 2^20)");
    if (o->arch.width % o->arch.heads)
        BAD_INT("heads", o->arch.heads, "does not divide \"width\" (%d)", o->arch.width);
    if (t.style == SDP_STYLE_LLAMA && (o->arch.width / o->arch.heads) % 2)
        BAD_INT("heads", o->arch.heads,
                "with \"width\" %d gives heads of %d, and llama's RoPE needs an even head size",
                o->arch.width, o->arch.width / o->arch.heads);
    if (images) { /* vit: a sequence of patches and the class token; a class per token */
        const int s = data->image_size;
        if (s % o->arch.patch)
            BAD_INT("patch", o->arch.patch, "does not divide the %dx%d images of \"dataset\" %s", s,
                    s, o->dataset);
        t.model.seq_len = (s / o->arch.patch) * (s / o->arch.patch) + 1;
        t.model.classes = data->classes;
    } else {
        if (o->arch.seq_len > SDP_TF_MAX_SEQ)
            BAD_INT("seq-len", o->arch.seq_len, "is more than sdp describes (at most 2^20)");
        if (o->arch.vocab == 1)
            BAD_INT("vocab", o->arch.vocab, "is below 2 (0: the data's vocabulary)");
        if (o->arch.vocab > SDP_TF_MAX_VOCAB)
            BAD_INT("vocab", o->arch.vocab, "is more than sdp describes (at most 2^24)");
        if (!t.model.vocab) t.model.vocab = 2; /* the data's: at least 2 */
    }
    const double params = sdp_tf_params_estimate(&t);
    if (params >= SDP_TF_MAX_PARAMS)
        BAD_INT("width", o->arch.width,
                "with %d \"layers\" makes a model of %.3g parameters, more than sdp holds (at most "
                "2^40)",
                o->arch.layers, params);
    if (!sdp_tf_batch_fits(&t, o->batch, t.model.seq_len))
        BAD_INT("batch", o->batch,
                "with sequences of %d (%s) is too large for the model's activations (at most 2^31 "
                "values in one tensor)",
                t.model.seq_len, images ? "patches and the class token" : "\"seq-len\"");
}

void train_run_config_check(const train_opts *o, const char *path) {
    check_choices(o, path);
    check_training(o, path);
    const sdp_model_family *f = sdp_model_family_find(o->model);
    run_data_shape data = {0};
    if (f->images && !train_run_dataset_lookup(o->dataset, &data))
        BAD_STR("dataset", o->dataset, "is not fashion-mnist, mnist, cifar10 or cifar100");
    /* Every step takes a batch from each worker's share of the training images (the loader's
     * check), so no run that trained had more in a batch than its dataset's training split. */
    const int n = f->images ? DATASETS[find_dataset(o->dataset)].train_images : 0;
    if (f->images && o->batch > n)
        BAD_INT("batch", o->batch, "is more than the %d training images of \"dataset\" %s", n,
                o->dataset);
    if (!strcmp(o->model, "resnet"))
        check_resnet(o, path);
    else
        check_transformer(o, &data, f->images, path);
}
