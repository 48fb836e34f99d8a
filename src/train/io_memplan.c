/* Each rank's evaluation and checkpoint bytes (io_mem), predicted from the plan: the same sizes
 * that eval_stream.c and trainer_checkpoint.c allocate, in the same combinations.
 *
 * A rank holds, at the most, one of these at a time (they run one after another), beside the
 * re-estimated running statistics, which stay once made:
 * - a checkpoint's optimizer state or parameters: rank 0's window of W floats, and the gather's
 *   packing buffers for the window that needs the most;
 * - a pass of block-streamed evaluation (validation, or re-estimating running statistics): the
 *   block models' arena, the chunk's streams, and the gather's buffers for one window of a block.
 * The gather's buffers (sdp_sync_gather_range) are, on every rank, 16 bytes per piece it sends
 * and 4 per value, each plus one; rank 0 also holds 24 bytes per rank of counts, and everything
 * every rank sent, counted the same way. */
#include "io_memplan.h"

#include "run.h"
#include "worker_count.h"

#include "sdp/check.h"
#include "sdp/memplan.h"
#include "sdp/subnet.h"
#include "sdp/sync.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Floats per window of a streamed checkpoint (4 MiB). Rank 0 holds the window, its own share of
 * it packed for the gather and everything gathered for it (sdp_sync_gather_range): about three
 * windows, whatever the model's size. The environment variable SDP_CKPT_WINDOW (floats, at most
 * SDP_SYNC_GATHER_MAX) overrides it, so that tests can use windows far smaller than a tensor. */
#define CKPT_WINDOW ((size_t)1 << 20)

static size_t ckpt_window(void) {
    const char *env = getenv("SDP_CKPT_WINDOW");
    if (!env || !*env) return CKPT_WINDOW;
    char *end;
    errno = 0;
    const unsigned long long w = strtoull(env, &end, 10);
    SDP_CHECK(
        *end == 0 && errno == 0 && w >= 1 && w <= SDP_SYNC_GATHER_MAX,
        "SDP_CKPT_WINDOW is '%.40s', not a number of floats from 1 to %zu: unset it or fix it", env,
        (size_t)SDP_SYNC_GATHER_MAX);
    return (size_t)w;
}

size_t train_ckpt_window_floats(size_t numel) {
    const size_t want = ckpt_window();
    return numel < want ? (numel > 0 ? numel : 1) : want; /* no more than the model needs */
}

/* A range of the full layout's flat buffer that one gather assembles. */
typedef struct {
    size_t lo, hi;
    bool state_compact;
    int kind;
} window;

enum { WIN_PARAMS, WIN_STATE, WIN_BLOCK, NKINDS };

typedef struct {
    window *w;
    int n, cap;
} windows;

static void add_window(windows *ws, size_t lo, size_t hi, bool state_compact, int kind) {
    if (ws->n == ws->cap) {
        ws->cap = ws->cap ? 2 * ws->cap : 64;
        ws->w = sdp_xrealloc(ws->w, sizeof *ws->w * (size_t)ws->cap, "the gathers' windows");
    }
    ws->w[ws->n++] = (window){lo, hi, state_compact, kind};
}

/* [lo, hi) in windows of W, as the checkpoint and the block streaming cut it. */
static void add_range(windows *ws, size_t lo, size_t hi, size_t W, bool state_compact, int kind) {
    for (size_t a = lo; a < hi; a += W)
        add_window(ws, a, hi - a < W ? hi : a + W, state_compact, kind);
}

/* Every block's range of the full layout's flat buffer (lo[g] >= hi[g]: the block has no
 * tensors), in one pass: models with thousands of layers are planned (sdp plan --fit). */
static void block_ranges(const sdp_layout *full, size_t *lo, size_t *hi) {
    for (int g = 0; g < full->nblocks; g++) lo[g] = SIZE_MAX, hi[g] = 0;
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *p = &full->params[i];
        if (p->block < 0) continue;
        if (p->offset < lo[p->block]) lo[p->block] = p->offset;
        if (p->offset + p->numel > hi[p->block]) hi[p->block] = p->offset + p->numel;
    }
}

static bool streams(const io_memplan_run *run) {
    return run->plan->cfg.mask == SDP_MASK_FORWARD && run->plan->cfg.owners != run->plan->cfg.world;
}

static bool recalibrates(const io_memplan_run *run) {
    return streams(run) && run->images && run->recal_batches > 0 &&
           train_eval_recal_floats(run->full) > 0;
}

/* The gathers the run makes, each window once. */
static windows gathers_of(const io_memplan_run *run) {
    windows ws = {0};
    const size_t numel = run->full->numel, W = train_ckpt_window_floats(numel);
    const bool gathers_params = run->plan->cfg.mask == SDP_MASK_FORWARD || run->on_device;
    if (gathers_params) add_range(&ws, 0, numel, W, false, WIN_PARAMS);
    if (run->state_buffers > 0) add_range(&ws, 0, numel, W, true, WIN_STATE);
    if (streams(run)) {
        const size_t nb = (size_t)run->full->nblocks + 1;
        size_t *lo = sdp_xmalloc(nb * sizeof *lo, "the blocks' ranges"),
               *hi = sdp_xmalloc(nb * sizeof *hi, "the blocks' ranges");
        block_ranges(run->full, lo, hi);
        for (int g = 0; g < run->full->nblocks; g++)
            if (lo[g] < hi[g]) add_range(&ws, lo[g], hi[g], W, false, WIN_BLOCK);
        free(lo), free(hi);
    }
    return ws;
}

/* The runs one rank sends in a gather (of parameters, or of optimizer state), in ascending global
 * order with the running sum of their lengths: any window's count is then two binary searches,
 * where sdp_sync_gather_count scans every run. Same rule (sdp_sync_provides), same counts; at
 * N = 1024 with neuron units the scan per window took minutes. */
typedef struct {
    size_t *start, *end, *before; /* run j is [start, end); before[j]: the lengths of runs < j */
    int n;
} sent_runs;

typedef struct {
    size_t global, len;
} piece;

static int by_global(const void *a, const void *b) {
    const size_t x = ((const piece *)a)->global, y = ((const piece *)b)->global;
    return (x > y) - (x < y);
}

typedef struct {
    piece *p;
    int n, cap;
} pieces;

static void add_piece(void *ctx, size_t global, size_t len) {
    pieces *ps = ctx;
    if (len == 0) return;
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 64;
        ps->p = sdp_xrealloc(ps->p, sizeof *ps->p * (size_t)ps->cap, "the runs a rank sends");
    }
    ps->p[ps->n++] = (piece){global, len};
}

static sent_runs sent_runs_of(const sdp_plan *p, const sdp_subnet_map *map, const sdp_layout *local,
                              int rank, bool state_compact) {
    const char *what = "the runs a rank sends";
    pieces ps = {0};
    sdp_sync_provided(p, map, local, rank, state_compact, add_piece, &ps);
    const int n = ps.n;
    sent_runs s = {sdp_xmalloc(sizeof(size_t) * ((size_t)n + 1), what),
                   sdp_xmalloc(sizeof(size_t) * ((size_t)n + 1), what),
                   sdp_xmalloc(sizeof(size_t) * ((size_t)n + 2), what), n};
    if (n) qsort(ps.p, (size_t)n, sizeof *ps.p, by_global);
    s.before[0] = 0;
    for (int j = 0; j < n; j++) {
        s.start[j] = ps.p[j].global, s.end[j] = ps.p[j].global + ps.p[j].len;
        s.before[j + 1] = s.before[j] + ps.p[j].len;
    }
    free(ps.p);
    return s;
}

static void sent_runs_free(sent_runs *s) {
    free(s->start), free(s->end), free(s->before);
}

/* The first run whose end is past x (runs are disjoint and sorted, so ends ascend too). */
static int first_ending_after(const sent_runs *s, size_t x) {
    int a = 0, b = s->n;
    while (a < b) {
        const int m = (a + b) / 2;
        if (s->end[m] > x)
            b = m;
        else
            a = m + 1;
    }
    return a;
}

/* The first run starting at or after x. */
static int first_starting_at(const sent_runs *s, size_t x) {
    int a = 0, b = s->n;
    while (a < b) {
        const int m = (a + b) / 2;
        if (s->start[m] >= x)
            b = m;
        else
            a = m + 1;
    }
    return a;
}

/* What the rank sends of [lo, hi): its pieces, and its values in *nvals. */
static int sent_in(const sent_runs *s, size_t lo, size_t hi, size_t *nvals) {
    const int a = first_ending_after(s, lo), b = first_starting_at(s, hi);
    if (a >= b) {
        *nvals = 0;
        return 0;
    }
    size_t nv = s->before[b] - s->before[a];
    if (s->start[a] < lo) nv -= lo - s->start[a];     /* the first run starts before the range */
    if (s->end[b - 1] > hi) nv -= s->end[b - 1] - hi; /* the last one ends after it */
    *nvals = nv;
    return b - a;
}

static double pack_bytes(int pieces, size_t values) {
    return 16.0 * (pieces + 1) + 4.0 * ((double)values + 1);
}

/* The largest gather of each kind on every rank: gather[r * NKINDS + kind], from every rank's own
 * model and subnet map, as the trainer builds them: the reference gather_peaks equals. */
static double *gather_peaks_reference(const io_memplan_run *run, const windows *ws) {
    const int world = run->plan->cfg.world;
    const char *what = "predicting the checkpoint's gathers";
    double *peak = sdp_xcalloc((size_t)world * NKINDS, sizeof(double), what);
    int *np0 = sdp_xcalloc((size_t)ws->n + 1, sizeof(int), what),
        *np_all = sdp_xcalloc((size_t)ws->n + 1, sizeof(int), what);
    size_t *nv0 = sdp_xcalloc((size_t)ws->n + 1, sizeof(size_t), what),
           *nv_all = sdp_xcalloc((size_t)ws->n + 1, sizeof(size_t), what);
    for (int r = 0; r < world; r++) {
        sdp_mem dry = {.dry = true};
        sdp_model_config counted = *run->cfg;
        counted.backend = sdp_backend_cpu(run->gemm, &dry);
        sdp_model m;
        train_run_create_worker_model(&m, &counted, run->plan, run->full, r, run->B, run->T,
                                      SDP_MODEL_TRAIN_BARE);
        sdp_subnet_map map;
        sdp_subnet_map_build(&map, run->full, m.layout, run->plan, r,
                             run->plan->cfg.mask == SDP_MASK_FORWARD);
        sent_runs sent[2] = {sent_runs_of(run->plan, &map, m.layout, r, false),
                             sent_runs_of(run->plan, &map, m.layout, r, true)};
        for (int i = 0; i < ws->n; i++) {
            const window *w = &ws->w[i];
            size_t nv;
            const int np = sent_in(&sent[w->state_compact], w->lo, w->hi, &nv);
            np_all[i] += np, nv_all[i] += nv;
            if (r == 0) np0[i] = np, nv0[i] = nv;
            double *at = &peak[(size_t)r * NKINDS + w->kind];
            if (pack_bytes(np, nv) > *at) *at = pack_bytes(np, nv);
        }
        sent_runs_free(&sent[0]), sent_runs_free(&sent[1]);
        sdp_subnet_map_free(&map);
        m.ops->destroy(&m);
        sdp_backend_destroy(counted.backend);
    }
    for (int k = 0; k < NKINDS; k++) peak[k] = 0;
    for (int i = 0; i < ws->n; i++) {
        const double b =
            pack_bytes(np0[i], nv0[i]) + 24.0 * world + pack_bytes(np_all[i], nv_all[i]);
        if (b > peak[ws->w[i].kind]) peak[ws->w[i].kind] = b;
    }
    free(np0), free(np_all), free(nv0), free(nv_all);
    return peak;
}

/* ---- the gathers from the plan alone -------------------------------------------------------- */

/* Every worker's subnet map cuts the full model into the same runs: a shared tensor whole, a
 * block unit's tensor whole, and a group tensor into one run per unit's chunk, per segment (and
 * per row, when the group runs along axis 1). A worker's map holds the runs it keeps, and the
 * rank that sends a run in a gather (sdp_sync_provides) is its unit's publisher, who owns it, or
 * rank 0 for a shared run, which everyone keeps. So every run of the full model is sent by
 * exactly one rank, and the gathers' counts follow from one pass over the full model's runs, in
 * ascending order, with no worker's model or map: O(runs), where building every worker's map was
 * O(N x runs) (minutes at N = 1024 with neuron units). gather_peaks_reference is the rank-by-rank
 * computation this equals (tests/test_plan_fast.c). */

/* One rank's sums over the window of one kind it is sending into. */
typedef struct {
    int cur;     /* the window, or -1 before the first */
    int np;      /* pieces in it */
    size_t nv;   /* values in it */
    int touched; /* windows of this kind it sends anything into */
    double peak;
} rank_window;

typedef struct {
    size_t lo, hi;
    int first; /* its first window's id */
} block_span;

typedef struct {
    int world;
    size_t W;
    bool on[NKINDS];
    int first[NKINDS], nwin[NKINDS]; /* window ids of each kind: [first, first + nwin) */
    block_span *spans;               /* non-empty blocks, ascending */
    int nspans;
    rank_window *rw; /* [rank * NKINDS + kind] */
    /* --zero 1, optimizer state: per bucket (an owner group, or ngroups: every worker's), its
     * trained elements and how many of them the sweep has passed */
    const sdp_plan *p;
    size_t *count, *cursor;
    /* --zero 2: each bucket's pieces (one per run of equal layers in it, as sdp_sync cuts them),
     * sharded each on its own. A first sweep (counting) sizes them; the second walks them. */
    int layer; /* of the tensor being swept: its block, or -1 */
    bool counting;
    int maxp;             /* pieces per bucket at most */
    size_t *pcount;       /* [bucket * maxp + piece]: its trained elements */
    int *npiece, *player; /* per bucket, while counting: its pieces so far, the last's layer */
    int *pidx, *pcur;     /* per bucket, while walking: the current piece and its layer */
    size_t *pcursor;      /* and how much of it the sweep has passed */
    int *np_all, *np0;    /* per window id: pieces from every rank, and from rank 0 */
    size_t *nv_all, *nv0; /* values */
} run_sweep;

static void sweep_add(run_sweep *s, int kind, int id, size_t len, int rank) {
    rank_window *w = &s->rw[(size_t)rank * NKINDS + kind];
    if (w->cur != id) {
        if (w->cur >= 0 && pack_bytes(w->np, w->nv) > w->peak) w->peak = pack_bytes(w->np, w->nv);
        w->cur = id, w->np = 0, w->nv = 0, w->touched++;
    }
    w->np++, w->nv += len;
    s->np_all[id]++, s->nv_all[id] += len;
    if (rank == 0) s->np0[id]++, s->nv0[id] += len;
}

/* [a, b) over windows of W from `base` (the grid of ids from `first`), capped at `end`. */
static void sweep_grid(run_sweep *s, int kind, int first, size_t base, size_t end, size_t a,
                       size_t b, int rank) {
    for (size_t j = (a - base) / s->W; base + j * s->W < b; j++) {
        const size_t lo = base + j * s->W, hi = lo + s->W < end ? lo + s->W : end;
        const size_t from = a > lo ? a : lo, to = b < hi ? b : hi;
        sweep_add(s, kind, first + (int)j, to - from, rank);
    }
}

static int sends(const sdp_plan *p, int unit) {
    return unit < 0 ? 0 : p->groups[p->units[unit].owner_group].publisher;
}

/* The bucket of unit u's runs (-1: shared): its owner group's, or every worker's (ngroups). */
static int bucket_of_unit(const sdp_plan *p, int u) {
    if (u < 0) return p->ngroups;
    const int g = p->units[u].owner_group;
    return p->groups[g].nmembers == p->cfg.world ? p->ngroups : g;
}

/* The optimizer state of a trained run [a, a + len) of bucket b lies at [pos, pos + len) of a
 * region of `count` elements sharded over the bucket's members: each part goes to the window
 * sweep as sent by the member whose shard holds it. */
static void sweep_sharded(run_sweep *s, size_t a, size_t len, int b, size_t count, size_t pos) {
    const sdp_owner_group *og = b < s->p->ngroups ? &s->p->groups[b] : NULL;
    const int k = og ? og->nmembers : s->world;
    const size_t end = pos + len;
    size_t at = pos;
    for (int j = (int)(pos * (size_t)k / count); at < end; j++) { /* shard j starts at or before */
        size_t lo, hi;
        sdp_sync_shard(count, k, j, &lo, &hi);
        if (hi <= at) continue;
        const size_t e = hi < end ? hi : end;
        sweep_grid(s, WIN_STATE, s->first[WIN_STATE], 0, SIZE_MAX, a + (at - pos), a + (e - pos),
                   og ? og->members[j] : j);
        at = e;
    }
}

/* --zero 1: the region is the bucket's (its runs lie in ascending global order, as the sweep
 * meets them). */
static void sweep_shards(run_sweep *s, size_t a, size_t len, int u) {
    const int b = bucket_of_unit(s->p, u);
    sweep_sharded(s, a, len, b, s->count[b], s->cursor[b]);
    s->cursor[b] += len;
}

/* --zero 2, counting: a trained run of unit u extends its bucket's last piece, or starts one. */
static void count_piece(run_sweep *s, size_t len, int u) {
    const int b = bucket_of_unit(s->p, u);
    if (s->npiece[b] == 0 || s->player[b] != s->layer) {
        SDP_ASSERT(s->npiece[b] < s->maxp);
        s->npiece[b]++, s->player[b] = s->layer;
    }
    s->pcount[(size_t)b * (size_t)s->maxp + (size_t)s->npiece[b] - 1] += len;
}

/* --zero 2: the region is the run's piece, each sharded on its own. */
static void sweep_piece_shards(run_sweep *s, size_t a, size_t len, int u) {
    const int b = bucket_of_unit(s->p, u);
    if (s->pidx[b] < 0 || s->pcur[b] != s->layer)
        s->pidx[b]++, s->pcur[b] = s->layer, s->pcursor[b] = 0;
    const size_t count = s->pcount[(size_t)b * (size_t)s->maxp + (size_t)s->pidx[b]];
    sweep_sharded(s, a, len, b, count, s->pcursor[b]);
    s->pcursor[b] += len;
}

/* A run [a, a + len) of unit u (-1: shared) that `rank` sends; runs come in ascending order. */
static void sweep_run(run_sweep *s, size_t a, size_t len, int u, bool buffer) {
    if (len == 0) return;
    if (s->counting) {
        if (!buffer) count_piece(s, len, u);
        return;
    }
    const size_t b = a + len;
    const int rank = sends(s->p, u);
    if (s->on[WIN_PARAMS]) sweep_grid(s, WIN_PARAMS, s->first[WIN_PARAMS], 0, SIZE_MAX, a, b, rank);
    if (s->on[WIN_STATE] && !buffer && s->p->cfg.zero == 2)
        sweep_piece_shards(s, a, len, u);
    else if (s->on[WIN_STATE] && !buffer && s->p->cfg.zero)
        sweep_shards(s, a, len, u);
    else if (s->on[WIN_STATE] && !buffer)
        sweep_grid(s, WIN_STATE, s->first[WIN_STATE], 0, SIZE_MAX, a, b, rank);
    if (s->on[WIN_BLOCK]) {
        int lo = 0, hi = s->nspans; /* the last span starting at or before a */
        while (lo < hi) {
            const int m = (lo + hi) / 2;
            if (s->spans[m].lo <= a)
                lo = m + 1;
            else
                hi = m;
        }
        const block_span *sp = lo > 0 ? &s->spans[lo - 1] : NULL;
        if (sp && a < sp->hi) sweep_grid(s, WIN_BLOCK, sp->first, sp->lo, sp->hi, a, b, rank);
    }
}

/* The runs of full tensor i, in ascending order (sdp_subnet_map_build cuts every worker's the
 * same way). */
static void sweep_param(run_sweep *s, const sdp_plan *p, const sdp_layout *full, int i) {
    const sdp_param *fp = &full->params[i];
    s->layer = fp->block >= 0 ? fp->block : -1;
    if (fp->block < 0) {
        sweep_run(s, fp->offset, fp->numel, sdp_plan_shared_unit(p, full, i), fp->buffer);
        return;
    }
    if (fp->group < 0 || p->cfg.unit == SDP_UNIT_BLOCK) {
        const int u = p->cfg.unit == SDP_UNIT_BLOCK ? sdp_plan_unit_of(p, fp->block, -1, 0) : -1;
        sweep_run(s, fp->offset, fp->numel, u, fp->buffer);
        return;
    }
    const sdp_group *fg = &full->blocks[fp->block].groups[fp->group];
    const int first = sdp_plan_unit_of(p, fp->block, fp->group, 0);
    const int nchunks = first < 0 ? 1 : p->cfg.chunks;
    const size_t atom = (size_t)fg->atom, seg_full = (size_t)fg->width * atom;
    const size_t chunk = first < 0 ? seg_full : (size_t)p->units[first].width * atom;
    if (fp->axis == 0) {
        const size_t inner = fp->numel / (size_t)fp->shape[0];
        for (int sg = 0; sg < fp->segments; sg++)
            for (int c = 0; c < nchunks; c++)
                sweep_run(s, fp->offset + ((size_t)sg * seg_full + (size_t)c * chunk) * inner,
                          chunk * inner, first < 0 ? -1 : first + c, fp->buffer);
        return;
    }
    const size_t rows = (size_t)fp->shape[0];
    const size_t trail = fp->numel / ((size_t)fp->shape[0] * (size_t)fp->shape[1]);
    const size_t gcols = (size_t)fp->shape[1] * trail;
    for (size_t r = 0; r < rows; r++)
        for (int sg = 0; sg < fp->segments; sg++)
            for (int c = 0; c < nchunks; c++)
                sweep_run(
                    s, fp->offset + r * gcols + ((size_t)sg * seg_full + (size_t)c * chunk) * trail,
                    chunk * trail, first < 0 ? -1 : first + c, fp->buffer);
}

typedef struct {
    size_t offset;
    int i;
} placed;

static int by_offset(const void *a, const void *b) {
    const placed *x = a, *y = b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static int by_lo(const void *a, const void *b) {
    const size_t x = ((const block_span *)a)->lo, y = ((const block_span *)b)->lo;
    return (x > y) - (x < y);
}

/* The full layout's tensors in ascending order, or NULL when they overlap, a tensor's group is
 * not one the sweep cuts as the maps do, or a tensor outside the blocks lies inside a block's
 * range (no model does any of these; gather_peaks then takes the reference's way). */
static int *sweep_order(const sdp_layout *full, const block_span *spans, int nspans) {
    const int n = full->nparams;
    placed *sorted = sdp_xmalloc(sizeof *sorted * ((size_t)n + 1), "ordering the tensors");
    int *order = sdp_xmalloc(sizeof(int) * ((size_t)n + 1), "ordering the tensors");
    for (int i = 0; i < n; i++) sorted[i] = (placed){full->params[i].offset, i};
    qsort(sorted, (size_t)n, sizeof *sorted, by_offset);
    for (int j = 0; j < n; j++) order[j] = sorted[j].i;
    free(sorted);
    bool ok = true;
    for (int j = 0; j < n && ok; j++) {
        const sdp_param *fp = &full->params[order[j]];
        if (j > 0) {
            const sdp_param *prev = &full->params[order[j - 1]];
            ok = prev->offset + prev->numel <= fp->offset;
        }
        if (fp->block >= 0 && fp->group >= 0)
            ok = ok && (fp->axis == 0 || (fp->axis == 1 && fp->ndim >= 2)) && fp->shape[0] > 0 &&
                 (fp->axis == 0 || fp->shape[1] > 0);
        if (fp->block < 0 && fp->numel > 0)
            for (int k = 0; k < nspans && ok; k++)
                ok = fp->offset + fp->numel <= spans[k].lo || fp->offset >= spans[k].hi;
    }
    for (int k = 1; k < nspans && ok; k++) ok = spans[k - 1].hi <= spans[k].lo;
    if (!ok) free(order);
    return ok ? order : NULL;
}

/* Every bucket's trained elements (s->count; the last is every worker's), for --zero 1. */
static void bucket_counts(run_sweep *s, const sdp_layout *full) {
    const sdp_plan *p = s->p;
    const char *what = "the buckets' sizes";
    s->count = sdp_xcalloc((size_t)p->ngroups + 1, sizeof(size_t), what);
    s->cursor = sdp_xcalloc((size_t)p->ngroups + 1, sizeof(size_t), what);
    size_t *unit_elems = sdp_xcalloc((size_t)p->nunits + 1, sizeof(size_t), what);
    sdp_plan_unit_elems(p, full, true, unit_elems, &s->count[p->ngroups]);
    for (int u = 0; u < p->nunits; u++) s->count[bucket_of_unit(p, u)] += unit_elems[u];
    free(unit_elems);
}

/* --zero 2: the first sweep, which sizes every bucket's pieces. */
static void count_pieces(run_sweep *s, const sdp_layout *full, const int *order) {
    const size_t nb = (size_t)s->p->ngroups + 1;
    const char *what = "the buckets' pieces";
    s->maxp = full->nparams + 1;
    s->pcount = sdp_xcalloc(nb * (size_t)s->maxp, sizeof(size_t), what);
    s->npiece = sdp_xcalloc(nb, sizeof(int), what);
    s->player = sdp_xcalloc(nb, sizeof(int), what);
    s->pidx = sdp_xmalloc(nb * sizeof(int), what);
    s->pcur = sdp_xcalloc(nb, sizeof(int), what);
    s->pcursor = sdp_xcalloc(nb, sizeof(size_t), what);
    for (size_t b = 0; b < nb; b++) s->pidx[b] = -1;
    s->counting = true;
    for (int j = 0; j < full->nparams; j++) sweep_param(s, s->p, full, order[j]);
    s->counting = false;
}

static double *gather_peaks(const io_memplan_run *run, const windows *ws) {
    const sdp_layout *full = run->full;
    const sdp_plan *p = run->plan;
    const int world = p->cfg.world;
    run_sweep s = {.world = world, .W = train_ckpt_window_floats(full->numel), .p = p};
    const char *what = "predicting the checkpoint's gathers";
    s.spans = sdp_xmalloc(sizeof *s.spans * ((size_t)full->nblocks + 1), what);
    size_t *lo = sdp_xmalloc(sizeof *lo * ((size_t)full->nblocks + 1), what),
           *hi = sdp_xmalloc(sizeof *hi * ((size_t)full->nblocks + 1), what);
    block_ranges(full, lo, hi);
    for (int g = 0; g < full->nblocks; g++)
        if (lo[g] < hi[g]) s.spans[s.nspans++] = (block_span){lo[g], hi[g], 0};
    free(lo), free(hi);
    qsort(s.spans, (size_t)s.nspans, sizeof *s.spans, by_lo);
    int *order = sweep_order(full, s.spans, s.nspans);
    if (!order) {
        free(s.spans);
        return gather_peaks_reference(run, ws);
    }
    /* The windows gathers_of lists, numbered kind by kind (blocks in ascending order). */
    for (int i = 0; i < ws->n; i++) s.on[ws->w[i].kind] = true;
    int nwin = 0;
    for (int k = 0; k < NKINDS; k++) {
        s.first[k] = nwin;
        if (!s.on[k]) continue;
        if (k != WIN_BLOCK) {
            s.nwin[k] = (int)((full->numel + s.W - 1) / s.W);
        } else {
            for (int j = 0; j < s.nspans; j++) {
                s.spans[j].first = nwin + s.nwin[k];
                s.nwin[k] += (int)((s.spans[j].hi - s.spans[j].lo + s.W - 1) / s.W);
            }
        }
        nwin += s.nwin[k];
    }
    SDP_ASSERT(nwin == ws->n); /* the same windows as gathers_of's */
    s.rw = sdp_xmalloc(sizeof *s.rw * (size_t)world * NKINDS, what);
    s.np_all = sdp_xcalloc((size_t)nwin + 1, sizeof(int), what);
    s.np0 = sdp_xcalloc((size_t)nwin + 1, sizeof(int), what);
    s.nv_all = sdp_xcalloc((size_t)nwin + 1, sizeof(size_t), what);
    s.nv0 = sdp_xcalloc((size_t)nwin + 1, sizeof(size_t), what);
    double *peak = sdp_xcalloc((size_t)world * NKINDS, sizeof(double), what);
    for (size_t i = 0; i < (size_t)world * NKINDS; i++) s.rw[i] = (rank_window){.cur = -1};
    bucket_counts(&s, full);
    const bool pieces = p->cfg.zero == 2 && s.on[WIN_STATE];
    if (pieces) count_pieces(&s, full, order);
    for (int j = 0; j < full->nparams; j++) sweep_param(&s, p, full, order[j]);
    free(s.count), free(s.cursor);
    free(s.pcount), free(s.npiece), free(s.player), free(s.pidx), free(s.pcur), free(s.pcursor);
    for (int r = 0; r < world; r++)
        for (int k = 0; k < NKINDS; k++) {
            rank_window *w = &s.rw[(size_t)r * NKINDS + k];
            double most = w->cur >= 0 ? pack_bytes(w->np, w->nv) : 0;
            if (w->peak > most) most = w->peak;
            /* a window it sends nothing into still packs its two counts */
            if (w->touched < s.nwin[k] && pack_bytes(0, 0) > most) most = pack_bytes(0, 0);
            peak[(size_t)r * NKINDS + k] = most;
        }
    for (int k = 0; k < NKINDS; k++) peak[k] = 0; /* rank 0, which gathers: as the reference */
    for (int k = 0; k < NKINDS; k++)
        for (int id = s.first[k]; id < s.first[k] + s.nwin[k]; id++) {
            const double b = pack_bytes(s.np0[id], s.nv0[id]) + 24.0 * world +
                             pack_bytes(s.np_all[id], s.nv_all[id]);
            if (b > peak[k]) peak[k] = b;
        }
    free(order);
    free(s.spans);
    free(s.rw);
    free(s.np_all), free(s.np0), free(s.nv_all), free(s.nv0);
    return peak;
}

/* Elements of rank r's own model and of the optimizer state it keeps, and its activations' pool,
 * from its own model. */
static void local_sizes(const io_memplan_run *run, int r, size_t *nlocal, size_t *owned,
                        size_t *pool) {
    const worker_count c = train_worker_count_one(run->cfg, run->plan, run->full, r, run->B, run->T,
                                                  train_worker_count_cpu, &run->gemm);
    *nlocal = c.numel;
    *pool = c.acts_pool;
    sdp_worker_plan w;
    sdp_memplan_worker(run->plan, run->full, r, &w);
    *owned = w.owned;
}

static double max2(double a, double b) {
    return a > b ? a : b;
}

/* Whether a pass borrows the workers' training activations (eval_stream.c): on the host only. */
static bool lends(const io_memplan_run *run) {
    return streams(run) && !run->on_device;
}

/* What a pass over `lent` bytes of training activations allocates of its own. */
static double pass_bytes(const eval_pass_size *z, size_t lent) {
    const eval_pass_lent l = train_eval_pass_lent(z, lent);
    return (l.arena ? 0 : (double)z->arena_bytes) + (l.stream ? 0 : (double)z->stream_bytes);
}

/* Every rank's peak from the gathers' (gather[r * NKINDS + kind]), on a device the elements of
 * its model and of its optimizer state (NULL otherwise: the host copies are made only there), and
 * on the host the pool of its activations that a pass borrows (NULL when none does). */
static void assemble(const io_memplan_run *run, const windows *ws, const double *gather,
                     const size_t *nlocal, const size_t *owned, const size_t *pool, double *out) {
    const int world = run->plan->cfg.world;
    const double W = 4.0 * (double)train_ckpt_window_floats(run->full->numel);
    eval_pass_size val = {0}, recal = {0};
    if (streams(run))
        val = train_eval_pass_size_of(run->cfg, run->full, run->B, run->T, run->val_batches, false,
                                      run->gemm);
    if (recalibrates(run))
        recal = train_eval_pass_size_of(run->cfg, run->full, run->B, run->T, run->recal_batches,
                                        true, run->gemm);
    const double kept = recalibrates(run) ? 4.0 * (double)train_eval_recal_floats(run->full) : 0;
    for (int r = 0; r < world; r++) {
        const double host = run->on_device ? 4.0 * (double)nlocal[r] : 0; /* train_host_copy */
        const double host_state = run->on_device ? 4.0 * (double)owned[r] : 0;
        const double win = r == 0 ? W : 0;
        const double *g = &gather[(size_t)r * NKINDS];
        double most = host; /* the initial values, copied to the device */
        if (ws->n && run->state_buffers > 0) most = max2(most, host_state + win + g[WIN_STATE]);
        if (g[WIN_PARAMS] > 0) most = max2(most, host + win + g[WIN_PARAMS]);
        if (streams(run)) {
            const size_t lent = pool ? pool[r] : 0;
            most = max2(most, host + pass_bytes(&val, lent) + g[WIN_BLOCK]);
            if (recalibrates(run))
                most = max2(most, host + pass_bytes(&recal, lent) + g[WIN_BLOCK]);
        }
        out[r] = kept + most;
    }
}

void train_io_memplan_predict(const io_memplan_run *run, double *out) {
    const int world = run->plan->cfg.world;
    windows ws = gathers_of(run);
    double *gather = gather_peaks(run, &ws);
    size_t *nlocal = NULL, *owned = NULL, *pool = NULL;
    if (run->on_device || lends(run)) {
        const char *what = "the workers' model sizes";
        worker_count *c = sdp_xmalloc(sizeof *c * (size_t)world, what);
        train_worker_count_all(run->cfg, run->plan, run->full, run->B, run->T,
                               train_worker_count_cpu, &run->gemm, c);
        if (run->on_device) {
            nlocal = sdp_xmalloc(sizeof *nlocal * (size_t)world, what);
            owned = sdp_xmalloc(sizeof *owned * (size_t)world, what);
            sdp_worker_plan *w = sdp_xmalloc(sizeof *w * (size_t)world, what);
            sdp_memplan_workers(run->plan, run->full, w);
            for (int r = 0; r < world; r++) nlocal[r] = c[r].numel, owned[r] = w[r].owned;
            free(w);
        } else {
            pool = sdp_xmalloc(sizeof *pool * (size_t)world, what);
            for (int r = 0; r < world; r++) pool[r] = c[r].acts_pool;
        }
        free(c);
    }
    assemble(run, &ws, gather, nlocal, owned, pool, out);
    free(nlocal), free(owned), free(pool);
    free(gather);
    free(ws.w);
}

void train_io_memplan_predict_reference(const io_memplan_run *run, double *out) {
    const int world = run->plan->cfg.world;
    windows ws = gathers_of(run);
    double *gather = gather_peaks_reference(run, &ws);
    const char *what = "the workers' model sizes";
    size_t *nlocal = sdp_xmalloc(sizeof *nlocal * ((size_t)world + 1), what),
           *owned = sdp_xmalloc(sizeof *owned * ((size_t)world + 1), what),
           *pool = sdp_xmalloc(sizeof *pool * ((size_t)world + 1), what);
    for (int r = 0; r < world; r++) local_sizes(run, r, &nlocal[r], &owned[r], &pool[r]);
    assemble(run, &ws, gather, run->on_device ? nlocal : NULL, run->on_device ? owned : NULL,
             lends(run) ? pool : NULL, out);
    free(nlocal), free(owned), free(pool);
    free(gather);
    free(ws.w);
}
