#include "load_run.h"

#include "sdp/check.h"
#include "sdp/ckpt.h"

#include <stdio.h>
#include <stdlib.h>

void load_run_model(sdp_model *m, train_opts *o, const char *dir, int B, int T, sdp_mem *mem) {
    run_load_config(o, dir);
    char path[1024];
    run_path(path, sizeof path, dir, "model.safetensors");
    /* The vocabulary of a run whose --vocab was 0 came from its data: read it off the
     * checkpoint's metadata rather than reloading the data. */
    sdp_st_file f;
    sdp_st_read(&f, path, mem);
    const char *v = sdp_st_meta(&f, "sdp.vocab");
    SDP_CHECK(v, "%s has no sdp.vocab metadata: it was not written by sdp train", path);
    run_data_shape shape = {.vocab = atoi(v)};
    const char *img = sdp_st_meta(&f, "sdp.image_shape");
    if (img) sscanf(img, "%d %d %d", &shape.channels, &shape.image_size, &shape.classes);
    sdp_st_close(&f, mem);
    sdp_model_config cfg = run_model_config(o, shape);
    /* An image is one example, whatever --seq-len the run's config.json carries (its default). */
    const int run_T = run_images(o) ? 1 : o->seq_len;
    run_family(&cfg)->create(m, &cfg, NULL, B ? B : o->batch, T ? T : run_T, SDP_MODEL_INFER,
                             run_gemm(o), mem);
    sdp_ckpt_buffer pb = {m->params, ""};
    sdp_ckpt_load(&f, path, m->layout, &pb, 1, mem);
    sdp_st_close(&f, mem);
}
