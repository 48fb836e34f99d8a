/* The step-time model (include/sdp/steptime.h): each worker's compute from its FLOPs, the
 * moments its buckets become ready, the gradient sync the plan issues, and the update. */
#include "sdp/steptime.h"

#include "sdp/check.h"
#include "sdp/mem.h"
#include "sdp/memplan.h"
#include "sdp/subnet.h"

#include <stdlib.h>
#include <string.h>

const char *sdp_comm_lib_name(sdp_comm_lib lib) {
    return lib == SDP_COMM_NCCL ? "nccl" : "mpi";
}

bool sdp_comm_lib_parse(const char *s, sdp_comm_lib *out) {
    if (!strcmp(s, "mpi")) return *out = SDP_COMM_MPI, true;
    if (!strcmp(s, "nccl")) return *out = SDP_COMM_NCCL, true;
    return false;
}

/* ---- what each worker computes --------------------------------------------------------------- */

/* Trained elements by block and by worker: the weights that set each block's share of the
 * FLOPs. The stem (embedding lookups) is left out: it does no matmul. */
typedef struct {
    int world, nblocks;
    double head;   /* outside blocks, the stem excluded */
    double *block; /* [nblocks] */
    double *mine;  /* [world][nblocks]: what worker r holds (forward) or owns (backward masking) */
    bool *stem;    /* [world]: owns a stem tensor, so its backward runs through every block */
} model_shape;

/* Per unit: its trained elements inside its block (plan.c counts the stem into the unit it goes
 * with under backward masking; that part does no matmul). Marks the stem's owners. */
static double *unit_elems_in_blocks(const sdp_plan *p, const sdp_layout *full, model_shape *s,
                                    sdp_mem *mem) {
    size_t *raw = sdp_alloc(mem, SDP_MEM_SCRATCH, ((size_t)p->nunits + 1) * sizeof(size_t));
    double *unit = sdp_alloc(mem, SDP_MEM_SCRATCH, ((size_t)p->nunits + 1) * sizeof(double));
    sdp_plan_unit_elems(p, full, true, raw, NULL);
    for (int u = 0; u < p->nunits; u++) unit[u] = (double)raw[u];
    for (int i = 0; i < full->nparams; i++) {
        if (full->params[i].buffer || !sdp_param_is_stem(full, i)) continue;
        const int u = sdp_plan_shared_unit(p, full, i);
        if (u >= 0) unit[u] -= (double)full->params[i].numel;
        for (int r = 0; r < s->world; r++) s->stem[r] |= u < 0 || sdp_plan_owns(p, u, r);
    }
    sdp_free(mem, raw);
    return unit;
}

static void shape_build(model_shape *s, const sdp_plan *p, const sdp_layout *full, sdp_mem *mem) {
    memset(s, 0, sizeof *s);
    s->world = p->cfg.world;
    s->nblocks = full->nblocks;
    const size_t nb = (size_t)s->nblocks + 1;
    s->block = sdp_alloc(mem, SDP_MEM_SCRATCH, nb * sizeof(double));
    s->mine = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)s->world * nb * sizeof(double));
    s->stem = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)s->world * sizeof(bool));
    for (int i = 0; i < full->nparams; i++) {
        const sdp_param *t = &full->params[i];
        if (t->buffer) continue;
        if (t->block >= 0)
            s->block[t->block] += (double)t->numel;
        else if (!sdp_param_is_stem(full, i))
            s->head += (double)t->numel;
    }
    double *unit = unit_elems_in_blocks(p, full, s, mem);
    /* A block's elements outside its units are shared: every worker holds them. */
    double *in_units = sdp_alloc(mem, SDP_MEM_SCRATCH, nb * sizeof(double));
    for (int u = 0; u < p->nunits; u++) {
        const sdp_unit *un = &p->units[u];
        in_units[un->block] += unit[u];
        for (int j = 0; j < p->cfg.owners; j++)
            s->mine[(size_t)un->owners[j] * nb + (size_t)un->block] += unit[u];
    }
    for (int r = 0; r < s->world; r++)
        for (int b = 0; b < s->nblocks; b++)
            s->mine[(size_t)r * nb + b] += s->block[b] - in_units[b];
    sdp_free(mem, in_units);
    sdp_free(mem, unit);
}

static void shape_free(model_shape *s, sdp_mem *mem) {
    sdp_free(mem, s->block);
    sdp_free(mem, s->mine);
    sdp_free(mem, s->stem);
}

static const double *mine_of(const model_shape *s, int r) {
    return s->mine + (size_t)r * ((size_t)s->nblocks + 1);
}

/* Forward masking and data parallelism: the worker's own model, backward 2F/3 shared out over
 * the head and its blocks by their elements. done[b]: when its backward has finished block b. */
static double backward_own_model(const model_shape *s, int r, double third, double t,
                                 bool recompute, double *done) {
    const double *mine = mine_of(s, r);
    double w = s->head;
    for (int b = 0; b < s->nblocks; b++) w += mine[b];
    const double per = w > 0 ? 2 * third / w : 0;
    /* Recomputation runs each block's forward again just before its backward. */
    const double again = recompute && w > 0 ? third / w : 0;
    t += s->head * per;
    for (int b = s->nblocks - 1; b >= 0; b--) {
        t += mine[b] * (per + again);
        done[b] = t;
    }
    return t;
}

/* Backward masking: the full model's F, F/3 of input gradients and F/3 of weight gradients at
 * most. Input gradients stop at the lowest block the worker owns (all the way down when it owns
 * the stem); weight gradients only for what it owns. The head is shared: both. */
static double backward_masked(const model_shape *s, int r, double third, double t, bool recompute,
                              double *done) {
    const double *mine = mine_of(s, r);
    double w = s->head;
    for (int b = 0; b < s->nblocks; b++) w += s->block[b];
    const double per = w > 0 ? third / w : 0;
    const double again = recompute ? per : 0; /* each block the backward reaches, forward again */
    int floor = s->nblocks;
    for (int b = 0; b < s->nblocks && floor == s->nblocks; b++)
        if (mine[b] > 0) floor = b;
    if (s->stem[r]) floor = 0;
    t += 2 * s->head * per;
    for (int b = s->nblocks - 1; b >= 0; b--) {
        if (b >= floor) t += (s->block[b] + mine[b]) * per + s->block[b] * again;
        done[b] = t;
    }
    return t;
}

/* ---- gradient sync --------------------------------------------------------------------------- */

/* One all-reduce as sdp_sync issues it: the shared tensors (and any group of all N) over every
 * worker, then each owner group of 2 to N-1 members. */
typedef struct {
    sdp_coll c;
    int lowest; /* lowest block of its units; -1: ready only at the backward's end */
} bucket;

typedef struct {
    int n;
    bucket *b;
    int *everyone;
} bucket_list;

/* The owner group the stem goes with (backward masking with block units), or -1. */
static int stem_group(const sdp_plan *p, const sdp_layout *full) {
    for (int i = 0; i < full->nparams && sdp_param_is_stem(full, i); i++) {
        const int u = sdp_plan_shared_unit(p, full, i);
        if (u >= 0) return p->units[u].owner_group;
    }
    return -1;
}

/* Per group: trained elements and lowest block. A group that carries the stem is, like the
 * shared bucket, complete only when the backward ends (lowest -1). */
static void group_figures(const sdp_plan *p, const sdp_layout *full, const size_t *unit_trained,
                          double *elems, int *lowest) {
    for (int g = 0; g < p->ngroups; g++) lowest[g] = full->nblocks;
    for (int u = 0; u < p->nunits; u++) {
        const int g = p->units[u].owner_group;
        elems[g] += (double)unit_trained[u];
        if (p->units[u].block < lowest[g]) lowest[g] = p->units[u].block;
    }
    const int sg = stem_group(p, full);
    if (sg >= 0) lowest[sg] = -1;
}

static void buckets_build(bucket_list *l, const sdp_plan *p, const sdp_layout *full, double wire,
                          sdp_mem *mem) {
    const int N = p->cfg.world;
    const size_t ng = (size_t)p->ngroups + 1;
    size_t *unit = sdp_alloc(mem, SDP_MEM_SCRATCH, ((size_t)p->nunits + 1) * sizeof(size_t));
    double *elems = sdp_alloc(mem, SDP_MEM_SCRATCH, ng * sizeof(double));
    int *lowest = sdp_alloc(mem, SDP_MEM_SCRATCH, ng * sizeof(int));
    size_t shared;
    sdp_plan_unit_elems(p, full, true, unit, &shared);
    group_figures(p, full, unit, elems, lowest);
    l->b = sdp_alloc(mem, SDP_MEM_SCRATCH, ng * sizeof(bucket));
    l->everyone = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)N * sizeof(int));
    for (int r = 0; r < N; r++) l->everyone[r] = r;
    double world_elems = (double)shared;
    l->n = 1;
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        if (og->nmembers == N) world_elems += elems[g];
        if (og->nmembers == N || og->nmembers < 2 || elems[g] <= 0) continue;
        l->b[l->n++] = (bucket){{og->members, og->nmembers, wire * elems[g]}, lowest[g]};
    }
    l->b[0] = (bucket){{l->everyone, N, wire * world_elems}, -1};
    sdp_free(mem, unit);
    sdp_free(mem, elems);
    sdp_free(mem, lowest);
}

/* When worker r has finished what bucket k needs. */
static double ready_on(const bucket *k, const double *done, double end) {
    return k->lowest < 0 ? end : done[k->lowest];
}

/* Issue order: by the moment a bucket is ready; at the same moment, those a layer's end starts
 * (sdp_sync_layer_done) before those the backward's end starts (sdp_sync_grads_end), each in
 * bucket order. */
typedef struct {
    double ready;
    int at_end, index;
} ready_key;

static int by_ready(const void *a, const void *b) {
    const ready_key *x = a, *y = b;
    if (x->ready != y->ready) return x->ready < y->ready ? -1 : 1;
    if (x->at_end != y->at_end) return x->at_end - y->at_end;
    return x->index - y->index;
}

/* NCCL: each all-reduce starts once every member has finished its part of the backward (or the
 * whole backward, without overlap) and is free; a worker runs one at a time. Returns when the
 * last one ends. done is [world][nblocks + 1], end [world]. */
static double sync_nccl(const sdp_steptime_cfg *cfg, const bucket_list *l, const double *done,
                        const double *end, int nb, bool zero, sdp_mem *mem) {
    const int N = cfg->net.world;
    ready_key *order = sdp_alloc(mem, SDP_MEM_SCRATCH, ((size_t)l->n + 1) * sizeof(ready_key));
    double *free_at = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)N * sizeof(double));
    for (int k = 0; k < l->n; k++) {
        double ready = 0;
        for (int i = 0; i < l->b[k].c.n; i++) {
            const int m = l->b[k].c.members[i];
            const double t =
                cfg->overlap ? ready_on(&l->b[k], done + (size_t)m * (nb + 1), end[m]) : end[m];
            if (t > ready) ready = t;
        }
        order[k] = (ready_key){ready, l->b[k].lowest < 0, k};
    }
    qsort(order, (size_t)l->n, sizeof *order, by_ready);
    double last = 0;
    for (int j = 0; j < l->n; j++) {
        const sdp_coll *c = &l->b[order[j].index].c;
        double start = order[j].ready;
        for (int i = 0; i < c->n; i++)
            if (free_at[c->members[i]] > start) start = free_at[c->members[i]];
        const double finish = start + (zero ? sdp_net_ring_reduce_scatter(&cfg->net, c)
                                            : sdp_net_ring_allreduce(&cfg->net, c));
        for (int i = 0; i < c->n; i++) free_at[c->members[i]] = finish;
        if (finish > last) last = finish;
    }
    sdp_free(mem, order);
    sdp_free(mem, free_at);
    return last;
}

/* Open MPI over TCP: nothing moves between MPI calls, so every all-reduce (reduce-scatter under
 * zero) starts when the slowest backward ends and they all run together. */
static double sync_mpi(const sdp_steptime_cfg *cfg, const bucket_list *l, double slowest, bool zero,
                       sdp_mem *mem) {
    sdp_coll *c = sdp_alloc(mem, SDP_MEM_SCRATCH, ((size_t)l->n + 1) * sizeof(sdp_coll));
    for (int k = 0; k < l->n; k++) c[k] = l->b[k].c;
    const double t = zero ? sdp_net_mpi_reduce_scatter_together(&cfg->net, c, l->n, NULL)
                          : sdp_net_mpi_allreduce_together(&cfg->net, c, l->n, NULL);
    sdp_free(mem, c);
    return slowest + t;
}

/* When the gradient sync ends, from when each worker finished each block and its backward. */
static double sync_of(const sdp_steptime_cfg *cfg, const bucket_list *l, const double *done,
                      const double *end, double slowest, int nb, bool zero, sdp_mem *mem) {
    const double t = cfg->lib == SDP_COMM_NCCL ? sync_nccl(cfg, l, done, end, nb, zero, mem)
                                               : sync_mpi(cfg, l, slowest, zero, mem);
    return t > slowest ? t : slowest; /* the norm's all-gather waits for everyone */
}

/* ---- update ---------------------------------------------------------------------------------- */

/* Backward masking: one broadcast per owner group from its publisher to every worker, one after
 * another (sdp_sync_publish). They are blocking, at their own transport rate when one is given. */
static double publish_time(const sdp_plan *p, const sdp_steptime_cfg *cfg) {
    if (p->cfg.mask != SDP_MASK_BACKWARD) return 0;
    sdp_net net = cfg->net;
    if (cfg->bcast_host_Bps > 0) net.host_Bps = cfg->bcast_host_Bps;
    double t = 0;
    for (int g = 0; g < p->ngroups; g++) {
        const sdp_owner_group *og = &p->groups[g];
        if (og->nmembers == p->cfg.world || og->elems == 0) continue;
        const double bytes = cfg->wire_bytes * (double)og->elems;
        t += cfg->lib == SDP_COMM_NCCL ? sdp_net_ring_broadcast(&net, og->publisher, bytes)
                                       : sdp_net_mpi_broadcast(&net, og->publisher, bytes);
    }
    return t;
}

/* --zero 1: every bucket's blocking all-gather of the updated shards, in bucket order. */
static double gather_time(const sdp_steptime_cfg *cfg, const bucket_list *l) {
    double t = 0;
    for (int k = 0; k < l->n; k++)
        t += cfg->lib == SDP_COMM_NCCL ? sdp_net_ring_allgather(&cfg->net, &l->b[k].c)
                                       : sdp_net_mpi_allgather(&cfg->net, &l->b[k].c);
    return t;
}

/* Its own optimizer sweep: over what it owns, or under zero its shards of it. */
static double optimizer_time(const sdp_plan *p, const sdp_layout *full, const sdp_steptime_cfg *cfg,
                             int r) {
    if (cfg->mem_Bps <= 0) return 0;
    sdp_worker_plan w;
    sdp_memplan_worker(p, full, r, &w);
    return (double)(p->cfg.zero ? w.state_elems : w.owned) * cfg->update_bytes / cfg->mem_Bps;
}

/* ---- the step -------------------------------------------------------------------------------- */

/* Every worker's forward, backward and optimizer; end[r]: when its backward ends, done[r][b]:
 * when it has finished block b. Returns the slowest backward's end. */
static double compute_all(const sdp_plan *p, const sdp_layout *full, const model_shape *s,
                          const double *flops, const sdp_steptime_cfg *cfg, double *done,
                          double *end, sdp_step_times *out) {
    const bool masked = p->cfg.mask == SDP_MASK_BACKWARD;
    double slowest = 0;
    for (int r = 0; r < p->cfg.world; r++) {
        sdp_step_times *o = &out[r];
        memset(o, 0, sizeof *o);
        double *d = done + (size_t)r * ((size_t)s->nblocks + 1);
        const bool timed = cfg->forward_s != NULL;
        /* Timed: the FLOPs only say how the backward spreads over the blocks; its length is
         * the measured one. */
        const double third = timed ? 1 : flops[r] / 3 / cfg->flops_per_s;
        const double fwd = timed ? cfg->forward_s[r] : third;
        const double bwd_end = masked ? backward_masked(s, r, third, 0, cfg->recompute, d)
                                      : backward_own_model(s, r, third, 0, cfg->recompute, d);
        const double scale = !timed ? 1 : bwd_end > 0 ? cfg->backward_s[r] / bwd_end : 0;
        for (int b = 0; b < s->nblocks; b++) d[b] = fwd + d[b] * scale;
        end[r] = fwd + bwd_end * scale;
        o->forward = fwd;
        o->backward = end[r] - fwd;
        o->optimizer = optimizer_time(p, full, cfg, r);
        if (end[r] > slowest) slowest = end[r];
    }
    return slowest;
}

/* The micro-batches before the last (cfg->micro_batches A): every worker's timeline moves on by
 * A - 1 of its own forward and backward, or under --zero 2 by A - 1 times the sync's end of the
 * micro-batch priced so far (each early micro-batch ends with its reduce-scatters, on every worker
 * together). Forward and backward become the step's. Returns the slowest backward's end. */
static double add_early_micro_batches(const sdp_steptime_cfg *cfg, bool zero2, double sync_end,
                                      int world, int nb, double *done, double *end,
                                      sdp_step_times *out) {
    const int early = cfg->micro_batches > 1 ? cfg->micro_batches - 1 : 0;
    double slowest = 0;
    for (int r = 0; r < world; r++) {
        sdp_step_times *o = &out[r];
        const double shift = early * (zero2 ? sync_end : o->forward + o->backward);
        for (int b = 0; b <= nb; b++) done[(size_t)r * (nb + 1) + b] += shift;
        end[r] += shift;
        o->forward *= early + 1;
        o->backward *= early + 1;
        if (end[r] > slowest) slowest = end[r];
    }
    return slowest;
}

/* Exposed sync, update and step of every worker once the sync ends; returns the job's step.
 * The all-gathers (zero) and publishing wait for every worker's optimizer. */
static double finish_steps(const sdp_plan *p, const sdp_steptime_cfg *cfg, double sync_end,
                           double gather, sdp_step_times *out) {
    const int N = p->cfg.world;
    const bool publishes = p->cfg.mask == SDP_MASK_BACKWARD && N > 1;
    const bool waits = (publishes || gather > 0) && N > 1;
    const double publish = publish_time(p, cfg);
    double max_opt = 0, job = 0;
    for (int r = 0; r < N; r++)
        if (out[r].optimizer > max_opt) max_opt = out[r].optimizer;
    for (int r = 0; r < N; r++) {
        sdp_step_times *o = &out[r];
        o->exposed = N > 1 ? sync_end - o->forward - o->backward : 0;
        o->publish = publish;
        o->gather = gather;
        o->update = waits ? max_opt + gather + publish : o->optimizer;
        o->step = o->forward + o->backward + o->exposed + o->update;
        if (o->step > job) job = o->step;
    }
    return job;
}

double sdp_steptime_predict(const sdp_plan *p, const sdp_layout *full, const double *flops,
                            const sdp_steptime_cfg *cfg, sdp_step_times *out) {
    const int N = p->cfg.world, nb = full->nblocks;
    SDP_CHECK(cfg->net.world == N && cfg->net.ranks_per_host >= 1 && cfg->net.link_Bps > 0 &&
                  (cfg->flops_per_s > 0 || (cfg->forward_s && cfg->backward_s)),
              "step-time model: the network must cover the plan's %d workers, with a link rate "
              "above 0, and a compute rate above 0 or measured compute times",
              N);
    sdp_mem mem = {0};
    model_shape s;
    shape_build(&s, p, full, &mem);
    double *done = sdp_alloc(&mem, SDP_MEM_SCRATCH, (size_t)N * (nb + 1) * sizeof(double));
    double *end = sdp_alloc(&mem, SDP_MEM_SCRATCH, (size_t)N * sizeof(double));
    double slowest = compute_all(p, full, &s, flops, cfg, done, end, out);
    bucket_list l;
    buckets_build(&l, p, full, cfg->wire_bytes, &mem);
    const bool zero = p->cfg.zero && N > 1;
    double sync_end = sync_of(cfg, &l, done, end, slowest, nb, zero, &mem);
    if (cfg->micro_batches > 1) {
        slowest = add_early_micro_batches(cfg, p->cfg.zero == 2 && N > 1, sync_end, N, nb, done,
                                          end, out);
        sync_end = sync_of(cfg, &l, done, end, slowest, nb, zero, &mem);
    }
    const double job = finish_steps(p, cfg, sync_end, zero ? gather_time(cfg, &l) : 0, out);
    sdp_free(&mem, l.b);
    sdp_free(&mem, l.everyone);
    sdp_free(&mem, done);
    sdp_free(&mem, end);
    shape_free(&s, &mem);
    return job;
}
