#include "sdp/ckpt.h"

#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *suffixed(const char *name, const char *suffix) {
    size_t n = strlen(name) + strlen(suffix) + 1;
    char *s = malloc(n);
    SDP_CHECK(s, "out of memory");
    snprintf(s, n, "%s%s", name, suffix);
    return s;
}

void sdp_ckpt_save(const char *path, const sdp_layout *L, const sdp_ckpt_buffer *bufs, int nbufs,
                   const char *const *meta) {
    int n = L->nparams * nbufs;
    sdp_st_tensor *t = calloc((size_t)n, sizeof *t);
    SDP_CHECK(t, "out of memory");
    for (int b = 0; b < nbufs; b++)
        for (int i = 0; i < L->nparams; i++) {
            const sdp_param *p = &L->params[i];
            sdp_st_tensor *e = &t[b * L->nparams + i];
            e->name = suffixed(p->name, bufs[b].suffix);
            e->ndim = p->ndim;
            for (int d = 0; d < p->ndim; d++) e->shape[d] = p->shape[d];
            e->data = bufs[b].data + p->offset;
        }
    sdp_st_write(path, t, n, meta);
    for (int i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
}

/* sdp's own checkpoints carry the whole-file checksum; one that does not cannot be trusted to
 * hold what its header says. */
static void require_file_checksum(const sdp_st_file *f, const char *path) {
    SDP_CHECK(f->checksum != SDP_ST_DATA_CHECKSUM,
              "cannot load '%s': it predates the header checksum (its sdp.crc32 covers only the "
              "tensors, so damage to its header would go unnoticed): load it with the sdp that "
              "wrote it, or retrain",
              path);
    SDP_CHECK(f->checksum == SDP_ST_FILE_CHECKSUM,
              "cannot load '%s': it has no sdp.file_crc32 checksum: it was not written by sdp "
              "train",
              path);
}

/* A NaN or infinity would only surface steps later as a diverged loss that blames the learning
 * rate; a negative second moment, as the square root of one. */
static void check_values(const char *path, const char *name, const float *x, size_t n,
                         bool nonnegative) {
    for (size_t i = 0; i < n; i++)
        SDP_CHECK(isfinite(x[i]) && !(nonnegative && x[i] < 0),
                  "cannot load '%s': tensor '%s' holds %g at element %zu, where %s: the file is "
                  "damaged, or training had diverged when it was saved; resume from an earlier "
                  "checkpoint or retrain",
                  path, name, (double)x[i], i,
                  nonnegative ? "only finite values of at least 0 belong"
                              : "only finite values belong");
}

void sdp_ckpt_load(sdp_st_file *f, const char *path, const sdp_layout *L,
                   const sdp_ckpt_buffer *bufs, int nbufs, sdp_mem *mem) {
    sdp_st_read(f, path, mem);
    require_file_checksum(f, path);
    for (int b = 0; b < nbufs; b++)
        for (int i = 0; i < L->nparams; i++) {
            const sdp_param *p = &L->params[i];
            char *name = suffixed(p->name, bufs[b].suffix);
            const sdp_st_entry *e = sdp_st_find(f, name);
            SDP_CHECK(e,
                      "checkpoint %s has no tensor '%s': it was written for a different "
                      "model; check the run's configuration",
                      path, name);
            bool same = strcmp(e->dtype, "F32") == 0 && e->ndim == p->ndim;
            for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
            SDP_CHECK(same,
                      "checkpoint %s: tensor '%s' has dtype %s or a shape that differs "
                      "from the model's: it was written for a different model",
                      path, name, e->dtype);
            float *dst = bufs[b].data + p->offset;
            memcpy(dst, e->data, p->numel * sizeof(float));
            check_values(path, name, dst, p->numel, bufs[b].nonnegative);
            free(name);
        }
}
