/* GPT-2 124M training steps on one GPU through the CUDA backend: tokens/s, model FLOPs per token,
 * MFU, and device memory. Before the model it measures the cuBLAS GEMM peak (8192^3) of four
 * paths, so that each run says what its GEMMs could reach: plain fp32, FAST_16BF on fp32 storage
 * (what --precision bf16 runs), and native bf16 operands with fp32 or bf16 C. MFU is given
 * against the card's nominal dense bf16 peak (from its name; 'unknown' for other cards) and
 * against the measured peak of the run's own precision. Figures are printed, never asserted.
 *
 *   bench_cuda_train [--precision fp32|bf16] [--batch B] [--steps S]   a DDP-equivalent worker
 *                                                                      (the full model)
 *   bench_cuda_train --sim-world N --sim-rank r [...]                  worker r of a simulated
 *                                                                      SDP job of N workers:
 *                                                                      forward masking, block
 *                                                                      units, C = 0.5
 *
 * --precision defaults to bf16 (the fast path); fp32 is the exact one the parity tests use.
 *
 * The SDP worker's model is built as tests/test_sdp_forward_equiv.c builds it (sdp_plan_build,
 * sdp_subnet_spec_make, sdp_tf_shape_from_keep). Only the worker's own computation runs: no
 * gradient exchange (no NCCL yet), so the figures are those of a worker before communication.
 * A step is: zero the gradients, forward (which waits for the loss), backward, AdamW on the device
 * (sdp_cuda_adamw_update; no gradient clipping), then wait for the device.
 *
 * Without a CUDA device it prints "no CUDA device" and exits 0. */
#include "sdp/backend.h"
#include "sdp/bench.h"
#include "sdp/cuda_check.h"
#include "sdp/ops_cuda.h"
#include "sdp/plan.h"
#include "sdp/rng.h"
#include "sdp/subnet.h"
#include "sdp/transformer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WARMUP_STEPS = 2, MAX_STEPS = 100, PEAK_SIZE = 8192, PEAK_REPEATS = 5, SEQ = 1024 };
static const float LR = 3e-4f;

typedef struct {
    int batch, steps, world, rank; /* world 0: the full model */
    sdp_precision precision;
} options;

_Noreturn static void usage_fail(const char *what) {
    sdp_fatal("bench_cuda_train: %s: usage: bench_cuda_train [--precision fp32|bf16] [--batch B] "
              "[--steps 1..%d] [--sim-world N --sim-rank r]",
              what, MAX_STEPS);
}

static sdp_precision parse_precision(const char *name) {
    if (strcmp(name, "fp32") == 0) return SDP_PRECISION_FP32;
    if (strcmp(name, "bf16") == 0) return SDP_PRECISION_BF16;
    usage_fail("--precision takes fp32 or bf16");
}

static options parse(int argc, char **argv) {
    options o = {.batch = 4, .steps = 10, .world = 0, .rank = -1, .precision = SDP_PRECISION_BF16};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage_fail("every option takes a value");
        const char *k = argv[i];
        if (strcmp(k, "--precision") == 0) {
            o.precision = parse_precision(argv[++i]);
            continue;
        }
        int v = atoi(argv[++i]);
        if (strcmp(k, "--batch") == 0)
            o.batch = v;
        else if (strcmp(k, "--steps") == 0)
            o.steps = v;
        else if (strcmp(k, "--sim-world") == 0)
            o.world = v;
        else if (strcmp(k, "--sim-rank") == 0)
            o.rank = v;
        else
            usage_fail("unknown option");
    }
    if (o.batch < 1 || o.steps < 1 || o.steps > MAX_STEPS) usage_fail("bad --batch or --steps");
    if (o.world != 0 && (o.world < 2 || o.rank < 0 || o.rank >= o.world))
        usage_fail("--sim-world N needs N >= 2 and --sim-rank r with 0 <= r < N");
    if (o.world == 0 && o.rank >= 0) usage_fail("--sim-rank needs --sim-world");
    return o;
}

static sdp_tf_config gpt2_config(void) {
    sdp_tf_config c = {.style = SDP_STYLE_GPT,
                       .n_layer = 12,
                       .n_head = 12,
                       .d_model = 768,
                       .seq_len = SEQ,
                       .vocab = 50257,
                       .vocab_padded = 50304};
    sdp_tf_config_finish(&c);
    return c;
}

/* ---- GEMM peaks ----------------------------------------------------------------------------- */

/* A cuBLAS GEMM path: storage of A and B, storage of C, arithmetic. */
typedef struct {
    const char *name;
    cudaDataType ab, c;
    cublasComputeType_t compute;
} gemm_path;

enum { PATH_FP32, PATH_FAST_16BF, PATH_BF16_FP32C, PATH_BF16, NPATHS };
static const gemm_path PATHS[NPATHS] = {
    [PATH_FP32] = {"fp32 (TF32 off): --precision fp32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F},
    [PATH_FAST_16BF] = {"fp32 storage, FAST_16BF: --precision bf16", CUDA_R_32F, CUDA_R_32F,
                        CUBLAS_COMPUTE_32F_FAST_16BF},
    [PATH_BF16_FP32C] = {"native bf16 A, B; fp32 C", CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F},
    [PATH_BF16] = {"native bf16 A, B, C", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F},
};

static size_t storage_bytes(cudaDataType t) {
    return t == CUDA_R_16BF ? 2 : 4;
}

/* bf16 is the top half of an fp32, rounded to nearest even (operands here are finite). */
static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A PEAK_SIZE^2 matrix of uniform values in [-1, 1) on the device, in storage t: random rather
 * than zero operands, because tensor cores draw less power (and clock higher) on zeros. */
static void *random_matrix(cudaDataType t, uint64_t seed) {
    const size_t n = (size_t)PEAK_SIZE * PEAK_SIZE, bytes = n * storage_bytes(t);
    void *host = malloc(bytes), *dev = NULL;
    SDP_CHECK(host, "out of host memory");
    sdp_rng r = sdp_rng_make(seed, 0);
    for (size_t i = 0; i < n; i++) {
        const float x = 2.0f * sdp_rng_uniform(&r) - 1.0f;
        if (t == CUDA_R_16BF)
            ((uint16_t *)host)[i] = to_bf16(x);
        else
            ((float *)host)[i] = x;
    }
    CUDA_CHECK(cudaMalloc(&dev, bytes));
    CUDA_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    /* From pageable memory the copy may still be in flight when cudaMemcpy returns, and the
     * backend's stream does not wait for the default stream. */
    CUDA_CHECK(cudaDeviceSynchronize());
    free(host);
    return dev;
}

/* Best TFLOP/s of C = A B at PEAK_SIZE^3 on this path, through the backend's cuBLAS handle and
 * stream (after one untimed call). Its operands are allocated apart from the backend, so that
 * they stay out of the model's memory figures, and freed before the model exists. */
static double gemm_peak(sdp_backend *be, const gemm_path *p) {
    sdp_cuda_ctx *ctx = be->ctx;
    void *A = random_matrix(p->ab, 1), *B = random_matrix(p->ab, 2), *C = NULL;
    CUDA_CHECK(cudaMalloc(&C, (size_t)PEAK_SIZE * PEAK_SIZE * storage_bytes(p->c)));
    const float alpha = 1.0f, beta = 0.0f;
    double best = 0;
    for (int r = -1; r < PEAK_REPEATS; r++) {
        be->sync(be);
        const double t0 = sdp_bench_now_ms();
        CUBLAS_CHECK(cublasGemmEx(ctx->cublas, CUBLAS_OP_N, CUBLAS_OP_N, PEAK_SIZE, PEAK_SIZE,
                                  PEAK_SIZE, &alpha, A, p->ab, PEAK_SIZE, B, p->ab, PEAK_SIZE,
                                  &beta, C, p->c, PEAK_SIZE, p->compute, CUBLAS_GEMM_DEFAULT));
        be->sync(be);
        const double tflops = 2.0 * PEAK_SIZE * PEAK_SIZE * (double)PEAK_SIZE /
                              ((sdp_bench_now_ms() - t0) * 1e-3) * 1e-12;
        if (r >= 0 && tflops > best) best = tflops;
    }
    CUDA_CHECK(cudaFree(A));
    CUDA_CHECK(cudaFree(B));
    CUDA_CHECK(cudaFree(C));
    return best;
}

/* The card's nominal dense (no sparsity) bf16 tensor-core peak in TFLOP/s, from NVIDIA's data
 * sheets, or 0 when the card is not one of these. */
static double nominal_bf16_peak(const char *device_name) {
    if (strstr(device_name, "H100") && (strstr(device_name, "HBM3") || strstr(device_name, "SXM")))
        return 989.4;
    if (strstr(device_name, "H100 PCIe")) return 756.0;
    if (strstr(device_name, "H200") && !strstr(device_name, "NVL")) return 989.4;
    return 0;
}

/* The worker's shape: the full model, or SDP worker `rank`'s compact subnetwork. */
typedef struct {
    sdp_tf_shape shape;
    sdp_layout full;
    sdp_plan plan;
    bool sdp;
} worker_shape;

static void worker_shape_make(worker_shape *w, const sdp_tf_config *cfg, const options *o) {
    memset(w, 0, sizeof *w);
    sdp_tf_shape full_shape;
    sdp_tf_shape_full(&full_shape, cfg);
    sdp_tf_describe(&w->full, cfg, &full_shape);
    w->sdp = o->world > 0;
    if (!w->sdp) {
        w->shape = full_shape;
        return;
    }
    sdp_tf_shape_free(&full_shape);
    sdp_plan_cfg pc = {.mask = SDP_MASK_FORWARD,
                       .unit = SDP_UNIT_BLOCK,
                       .assign = SDP_ASSIGN_CYCLIC,
                       .scale = SDP_SCALE_INVERSE,
                       .world = o->world,
                       .owners = o->world / 2, /* C = k / N = 0.5 */
                       .seed = 1};
    sdp_plan_build(&w->plan, &pc, &w->full);
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, &w->plan, &w->full, o->rank);
    sdp_tf_shape_from_keep(&w->shape, cfg, spec.nblocks, spec.keep,
                           (const int(*)[SDP_MAX_GROUPS])spec.kept, spec.scale);
    sdp_subnet_spec_free(&spec);
}

static void worker_shape_free(worker_shape *w) {
    if (w->sdp) sdp_plan_free(&w->plan);
    sdp_layout_free(&w->full);
    sdp_tf_shape_free(&w->shape);
}

/* Initial parameters on the host (each the value of its full-model element), then uploaded. */
static void init_params(sdp_tf *m, const worker_shape *w, int rank) {
    float *host = malloc(m->layout.numel * sizeof(float));
    SDP_CHECK(host, "out of host memory");
    if (w->sdp) {
        sdp_subnet_map map;
        sdp_subnet_map_build(&map, &w->full, &m->layout, &w->plan, rank, true);
        sdp_subnet_init_values(&map, &w->full, &m->layout, host, 1234);
        sdp_subnet_map_free(&map);
    } else {
        sdp_layout_init_values(&m->layout, host, 1234);
    }
    m->be->upload(m->be, m->params, host, m->layout.numel * sizeof(float));
    free(host);
}

static sdp_opt_segment *tensor_segments(const sdp_layout *L) {
    sdp_opt_segment *segs = calloc((size_t)L->nparams, sizeof *segs);
    SDP_CHECK(segs, "out of host memory");
    for (int i = 0; i < L->nparams; i++)
        segs[i] = (sdp_opt_segment){L->params[i].offset, L->params[i].numel, L->params[i].decay,
                                    L->params[i].offset, L->params[i].offset};
    return segs;
}

/* The most device memory in use so far, by cudaMemGetInfo (every process on the device). */
static size_t device_used(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return total_b - free_b;
}

static const char *precision_name(sdp_precision p) {
    return p == SDP_PRECISION_BF16 ? "bf16" : "fp32";
}

/* The measured peak of every path, printed; returns them in peaks[NPATHS]. */
static void measure_peaks(sdp_backend *be, double peaks[NPATHS]) {
    printf("cuBLAS GEMM peaks (%d^3, random operands, best of %d):\n", PEAK_SIZE, PEAK_REPEATS);
    for (int i = 0; i < NPATHS; i++) {
        peaks[i] = gemm_peak(be, &PATHS[i]);
        printf("  %-44s %7.1f TFLOP/s\n", PATHS[i].name, peaks[i]);
    }
}

/* Speed and MFU of the median step: against the card's nominal dense bf16 peak, and against the
 * measured peak of the path this precision's GEMMs take. */
static void print_speed(const sdp_tf *m, const options *o, const char *device_name,
                        const double peaks[NPATHS], double median_ms) {
    const int N = o->batch * SEQ;
    const double per_token = sdp_tf_train_flops_per_token(m, SEQ);
    const double tflops = per_token * N / (median_ms * 1e-3) * 1e-12;
    printf("%.0f tokens/s; model FLOPs per token %.1f M (6 x params + attention over the full T, "
           "as PaLM counts), %.1f GFLOP per step, %.1f TFLOP/s\n",
           N / (median_ms * 1e-3), 1e-6 * per_token, 1e-9 * per_token * N, tflops);
    const double nominal = nominal_bf16_peak(device_name);
    if (nominal > 0)
        printf("MFU %.1f%% of the card's nominal dense bf16 peak (%.1f TFLOP/s)\n",
               100.0 * tflops / nominal, nominal);
    else
        printf("MFU against the nominal dense bf16 peak: unknown (no figure for '%s')\n",
               device_name);
    const int own = o->precision == SDP_PRECISION_BF16 ? PATH_FAST_16BF : PATH_FP32;
    printf("MFU %.1f%% of the measured peak of this precision's GEMMs (%s: %.1f TFLOP/s)\n",
           100.0 * tflops / peaks[own], PATHS[own].name, peaks[own]);
}

int main(int argc, char **argv) {
    const options o = parse(argc, argv);
    if (!sdp_backend_cuda_available()) {
        printf("bench_cuda_train: no CUDA device\n");
        return 0;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) strcpy(prop.name, "?");
    sdp_backend *be = sdp_backend_cuda(0, o.precision);
    printf("device %s\n", prop.name);
    double peaks[NPATHS];
    measure_peaks(be, peaks);
    const size_t used_before = device_used();

    const sdp_tf_config cfg = gpt2_config();
    worker_shape w;
    worker_shape_make(&w, &cfg, &o);
    sdp_tf m;
    sdp_tf_create(&m, &cfg, &w.shape, o.batch, SEQ, SDP_MODEL_TRAIN, be);
    init_params(&m, &w, o.rank);
    const size_t n = m.layout.numel, bytes = n * sizeof(float);
    sdp_opt_cfg oc = sdp_opt_defaults(SDP_OPT_ADAMW);
    float *om = be->alloc(be, SDP_MEM_OPTIM, bytes), *ov = be->alloc(be, SDP_MEM_OPTIM, bytes);
    sdp_opt_segment *segs = tensor_segments(&m.layout);

    if (w.sdp)
        printf("SDP worker %d of %d (forward masking, block units, C = 0.5): %d of %d layers, "
               "%.1fM of %.1fM params\n",
               o.rank, o.world, m.shape.n_layer, cfg.n_layer, 1e-6 * (double)n,
               1e-6 * (double)w.full.numel);
    else
        printf("DDP-equivalent worker: the full model, %.1fM params\n", 1e-6 * (double)n);
    printf("GPT-2 124M shape (12 layers, width 768, 12 heads, vocab 50257 padded 50304), T=%d, "
           "B=%d, --precision %s (parameters, gradients, AdamW state and activations fp32)\n",
           SEQ, o.batch, precision_name(o.precision));

    const int N = o.batch * SEQ;
    int *tokens = malloc((size_t)N * sizeof(int)), *targets = malloc((size_t)N * sizeof(int));
    SDP_CHECK(tokens && targets, "out of host memory");
    sdp_rng rng = sdp_rng_make(42, 0);
    double *ms = calloc((size_t)o.steps, sizeof(double)), loss = 0;
    SDP_CHECK(ms, "out of host memory");
    size_t used_peak = device_used();
    for (int s = -WARMUP_STEPS; s < o.steps; s++) {
        for (int i = 0; i < N; i++) {
            tokens[i] = (int)sdp_rng_below(&rng, (uint64_t)cfg.vocab);
            targets[i] = (int)sdp_rng_below(&rng, (uint64_t)cfg.vocab);
        }
        be->sync(be);
        const double t0 = sdp_bench_now_ms();
        be->zero(be, m.grads, bytes);
        loss = sdp_tf_forward(&m, tokens, targets, o.batch, SEQ) / N;
        sdp_tf_backward(&m, 1.0f / (float)N);
        sdp_cuda_adamw_update(be->ctx, &oc, s + WARMUP_STEPS + 1, om, ov, m.params, m.grads, segs,
                              m.layout.nparams, LR);
        be->sync(be);
        if (s >= 0) ms[s] = sdp_bench_now_ms() - t0;
        const size_t used = device_used();
        if (used > used_peak) used_peak = used;
    }
    const double med = sdp_bench_median(ms, o.steps);
    printf("%d steps after %d warm-up: last loss %.3f, median step %.1f ms (fastest %.1f)\n",
           o.steps, WARMUP_STEPS, loss, med, ms[0]);
    print_speed(&m, &o, prop.name, peaks, med);
    printf("device memory by category (this model's buffers, the CUDA context's workspace and "
           "cuBLAS's):\n");
    sdp_bench_print_memory(be->mem);
    char a[32], b[32];
    printf("peak device memory (cudaMemGetInfo): %s in use at the peak, %s before the model "
           "(CUDA context, cuBLAS)\n",
           sdp_fmt_bytes(a, sizeof a, (double)used_peak),
           sdp_fmt_bytes(b, sizeof b, (double)used_before));

    free(ms);
    free(tokens);
    free(targets);
    free(segs);
    be->free(be, om);
    be->free(be, ov);
    sdp_tf_destroy(&m);
    worker_shape_free(&w);
    sdp_backend_destroy(be);
    return 0;
}
