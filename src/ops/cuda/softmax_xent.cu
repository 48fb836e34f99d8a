/* Fused softmax and cross-entropy over the real classes of a padded vocabulary, one block per
 * row. The block makes two read-only passes over the row (maximum, then sum of exponentials) and
 * reads the target's logit before a barrier; only then does each thread overwrite its own
 * elements. That order is what lets probs alias logits, and dlogits alias probs.
 *
 * The total loss is added in double by one block, in row order, so it is the same on every run;
 * returning it waits for the stream. */
#include "ops/cuda/common.cuh"

enum { ROW_THREADS = 512, TOTAL_THREADS = 1024 };

__global__ void softmax_xent_fwd_kernel(float *losses, float *probs, const float *logits,
                                        const int *targets, int V, int Vp, unsigned *errors) {
    __shared__ float shared[WARP];
    size_t row = blockIdx.x;
    const float *x = logits + row * Vp;
    float *p = probs + row * Vp;
    int target = targets[row];
    if (target >= V) {
        if (threadIdx.x == 0) atomicOr(errors, BAD_TARGET);
        target = -1; /* treated as ignored, so nothing reads past the row */
    }

    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, x[v]);
    mx = block_max(mx, shared);
    float sum = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) sum += expf(x[v] - mx);
    sum = block_sum(sum, shared);
    float target_shifted = target >= 0 ? x[target] - mx : 0.0f;
    __syncthreads(); /* every read of the row is done: the writes may begin */

    float inv = 1.0f / sum;
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) p[v] = v < V ? expf(x[v] - mx) * inv : 0.0f;
    if (threadIdx.x == 0) losses[row] = target >= 0 ? logf(sum) - target_shifted : 0.0f;
}

/* One block: total = sum of losses in row order, in double (deterministic). */
__global__ void sum_losses_kernel(double *total, const float *losses, int n) {
    __shared__ double part[TOTAL_THREADS];
    int per = (n + TOTAL_THREADS - 1) / TOTAL_THREADS;
    int i0 = threadIdx.x * per, i1 = min(n, i0 + per);
    double s = 0.0;
    for (int i = i0; i < i1; i++) s += losses[i];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x != 0) return;
    double t = 0.0;
    for (int j = 0; j < TOTAL_THREADS; j++) t += part[j];
    *total = t;
}

__global__ void softmax_xent_bwd_kernel(float *dlogits, const float *probs, const int *targets,
                                        float dloss, int V, int Vp) {
    size_t row = blockIdx.x;
    const float *p = probs + row * Vp;
    float *d = dlogits + row * Vp;
    int target = targets[row];
    bool ignored = target < 0 || target >= V;
    /* Each thread reads p[v] and writes d[v] for its own v only, so aliasing is safe. */
    for (int v = threadIdx.x; v < Vp; v += blockDim.x) {
        float g = 0.0f;
        if (!ignored && v < V) g = dloss * (p[v] - (v == target ? 1.0f : 0.0f));
        d[v] = g;
    }
}

/* As sdp_softmax_xent_fwd (probs may alias logits; targets < 0 ignored; returns the sum of the
 * losses, in double). Waits for the stream to return the sum, and fails there if a target was
 * >= V. */
static double cuda_softmax_xent_fwd(const sdp_backend *be, float *losses, float *probs,
                                    const float *logits, const int *targets, int n, int V, int Vp) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n <= 0) return 0.0;
    double *total = (double *)sdp_cuda_workspace(ctx, sizeof(double));
    softmax_xent_fwd_kernel<<<n, ROW_THREADS, 0, ctx->stream>>>(losses, probs, logits, targets, V,
                                                                Vp, ctx->input_errors);
    LAUNCH_CHECK();
    sum_losses_kernel<<<1, TOTAL_THREADS, 0, ctx->stream>>>(total, losses, n);
    LAUNCH_CHECK();
    double result = 0.0;
    sdp_cuda_download(ctx, &result, total, sizeof result);
    return result;
}

/* As sdp_softmax_xent_bwd: OVERWRITES dlogits (which may alias probs). A target >= V (already
 * reported by the forward) gives a zero row. */
static void cuda_softmax_xent_bwd(const sdp_backend *be, float *dlogits, const float *probs,
                                  const int *targets, float dloss, int n, int V, int Vp) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n <= 0) return;
    softmax_xent_bwd_kernel<<<n, ROW_THREADS, 0, ctx->stream>>>(dlogits, probs, targets, dloss, V,
                                                                Vp);
    LAUNCH_CHECK();
}

/* One thread per row (classifier rows are few and short); the first maximum wins, as on the
 * CPU. Hits are counted with an atomic on an integer, which is exact in any order. */
__global__ void count_correct_kernel(int *hits, const float *logits, const int *labels, int n,
                                     int K, int ld) {
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += gridDim.x * blockDim.x) {
        if (labels[r] < 0) continue;
        const float *x = logits + (size_t)r * ld;
        int best = 0;
        for (int k = 1; k < K; k++)
            if (x[k] > x[best]) best = k;
        if (best == labels[r]) atomicAdd(hits, 1);
    }
}

/* How many rows r < n with labels[r] >= 0 have their largest logit (the first on a tie) at
 * column labels[r]; logits is [n, ld] with K <= ld classes. Waits for the stream. */
static int cuda_count_correct(const sdp_backend *be, const float *logits, const int *labels, int n,
                              int K, int ld) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    if (n <= 0) return 0;
    int *hits = (int *)sdp_cuda_workspace(ctx, sizeof(int));
    CUDA_CHECK(cudaMemsetAsync(hits, 0, sizeof(int), ctx->stream));
    count_correct_kernel<<<elementwise_blocks((size_t)n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        hits, logits, labels, n, K, ld);
    LAUNCH_CHECK();
    int result = 0;
    sdp_cuda_download(ctx, &result, hits, sizeof result);
    return result;
}

void cuda_ops_softmax_xent(sdp_backend *t) {
    t->softmax_xent_fwd = cuda_softmax_xent_fwd;
    t->softmax_xent_bwd = cuda_softmax_xent_bwd;
    t->count_correct = cuda_count_correct;
}
