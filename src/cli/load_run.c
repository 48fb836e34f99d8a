#include "load_run.h"
#include "train/run_config_check.h"
#include "train/trainer.h"

#include "sdp/check.h"
#include "sdp/checkpoint.h"
#include "sdp/transformer.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* An image model's vocabulary is unused (0); a text model's is at least 2, and no more than the
 * file's floats, since its embedding has a row per token (a damaged value cannot make the model
 * built to hold the file far larger than the file), nor than a model can have. */
static int load_run_vocab(const sdp_st_file *f, bool images) {
    const double most = (double)(f->len / sizeof(float));
    const double hi = most < SDP_TF_MAX_VOCAB ? most : SDP_TF_MAX_VOCAB; /* the model's limit */
    return (int)sdp_st_meta_number(f, "sdp.vocab", images ? 0 : 2, images ? INT_MAX : hi, true);
}

run_data_shape load_run_model(sdp_model *m, sdp_backend **be, train_opts *o, const char *dir, int B,
                              int T, sdp_mem *mem) {
    /* The run's "resolved" record is checked but not needed: model.safetensors is the full
     * assembled model, which is evaluated whole, with no plan and no branch scale. */
    train_run_load_config(o, NULL, dir);
    char path[1024];
    train_run_path(path, sizeof path, dir, "model.safetensors");
    SDP_CHECK_ALL(access(path, F_OK) == 0 || o->sim_world == 0,
                  "run directory '%s' is a --sim-world run, which measures one worker and writes "
                  "no checkpoint: train without --sim-world to evaluate or sample a model",
                  dir);
    SDP_CHECK_ALL(access(path, F_OK) == 0 || errno != ENOENT,
                  "run directory '%s' holds no checkpoint (no model.safetensors): the run stopped "
                  "before its first save (--ckpt-every sets how often it saves), or is still "
                  "training toward it",
                  dir);
    /* The vocabulary of a run whose --vocab was 0 came from its data: read it off the
     * checkpoint's metadata rather than reloading the data. */
    sdp_st_file f;
    sdp_st_read(&f, path, mem);
    train_checkpoint_check_meta(&f);
    run_data_shape shape = {.vocab = load_run_vocab(&f, train_run_images(o))};
    double img[3]; /* channels, size, classes: 0 0 0 for text */
    sdp_st_meta_numbers(&f, "sdp.image_shape", 3, img, 0, INT_MAX, true);
    SDP_CHECK(!train_run_images(o) || train_run_image_shape_known(img[0], img[1], img[2]),
              "cannot load '%s': metadata 'sdp.image_shape' is '%.0f %.0f %.0f', which is not the "
              "shape of a dataset sdp reads (1 28 10, 3 32 10 or 3 32 100): the file is damaged "
              "or was edited; restore it or start a new run",
              path, img[0], img[1], img[2]);
    SDP_CHECK(!o->arch.vocab || o->arch.vocab >= shape.vocab,
              "%s/config.json: \"vocab\" is %d, which is below the vocabulary of %d tokens that "
              "'%s' was trained with (its 'sdp.vocab'): one of the files is damaged or was edited; "
              "restore it or start a new run",
              dir, o->arch.vocab, shape.vocab, path);
    shape.channels = (int)img[0], shape.image_size = (int)img[1], shape.classes = (int)img[2];
    sdp_model_config cfg = train_run_model_config(o, shape);
    /* Before the model is built: an edited config.json could ask for a far larger one. */
    sdp_layout full;
    train_run_full_layout(&full, &cfg);
    const char *param_suffix[] = {""};
    sdp_ckpt_check_tensors(&f, path, &full, param_suffix, 1);
    sdp_layout_free(&full);
    sdp_st_close(&f, mem);
    /* An image is one example, whatever --seq-len the run's config.json carries (its default). */
    const int run_T = train_run_images(o) ? 1 : o->arch.seq_len;
    *be = sdp_backend_cpu(train_run_gemm(o), mem);
    cfg.backend = *be;
    train_run_family(&cfg)->create(m, &cfg, NULL, B ? B : o->batch, T ? T : run_T, SDP_MODEL_INFER);
    sdp_ckpt_buffer pb = {m->params, "", false};
    sdp_ckpt_load(&f, path, m->layout, &pb, 1, mem);
    sdp_st_close(&f, mem);
    return shape;
}
