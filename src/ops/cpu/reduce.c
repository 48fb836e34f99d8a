/* The gradient norm's reductions on the CPU. The sum of squares is split into a fixed number of
 * blocks whatever the thread count, and the block sums are added in order, so the norm (and hence
 * training) is bitwise reproducible across runs and OMP_NUM_THREADS settings. */
#include "ops/cpu/cpu_ops.h"

#include <stddef.h>

enum {
    SUMSQ_BLOCKS = 256,    /* fixed partition: enough blocks to balance up to ~64 threads */
    PARALLEL_MIN = 1 << 16 /* below this a parallel region costs more than the loop */
};

/* Declared simd so the sum runs in vector lanes (a few independent chains each), combined in an
 * order fixed at compile time: still the same result on every run. Without it the double adds
 * form one latency chain and the sum runs far below memory speed. */
static double sumsq_serial(const float *x, size_t n) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static double sumsq(const sdp_backend *be, const float *x, size_t n) {
    (void)be;
    double partial[SUMSQ_BLOCKS];
    size_t block = (n + SUMSQ_BLOCKS - 1) / SUMSQ_BLOCKS;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int b = 0; b < SUMSQ_BLOCKS; b++) {
        size_t lo = (size_t)b * block < n ? (size_t)b * block : n;
        size_t hi = lo + block < n ? lo + block : n;
        partial[b] = sumsq_serial(x + lo, hi - lo);
    }
    double total = 0;
    for (int b = 0; b < SUMSQ_BLOCKS; b++) total += partial[b];
    return total;
}

static void scale(const sdp_backend *be, float *x, size_t n, float s) {
    (void)be;
    if (s == 1.0f) return; /* x * 1 == x for every float: the common no-clip case is free */
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void cpu_ops_reduce(sdp_backend *t) {
    t->scale = scale;
    t->sumsq = sumsq;
}
