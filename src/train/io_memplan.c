/* Each rank's evaluation and checkpoint bytes (io_mem), predicted from the plan: the same sizes
 * that eval_stream.c and train_ckpt.c allocate, in the same combinations.
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

size_t ckpt_window_floats(size_t numel) {
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
        ws->w = realloc(ws->w, sizeof *ws->w * (size_t)ws->cap);
        SDP_CHECK(ws->w, "out of memory");
    }
    ws->w[ws->n++] = (window){lo, hi, state_compact, kind};
}

/* [lo, hi) in windows of W, as the checkpoint and the block streaming cut it. */
static void add_range(windows *ws, size_t lo, size_t hi, size_t W, bool state_compact, int kind) {
    for (size_t a = lo; a < hi; a += W)
        add_window(ws, a, hi - a < W ? hi : a + W, state_compact, kind);
}

static void block_range(const sdp_layout *full, int g, size_t *lo, size_t *hi) {
    *lo = SIZE_MAX, *hi = 0;
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *p = &full->params[i];
        if (p->block != g) continue;
        if (p->offset < *lo) *lo = p->offset;
        if (p->offset + p->numel > *hi) *hi = p->offset + p->numel;
    }
}

static bool streams(const io_memplan_run *run) {
    return run->plan->cfg.mask == SDP_MASK_FORWARD && run->plan->cfg.owners != run->plan->cfg.world;
}

static bool recalibrates(const io_memplan_run *run) {
    return streams(run) && run->images && eval_recal_floats(run->full) > 0;
}

/* The gathers the run makes, each window once. */
static windows gathers_of(const io_memplan_run *run) {
    windows ws = {0};
    const size_t numel = run->full->numel, W = ckpt_window_floats(numel);
    const bool gathers_params = run->plan->cfg.mask == SDP_MASK_FORWARD || run->on_device;
    if (gathers_params) add_range(&ws, 0, numel, W, false, WIN_PARAMS);
    if (run->state_buffers > 0) add_range(&ws, 0, numel, W, true, WIN_STATE);
    if (streams(run))
        for (int g = 0; g < run->full->nblocks; g++) {
            size_t lo, hi;
            block_range(run->full, g, &lo, &hi);
            if (lo < hi) add_range(&ws, lo, hi, W, false, WIN_BLOCK);
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

static int by_global(const void *a, const void *b) {
    const size_t x = ((const sdp_run *)a)->global, y = ((const sdp_run *)b)->global;
    return (x > y) - (x < y);
}

static sent_runs sent_runs_of(const sdp_plan *p, const sdp_subnet_map *map, int rank,
                              bool state_compact) {
    sdp_run *sorted = malloc(sizeof *sorted * ((size_t)map->nruns + 1));
    sent_runs s = {malloc(sizeof(size_t) * ((size_t)map->nruns + 1)),
                   malloc(sizeof(size_t) * ((size_t)map->nruns + 1)),
                   malloc(sizeof(size_t) * ((size_t)map->nruns + 2)), 0};
    SDP_CHECK(sorted && s.start && s.end && s.before, "out of memory");
    int n = 0;
    for (int i = 0; i < map->nruns; i++)
        if (map->runs[i].len > 0 && sdp_sync_provides(p, &map->runs[i], rank, state_compact))
            sorted[n++] = map->runs[i];
    qsort(sorted, (size_t)n, sizeof *sorted, by_global);
    s.before[0] = 0;
    for (int j = 0; j < n; j++) {
        s.start[j] = sorted[j].global, s.end[j] = sorted[j].global + sorted[j].len;
        s.before[j + 1] = s.before[j] + sorted[j].len;
    }
    s.n = n;
    free(sorted);
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

/* The largest gather of each kind on every rank: gather[r * NKINDS + kind]. */
static double *gather_peaks(const io_memplan_run *run, const windows *ws) {
    const int world = run->plan->cfg.world;
    double *peak = calloc((size_t)world * NKINDS, sizeof(double));
    int *np0 = calloc((size_t)ws->n + 1, sizeof(int)),
        *np_all = calloc((size_t)ws->n + 1, sizeof(int));
    size_t *nv0 = calloc((size_t)ws->n + 1, sizeof(size_t)),
           *nv_all = calloc((size_t)ws->n + 1, sizeof(size_t));
    SDP_CHECK(peak && np0 && np_all && nv0 && nv_all, "out of memory");
    for (int r = 0; r < world; r++) {
        sdp_mem dry = {.dry = true};
        sdp_model_config counted = *run->cfg;
        counted.backend = sdp_backend_cpu(run->gemm, &dry);
        sdp_model m;
        run_create_worker_model(&m, &counted, run->plan, run->full, r, run->B, run->T,
                                SDP_MODEL_TRAIN_BARE);
        sdp_subnet_map map;
        sdp_subnet_map_build(&map, run->full, m.layout, run->plan, r,
                             run->plan->cfg.mask == SDP_MASK_FORWARD);
        sent_runs sent[2] = {sent_runs_of(run->plan, &map, r, false),
                             sent_runs_of(run->plan, &map, r, true)};
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

/* Elements of rank r's own model and of the optimizer state it keeps. */
static void local_sizes(const io_memplan_run *run, int r, size_t *nlocal, size_t *owned) {
    sdp_mem dry = {.dry = true};
    sdp_model_config counted = *run->cfg;
    counted.backend = sdp_backend_cpu(run->gemm, &dry);
    sdp_model m;
    run_create_worker_model(&m, &counted, run->plan, run->full, r, run->B, run->T,
                            SDP_MODEL_TRAIN_BARE);
    *nlocal = m.layout->numel;
    m.ops->destroy(&m);
    sdp_backend_destroy(counted.backend);
    sdp_worker_plan w;
    sdp_memplan_worker(run->plan, run->full, r, &w);
    *owned = w.owned;
}

static double max2(double a, double b) {
    return a > b ? a : b;
}

void io_memplan_predict(const io_memplan_run *run, double *out) {
    const int world = run->plan->cfg.world;
    windows ws = gathers_of(run);
    double *gather = gather_peaks(run, &ws);
    const double W = 4.0 * (double)ckpt_window_floats(run->full->numel);
    eval_pass_size val = {0}, recal = {0};
    if (streams(run))
        val = eval_pass_size_of(run->cfg, run->full, run->B, run->T, run->val_batches, false,
                                run->gemm);
    if (recalibrates(run))
        recal = eval_pass_size_of(run->cfg, run->full, run->B, run->T, run->recal_batches, true,
                                  run->gemm);
    const double kept = recalibrates(run) ? 4.0 * (double)eval_recal_floats(run->full) : 0;
    for (int r = 0; r < world; r++) {
        size_t nlocal, owned;
        local_sizes(run, r, &nlocal, &owned);
        const double host = run->on_device ? 4.0 * (double)nlocal : 0; /* host_copy */
        const double host_state = run->on_device ? 4.0 * (double)owned : 0;
        const double win = r == 0 ? W : 0;
        const double *g = &gather[(size_t)r * NKINDS];
        double most = host; /* the initial values, copied to the device */
        if (ws.n && run->state_buffers > 0) most = max2(most, host_state + win + g[WIN_STATE]);
        if (g[WIN_PARAMS] > 0) most = max2(most, host + win + g[WIN_PARAMS]);
        if (streams(run)) {
            most = max2(most,
                        host + (double)val.arena_bytes + (double)val.stream_bytes + g[WIN_BLOCK]);
            if (recalibrates(run))
                most = max2(most, host + (double)recal.arena_bytes + (double)recal.stream_bytes +
                                      g[WIN_BLOCK]);
        }
        out[r] = kept + most;
    }
    free(gather);
    free(ws.w);
}
