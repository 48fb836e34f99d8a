/* 2D convolution on cuDNN (its legacy convolution API), fp32 NCHW, as sdp_conv2d_fwd/bwd.
 *
 * A plan holds the descriptors of one shape and the three algorithms (forward, backward data,
 * backward filter) chosen once from cuDNN's heuristics (cudnnGet*Algorithm_v7, which time
 * nothing and need no memory). The convolution descriptor's math type is CUDNN_FMA_MATH: fp32
 * products stay fp32, whereas the default math lets cuDNN use TF32 tensor cores on Ampere and
 * later (errors near 1e-3). Among the algorithms that run for the shape under that math type,
 * within MAX_WORKSPACE_BYTES, the first deterministic one is taken (cuDNN lists the fastest first),
 * and a non-deterministic one only when there is none. The workspace is the context's.
 *
 * The backward accumulates as the CPU kernel does: beta = 1 for dinp, dw and dbias. */
#include "ops/cuda/common.cuh"

#include <limits.h>
#include <stdlib.h>

/* cuDNN's FFT algorithms can ask for gigabytes; these convolutions are small enough that an
 * algorithm needing more than this is not worth the memory. */
static const size_t MAX_WORKSPACE_BYTES = (size_t)256 << 20;

/* A convolution of one shape (sdp_conv_shape, zero padding, cross-correlation as nn.Conv2d):
 * cuDNN's descriptors and the algorithms picked for it once, by cuDNN's heuristics, among those
 * that run in plain fp32 (FMA math, never TF32) and deterministically where one exists. Their
 * workspace comes from the context's. conv_plan_create returns one as the table's void *plan. */
typedef struct sdp_cuda_conv {
    sdp_conv_shape shape;
    cudnnTensorDescriptor_t x, y, bias; /* [B, IC, H, W], [B, OC, OH, OW], [1, OC, 1, 1] */
    cudnnFilterDescriptor_t w;          /* [OC, IC, KH, KW] */
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t fwd_bytes, bwd_data_bytes, bwd_filter_bytes; /* workspace of each */
} sdp_cuda_conv;

static int out_size(int in, int k, int stride, int pad) {
    return (in + 2 * pad - k) / stride + 1;
}

/* cuDNN's own limit, beyond what sdp_conv_plan_create checked: its 4-d descriptors index with
 * ints. */
static void check_shape(const sdp_conv_shape *s) {
    const long long in = (long long)s->B * s->IC * s->H * s->W;
    const long long out = (long long)s->B * s->OC * out_size(s->H, s->KH, s->stride_h, s->pad_h) *
                          out_size(s->W, s->KW, s->stride_w, s->pad_w);
    SDP_CHECK(in <= INT_MAX && out <= INT_MAX,
              "conv2d: a tensor of %lld elements exceeds cuDNN's int indexing: use a smaller batch",
              in > out ? in : out);
}

static cudnnHandle_t cudnn_of(sdp_cuda_ctx *ctx) {
    if (!ctx->cudnn) {
        CUDNN_CHECK(cudnnCreate(&ctx->cudnn));
        CUDNN_CHECK(cudnnSetStream(ctx->cudnn, ctx->stream));
    }
    return ctx->cudnn;
}

/* ---- algorithm choice ---------------------------------------------------------------------- */

/* Whether a heuristic result may run here: it runs for this shape, in plain fp32 (its math type is
 * not a tensor-core one), within the workspace limit, and deterministically if asked. */
template <class Perf> static bool acceptable(const Perf &p, bool deterministic) {
    return p.status == CUDNN_STATUS_SUCCESS &&
           (p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH) &&
           p.memory <= MAX_WORKSPACE_BYTES &&
           (!deterministic || p.determinism == CUDNN_DETERMINISTIC);
}

/* The first acceptable result, deterministic ones first, for which workspace_size (the
 * cudnnGet*WorkspaceSize of an algorithm under the plan's FMA descriptor) succeeds; fatal if
 * none. */
template <class Perf, class Algo, class WorkspaceSize>
static void choose(const Perf *perf, int n, WorkspaceSize workspace_size, const char *what,
                   const sdp_conv_shape *s, Algo *algo, size_t *bytes) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++)
            if (acceptable(perf[i], pass == 0) && workspace_size(perf[i].algo, bytes)) {
                *algo = perf[i].algo;
                return;
            }
    sdp_fatal("conv2d: cuDNN offers no fp32 %s algorithm for input [%d, %d, %d, %d], kernel %dx%d "
              "stride %d: check the cuDNN install (cuDNN 9 with its convolution engines)",
              what, s->B, s->IC, s->H, s->W, s->KH, s->KW, s->stride_h);
}

static void choose_algorithms(cudnnHandle_t h, sdp_cuda_conv *c) {
    const sdp_conv_shape *s = &c->shape;
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, c->x, c->w, c->conv, c->y,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, fwd));
    choose(
        fwd, n,
        [&](cudnnConvolutionFwdAlgo_t a, size_t *bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(h, c->x, c->w, c->conv, c->y, a,
                                                           bytes) == CUDNN_STATUS_SUCCESS;
        },
        "forward", s, &c->fwd, &c->fwd_bytes);

    cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, c->w, c->y, c->conv, c->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, data));
    choose(
        data, n,
        [&](cudnnConvolutionBwdDataAlgo_t a, size_t *bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w, c->y, c->conv, c->x, a,
                                                                bytes) == CUDNN_STATUS_SUCCESS;
        },
        "backward-data", s, &c->bwd_data, &c->bwd_data_bytes);

    cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        h, c->x, c->y, c->conv, c->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, filter));
    choose(
        filter, n,
        [&](cudnnConvolutionBwdFilterAlgo_t a, size_t *bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->x, c->y, c->conv, c->w, a,
                                                                  bytes) == CUDNN_STATUS_SUCCESS;
        },
        "backward-filter", s, &c->bwd_filter, &c->bwd_filter_bytes);
}

/* ---- plans --------------------------------------------------------------------------------- */

/* Fails with a clear message for an invalid shape. Makes ctx->cudnn on first use. */
static void *cuda_conv_plan_create(const sdp_backend *be, const sdp_conv_shape *shape,
                                   sdp_conv_algo algo) {
    (void)algo; /* the CPU's choice of implementation; cuDNN's heuristics pick here */
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    check_shape(shape);
    cudnnHandle_t h = cudnn_of(ctx);
    sdp_cuda_conv *c = (sdp_cuda_conv *)sdp_xcalloc(1, sizeof *c, "a convolution plan");
    c->shape = *shape;
    const sdp_conv_shape *s = &c->shape;
    const int OH = out_size(s->H, s->KH, s->stride_h, s->pad_h);
    const int OW = out_size(s->W, s->KW, s->stride_w, s->pad_w);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&c->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&c->y));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&c->bias));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&c->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&c->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->B, s->IC,
                                           s->H, s->W));
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->B, s->OC, OH, OW));
    CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(c->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, s->OC, 1, 1));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s->OC, s->IC,
                                           s->KH, s->KW));
    /* Cross-correlation (no kernel flip) is what nn.Conv2d and the CPU kernel compute. */
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c->conv, s->pad_h, s->pad_w, s->stride_h,
                                                s->stride_w, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(c->conv, CUDNN_FMA_MATH));
    int n, oc, oh, ow;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(c->conv, c->x, c->w, &n, &oc, &oh, &ow));
    SDP_ASSERT(n == s->B && oc == s->OC && oh == OH && ow == OW);
    choose_algorithms(h, c);
    return c;
}

static void cuda_conv_plan_free(const sdp_backend *be, void *plan) {
    (void)be;
    sdp_cuda_conv *c = (sdp_cuda_conv *)plan;
    if (!c) return;
    CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(c->conv));
    CUDNN_CHECK(cudnnDestroyFilterDescriptor(c->w));
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(c->bias));
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(c->y));
    CUDNN_CHECK(cudnnDestroyTensorDescriptor(c->x));
    free(c);
}

/* ---- kernels ------------------------------------------------------------------------------- */

static const float ONE = 1.0f, ZERO = 0.0f;

/* 0: cuDNN's workspace is the context's (sdp_cuda_workspace, grown on demand), so the model
 * allocates no convolution scratch. */
static size_t cuda_conv_scratch_bytes(const sdp_backend *be, const void *plan) {
    (void)be;
    (void)plan;
    return 0;
}

/* out [B, OC, OH, OW] is overwritten; bias [OC] may be NULL. */
static void cuda_conv2d_fwd(const sdp_backend *be, const void *plan, float *out, const float *inp,
                            const float *w, const float *bias, float *scratch) {
    (void)scratch; /* conv_scratch_bytes is 0: the workspace is the context's */
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    const sdp_cuda_conv *c = (const sdp_cuda_conv *)plan;
    SDP_ASSERT(ctx->cudnn); /* made with the plan */
    void *ws = sdp_cuda_workspace(ctx, c->fwd_bytes);
    CUDNN_CHECK(cudnnConvolutionForward(ctx->cudnn, &ONE, c->x, inp, c->w, w, c->conv, c->fwd, ws,
                                        c->fwd_bytes, &ZERO, c->y, out));
    if (bias) CUDNN_CHECK(cudnnAddTensor(ctx->cudnn, &ONE, c->bias, bias, &ONE, c->y, out));
}

/* dinp += ; dw += ; dbias += . inp is needed only for dw, w only for dinp. */
static void cuda_conv2d_bwd(const sdp_backend *be, const void *plan, float *dinp, float *dw,
                            float *dbias, const float *dout, const float *inp, const float *w,
                            float *scratch) {
    (void)scratch; /* conv_scratch_bytes is 0: the workspace is the context's */
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    const sdp_cuda_conv *c = (const sdp_cuda_conv *)plan;
    SDP_ASSERT(ctx->cudnn);
    const size_t data_bytes = dinp ? c->bwd_data_bytes : 0,
                 filter_bytes = dw ? c->bwd_filter_bytes : 0;
    /* One workspace for both: they run one after the other on the stream. */
    void *ws = sdp_cuda_workspace(ctx, data_bytes > filter_bytes ? data_bytes : filter_bytes);
    if (dinp)
        CUDNN_CHECK(cudnnConvolutionBackwardData(ctx->cudnn, &ONE, c->w, w, c->y, dout, c->conv,
                                                 c->bwd_data, ws, data_bytes, &ONE, c->x, dinp));
    if (dw)
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx->cudnn, &ONE, c->x, inp, c->y, dout, c->conv,
                                                   c->bwd_filter, ws, filter_bytes, &ONE, c->w,
                                                   dw));
    if (dbias)
        CUDNN_CHECK(
            cudnnConvolutionBackwardBias(ctx->cudnn, &ONE, c->y, dout, &ONE, c->bias, dbias));
}

void cuda_ops_conv2d(sdp_backend *t) {
    t->conv_plan_create = cuda_conv_plan_create;
    t->conv_plan_free = cuda_conv_plan_free;
    t->conv_scratch_bytes = cuda_conv_scratch_bytes;
    t->conv2d_fwd = cuda_conv2d_fwd;
    t->conv2d_bwd = cuda_conv2d_bwd;
}
