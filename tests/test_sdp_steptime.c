/* The step-time model against hand-computed expectations: each expected time below is worked out
 * here from the formula in the comment beside it (and sizes summed from the layout), never taken
 * from the model's output. Collectives: a ring all-reduce, libnbc's binomial all-reduce across two
 * hosts, concurrent all-reduces sharing a link, the chain and ring broadcasts. Steps: data
 * parallelism's exposed sync, overlap with the backward, backward masking's compute and
 * publishing, the publishing broadcasts' own transport rate, and --zero 1's reduce-scatter,
 * sharded optimizer and all-gather. */
#include "testutil.h"

#include "sdp/netcost.h"
#include "sdp/plan.h"
#include "sdp/steptime.h"
#include "sdp/transformer.h"

#define B_LINK 1.25e9 /* 10 Gbit/s */
#define ALPHA  5e-6
#define H_RATE 2e9
#define MB     1e6

static void assert_close(double got, double want) {
    if (fabs(got - want) > 1e-9 * (fabs(want) + 1e-6)) {
        print_error("got %.12g, expected %.12g\n", got, want);
        fail();
    }
}

static sdp_net net_of(int world, int per_host, double host) {
    return (sdp_net){.world = world,
                     .ranks_per_host = per_host,
                     .link_Bps = B_LINK,
                     .latency_s = ALPHA,
                     .host_Bps = host};
}

/* ---- collectives ----------------------------------------------------------------------------- */

/* One group of p = 4 on hosts of their own: 2(p-1)/p S/B + 2(p-1) alpha. */
static void test_ring_allreduce_one_group(void **state) {
    (void)state;
    const sdp_net net = net_of(8, 1, 0);
    const int members[4] = {1, 3, 4, 6};
    const sdp_coll c = {members, 4, 12 * MB};
    const double p = 4, S = 12 * MB;
    assert_close(sdp_net_ring_allreduce(&net, &c),
                 2 * (p - 1) / p * S / B_LINK + 2 * (p - 1) * ALPHA);
    const sdp_coll alone = {members, 1, S};
    assert_close(sdp_net_ring_allreduce(&net, &alone), 0);
}

/* Its halves (--zero 1's sync and all-gather): (p-1)/p S/B + (p-1) alpha each. */
static void test_ring_halves(void **state) {
    (void)state;
    const sdp_net net = net_of(8, 1, 0);
    const int members[4] = {1, 3, 4, 6};
    const double p = 4, S = 12 * MB;
    const sdp_coll c = {members, 4, S};
    const double half = (p - 1) / p * S / B_LINK + (p - 1) * ALPHA;
    assert_close(sdp_net_ring_reduce_scatter(&net, &c), half);
    assert_close(sdp_net_ring_allgather(&net, &c), half);
}

/* The same group inside one host: no link, no latency, each step moves S/p out of and S/p into
 * every rank's transport: 2(p-1) * 2 (S/p) / H. */
static void test_ring_allreduce_within_a_host(void **state) {
    (void)state;
    const sdp_net net = net_of(8, 8, H_RATE);
    const int members[4] = {1, 3, 4, 6};
    const sdp_coll c = {members, 4, 12 * MB};
    const double p = 4, S = 12 * MB;
    assert_close(sdp_net_ring_allreduce(&net, &c), 2 * (p - 1) * 2 * (S / p) / H_RATE);
}

/* The measured setting: ranks 0, 1 on host 0 and 2, 3 on host 1, DDP's binomial all-reduce.
 * Reduce: 1->0 and 3->2 (within hosts), then 2->0 (crosses). Broadcast: 0->1 (within), then
 * 0->2 and 1->3 (both cross in the same direction: 2S on one link). Four steps, each rank moving
 * at most S per step through its transport: 3 S/B + 2 alpha + 4 S/H. */
static void test_mpi_allreduce_across_two_hosts(void **state) {
    (void)state;
    const sdp_net net = net_of(4, 2, H_RATE);
    const int everyone[4] = {0, 1, 2, 3};
    const double S = 40 * MB;
    const sdp_coll c = {everyone, 4, S};
    double end;
    const double t = sdp_net_mpi_allreduce_together(&net, &c, 1, &end);
    assert_close(t, 3 * S / B_LINK + 2 * ALPHA + 4 * S / H_RATE);
    assert_close(end, t);
}

/* The same setting, libnbc's reduce-scatter (--zero 1): the binomial reduce, 1->0 and 3->2 (S/H),
 * then 2->0 (alpha + S/B + S/H); then rank 0 scatters S/4 to each of 1, 2 and 3 at once: 2 and 3
 * across (alpha + (S/2)/B), 3S/4 out of rank 0's transport. 2 alpha + 1.5 S/B + 2.75 S/H. */
static void test_mpi_reduce_scatter_across_two_hosts(void **state) {
    (void)state;
    const sdp_net net = net_of(4, 2, H_RATE);
    const int everyone[4] = {0, 1, 2, 3};
    const double S = 40 * MB;
    const sdp_coll c = {everyone, 4, S};
    double end;
    const double t = sdp_net_mpi_reduce_scatter_together(&net, &c, 1, &end);
    assert_close(t, 2 * ALPHA + 1.5 * S / B_LINK + 2.75 * S / H_RATE);
    assert_close(end, t);
}

/* Open MPI's all-gather of --zero 1. Two members across the hosts exchange their halves at
 * once: alpha + (S/2)/B + S/H. Four on 2 hosts: the gather to rank 0 (2 and 3 across: alpha +
 * (S/2)/B; 3S/4 into rank 0) and the chain broadcast 0 -> 1 -> 2 -> 3 (one hop across, each
 * S through the transport): 2 alpha + 1.5 S/B + 3.75 S/H. */
static void test_mpi_allgather(void **state) {
    (void)state;
    const sdp_net net = net_of(4, 2, H_RATE);
    const double S = 8 * MB;
    const int pair[2] = {1, 2}, everyone[4] = {0, 1, 2, 3};
    const sdp_coll two = {pair, 2, S}, four = {everyone, 4, S};
    assert_close(sdp_net_mpi_allgather(&net, &two), ALPHA + S / 2 / B_LINK + S / H_RATE);
    assert_close(sdp_net_mpi_allgather(&net, &four),
                 2 * ALPHA + 1.5 * S / B_LINK + 3.75 * S / H_RATE);
}

/* Groups {1, 2} and {0, 3} (p = 2: reduce to the lower rank, then send back). Alone, one takes
 * 2 (alpha + S/B). Together both reductions go from host 1 to host 0 at once, then both
 * broadcasts back: 2 (alpha + 2S/B). */
static void test_mpi_allreduces_share_the_link(void **state) {
    (void)state;
    const sdp_net net = net_of(4, 2, 0);
    const int a[2] = {1, 2}, b[2] = {0, 3};
    const double S = 7 * MB;
    const sdp_coll both[2] = {{a, 2, S}, {b, 2, S}};
    assert_close(sdp_net_mpi_allreduce_together(&net, both, 1, NULL), 2 * (ALPHA + S / B_LINK));
    double ends[2];
    const double t = sdp_net_mpi_allreduce_together(&net, both, 2, ends);
    assert_close(t, 2 * (ALPHA + 2 * S / B_LINK));
    assert_close(ends[0], t);
    assert_close(ends[1], t);
}

/* Below 8 ranks Open MPI chains a large broadcast: root 1 -> 2 (crosses) -> 3 -> 0 (crosses),
 * one whole hop after another: 2 (alpha + S/B) + 3 S/H. Root 0 crosses once. */
static void test_mpi_broadcast_chain(void **state) {
    (void)state;
    const sdp_net net = net_of(4, 2, H_RATE);
    const double S = 10 * MB;
    assert_close(sdp_net_mpi_broadcast(&net, 1, S), 2 * (ALPHA + S / B_LINK) + 3 * S / H_RATE);
    assert_close(sdp_net_mpi_broadcast(&net, 0, S), ALPHA + S / B_LINK + 3 * S / H_RATE);
}

/* NCCL's pipelined ring broadcast over 8 ranks on hosts of their own: 7 alpha + S/B. */
static void test_ring_broadcast(void **state) {
    (void)state;
    const sdp_net net = net_of(8, 1, 0);
    const double S = 10 * MB;
    assert_close(sdp_net_ring_broadcast(&net, 3, S), 7 * ALPHA + S / B_LINK);
}

/* ---- steps ----------------------------------------------------------------------------------- */

static void gpt_layout(sdp_layout *L, int n_layer) {
    sdp_tf_config c = {.model = {.arch = "gpt",
                                 .layers = n_layer,
                                 .heads = 4,
                                 .width = 32,
                                 .d_ff = 128,
                                 .seq_len = 16,
                                 .vocab = 64}};
    sdp_tf_config_finish(&c);
    sdp_tf_shape s;
    sdp_tf_shape_full(&s, &c);
    sdp_tf_describe(L, &c, &s);
    sdp_tf_shape_free(&s);
}

static void build_plan(sdp_plan *p, const sdp_layout *L, sdp_mask_mode mask, int N, int k) {
    const sdp_plan_cfg c = {.mask = mask, .unit = SDP_UNIT_BLOCK, .world = N, .owners = k};
    sdp_plan_build(p, &c, L);
}

static sdp_steptime_cfg step_cfg(int N, bool overlap) {
    return (sdp_steptime_cfg){.net = net_of(N, 1, 0),
                              .lib = SDP_COMM_NCCL,
                              .overlap = overlap,
                              .flops_per_s = 1e12,
                              .wire_bytes = 4};
}

/* Elements by place in the layout: block b (b >= 0), the stem (-1), the rest outside blocks
 * (-2). */
static double elems_at(const sdp_layout *L, int where) {
    double e = 0;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *t = &L->params[i];
        const int at = t->block >= 0 ? t->block : sdp_param_is_stem(L, i) ? -1 : -2;
        if (at == where) e += (double)t->numel;
    }
    return e;
}

/* Data parallelism over 2 workers: forward F/3 and backward 2F/3 at the rate; the one bucket
 * holds every element, the embedding included, so it starts after the backward and is exposed
 * whole: 2 (1/2) 4 numel / B + 2 alpha. */
static void test_ddp_step(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 2);
    sdp_plan p;
    build_plan(&p, &L, SDP_MASK_NONE, 2, 2);
    const sdp_steptime_cfg cfg = step_cfg(2, true);
    const double F = 3e9, flops[2] = {F, F};
    sdp_step_times t[2];
    const double job = sdp_steptime_predict(&p, &L, flops, &cfg, t);
    const double ring = 4 * (double)L.numel / B_LINK + 2 * ALPHA;
    for (int r = 0; r < 2; r++) {
        assert_close(t[r].forward, F / 3 / 1e12);
        assert_close(t[r].backward, 2 * F / 3 / 1e12);
        assert_close(t[r].exposed, ring);
        assert_close(t[r].update, 0);
        assert_close(t[r].step, F / 1e12 + ring);
    }
    assert_close(job, F / 1e12 + ring);
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

/* Forward masking, 3 blocks, 3 workers, k = 2: block u is owned by u and u + 1 (mod 3), one
 * owner group each, all-reduced in g = 2 alpha + 4 block / B (a ring of 2); the shared tensors
 * over all 3 in s = 4 alpha + 4 (4 shared) / (3 B). Block 2 is the top block of both its owners,
 * 0 and 2, so its group is complete halfway through their backward; at this link rate its
 * all-reduce ends before the backward does. Without overlap all start at the end, groups first
 * (as a layer's end starts them), in bucket order: {0,1}, then {0,2} once worker 0 is free, then
 * {1,2} once worker 2 is, then the shared bucket: 3g + s. With overlap {0,2} is hidden: 2g + s. */
static void test_overlap_reduces_exposed_time(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 3);
    sdp_plan p;
    build_plan(&p, &L, SDP_MASK_FORWARD, 3, 2);
    const double flops[3] = {3e9, 3e9, 3e9};
    sdp_step_times on[3], off[3];
    sdp_steptime_cfg cfg = step_cfg(3, true);
    cfg.net.link_Bps = 1e8;
    const double block = elems_at(&L, 0), shared = (double)L.numel - 3 * block;
    const double g = 2 * ALPHA + 4 * block / 1e8, s = 4 * ALPHA + 4 * (4 * shared) / (3 * 1e8);
    sdp_steptime_predict(&p, &L, flops, &cfg, on);
    cfg.overlap = false;
    sdp_steptime_predict(&p, &L, flops, &cfg, off);
    for (int r = 0; r < 3; r++) {
        assert_close(on[r].exposed, s + 2 * g);
        assert_close(off[r].exposed, s + 3 * g);
    }
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

/* Backward masking, 2 blocks, 2 workers, k = 1: worker 0 owns block 0 and the embedding that goes
 * with it, worker 1 owns block 1. With w = head + block 0 + block 1 (the embedding does no
 * matmul) and c = (F/3)/w per element, each backward pays input gradients (c per element) down
 * to its lowest owned block and weight gradients (c per element) for what it owns; the head is
 * shared:
 *   worker 0: c (2 head + 2 block0 + 2 block1 - block1) = c (2 head + 2 block0 + block1)
 *   worker 1: c (2 head + 2 block1)
 * Publishing: each group goes by a ring broadcast to the other worker, alpha + 4 elems / B:
 * block 0 with the stem, then block 1. */
static void test_backward_masking(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 2);
    sdp_plan p;
    build_plan(&p, &L, SDP_MASK_BACKWARD, 2, 1);
    const sdp_steptime_cfg cfg = step_cfg(2, true);
    const double F = 3e9, flops[2] = {F, F};
    sdp_step_times t[2];
    sdp_steptime_predict(&p, &L, flops, &cfg, t);
    const double head = elems_at(&L, -2), b0 = elems_at(&L, 0), b1 = elems_at(&L, 1);
    const double stem = elems_at(&L, -1), c = F / 3 / 1e12 / (head + b0 + b1);
    assert_close(t[0].forward, F / 3 / 1e12);
    assert_close(t[0].backward, c * (2 * head + 2 * b0 + b1));
    assert_close(t[1].backward, c * (2 * head + 2 * b1));
    const double publish = 2 * ALPHA + 4 * (stem + b0 + b1) / B_LINK;
    for (int r = 0; r < 2; r++) {
        assert_close(t[r].publish, publish);
        assert_close(t[r].update, publish); /* no optimizer time without a memory rate */
    }
    /* Each worker's head gradients are all-reduced over both (the shared bucket), after the
     * slower backward (worker 0's): the step ends together. */
    assert_close(t[0].step, t[1].step);
    assert_true(t[1].exposed > t[0].exposed);
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

/* The blocking publishing broadcasts at their own transport rate. The setting of
 * test_backward_masking under Open MPI, each worker on a host of its own, every rank's transport
 * at H. Publishing: two chain broadcasts of one hop each (below 8 ranks), each crossing:
 * alpha + S/B + S/H_b per group, E = stem + block 0 + block 1 elements in all:
 *   2 alpha + 4E/B + 4E/H_b, with H_b = H when no broadcast rate is given, 4H when it is.
 * The gradient sync keeps H: the shared bucket (the head) is libnbc's binomial all-reduce over
 * 2, reduce 1 -> 0 then broadcast 0 -> 1, both crossing: 2 (alpha + 4 head/B + 4 head/H),
 * exposed on worker 0, whose backward is the slower. */
static void test_publish_transport_rate(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 2);
    sdp_plan p;
    build_plan(&p, &L, SDP_MASK_BACKWARD, 2, 1);
    sdp_steptime_cfg cfg = step_cfg(2, false);
    cfg.lib = SDP_COMM_MPI;
    cfg.net.host_Bps = H_RATE;
    const double F = 3e9, flops[2] = {F, F};
    sdp_step_times same[2], fast[2];
    sdp_steptime_predict(&p, &L, flops, &cfg, same);
    cfg.bcast_host_Bps = 4 * H_RATE;
    sdp_steptime_predict(&p, &L, flops, &cfg, fast);
    const double E = elems_at(&L, -1) + elems_at(&L, 0) + elems_at(&L, 1), head = elems_at(&L, -2);
    const double wire = 2 * ALPHA + 4 * E / B_LINK;
    const double sync = 2 * (ALPHA + 4 * head / B_LINK + 4 * head / H_RATE);
    for (int r = 0; r < 2; r++) {
        assert_close(same[r].publish, wire + 4 * E / H_RATE);
        assert_close(fast[r].publish, wire + 4 * E / (4 * H_RATE));
        assert_close(fast[r].update, fast[r].publish); /* no optimizer time without a memory rate */
        assert_close(fast[r].exposed, same[r].exposed);
        assert_close(same[r].step - fast[r].step, 3 * E / H_RATE);
    }
    assert_close(same[0].exposed, sync);
    assert_close(fast[0].exposed, sync);
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

/* Open MPI, forward masking over 4 workers on 2 hosts, k = 1, with unequal FLOPs (workers 0 and
 * 1 twice 2 and 3's), at MICRO micro-batches a step. Returns the job's step. */
static const double UNEQUAL_FLOPS[4] = {4e9, 4e9, 2e9, 2e9};
static double mpi_unequal_step(int micro, sdp_step_times *t) {
    sdp_layout L;
    gpt_layout(&L, 6);
    sdp_plan p;
    build_plan(&p, &L, SDP_MASK_FORWARD, 4, 1);
    sdp_steptime_cfg cfg = step_cfg(4, false);
    cfg.lib = SDP_COMM_MPI;
    cfg.net.ranks_per_host = 2;
    cfg.micro_batches = micro;
    const double job = sdp_steptime_predict(&p, &L, UNEQUAL_FLOPS, &cfg, t);
    sdp_plan_free(&p);
    sdp_layout_free(&L);
    return job;
}

/* Under Open MPI every all-reduce starts after the slowest backward, and the sync ends
 * everywhere together: each worker's step is the same. */
static void test_mpi_steps_end_together(void **state) {
    (void)state;
    sdp_step_times t[4];
    const double job = mpi_unequal_step(1, t);
    for (int r = 0; r < 4; r++) assert_close(t[r].step, job);
    assert_true(t[2].exposed > t[0].exposed);
}

/* Recomputation runs each block's forward again in the backward, where the backward reaches it:
 * the whole model's blocks under data parallelism, down to the lowest owned block under backward
 * masking. The head is not recomputed. */
static void test_recompute_adds_forwards(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 2);
    sdp_plan ddp, masked;
    build_plan(&ddp, &L, SDP_MASK_NONE, 2, 2);
    build_plan(&masked, &L, SDP_MASK_BACKWARD, 2, 1);
    sdp_steptime_cfg cfg = step_cfg(2, true);
    const double F = 3e9, flops[2] = {F, F};
    const double head = elems_at(&L, -2), b0 = elems_at(&L, 0), b1 = elems_at(&L, 1);
    const double c = F / 3 / 1e12 / (head + b0 + b1);
    sdp_step_times plain[2], again[2];
    sdp_steptime_predict(&ddp, &L, flops, &cfg, plain);
    cfg.recompute = true;
    sdp_steptime_predict(&ddp, &L, flops, &cfg, again);
    assert_close(again[0].forward, plain[0].forward);
    assert_close(again[0].backward, plain[0].backward + c * (b0 + b1));
    sdp_steptime_predict(&masked, &L, flops, &cfg, again);
    assert_close(again[0].backward, c * (2 * head + 2 * b0 + b1) + c * (b0 + b1));
    assert_close(again[1].backward, c * (2 * head + 2 * b1) + c * b1);
    sdp_plan_free(&ddp);
    sdp_plan_free(&masked);
    sdp_layout_free(&L);
}

/* --zero 1, data parallelism over 2 workers: the bucket's ring reduce-scatter is exposed after
 * the backward, (1/2) 4 numel / B + alpha; each worker's optimizer sweeps its shard alone (the two
 * shards partition the model); then, after the slower optimizer, the ring all-gather, the same
 * time again. The wire moves what the all-reduce did: the step is the plain one plus the slower
 * optimizer. */
static void test_zero_step(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 2);
    sdp_plan p;
    const sdp_plan_cfg c = {
        .mask = SDP_MASK_NONE, .unit = SDP_UNIT_BLOCK, .world = 2, .owners = 2, .zero = 1};
    sdp_plan_build(&p, &c, &L);
    sdp_steptime_cfg cfg = step_cfg(2, true);
    cfg.mem_Bps = 1e11;
    cfg.update_bytes = 16;
    const double F = 3e9, flops[2] = {F, F}, n = (double)L.numel;
    sdp_step_times t[2];
    const double job = sdp_steptime_predict(&p, &L, flops, &cfg, t);
    const double half = 0.5 * 4 * n / B_LINK + ALPHA;
    assert_close(t[0].optimizer + t[1].optimizer, n * 16 / 1e11);
    const double slower = fmax(t[0].optimizer, t[1].optimizer);
    assert_true(slower < n * 16 / 1e11);
    for (int r = 0; r < 2; r++) {
        assert_close(t[r].exposed, half);
        assert_close(t[r].gather, half);
        assert_close(t[r].update, slower + half);
        assert_close(t[r].step, F / 1e12 + 2 * half + slower);
    }
    assert_close(job, F / 1e12 + 2 * half + slower);
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

/* --grad-accum 3, data parallelism over 2 workers: the first two micro-batches are a forward and
 * a backward alone; the bucket is all-reduced after the last backward, exposed as with one. */
static void test_micro_batches_accumulate(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 2);
    sdp_plan p;
    build_plan(&p, &L, SDP_MASK_NONE, 2, 2);
    sdp_steptime_cfg cfg = step_cfg(2, true);
    cfg.micro_batches = 3;
    const double F = 3e9, flops[2] = {F, F};
    sdp_step_times t[2];
    const double job = sdp_steptime_predict(&p, &L, flops, &cfg, t);
    const double ring = 4 * (double)L.numel / B_LINK + 2 * ALPHA;
    for (int r = 0; r < 2; r++) {
        assert_close(t[r].forward, 3 * F / 3 / 1e12);
        assert_close(t[r].backward, 3 * 2 * F / 3 / 1e12);
        assert_close(t[r].exposed, ring);
        assert_close(t[r].step, 3 * F / 1e12 + ring);
    }
    assert_close(job, 3 * F / 1e12 + ring);
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

/* The same workers at 3 micro-batches: each worker's early micro-batches take its own compute,
 * and the sync starts after the slowest's last backward. The job's step grows by
 * (A - 1) times the slowest worker's micro-batch, and a faster worker waits that much longer. */
static void test_micro_batches_wait_for_the_slowest(void **state) {
    (void)state;
    sdp_step_times one[4], three[4];
    const double job1 = mpi_unequal_step(1, one), job3 = mpi_unequal_step(3, three);
    assert_close(job3, job1 + 2 * 4e9 / 1e12);
    for (int r = 0; r < 4; r++) {
        assert_close(three[r].forward + three[r].backward, 3 * UNEQUAL_FLOPS[r] / 1e12);
        assert_close(three[r].exposed, one[r].exposed + 2 * (4e9 - UNEQUAL_FLOPS[r]) / 1e12);
        assert_close(three[r].step, job3);
    }
}

/* --zero 2 --grad-accum 2, data parallelism over 2 workers: the early micro-batch reduce-scatters
 * its gradients, priced as the last one's, F / R + h with h = (1/2) 4 numel / B + alpha; then the
 * last micro-batch the same, and the all-gather h after the optimizer (untimed here). */
static void test_micro_batches_under_zero2(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 2);
    sdp_plan p;
    const sdp_plan_cfg c = {
        .mask = SDP_MASK_NONE, .unit = SDP_UNIT_BLOCK, .world = 2, .owners = 2, .zero = 2};
    sdp_plan_build(&p, &c, &L);
    sdp_steptime_cfg cfg = step_cfg(2, true);
    cfg.micro_batches = 2;
    const double F = 3e9, flops[2] = {F, F}, n = (double)L.numel;
    sdp_step_times t[2];
    const double job = sdp_steptime_predict(&p, &L, flops, &cfg, t);
    const double half = 0.5 * 4 * n / B_LINK + ALPHA;
    for (int r = 0; r < 2; r++) {
        assert_close(t[r].forward + t[r].backward, 2 * F / 1e12);
        assert_close(t[r].exposed, 2 * half);
        assert_close(t[r].gather, half);
        assert_close(t[r].step, 2 * (F / 1e12 + half) + half);
    }
    assert_close(job, 2 * (F / 1e12 + half) + half);
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

/* Measured compute (sdp plan --measure-compute). Timed at exactly what the FLOPs give, every
 * worker's step is the FLOPs' step: the backward's spread over the blocks (when each owner
 * group's all-reduce can start, with overlap) follows the FLOPs either way. Under backward
 * masking with k = 1 the workers' backwards differ; with overlap the owner groups start
 * mid-backward, so a spread that ignored the blocks would move the exposed sync. */
static void test_timed_compute_as_flops(void **state) {
    (void)state;
    const sdp_mask_mode masks[3] = {SDP_MASK_NONE, SDP_MASK_FORWARD, SDP_MASK_BACKWARD};
    for (int m = 0; m < 3; m++) {
        sdp_layout L;
        gpt_layout(&L, 3);
        sdp_plan p;
        build_plan(&p, &L, masks[m], 3, masks[m] == SDP_MASK_NONE ? 3 : 1);
        sdp_steptime_cfg cfg = step_cfg(3, true);
        cfg.net.link_Bps = 1e8;
        const double flops[3] = {3e9, 2e9, 1e9};
        sdp_step_times by_flops[3], timed[3];
        sdp_steptime_predict(&p, &L, flops, &cfg, by_flops);
        double fwd[3], bwd[3];
        for (int r = 0; r < 3; r++) fwd[r] = by_flops[r].forward, bwd[r] = by_flops[r].backward;
        cfg.forward_s = fwd, cfg.backward_s = bwd;
        cfg.flops_per_s = 0; /* timed compute needs no rate */
        sdp_steptime_predict(&p, &L, flops, &cfg, timed);
        for (int r = 0; r < 3; r++) {
            assert_close(timed[r].forward, by_flops[r].forward);
            assert_close(timed[r].backward, by_flops[r].backward);
            assert_close(timed[r].exposed, by_flops[r].exposed);
            assert_close(timed[r].step, by_flops[r].step);
        }
        sdp_plan_free(&p);
        sdp_layout_free(&L);
    }
}

/* Timed compute is the times given, whatever the FLOPs: a worker timed at twice another's
 * backward, with equal FLOPs, has twice its backward; forward masking's owner groups then wait
 * for the slower owner. */
static void test_timed_compute_is_the_times(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 3);
    sdp_plan p;
    build_plan(&p, &L, SDP_MASK_FORWARD, 3, 2);
    sdp_steptime_cfg cfg = step_cfg(3, false);
    const double flops[3] = {3e9, 3e9, 3e9}, fwd[3] = {1e-3, 2e-3, 1e-3},
                 bwd[3] = {2e-3, 4e-3, 2e-3};
    cfg.forward_s = fwd, cfg.backward_s = bwd;
    sdp_step_times t[3];
    sdp_steptime_predict(&p, &L, flops, &cfg, t);
    for (int r = 0; r < 3; r++) {
        assert_close(t[r].forward, fwd[r]);
        assert_close(t[r].backward, bwd[r]);
        assert_close(t[r].step, t[1].step); /* the sync ends everywhere together */
    }
    /* Without overlap every all-reduce starts after the slowest backward, worker 1's. */
    assert_close(t[0].exposed - t[1].exposed, 6e-3 - 3e-3);
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

/* The timeline follows the times given: with every time k times longer (compute, link and
 * latency), each overlapped owner group still starts at the same point of its owners' backwards,
 * so every figure is k times the first. It would not be if the blocks' ends kept the FLOPs'
 * timing while the backward took the measured length. */
static void test_timed_compute_scales_the_timeline(void **state) {
    (void)state;
    sdp_layout L;
    gpt_layout(&L, 3);
    sdp_plan p;
    build_plan(&p, &L, SDP_MASK_BACKWARD, 3, 2);
    sdp_steptime_cfg cfg = step_cfg(3, true);
    cfg.net.link_Bps = 1e8;
    const double flops[3] = {3e9, 3e9, 3e9}, k = 10;
    double fwd[3] = {1e-3, 2e-3, 1.5e-3}, bwd[3] = {3e-3, 5e-3, 2e-3};
    cfg.forward_s = fwd, cfg.backward_s = bwd;
    sdp_step_times a[3], b[3];
    sdp_steptime_predict(&p, &L, flops, &cfg, a);
    for (int r = 0; r < 3; r++) fwd[r] *= k, bwd[r] *= k;
    cfg.net.link_Bps /= k;
    cfg.net.latency_s *= k;
    sdp_steptime_predict(&p, &L, flops, &cfg, b);
    for (int r = 0; r < 3; r++) {
        assert_close(b[r].exposed, k * a[r].exposed);
        assert_close(b[r].step, k * a[r].step);
    }
    sdp_plan_free(&p);
    sdp_layout_free(&L);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_allreduce_one_group),
        cmocka_unit_test(test_ring_halves),
        cmocka_unit_test(test_ring_allreduce_within_a_host),
        cmocka_unit_test(test_mpi_allreduce_across_two_hosts),
        cmocka_unit_test(test_mpi_reduce_scatter_across_two_hosts),
        cmocka_unit_test(test_mpi_allgather),
        cmocka_unit_test(test_mpi_allreduces_share_the_link),
        cmocka_unit_test(test_mpi_broadcast_chain),
        cmocka_unit_test(test_ring_broadcast),
        cmocka_unit_test(test_ddp_step),
        cmocka_unit_test(test_overlap_reduces_exposed_time),
        cmocka_unit_test(test_backward_masking),
        cmocka_unit_test(test_recompute_adds_forwards),
        cmocka_unit_test(test_publish_transport_rate),
        cmocka_unit_test(test_mpi_steps_end_together),
        cmocka_unit_test(test_zero_step),
        cmocka_unit_test(test_micro_batches_accumulate),
        cmocka_unit_test(test_micro_batches_wait_for_the_slowest),
        cmocka_unit_test(test_micro_batches_under_zero2),
        cmocka_unit_test(test_timed_compute_as_flops),
        cmocka_unit_test(test_timed_compute_is_the_times),
        cmocka_unit_test(test_timed_compute_scales_the_timeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
