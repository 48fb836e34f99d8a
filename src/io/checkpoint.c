#include "sdp/checkpoint.h"

#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *suffixed(const char *name, const char *suffix) {
    size_t n = strlen(name) + strlen(suffix) + 1;
    char *s = sdp_xmalloc(n, "a tensor's name");
    snprintf(s, n, "%s%s", name, suffix);
    return s;
}

/* The data section of a checkpoint is each buffer's flat layout in turn, byte for byte, only
 * because the layout's tensors lie at consecutive offsets in order, covering numel: streaming
 * relies on that, so a layout built otherwise is refused rather than written scrambled. */
static void check_consecutive(const sdp_layout *L) {
    size_t at = 0;
    for (int i = 0; i < L->nparams; i++) {
        SDP_CHECK(L->params[i].offset == at,
                  "tensor '%s' is at offset %zu of the flat buffer, not %zu: checkpoints need the "
                  "layout's tensors in order and contiguous",
                  L->params[i].name, L->params[i].offset, at);
        at += L->params[i].numel;
    }
    SDP_CHECK(at == L->numel, "the layout's tensors cover %zu of its %zu elements", at, L->numel);
}

void sdp_ckpt_writer_open(sdp_st_writer *w, const char *path, const sdp_layout *L,
                          const char *const *suffixes, int nbufs, const char *const *meta) {
    check_consecutive(L);
    int n = L->nparams * nbufs;
    sdp_st_tensor *t = sdp_xcalloc((size_t)n + 1, sizeof *t, "a checkpoint's tensor list");
    for (int b = 0; b < nbufs; b++)
        for (int i = 0; i < L->nparams; i++) {
            const sdp_param *p = &L->params[i];
            sdp_st_tensor *e = &t[b * L->nparams + i];
            e->name = suffixed(p->name, suffixes[b]);
            e->ndim = p->ndim;
            for (int d = 0; d < p->ndim; d++) e->shape[d] = p->shape[d];
        }
    sdp_st_writer_open(w, path, t, n, meta);
    for (int i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
}

void sdp_ckpt_save(const char *path, const sdp_layout *L, const sdp_ckpt_buffer *bufs, int nbufs,
                   const char *const *meta) {
    const char *suffixes[SDP_CKPT_MAX_BUFFERS] = {0};
    SDP_CHECK(nbufs >= 0 && nbufs <= SDP_CKPT_MAX_BUFFERS, "sdp_ckpt_save: %d buffers", nbufs);
    for (int b = 0; b < nbufs; b++) suffixes[b] = bufs[b].suffix;
    sdp_st_writer w;
    sdp_ckpt_writer_open(&w, path, L, suffixes, nbufs, meta);
    for (int b = 0; b < nbufs; b++)
        sdp_st_writer_append(&w, bufs[b].data, L->numel * sizeof(float));
    sdp_st_writer_commit(&w);
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

/* Elements [first, first + n) of tensor `name` are in x. A NaN or infinity would only surface steps
 * later as a diverged loss that blames the learning rate; a negative second moment, as the square
 * root of one. */
static void check_values(const char *path, const char *name, const float *x, size_t first, size_t n,
                         bool nonnegative) {
    for (size_t i = 0; i < n; i++)
        SDP_CHECK(isfinite(x[i]) && !(nonnegative && x[i] < 0),
                  "cannot load '%s': tensor '%s' holds %g at element %zu, where %s: the file is "
                  "damaged, or training had diverged when it was saved; resume from an earlier "
                  "checkpoint or retrain",
                  path, name, (double)x[i], first + i,
                  nonnegative ? "only finite values of at least 0 belong"
                              : "only finite values belong");
}

/* The file's entry for tensor p with `suffix`, checked to be F32 of p's shape. */
static const sdp_st_entry *entry_of(const sdp_st_file *f, const char *path, const sdp_param *p,
                                    const char *suffix) {
    char *name = suffixed(p->name, suffix);
    const sdp_st_entry *e = sdp_st_find(f, name);
    SDP_CHECK(e,
              "checkpoint %s has no tensor '%s': it was written for a different "
              "model; check the run's configuration",
              path, name);
    bool same = strcmp(e->dtype, "F32") == 0 && e->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = e->shape[d] == p->shape[d];
    SDP_CHECK(same,
              "checkpoint %s: tensor '%s' has dtype %s or a shape that differs "
              "from the model's: it was written for a different model (or the configuration it "
              "is loaded with, such as the run's config.json, was edited)",
              path, name, e->dtype);
    free(name);
    return e;
}

void sdp_ckpt_check_tensors(const sdp_st_file *f, const char *path, const sdp_layout *L,
                            const char *const *suffixes, int nbufs) {
    for (int b = 0; b < nbufs; b++)
        for (int i = 0; i < L->nparams; i++) entry_of(f, path, &L->params[i], suffixes[b]);
    /* Names are unique in a file, so with every tensor of L found, a larger count means tensors
     * of a larger model: loading the part that fits would evaluate or train another model. */
    SDP_CHECK(f->n == L->nparams * nbufs,
              "checkpoint %s holds %d tensors where the model has %d: it was written for a "
              "different model (or the configuration it is loaded with, such as the run's "
              "config.json, was edited)",
              path, f->n, L->nparams * nbufs);
}

void sdp_ckpt_load(sdp_st_file *f, const char *path, const sdp_layout *L,
                   const sdp_ckpt_buffer *bufs, int nbufs, sdp_mem *mem) {
    sdp_st_read(f, path, mem);
    require_file_checksum(f, path);
    const char *suffixes[SDP_CKPT_MAX_BUFFERS];
    SDP_ASSERT(nbufs <= SDP_CKPT_MAX_BUFFERS);
    for (int b = 0; b < nbufs; b++) suffixes[b] = bufs[b].suffix;
    sdp_ckpt_check_tensors(f, path, L, suffixes, nbufs);
    for (int b = 0; b < nbufs; b++)
        for (int i = 0; i < L->nparams; i++) {
            const sdp_param *p = &L->params[i];
            const sdp_st_entry *e = entry_of(f, path, p, bufs[b].suffix);
            float *dst = bufs[b].data + p->offset;
            memcpy(dst, e->data, p->numel * sizeof(float));
            check_values(path, e->name, dst, 0, p->numel, bufs[b].nonnegative);
        }
}

void sdp_ckpt_open(sdp_st_file *f, const char *path, const sdp_layout *L,
                   const char *const *suffixes, int nbufs, sdp_mem *mem) {
    sdp_st_open(f, path, mem);
    require_file_checksum(f, path);
    check_consecutive(L);
    sdp_ckpt_check_tensors(f, path, L, suffixes, nbufs);
}

/* The tensor of L holding flat element g: the last whose offset is at most g. */
static int param_at(const sdp_layout *L, size_t g) {
    int lo = 0, hi = L->nparams - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (L->params[mid].offset <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void sdp_ckpt_read_range(const sdp_st_file *f, const sdp_layout *L, const sdp_ckpt_buffer *buf,
                         size_t first, size_t n, float *dst) {
    SDP_CHECK(first <= L->numel && n <= L->numel - first,
              "sdp_ckpt_read_range: [%zu, %zu) is outside a layout of %zu elements", first,
              first + n, L->numel);
    while (n > 0) {
        const sdp_param *p = &L->params[param_at(L, first)];
        const size_t at = first - p->offset, len = p->numel - at < n ? p->numel - at : n;
        const sdp_st_entry *e = entry_of(f, f->path, p, buf->suffix);
        sdp_st_pread(f, e, at * sizeof(float), dst, len * sizeof(float));
        check_values(f->path, e->name, dst, at, len, buf->nonnegative);
        first += len, dst += len, n -= len;
    }
}
