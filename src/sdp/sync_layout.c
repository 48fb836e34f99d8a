/* Where each run's gradient and optimizer state lie: the optimizer's segments and the model's
 * gradient layout (offsets and slices). */
#include "sync_internal.h"

#include "sdp/check.h"

#include <stdlib.h>

/* The bucket that holds trained run i's gradient. */
static const sdp_bucket *bucket_of(const sdp_sync *s, int i) {
    return s->run_bucket[i] < 0 ? NULL : &s->buckets[s->run_bucket[i]];
}

size_t sync_state_part(const sdp_sync *s, int i, size_t *at, size_t *state) {
    const sdp_bucket *b = sync_run_at(s, i)->len ? bucket_of(s, i) : NULL;
    *at = 0, *state = 0;
    if (!b) return 0;
    /* The shard that may hold it: the bucket's (--zero 1), or its piece's (--zero 2). */
    size_t slo = b->shard_lo, shi = b->shard_hi, sstate = b->state_start;
    if (s->zero2) {
        const sdp_piece *p = &s->pieces[s->run_piece[i]];
        slo = p->shard_lo, shi = p->shard_hi, sstate = p->state_start;
    }
    const size_t pos = s->run_pos[i], end = pos + sync_run_at(s, i)->len;
    const size_t lo = pos > slo ? pos : slo;
    const size_t hi = end < shi ? end : shi;
    if (hi <= lo) return 0;
    *at = lo - pos;
    *state = sstate + (lo - slo);
    return hi - lo;
}

int sdp_sync_segments(const sdp_sync *s, const sdp_layout *local, bool decay_all,
                      sdp_opt_segment **segs) {
    *segs = sdp_xmalloc(sizeof **segs * (size_t)(s->map->nruns + 1), "the optimizer's segments");
    int n = 0;
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = sync_run_at(s, i);
        size_t at, st;
        const size_t len = sync_trained(s, r) ? sync_state_part(s, i, &at, &st) : 0;
        if (len == 0) continue;
        const bool decay = decay_all || local->params[r->param].decay;
        /* Under --zero 2 a shard's gradient lies where its state does. */
        const size_t p = r->local + at, g = s->zero2 ? st : s->grad_index[i] + at;
        sdp_opt_segment *last = n ? &(*segs)[n - 1] : NULL;
        /* Merge neighbours that are contiguous in every buffer: fewer, longer loops. */
        if (last && last->decay == decay && last->offset + last->count == p &&
            last->grad_offset + last->count == g && last->state_offset + last->count == st) {
            last->count += len;
            continue;
        }
        (*segs)[n++] = (sdp_opt_segment){p, len, decay, g, st};
    }
    return n;
}

/* ---- gradient layout for the model -------------------------------------------------------- */

static void slices_alloc(sdp_grad_slices *s, int cap, int axis) {
    s->axis = axis;
    const size_t bytes = sizeof(long) * (size_t)(cap + 1);
    s->start = sdp_xmalloc(bytes, "a tensor's gradient slices");
    s->len = sdp_xmalloc(bytes, "a tensor's gradient slices");
    s->dst = sdp_xmalloc(bytes, "a tensor's gradient slices");
    s->ld = sdp_xmalloc(bytes, "a tensor's gradient slices");
}

/* The owned slices of partly owned tensor pi. Along axis 0 each owned run is a block of rows;
 * along axis 1 row 0's runs name the columns, and row 1's place gives each slice's row stride
 * (its bucket may interleave other chunks' columns). */
static void slices_of(const sdp_sync *s, const sdp_param *lp, int pi, sdp_grad_slices *out) {
    int cap = 0;
    for (int i = 0; i < s->map->nruns; i++) cap += s->map->runs[i].param == pi;
    slices_alloc(out, cap, lp->axis);
    /* Tensors are seen as [shape[0], numel / shape[0]]. */
    const size_t cols = lp->numel / (size_t)lp->shape[0];
    const size_t inner = lp->axis == 0 ? cols : 1;
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = sync_run_at(s, i);
        if (r->param != pi || !sync_trained(s, r)) continue;
        const size_t at = r->local - lp->offset;
        const long dst = (long)s->grad_index[i];
        if (lp->axis == 0) {
            out->start[out->n] = (long)(at / inner);
            out->len[out->n] = (long)(r->len / inner);
            out->dst[out->n] = dst;
            out->ld[out->n] = (long)inner;
            out->n++;
        } else if (at < cols) {
            out->start[out->n] = (long)at;
            out->len[out->n] = (long)r->len;
            out->dst[out->n] = dst;
            out->ld[out->n] = (long)r->len; /* one row only, unless row 1 says otherwise */
            out->n++;
        } else if (at < 2 * cols) {
            for (int k = 0; k < out->n; k++)
                if ((size_t)out->start[k] == at - cols) out->ld[k] = dst - out->dst[k];
        }
    }
}

void sdp_sync_grad_layout(const sdp_sync *s, const sdp_layout *local, long **grad_offset,
                          sdp_grad_slices **slices) {
    const int np = local->nparams;
    const char *what = "the gradients' layout";
    long *off = sdp_xmalloc(sizeof(long) * (size_t)(np + 1), what);
    int *owned = sdp_xcalloc((size_t)np + 1, sizeof(int), what),
        *total = sdp_xcalloc((size_t)np + 1, sizeof(int), what);
    bool *scattered = sdp_xcalloc((size_t)np + 1, sizeof(bool), what);
    size_t *next = sdp_xcalloc((size_t)np + 1, sizeof(size_t), what);
    sdp_grad_slices *sl = sdp_xcalloc((size_t)np + 1, sizeof *sl, what);
    for (int i = 0; i < np; i++) off[i] = -1;
    for (int i = 0; i < s->map->nruns; i++) {
        const sdp_run *r = sync_run_at(s, i);
        total[r->param]++;
        if (!sync_trained(s, r)) continue;
        if (owned[r->param]++ == 0)
            off[r->param] = (long)s->grad_index[i];
        else if (s->grad_index[i] != next[r->param])
            scattered[r->param] = true;
        next[r->param] = s->grad_index[i] + r->len;
    }
    /* A tensor owned in part, or whose owned runs lie in several buckets, takes its gradient
     * as slices; any other owned tensor is one contiguous block. */
    for (int i = 0; i < np; i++)
        if (owned[i] > 0 && (owned[i] < total[i] || scattered[i])) {
            off[i] = SDP_GRAD_SLICED;
            slices_of(s, &local->params[i], i, &sl[i]);
        }
    free(owned);
    free(total);
    free(scattered);
    free(next);
    *grad_offset = off;
    *slices = sl;
}

void sdp_sync_grad_layout_free(long *grad_offset, sdp_grad_slices *slices, int nparams) {
    for (int i = 0; slices && i < nparams; i++) {
        free(slices[i].start);
        free(slices[i].len);
        free(slices[i].dst);
        free(slices[i].ld);
    }
    free(slices);
    free(grad_offset);
}
