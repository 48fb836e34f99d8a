/* GPT-2 124M training steps on one GPU through the CUDA backend: tokens/s, model FLOPs per token,
 * MFU, and device memory. Before the model it measures the cuBLAS GEMM peak (8192^3) of four
 * paths, so that each run says what its GEMMs could reach: plain fp32, FAST_16BF on fp32 storage
 * (what --precision bf16 runs), and native bf16 operands with fp32 or bf16 C. MFU is given
 * against the card's nominal dense bf16 peak (from its name; 'unknown' for other cards) and
 * against the measured peak of the run's own precision. Figures are printed, never asserted.
 *
 *   bench_cuda_train [--precision fp32|bf16] [--batch B] [--steps S]   a DDP-equivalent worker
 *                                                                      (the full model)
 *   bench_cuda_train ... --breakdown 1                                 then as many steps again,
 *                                                                      each backend entry's
 *                                                                      device time (CUDA events)
 *   bench_cuda_train ... --attention gemm                              bf16 attention by cuBLAS
 *                                                                      GEMMs over score matrices
 *                                                                      in device memory, not the
 *                                                                      fused kernels (score
 *                                                                      matrices on chip, the
 *                                                                      default)
 *   bench_cuda_train ... --operands bf16                               bf16 GEMMs on bf16 copies
 *                                                                      of their operands (native
 *                                                                      bf16 kernels), not fp32
 *                                                                      operands under FAST_16BF
 *   bench_cuda_train --sim-world N --sim-rank r [...]                  worker r of a simulated
 *                                                                      SDP job of N workers:
 *                                                                      forward masking, block
 *                                                                      units, C = 0.5
 *
 * --precision defaults to bf16 (the fast path); fp32 is the exact one the parity tests use.
 *
 * The worker is the trainer `sdp-cuda train --device cuda` runs (src/train), built from the same
 * options, fed random tokens: DDP is --sim-world 1 with data parallelism, the SDP worker
 * --sim-world N --sim-rank r. A simulated worker communicates nothing, so the figures are those
 * of a worker before communication. A step is trainer_step (zero the gradients, forward,
 * backward, the global norm and clipping, AdamW on the device), then a wait for the device.
 *
 * The timed steps run between cudaProfilerStart and cudaProfilerStop, so that ncu
 * --profile-from-start off profiles them alone.
 *
 * Without a CUDA device it prints "no CUDA device" and exits 0. */
#include "train/trainer.h"

#include "cuda_op_times.h"

#include <cuda_profiler_api.h>

#include "sdp/backend.h"
#include "sdp/bench.h"
#include "sdp/cuda_check.h"
#include "sdp/rng.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WARMUP_STEPS = 2, MAX_STEPS = 100, PEAK_SIZE = 8192, PEAK_REPEATS = 5, SEQ = 1024 };
enum { VOCAB = 50257 };

typedef struct {
    int batch, steps, world, rank; /* world 0: the full model */
    int breakdown;                 /* 1: then as many steps again, timed per backend entry */
    bool fused_attention;          /* bf16 attention by the fused kernels, not cuBLAS GEMMs */
    bool bf16_operands;            /* bf16 GEMMs on bf16 copies of their operands */
    sdp_precision precision;
} options;

_Noreturn static void usage_fail(const char *what) {
    sdp_fatal("bench_cuda_train: %s: usage: bench_cuda_train [--precision fp32|bf16] [--batch B] "
              "[--steps 1..%d] [--sim-world N --sim-rank r] [--breakdown 0|1] "
              "[--attention fused|gemm] [--operands fp32|bf16]",
              what, MAX_STEPS);
}

static sdp_precision parse_precision(const char *name) {
    if (strcmp(name, "fp32") == 0) return SDP_PRECISION_FP32;
    if (strcmp(name, "bf16") == 0) return SDP_PRECISION_BF16;
    usage_fail("--precision takes fp32 or bf16");
}

static options parse(int argc, char **argv) {
    options o = {.batch = 4,
                 .steps = 10,
                 .world = 0,
                 .rank = -1,
                 .fused_attention = true,
                 .precision = SDP_PRECISION_BF16};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage_fail("every option takes a value");
        const char *k = argv[i];
        if (strcmp(k, "--precision") == 0) {
            o.precision = parse_precision(argv[++i]);
            continue;
        }
        if (strcmp(k, "--attention") == 0) {
            const char *a = argv[++i];
            if (strcmp(a, "fused") != 0 && strcmp(a, "gemm") != 0)
                usage_fail("--attention takes fused or gemm");
            o.fused_attention = strcmp(a, "fused") == 0;
            continue;
        }
        if (strcmp(k, "--operands") == 0) {
            const char *a = argv[++i];
            if (strcmp(a, "fp32") != 0 && strcmp(a, "bf16") != 0)
                usage_fail("--operands takes fp32 or bf16");
            o.bf16_operands = strcmp(a, "bf16") == 0;
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
        else if (strcmp(k, "--breakdown") == 0 && (v == 0 || v == 1))
            o.breakdown = v;
        else
            usage_fail("unknown option");
    }
    if (o.batch < 1 || o.steps < 1 || o.steps > MAX_STEPS) usage_fail("bad --batch or --steps");
    if (o.world != 0 && (o.world < 2 || o.rank < 0 || o.rank >= o.world))
        usage_fail("--sim-world N needs N >= 2 and --sim-rank r with 0 <= r < N");
    if (o.world == 0 && o.rank >= 0) usage_fail("--sim-rank needs --sim-world");
    return o;
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
    [PATH_BF16_FP32C] = {"native bf16 A, B; fp32 C: --operands bf16", CUDA_R_16BF, CUDA_R_32F,
                         CUBLAS_COMPUTE_32F},
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
    cublasHandle_t cublas = sdp_backend_cuda_cublas(be);
    void *A = random_matrix(p->ab, 1), *B = random_matrix(p->ab, 2), *C = NULL;
    CUDA_CHECK(cudaMalloc(&C, (size_t)PEAK_SIZE * PEAK_SIZE * storage_bytes(p->c)));
    const float alpha = 1.0f, beta = 0.0f;
    double best = 0;
    for (int r = -1; r < PEAK_REPEATS; r++) {
        be->sync(be);
        const double t0 = sdp_bench_now_ms();
        CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, PEAK_SIZE, PEAK_SIZE, PEAK_SIZE,
                                  &alpha, A, p->ab, PEAK_SIZE, B, p->ab, PEAK_SIZE, &beta, C, p->c,
                                  PEAK_SIZE, p->compute, CUBLAS_GEMM_DEFAULT));
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

static const char *precision_name(sdp_precision p) {
    return p == SDP_PRECISION_BF16 ? "bf16" : "fp32";
}

/* Random tokens, drawn by the trainer's feed before each step's forward. */
typedef struct {
    sdp_rng rng;
    int *tokens, *targets, n;
} feed;

static void next_batch(void *ctx, sdp_batch *b) {
    feed *f = ctx;
    for (int i = 0; i < f->n; i++) {
        f->tokens[i] = (int)sdp_rng_below(&f->rng, VOCAB);
        f->targets[i] = (int)sdp_rng_below(&f->rng, VOCAB);
    }
    *b = (sdp_batch){.B = f->n / SEQ, .T = SEQ, .tokens = f->tokens, .targets = f->targets};
}

static void set(train_opts *t, const char *name, const char *value) {
    char err[256];
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++)
        if (!strcmp(s->name, name)) {
            SDP_CHECK(train_opts_set(s, t, value, err, sizeof err), "--%s %s: %s", name, value,
                      err);
            return;
        }
    sdp_fatal("no option --%s", name);
}

static void set_int(train_opts *t, const char *name, int value) {
    char v[32];
    snprintf(v, sizeof v, "%d", value);
    set(t, name, v);
}

/* GPT-2 124M as a DDP worker (the full model), or worker `rank` of a simulated SDP job with
 * forward masking, block units, C = 0.5, on the GPU. */
static void build(trainer *t, feed *f, const options *o, const sdp_world *world) {
    memset(t, 0, sizeof *t);
    train_opts *to = &t->o;
    train_opts_set_defaults(TRAIN_OPTS, to);
    set_int(to, "layers", 12);
    set_int(to, "heads", 12);
    set_int(to, "width", 768);
    set_int(to, "seq-len", SEQ);
    set_int(to, "vocab", VOCAB);
    set_int(to, "batch", o->batch);
    set(to, "device", "cuda");
    set(to, "precision", precision_name(o->precision));
    set_int(to, "steps", 2 * MAX_STEPS + WARMUP_STEPS); /* --breakdown runs the steps twice */
    set_int(to, "warmup", 0);
    set_int(to, "sim-world", o->world > 0 ? o->world : 1);
    set_int(to, "sim-rank", o->world > 0 ? o->rank : 0);
    if (o->world > 0) {
        set(to, "sdp-mask", "forward");
        set(to, "sdp-unit", "block");
        set(to, "sdp-coverage", "0.5");
        set(to, "branch-scale", "inverse");
    }
    t->world = *world;
    f->rng = sdp_rng_make(42, 0);
    f->n = o->batch * SEQ;
    f->tokens = malloc(sizeof(int) * (size_t)f->n);
    f->targets = malloc(sizeof(int) * (size_t)f->n);
    SDP_CHECK(f->tokens && f->targets, "out of host memory");
    t->next_batch = next_batch;
    t->next_batch_ctx = f;
    t->cuda_attention_gemm = !o->fused_attention;
    trainer_build(t);
}

/* The most device memory in use so far, by cudaMemGetInfo (every process on the device). */
static size_t device_used(void) {
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return total_b - free_b;
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
static void print_speed(const sdp_model *m, const options *o, const char *device_name,
                        const double peaks[NPATHS], double median_ms) {
    const int N = o->batch * SEQ;
    const double per_token = m->ops->train_flops_per_example(m);
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
    const int own = o->precision != SDP_PRECISION_BF16 ? PATH_FP32
                    : o->bf16_operands                 ? PATH_BF16_FP32C
                                                       : PATH_FAST_16BF;
    printf("MFU %.1f%% of the measured peak of this precision's GEMMs (%s: %.1f TFLOP/s)\n",
           100.0 * tflops / peaks[own], PATHS[own].name, peaks[own]);
}

/* As many steps again with every backend entry timed (cuda_op_times.h), against the median. */
static void print_breakdown(trainer *t, const options *o, double median_ms) {
    op_times *ot = malloc(sizeof *ot);
    SDP_CHECK(ot, "out of host memory");
    op_times_install(ot, t->be);
    for (int s = 0; s < o->steps; s++) {
        t->be->sync(t->be);
        trainer_step(t);
        t->be->sync(t->be);
        op_times_collect(ot);
    }
    op_times_uninstall(ot, t->be);
    op_times_print(ot, median_ms);
    free(ot);
}

int main(int argc, char **argv) {
    const options o = parse(argc, argv);
    if (!sdp_backend_cuda_available()) {
        printf("bench_cuda_train: no CUDA device\n");
        return 0;
    }
    sdp_world world;
    sdp_world_init(&world, &argc, &argv, 0);
    sdp_set_threads(world.threads);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) strcpy(prop.name, "?");
    printf("device %s\n", prop.name);
    /* The peaks are measured on a backend of their own, gone before the worker exists, so that
     * their operands stay out of the worker's memory figures. */
    double peaks[NPATHS];
    sdp_backend *probe = sdp_backend_cuda(0, o.precision);
    measure_peaks(probe, peaks);
    sdp_backend_destroy(probe);
    const size_t used_before = device_used();

    trainer t;
    feed f;
    build(&t, &f, &o, &world);
    const size_t n = t.model.layout->numel;
    if (o.world > 0)
        printf("SDP worker %d of %d (forward masking, block units, C = 0.5): %d of %d layers, "
               "%.1fM of %.1fM params\n",
               o.rank, o.world, t.model.layout->nblocks, t.full.nblocks, 1e-6 * (double)n,
               1e-6 * (double)t.full.numel);
    else
        printf("DDP-equivalent worker: the full model, %.1fM params\n", 1e-6 * (double)n);
    printf("GPT-2 124M shape (12 layers, width 768, 12 heads, vocab %d), T=%d, B=%d, "
           "--precision %s (parameters, gradients, AdamW state and activations fp32)\n",
           t.cfg.vocab, SEQ, o.batch, precision_name(o.precision));
    if (o.bf16_operands) sdp_backend_cuda_set_bf16_operands(t.be, true);
    printf("GEMM operands: %s\n",
           o.precision != SDP_PRECISION_BF16 ? "fp32 (exact products)"
           : o.bf16_operands
               ? "bf16 copies, native bf16 products (64 MiB of cast buffer, counted as scratch)"
               : "fp32 under FAST_16BF (cuBLAS chooses the kernels: TF32 on the H200)");
    printf("attention: %s\n",
           o.precision == SDP_PRECISION_BF16 && o.fused_attention
               ? "fused kernels (score matrices on chip)"
               : "cuBLAS GEMMs over [H, T, T] score matrices in device memory, one sequence at a "
                 "time");

    double *ms = calloc((size_t)o.steps, sizeof(double)), loss = 0;
    SDP_CHECK(ms, "out of host memory");
    size_t used_peak = device_used();
    for (int s = -WARMUP_STEPS; s < o.steps; s++) {
        t.be->sync(t.be);
        /* A profiler started with --profile-from-start off (scripts/gpu_check.sh profile) sees
         * the timed steps alone: not the GEMM peaks, the set-up or the warm-up. */
        if (s == 0) cudaProfilerStart();
        const double t0 = sdp_bench_now_ms();
        loss = trainer_step(&t).loss;
        t.be->sync(t.be);
        if (s >= 0) ms[s] = sdp_bench_now_ms() - t0;
        const size_t used = device_used();
        if (used > used_peak) used_peak = used;
    }
    cudaProfilerStop();
    const double med = sdp_bench_median(ms, o.steps);
    printf("%d steps after %d warm-up: last loss %.3f, median step %.1f ms (fastest %.1f)\n",
           o.steps, WARMUP_STEPS, loss, med, ms[0]);
    print_speed(&t.model, &o, prop.name, peaks, med);
    if (o.breakdown) print_breakdown(&t, &o, med);
    printf("device memory by category (this model's buffers, the CUDA context's workspace and "
           "cuBLAS's):\n");
    sdp_bench_print_memory(t.be->mem);
    char a[32], b[32];
    printf("peak device memory (cudaMemGetInfo): %s in use at the peak, %s before the model "
           "(CUDA context, cuBLAS)\n",
           sdp_fmt_bytes(a, sizeof a, (double)used_peak),
           sdp_fmt_bytes(b, sizeof b, (double)used_before));

    free(ms);
    trainer_free(&t);
    free(f.tokens);
    free(f.targets);
    sdp_world_finalize();
    return 0;
}
