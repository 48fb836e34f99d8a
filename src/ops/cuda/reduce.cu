/* Scaling a device array and its sum of squares: gradient averaging, clipping and the global norm
 * without a copy to the host. The sum is taken in double in a fixed order (per-block partials over
 * a grid that depends on n alone, then one block over the partials), so it is the same from run to
 * run, as sdp_sumsq is on the CPU. */
#include "ops/cuda/common.cuh"

enum { SUMSQ_THREADS = 256, SUMSQ_MAX_BLOCKS = 1024 };

__global__ void scale_kernel(float *x, size_t n, float s) {
    FOR_EACH_INDEX(i, n) x[i] *= s;
}

__device__ __forceinline__ double warp_sum_double(double x) {
    for (int offset = WARP / 2; offset > 0; offset /= 2)
        x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

/* The block's total, in thread 0 only (blockDim.x == SUMSQ_THREADS). */
__device__ double block_total_double(double x) {
    __shared__ double warps[SUMSQ_THREADS / WARP];
    x = warp_sum_double(x);
    if (threadIdx.x % WARP == 0) warps[threadIdx.x / WARP] = x;
    __syncthreads();
    double total = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < SUMSQ_THREADS / WARP; w++) total += warps[w];
    return total;
}

__global__ void sumsq_partials_kernel(double *partials, const float *x, size_t n) {
    double acc = 0;
    FOR_EACH_INDEX(i, n) acc += (double)x[i] * (double)x[i];
    const double total = block_total_double(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_partials_kernel(double *out, const double *partials, unsigned n) {
    double acc = 0;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
    const double total = block_total_double(acc);
    if (threadIdx.x == 0) *out = total;
}

/* x *= s (nothing when s == 1). */
static void cuda_scale(const sdp_backend *be, float *x, size_t n, float s) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n == 0 || s == 1.0f) return; /* x * 1 == x: the common no-clip case is free */
    scale_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(x, n, s);
    LAUNCH_CHECK();
}

/* Waits: sum of x[i]^2 in double, in an order that depends on n alone. */
static double cuda_sumsq(const sdp_backend *be, const float *x, size_t n) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n == 0) return 0;
    unsigned blocks = ceil_div(n, SUMSQ_THREADS);
    if (blocks > SUMSQ_MAX_BLOCKS) blocks = SUMSQ_MAX_BLOCKS;
    /* [0]: the total; [1, blocks]: the partials */
    double *scratch = (double *)sdp_cuda_workspace(ctx, (SUMSQ_MAX_BLOCKS + 1) * sizeof(double));
    sumsq_partials_kernel<<<blocks, SUMSQ_THREADS, 0, ctx->stream>>>(scratch + 1, x, n);
    LAUNCH_CHECK();
    sum_partials_kernel<<<1, SUMSQ_THREADS, 0, ctx->stream>>>(scratch, scratch + 1, blocks);
    LAUNCH_CHECK();
    double total = 0;
    sdp_cuda_download(ctx, &total, scratch, sizeof total);
    return total;
}

void cuda_ops_reduce(sdp_backend *t) {
    t->scale = cuda_scale;
    t->sumsq = cuda_sumsq;
}
