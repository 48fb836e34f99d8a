#include "run.h"
#include "run_config_check.h"

#include "sdp/check.h"
#include "sdp/subnet.h"

#include <glob.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void train_run_path(char *out, size_t n, const char *dir, const char *name) {
    int len = snprintf(out, n, "%s/%s", dir, name);
    SDP_CHECK(len > 0 && (size_t)len < n, "path too long: %s/%s", dir, name);
}

char *train_run_read_text(const char *path) {
    FILE *f = sdp_fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    SDP_CHECK(n >= 0, "cannot read %s", path);
    char *s = sdp_xmalloc((size_t)n + 1, "reading a run's file");
    SDP_CHECK(fread(s, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
    s[n] = 0;
    fclose(f);
    return s;
}

/* What every config.json has recorded since the first: the model, the data and the training. A
 * key missing from these is damage, where a default would train or evaluate another run unseen.
 * Options added since may be missing from an older run's file: their defaults are the behaviour
 * it ran with. */
static const char *const RECORDED_FROM_THE_FIRST[] = {
    "model",        "layers",     "heads",    "width",        "d-ff",       "seq-len",
    "vocab",        "rope-theta", "data",     "val-data",     "val-frac",   "batch",
    "grad-accum",   "steps",      "warmup",   "lr",           "lr-min",     "optimizer",
    "weight-decay", "decay-all",  "beta1",    "beta2",        "eps",        "momentum",
    "nesterov",     "clip",       "sdp-mask", "sdp-unit",     "sdp-owners", "sdp-coverage",
    "sdp-assign",   "sdp-chunks", "sdp-seed", "branch-scale", "seed",       NULL};

void train_run_load_config(train_opts *o, run_resolved *resolved, const char *dir) {
    char path[1024];
    train_run_path(path, sizeof path, dir, "config.json");
    SDP_CHECK(access(path, F_OK) == 0,
              "'%s' is not a run directory (no config.json): pass the directory that "
              "sdp train wrote",
              dir);
    char *txt = train_run_read_text(path);
    train_opts_set_defaults(TRAIN_OPTS, o);
    train_opts_from_json(TRAIN_OPTS, o, txt, path, RECORDED_FROM_THE_FIRST);
    train_run_config_check(o, path);
    snprintf(o->config_file, sizeof o->config_file, "%s", path);
    run_resolved record; /* checked even when the caller does not want it */
    train_run_resolved_from_json(resolved ? resolved : &record, txt, path);
    free(txt);
}

static bool starts_with_shard_magic(const char *path) {
    if (access(path, F_OK) != 0) return false; /* the text loader says that it is missing */
    FILE *f = sdp_fopen_input_all(path, "data file", NULL);
    int32_t magic = 0;
    bool shard = fread(&magic, sizeof magic, 1, f) == 1 && magic == SDP_SHARD_MAGIC;
    fclose(f);
    return shard;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Whether --data names llm.c shards. A glob pattern or a name ending in .bin promises shards, and
 * the shard loader then checks every file as one, so that a wrong magic is an error rather than
 * a file quietly trained on as text. Any other single file is a shard only when it starts with
 * the shard magic. */
bool train_run_data_is_shards(const char *pattern) {
    struct stat st;
    const bool literal = !strpbrk(pattern, "*?[") || stat(pattern, &st) == 0;
    if (!literal || ends_with(pattern, ".bin")) return true;
    return starts_with_shard_magic(pattern);
}

void train_run_load_data(const train_opts *o, sdp_tokens *train, sdp_tokens *val, sdp_mem *mem) {
    /* Every rank reads the same files, so each sees these alike. */
    SDP_CHECK_ALL(
        o->data[0],
        "no training data: pass --data FILE (a text file such as "
        "tinyshakespeare.txt, see the README) or --data 'DIR/*train*.bin' (llm.c shards)");
    memset(train, 0, sizeof *train);
    if (val) memset(val, 0, sizeof *val);
    if (train_run_data_is_shards(o->data)) {
        sdp_tokens_load_shards(train, o->data, mem);
        if (val && o->val_data[0]) {
            sdp_tokens_load_shards(val, o->val_data, mem);
            SDP_CHECK_ALL(val->ntokens > 0,
                          "--val-data '%s' holds no tokens, so there would be no validation: "
                          "point it at shards with tokens, or drop it",
                          o->val_data);
        }
    } else {
        SDP_CHECK_ALL(!o->val_data[0],
                      "--val-data is for llm.c shards; '%s' is text, whose "
                      "validation split is set by --val-frac",
                      o->data);
        SDP_CHECK_ALL(o->val_frac < 1.0, "--val-frac must be below 1 (got %g)", o->val_frac);
        sdp_tokens_load_text(train, val && o->val_frac > 0 ? val : NULL, o->data,
                             val ? o->val_frac : 0.0, mem);
    }
}

bool train_run_images(const train_opts *o) {
    const sdp_model_family *f = sdp_model_family_find(o->model);
    return f && f->images;
}

sdp_model_config train_run_model_config(const train_opts *o, run_data_shape data) {
    const int data_vocab = data.vocab;
    sdp_model_config c = o->arch; /* the options; then the family, and what the data decides */
    char names[128];
    SDP_CHECK(strlen(o->model) < sizeof c.arch && sdp_model_family_find(o->model),
              "unknown --model '%s': use %s", o->model,
              sdp_model_family_names(names, sizeof names));
    strcpy(c.arch, o->model);
    c.in_channels = data.channels;
    c.image_size = data.image_size;
    c.classes = data.classes;
    if (!c.vocab) c.vocab = data_vocab;
    /* Every rank reads the same data, so each sees these alike, after loading it. */
    SDP_CHECK_ALL(
        c.vocab >= data_vocab || !o->config_file[0],
        "%s: \"vocab\" is %d, which is smaller than the data's vocabulary (%d tokens): the "
        "file is damaged or was edited, or the data changed; restore them or start a new run",
        o->config_file, c.vocab, data_vocab);
    SDP_CHECK_ALL(c.vocab >= data_vocab,
                  "--vocab %d is smaller than the data's vocabulary (%d tokens): raise it or use 0",
                  c.vocab, data_vocab);
    c.recompute = train_opts_recompute(o);
    train_run_family(&c)->finish_config(&c);
    return c;
}

const sdp_model_family *train_run_family(const sdp_model_config *cfg) {
    const sdp_model_family *f = sdp_model_family_find(cfg->arch);
    char names[128];
    SDP_CHECK(f, "unknown model '%s': use %s", cfg->arch,
              sdp_model_family_names(names, sizeof names));
    return f;
}

sdp_opt_cfg train_run_optimizer_config(const train_opts *o) {
    sdp_opt_kind kind;
    if (strcmp(o->optimizer, "adamw") == 0)
        kind = SDP_OPT_ADAMW;
    else if (strcmp(o->optimizer, "sgd") == 0)
        kind = SDP_OPT_SGD;
    else
        sdp_fatal("unknown --optimizer '%s': use adamw or sgd", o->optimizer);
    sdp_opt_cfg c = sdp_opt_defaults(kind);
    c.beta1 = (float)o->beta1;
    c.beta2 = (float)o->beta2;
    c.eps = (float)o->eps;
    c.momentum = (float)o->momentum;
    c.nesterov = o->nesterov;
    if (o->weight_decay >= 0) c.weight_decay = (float)o->weight_decay;
    SDP_CHECK(o->beta1 < 1 && o->beta2 < 1, "--beta1 and --beta2 must be below 1");
    sdp_opt_cfg_check(&c);
    return c;
}

sdp_gemm_provider train_run_gemm(const train_opts *o) {
    sdp_gemm_provider p;
    SDP_CHECK(sdp_gemm_provider_parse(o->gemm, &p), "unknown --gemm '%s': use dnnl or openblas",
              o->gemm);
    return p;
}

void train_run_create_worker_model(sdp_model *m, const sdp_model_config *cfg, const sdp_plan *p,
                                   const sdp_layout *full, int rank, int B, int T,
                                   sdp_model_mode mode) {
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, p, full, rank);
    train_run_family(cfg)->create(m, cfg, &spec, B, T, mode);
    sdp_subnet_spec_free(&spec);
}

void train_run_full_layout(sdp_layout *full, const sdp_model_config *cfg) {
    train_run_family(cfg)->describe_full(full, cfg);
}

run_data_shape train_run_dataset_shape(const train_opts *o) {
    run_data_shape s = {.vocab = o->arch.vocab ? o->arch.vocab : 256};
    if (!train_run_images(o)) return s;
    SDP_CHECK(train_run_dataset_lookup(o->dataset, &s),
              "unknown --dataset '%s': use fashion-mnist, mnist, cifar10 or cifar100", o->dataset);
    return s;
}
