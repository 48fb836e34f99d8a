#include "sdp/ckpt.h"

#include "sdp/check.h"

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

void sdp_ckpt_load(sdp_st_file *f, const char *path, const sdp_layout *L,
                   const sdp_ckpt_buffer *bufs, int nbufs, sdp_mem *mem) {
    sdp_st_read(f, path, mem);
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
            memcpy(bufs[b].data + p->offset, e->data, p->numel * sizeof(float));
            free(name);
        }
}
