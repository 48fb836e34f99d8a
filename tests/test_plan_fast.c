/* sdp plan's fast paths against the rank-by-rank reference they replace, on small models of every
 * family under every mode: the evaluation and checkpoint bytes counted from the plan alone
 * (train_io_memplan_predict) equal those from every worker's own model and subnet map
 * (train_io_memplan_predict_reference), windows far smaller than a tensor and host copies included;
 * the workers' models counted once per distinct subnetwork, and their shares of the plan counted
 * all at once, equal each worker's own; the
 * subnetwork spec counted chunk by chunk equals an atom-by-atom count; and block-streamed
 * evaluation sized from one model per kind of block equals every block's. Bit for bit: sdp plan's
 * numbers are held to the measured bytes (tests/test_sdp_memplan.sh). */
#include "testutil.h"

#include "sdp/memplan.h"
#include "sdp/subnet.h"
#include "train/io_memplan.h"
#include "train/run.h"
#include "train/run_plan.h"
#include "train/worker_count.h"

typedef struct {
    const char *name;
    const char *model;
    int layers, heads, width, d_ff, depth, channels, patch, batch, seq_len;
} model_case;

static const model_case MODELS[] = {
    {"gpt", "gpt", 3, 4, 16, 0, 0, 0, 0, 2, 8},
    {"llama", "llama", 2, 4, 32, 48, 0, 0, 0, 2, 8},
    {"vit", "vit", 2, 4, 16, 32, 0, 0, 7, 4, 0},
    {"resnet", "resnet", 0, 0, 0, 0, 8, 4, 0, 4, 0},
    {"resnet-14", "resnet", 0, 0, 0, 0, 14, 4, 0, 2, 0}, /* two blocks a stage: alike blocks */
};

typedef struct {
    sdp_mask_mode mask;
    sdp_unit_kind unit;
} mode_case;

static const mode_case MODES[] = {
    {SDP_MASK_NONE, SDP_UNIT_NEURON},    {SDP_MASK_NONE, SDP_UNIT_BLOCK},
    {SDP_MASK_FORWARD, SDP_UNIT_BLOCK},  {SDP_MASK_FORWARD, SDP_UNIT_NEURON},
    {SDP_MASK_BACKWARD, SDP_UNIT_BLOCK}, {SDP_MASK_BACKWARD, SDP_UNIT_NEURON},
};

static train_opts opts_of(const model_case *mc) {
    train_opts o;
    memset(&o, 0, sizeof o);
    train_opts_set_defaults(TRAIN_OPTS, &o);
    snprintf(o.model, sizeof o.model, "%s", mc->model);
    if (mc->layers) o.arch.layers = mc->layers, o.arch.heads = mc->heads, o.arch.width = mc->width;
    o.arch.d_ff = mc->d_ff;
    if (mc->depth) o.arch.depth = mc->depth, o.arch.channels = mc->channels;
    if (mc->patch) o.arch.patch = mc->patch;
    o.batch = mc->batch;
    if (mc->seq_len) o.arch.seq_len = mc->seq_len;
    o.arch.vocab = 64;
    return o;
}

/* Chunks that split every group of these models: 4 heads, and widths that 2 and 4 divide. */
static int chunks_for(int N, int variant) {
    return variant == 0 ? 0 : (N % 2 ? 2 : 4);
}

static bool same_counts(const worker_count *a, const worker_count *b) {
    return a->numel == b->numel && !memcmp(a->peak, b->peak, sizeof a->peak) &&
           a->flops_per_example == b->flops_per_example;
}

typedef struct {
    int plans, ranks;
} tally;

static void check_one(const model_case *mc, const mode_case *md, int N, int k, int variant,
                      bool on_device, int state_buffers, tally *t) {
    train_opts o = opts_of(mc);
    sdp_model_config cfg = train_run_model_config(&o, train_run_dataset_shape(&o));
    sdp_layout full;
    train_run_full_layout(&full, &cfg);
    const bool images = train_run_images(&o);
    sdp_plan_cfg pc = {.mask = md->mask,
                       .unit = md->unit,
                       .assign = variant == 2 ? SDP_ASSIGN_RANDOM : SDP_ASSIGN_CYCLIC,
                       .world = N,
                       .owners = md->mask == SDP_MASK_NONE ? N : k,
                       .chunks = md->mask == SDP_MASK_NONE ? 0 : chunks_for(N, variant),
                       .seed = 7,
                       /* --zero 1 and 2: state gathered shard by shard */
                       .zero = variant == 3   ? 1
                               : variant == 4 ? 2
                                              : 0};
    /* The default chunk count is one per worker: beyond the 4 heads, ask for 4 or 2. */
    if (md->unit == SDP_UNIT_NEURON && md->mask != SDP_MASK_NONE && pc.chunks == 0 && N > 4)
        pc.chunks = chunks_for(N, 1);
    sdp_plan plan;
    sdp_plan_build(&plan, &pc, &full);
    const int T = images ? 1 : o.arch.seq_len;
    const io_memplan_run run = {
        .cfg = &cfg,
        .full = &full,
        .plan = &plan,
        .B = o.batch,
        .T = T,
        .val_batches = images ? UINT64_MAX : 3,
        .recal_batches = 2,
        .state_buffers = state_buffers,
        .images = images,
        .on_device = on_device,
        .gemm = SDP_GEMM_DNNL,
    };
    double *fast = calloc((size_t)N, sizeof(double)), *ref = calloc((size_t)N, sizeof(double));
    worker_count *all = calloc((size_t)N, sizeof *all);
    assert_non_null(fast), assert_non_null(ref), assert_non_null(all);
    train_io_memplan_predict(&run, fast);
    train_io_memplan_predict_reference(&run, ref);
    const sdp_gemm_provider gemm = SDP_GEMM_DNNL;
    train_worker_count_all(&cfg, &plan, &full, o.batch, T, train_worker_count_cpu, &gemm, all);
    sdp_worker_plan *shares = calloc((size_t)N, sizeof *shares);
    assert_non_null(shares);
    sdp_memplan_workers(&plan, &full, shares);
    for (int r = 0; r < N; r++) {
        if (fast[r] != ref[r])
            fail_msg("%s, mask %s, unit %s, N = %d, k = %d, variant %d, device %d, state %d: "
                     "rank %d's eval+ckpt bytes %.0f, reference %.0f",
                     mc->name, sdp_mask_mode_name(md->mask), sdp_unit_kind_name(md->unit), N, k,
                     variant, on_device, state_buffers, r, fast[r], ref[r]);
        const worker_count one = train_worker_count_one(&cfg, &plan, &full, r, o.batch, T,
                                                        train_worker_count_cpu, &gemm);
        if (!same_counts(&all[r], &one))
            fail_msg("%s, mask %s, unit %s, N = %d: rank %d's model counted once per spec "
                     "differs from its own (%zu and %zu elements)",
                     mc->name, sdp_mask_mode_name(md->mask), sdp_unit_kind_name(md->unit), N, r,
                     all[r].numel, one.numel);
        sdp_worker_plan w;
        sdp_memplan_worker(&plan, &full, r, &w);
        if (memcmp(&w, &shares[r], sizeof w))
            fail_msg("%s, mask %s, unit %s, N = %d: rank %d's share of the plan counted with "
                     "every worker's differs from its own (%zu and %zu owned)",
                     mc->name, sdp_mask_mode_name(md->mask), sdp_unit_kind_name(md->unit), N, r,
                     shares[r].owned, w.owned);
    }
    /* --zero 1 and 2 keep each trained element's optimizer state on exactly one worker. */
    size_t trained = 0, state = 0;
    for (int i = 0; i < full.nparams; i++)
        trained += full.params[i].buffer ? 0 : full.params[i].numel;
    for (int r = 0; r < N; r++) state += shares[r].state_elems;
    if (pc.zero && state != trained)
        fail_msg("%s, mask %s, unit %s, N = %d, k = %d: --zero %d keeps state for %zu elements "
                 "of %zu trained",
                 mc->name, sdp_mask_mode_name(md->mask), sdp_unit_kind_name(md->unit), N, k,
                 pc.zero, state, trained);
    free(shares);
    t->plans++, t->ranks += N;
    free(fast), free(ref), free(all);
    sdp_plan_free(&plan);
    sdp_layout_free(&full);
}

static void sweep_models(const char *window, tally *t) {
    if (window)
        setenv("SDP_CKPT_WINDOW", window, 1);
    else
        unsetenv("SDP_CKPT_WINDOW");
    static const int WORLDS[] = {1, 2, 3, 4, 5, 8};
    for (size_t m = 0; m < sizeof MODELS / sizeof *MODELS; m++)
        for (size_t d = 0; d < sizeof MODES / sizeof *MODES; d++)
            for (size_t w = 0; w < sizeof WORLDS / sizeof *WORLDS; w++) {
                const int N = WORLDS[w];
                for (int k = 1; k <= N; k += (N > 4 ? 3 : 1)) {
                    if (MODES[d].mask == SDP_MASK_NONE && k != N) continue;
                    for (int variant = 0; variant < 5; variant++)
                        check_one(&MODELS[m], &MODES[d], N, k, variant, variant == 1,
                                  variant == 2   ? 0
                                  : variant >= 3 ? 2
                                                 : variant + 1,
                                  t);
                }
            }
}

static void test_io_memplan_equals_reference(void **state) {
    (void)state;
    tally t = {0};
    sweep_models(NULL, &t);
    sweep_models("97", &t); /* windows cut through tensors and runs */
    sweep_models("1", &t);  /* every element a window */
    print_message("%d plans, %d ranks: fast equals reference\n", t.plans, t.ranks);
}

/* Kept atoms counted one by one, as sdp_subnet_spec_make did before it counted chunks. */
static void test_spec_equals_atom_count(void **state) {
    (void)state;
    static const int WORLDS[] = {1, 2, 3, 5, 8, 16};
    int checked = 0;
    for (size_t m = 0; m < sizeof MODELS / sizeof *MODELS; m++) {
        train_opts o = opts_of(&MODELS[m]);
        sdp_model_config cfg = train_run_model_config(&o, train_run_dataset_shape(&o));
        sdp_layout full;
        train_run_full_layout(&full, &cfg);
        for (size_t w = 0; w < sizeof WORLDS / sizeof *WORLDS; w++)
            for (int k = 1; k <= WORLDS[w]; k++)
                for (int chunks = 1; chunks <= 4; chunks *= 2)
                    for (int random = 0; random < 2; random++) {
                        const int N = WORLDS[w];
                        sdp_plan_cfg pc = {.mask = SDP_MASK_FORWARD,
                                           .unit = SDP_UNIT_NEURON,
                                           .assign = random ? SDP_ASSIGN_RANDOM : SDP_ASSIGN_CYCLIC,
                                           .world = N,
                                           .owners = k,
                                           .chunks = chunks,
                                           .seed = 3};
                        sdp_plan p;
                        sdp_plan_build(&p, &pc, &full);
                        for (int r = 0; r < N; r++) {
                            sdp_subnet_spec s;
                            sdp_subnet_spec_make(&s, &p, &full, r);
                            for (int b = 0; b < full.nblocks; b++)
                                for (int g = 0; g < full.blocks[b].ngroups; g++) {
                                    int kept = 0;
                                    for (int a = 0; a < full.blocks[b].groups[g].width; a++) {
                                        const int u = sdp_plan_unit_of(&p, b, g, a);
                                        kept += u < 0 || sdp_plan_owns(&p, u, r);
                                    }
                                    assert_int_equal(s.kept[b][g], kept);
                                    checked++;
                                }
                            sdp_subnet_spec_free(&s);
                        }
                        sdp_plan_free(&p);
                    }
        sdp_layout_free(&full);
    }
    print_message("%d groups' kept atoms equal the atom-by-atom count\n", checked);
}

/* Block-streamed evaluation sized from one model per kind of block equals every block's. */
static void test_eval_pass_equals_every_block(void **state) {
    (void)state;
    static const model_case MORE[] = {
        {"gpt", "gpt", 5, 4, 16, 0, 0, 0, 0, 3, 8},
        {"llama", "llama", 4, 2, 16, 0, 0, 0, 0, 8, 4},
        {"vit", "vit", 3, 2, 8, 16, 0, 0, 4, 16, 0},
        {"resnet-20", "resnet", 0, 0, 0, 0, 20, 4, 0, 16, 0},
        {"resnet-18", "resnet", 0, 0, 0, 0, 18, 4, 0, 5, 0},
        {"resnet-8", "resnet", 0, 0, 0, 0, 8, 2, 0, 1, 0},
    };
    int checked = 0;
    for (int set = 0; set < 2; set++) {
        const model_case *cases = set ? MORE : MODELS;
        const size_t n = set ? sizeof MORE / sizeof *MORE : sizeof MODELS / sizeof *MODELS;
        for (size_t m = 0; m < n; m++) {
            train_opts o = opts_of(&cases[m]);
            if (!strcmp(o.model, "resnet") && cases[m].depth == 18)
                snprintf(o.dataset, sizeof o.dataset, "cifar10");
            sdp_model_config cfg = train_run_model_config(&o, train_run_dataset_shape(&o));
            sdp_layout full;
            train_run_full_layout(&full, &cfg);
            const int T = train_run_images(&o) ? 1 : o.arch.seq_len;
            for (int training = 0; training < 2; training++)
                for (uint64_t batches = 1; batches <= 5000; batches *= 70) {
                    const eval_pass_size a = train_eval_pass_size_of(&cfg, &full, o.batch, T,
                                                                     batches, training,
                                                                     SDP_GEMM_DNNL),
                                         b = train_eval_pass_size_each_block(&cfg, &full, o.batch,
                                                                             T, batches, training,
                                                                             SDP_GEMM_DNNL);
                    if (a.rows != b.rows || a.chunk != b.chunk || a.row_floats != b.row_floats ||
                        a.arena_bytes != b.arena_bytes || a.stream_bytes != b.stream_bytes)
                        fail_msg("%s, training %d, %llu batches: arena %zu, every block's %zu",
                                 cases[m].name, training, (unsigned long long)batches,
                                 a.arena_bytes, b.arena_bytes);
                    checked++;
                }
            sdp_layout_free(&full);
        }
    }
    print_message("%d evaluation passes equal every block's\n", checked);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_io_memplan_equals_reference),
        cmocka_unit_test(test_spec_equals_atom_count),
        cmocka_unit_test(test_eval_pass_equals_every_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
