#include "sdp/subnet.h"

#include "sdp/check.h"

#include <stdlib.h>
#include <string.h>

static void spec_alloc(sdp_subnet_spec *s, int nblocks) {
    s->nblocks = nblocks;
    s->keep = sdp_xcalloc((size_t)nblocks + 1, sizeof *s->keep, "a subnet's blocks");
    s->kept = sdp_xcalloc((size_t)nblocks + 1, sizeof *s->kept, "a subnet's blocks");
    s->scale = sdp_xcalloc((size_t)nblocks + 1, sizeof *s->scale, "a subnet's blocks");
}

void sdp_subnet_spec_full(sdp_subnet_spec *s, const sdp_layout *full) {
    spec_alloc(s, full->nblocks);
    for (int b = 0; b < full->nblocks; b++) {
        s->keep[b] = true;
        s->scale[b] = 1.0f;
        for (int g = 0; g < full->blocks[b].ngroups; g++)
            s->kept[b][g] = full->blocks[b].groups[g].width;
    }
}

void sdp_subnet_spec_make(sdp_subnet_spec *s, const sdp_plan *p, const sdp_layout *full, int rank) {
    sdp_subnet_spec_full(s, full);
    if (p->cfg.mask != SDP_MASK_FORWARD) return;
    const float scale =
        p->cfg.scale == SDP_SCALE_INVERSE ? (float)(1.0 / sdp_plan_coverage(p)) : 1.0f;
    for (int b = 0; b < full->nblocks; b++) {
        const sdp_block *blk = &full->blocks[b];
        if (p->cfg.unit == SDP_UNIT_BLOCK) {
            int u = sdp_plan_unit_of(p, b, -1, 0);
            if (u < 0) continue; /* shared block: kept whole, unscaled */
            s->keep[b] = sdp_plan_owns(p, u, rank);
            s->scale[b] = scale;
            continue;
        }
        /* A group's atoms are its units' chunks, in order and of equal widths (or one shared
         * range when the group has no units): count them chunk by chunk, not atom by atom, which
         * at N = 1024 was most of what sdp plan spent on the workers' models. */
        for (int g = 0; g < blk->ngroups; g++) {
            const int width = blk->groups[g].width, first = sdp_plan_unit_of(p, b, g, 0);
            if (first < 0) {
                s->kept[b][g] = width;
                continue;
            }
            const int w = p->units[first].width;
            SDP_ASSERT(w * p->cfg.chunks == width);
            int kept = 0;
            for (int c = 0; c < p->cfg.chunks; c++)
                kept += sdp_plan_owns(p, first + c, rank) ? w : 0;
            s->kept[b][g] = kept;
        }
        s->scale[b] = scale;
    }
}

void sdp_subnet_spec_free(sdp_subnet_spec *s) {
    free(s->keep);
    free(s->kept);
    free(s->scale);
    memset(s, 0, sizeof *s);
}

/* ---- run map -------------------------------------------------------------------------------- */

typedef struct {
    sdp_run *runs;
    int n, cap;
} run_list;

static void push(run_list *l, size_t local, size_t global, size_t len, int unit, int param,
                 bool buffer) {
    if (len == 0) return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->runs = sdp_xrealloc(l->runs, (size_t)l->cap * sizeof *l->runs, "a subnet map's runs");
    }
    l->runs[l->n++] = (sdp_run){local, global, len, unit, param, buffer};
}

static int full_block_index(const sdp_layout *full, int global_index) {
    for (int b = 0; b < full->nblocks; b++)
        if (full->blocks[b].global_index == global_index) return b;
    return -1;
}

/* The group atoms this worker keeps, as a list of chunk starts (units in ascending atom order). */
typedef struct {
    int n;
    int *atom; /* first atom of each kept chunk */
    int *len;  /* atoms in it */
    int *unit;
} kept_chunks;

static kept_chunks kept_of(const sdp_plan *p, int block, int group, int width, int rank,
                           bool compact) {
    const size_t bytes = sizeof(int) * (size_t)(width + 1);
    kept_chunks k = {0, sdp_xmalloc(bytes, "a group's kept chunks"),
                     sdp_xmalloc(bytes, "a group's kept chunks"),
                     sdp_xmalloc(bytes, "a group's kept chunks")};
    for (int a = 0; a < width; a++) {
        int u = sdp_plan_unit_of(p, block, group, a);
        if (compact && u >= 0 && !sdp_plan_owns(p, u, rank)) continue;
        if (k.n > 0 && k.unit[k.n - 1] == u && k.atom[k.n - 1] + k.len[k.n - 1] == a) {
            k.len[k.n - 1]++;
        } else {
            k.atom[k.n] = a;
            k.len[k.n] = 1;
            k.unit[k.n] = u;
            k.n++;
        }
    }
    return k;
}

static void kept_free(kept_chunks *k) {
    free(k->atom);
    free(k->len);
    free(k->unit);
}

/* A tensor split along `axis` into `segments` copies of the group width: walk the kept chunks in
 * local order and emit one run per contiguous piece. */
static void map_group_tensor(run_list *l, const sdp_param *lp, const sdp_param *fp, int pi,
                             const sdp_group *fg, const kept_chunks *k) {
    const size_t atom = (size_t)fg->atom, W = (size_t)fg->width;
    const size_t seg_full = W * atom;
    size_t seg_local = 0;
    for (int c = 0; c < k->n; c++) seg_local += (size_t)k->len[c] * atom;
    SDP_ASSERT((size_t)lp->shape[lp->axis] == seg_local * (size_t)lp->segments);
    if (lp->axis == 0) {
        /* Elements per row, from the full tensor: a worker that keeps none of the group has a
         * local tensor with no rows. */
        const size_t inner = fp->numel / (size_t)fp->shape[0];
        size_t local_row = 0;
        for (int s = 0; s < lp->segments; s++)
            for (int c = 0; c < k->n; c++) {
                size_t rows = (size_t)k->len[c] * atom;
                size_t grow = (size_t)s * seg_full + (size_t)k->atom[c] * atom;
                push(l, lp->offset + local_row * inner, fp->offset + grow * inner, rows * inner,
                     k->unit[c], pi, lp->buffer);
                local_row += rows;
            }
    } else {
        /* Axis 1 of a [rows, cols, ...] tensor, seen as [rows, cols * trail]: each index along
         * axis 1 spans `trail` elements (a conv kernel's spatial block). */
        SDP_ASSERT(lp->axis == 1 && lp->ndim >= 2);
        const size_t rows = (size_t)lp->shape[0];
        /* from the full tensor: a compact one may have no columns at all */
        const size_t trail = fp->numel / ((size_t)fp->shape[0] * (size_t)fp->shape[1]);
        const size_t lcols = (size_t)lp->shape[1] * trail, gcols = (size_t)fp->shape[1] * trail;
        for (size_t r = 0; r < rows; r++) {
            size_t lc = 0;
            for (int s = 0; s < lp->segments; s++)
                for (int c = 0; c < k->n; c++) {
                    size_t cols = (size_t)k->len[c] * atom * trail;
                    size_t gc = ((size_t)s * seg_full + (size_t)k->atom[c] * atom) * trail;
                    push(l, lp->offset + r * lcols + lc, fp->offset + r * gcols + gc, cols,
                         k->unit[c], pi, lp->buffer);
                    lc += cols;
                }
        }
    }
}

void sdp_subnet_map_build(sdp_subnet_map *m, const sdp_layout *full, const sdp_layout *local,
                          const sdp_plan *p, int rank, bool compact) {
    run_list l = {0};
    for (int pi = 0; pi < local->nparams; pi++) {
        const sdp_param *lp = &local->params[pi];
        const sdp_param *fp = sdp_layout_find(full, lp->name);
        SDP_ASSERT(fp && fp->ndim == lp->ndim);
        if (lp->block < 0) { /* stem or head */
            push(&l, lp->offset, fp->offset, lp->numel,
                 sdp_plan_shared_unit(p, full, (int)(fp - full->params)), pi, lp->buffer);
            continue;
        }
        const int fb = full_block_index(full, local->blocks[lp->block].global_index);
        SDP_ASSERT(fb >= 0);
        if (lp->group < 0 || p->cfg.unit == SDP_UNIT_BLOCK) {
            /* Whole-block tensors belong to the block unit, or are shared in neuron mode. */
            int u = p->cfg.unit == SDP_UNIT_BLOCK ? sdp_plan_unit_of(p, fb, -1, 0) : -1;
            SDP_ASSERT(lp->numel == fp->numel);
            push(&l, lp->offset, fp->offset, lp->numel, u, pi, lp->buffer);
            continue;
        }
        const sdp_group *fg = &full->blocks[fb].groups[lp->group];
        kept_chunks k = kept_of(p, fb, lp->group, fg->width, rank, compact);
        map_group_tensor(&l, lp, fp, pi, fg, &k);
        kept_free(&k);
    }
    m->nruns = l.n;
    m->runs = l.runs;
}

void sdp_subnet_map_free(sdp_subnet_map *m) {
    free(m->runs);
    memset(m, 0, sizeof *m);
}

bool sdp_run_owned(const sdp_run *r, const sdp_plan *p, int rank) {
    return r->unit < 0 || sdp_plan_owns(p, r->unit, rank);
}

void sdp_subnet_init_values(const sdp_subnet_map *m, const sdp_layout *full,
                            const sdp_layout *local, float *params, uint64_t seed) {
#pragma omp parallel for schedule(dynamic, 64)
    for (int i = 0; i < m->nruns; i++) {
        const sdp_run *r = &m->runs[i];
        const sdp_param *fp = sdp_layout_find(full, local->params[r->param].name);
        for (size_t e = 0; e < r->len; e++)
            params[r->local + e] = sdp_param_init_value(fp, seed, r->global - fp->offset + e);
    }
}
