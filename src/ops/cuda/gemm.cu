/* GEMMs through cuBLAS, called row-major like sdp_gemm, fp32 in memory, with the arithmetic of
 * the context's precision: plain fp32 (CUBLAS_COMPUTE_32F under the default math mode: no TF32),
 * or tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF: cuBLAS may round A and B
 * to bf16 as it loads them, and on the H200 runs TF32 kernels instead; or, with
 * ctx->bf16_operands, native bf16 products on copies of A and B rounded to bf16).
 *
 * cuBLAS reads matrices column-major, and a row-major X[r, c] with row stride ld is, read
 * column-major with leading dimension ld, the matrix X^T. So the row-major product
 * C = op(A) op(B) is asked of cuBLAS as C^T = op(B)^T op(A)^T: B goes first with B's transpose
 * flag, A second with A's, and the sizes are (N, M, K). No data moves. */
#include "ops/cuda/common.cuh"
#include "ops/cuda/gemm_slices.h"
#include "sdp/cuda_scratch.h"

#include <cuda_bf16.h>

static int max1(int x) {
    return x > 1 ? x : 1;
}

/* The same checks and messages as the CPU sdp_gemm, so a bad stride fails alike on both. */
static void check_gemm_args(bool ta, bool tb, int M, int N, int K, int lda, int ldb, int ldc) {
    SDP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=%d N=%d K=%d: pass sizes >= 0", M,
              N, K);
    int a_cols = ta ? M : K, b_cols = tb ? K : N;
    SDP_CHECK(lda >= max1(a_cols),
              "gemm: lda=%d is less than the %d columns of A as stored: pass the row stride of A",
              lda, a_cols);
    SDP_CHECK(ldb >= max1(b_cols),
              "gemm: ldb=%d is less than the %d columns of B as stored: pass the row stride of B",
              ldb, b_cols);
    SDP_CHECK(ldc >= max1(N),
              "gemm: ldc=%d is less than the %d columns of C: pass the row stride of C", ldc, N);
}

static cublasComputeType_t compute_type(const sdp_cuda_ctx *ctx) {
    return ctx->precision == SDP_PRECISION_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
}

static cublasOperation_t op(bool transposed) {
    return transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
}

/* ---- bf16 operands (ctx->bf16_operands) ----------------------------------------------------
 * cuBLAS serves fp32 operands under FAST_16BF through TF32 kernels, about half the bf16 tensor
 * cores' rate on the H200 (docs/cuda.md). With bf16_operands, each product first rounds its
 * operands (to nearest even, as FAST_16BF would) into bf16 copies in the context's cast buffer,
 * and cuBLAS multiplies those, accumulating in fp32 into the fp32 C. A product whose operands do
 * not fit the buffer is taken in slices of its inner dimension K (gemm_slices.h), each
 * accumulating into C (beta for the first, 1 after), so every element is rounded once. */

/* dst[r * cols + c] = bf16(src[r * ld + c]), r < rows, c < cols. */
__global__ void cast_block_kernel(__nv_bfloat16 *dst, const float *src, int rows, int cols,
                                  int ld) {
    const size_t n = (size_t)rows * (size_t)cols;
    FOR_EACH_INDEX(i, n) {
        const size_t r = i / (size_t)cols, c = i % (size_t)cols;
        dst[i] = __float2bfloat16_rn(src[r * (size_t)ld + c]);
    }
}

/* A block of `rows` x `cols` of a row-major fp32 matrix with row stride ld, as contiguous bf16. */
static void cast_block(sdp_cuda_ctx *ctx, __nv_bfloat16 *dst, const float *src, int rows, int cols,
                       int ld) {
    const size_t n = (size_t)rows * (size_t)cols;
    cast_block_kernel<<<elementwise_blocks(n), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        dst, src, rows, cols, ld);
    LAUNCH_CHECK();
}

/* sdp_cuda_gemm on bf16 copies of the operands, slice by slice of K (gemm_slices.h); false,
 * doing nothing, when not even one column fits the cast buffer. */
static bool gemm_bf16_operands(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K,
                               float alpha, const float *A, int lda, const float *B, int ldb,
                               float beta, float *C, int ldc) {
    const size_t room = SDP_CUDA_CAST_BYTES / sizeof(__nv_bfloat16);
    if (gemm_slices::slice_width(room, M, N, K) <= 0) return false; /* before allocating */
    __nv_bfloat16 *buf = (__nv_bfloat16 *)sdp_cuda_cast_buffer(ctx);
    auto cast = [ctx](__nv_bfloat16 *dst, const float *src, int rows, int cols, int ld) {
        cast_block(ctx, dst, src, rows, cols, ld);
    };
    auto product = [&](bool first, int k, const __nv_bfloat16 *a, int la, const __nv_bfloat16 *b,
                       int lb) {
        const float beta_k = first ? beta : 1.0f;
        CUBLAS_CHECK(cublasGemmEx(ctx->cublas, op(tb), op(ta), N, M, k, &alpha, b, CUDA_R_16BF, lb,
                                  a, CUDA_R_16BF, la, &beta_k, C, CUDA_R_32F, ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    return gemm_slices::run(buf, room, ta, tb, M, N, K, A, lda, B, ldb, cast, product);
}

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, as sdp_gemm, through cuBLAS: in full fp32
 * (no TF32) when ctx->precision is SDP_PRECISION_FP32; with SDP_PRECISION_BF16, on tensor cores
 * with A and B rounded to bf16 and fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF; A, B and C
 * stay fp32 in memory), or with ctx->bf16_operands on bf16 copies of A and B (above). cuBLAS is
 * column-major, and a row-major matrix read column-major is its transpose, so this computes C^T =
 * op(B)^T op(A)^T: B is passed as cuBLAS's first operand and A as its second, with M and N swapped;
 * the strides stay as they are. */
void sdp_cuda_gemm(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   int ldc) {
    check_gemm_args(ta, tb, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    if (ctx->precision == SDP_PRECISION_BF16 && ctx->bf16_operands && K > 0 &&
        gemm_bf16_operands(ctx, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    CUBLAS_CHECK(cublasGemmEx(ctx->cublas, op(tb), op(ta), N, M, K, &alpha, B, CUDA_R_32F, ldb, A,
                              CUDA_R_32F, lda, &beta, C, CUDA_R_32F, ldc, compute_type(ctx),
                              CUBLAS_GEMM_DEFAULT));
}

void sdp_cuda_gemm_strided_batched(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K,
                                   float alpha, const float *A, int lda, long long stride_a,
                                   const float *B, int ldb, long long stride_b, float beta,
                                   float *C, int ldc, long long stride_c, int batch) {
    check_gemm_args(ta, tb, M, N, K, lda, ldb, ldc);
    SDP_ASSERT(batch >= 0 && stride_a >= 0 && stride_b >= 0 && stride_c >= 0);
    if (M == 0 || N == 0 || batch == 0) return;
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx->cublas, op(tb), op(ta), N, M, K, &alpha, B,
                                            CUDA_R_32F, ldb, stride_b, A, CUDA_R_32F, lda, stride_a,
                                            &beta, C, CUDA_R_32F, ldc, stride_c, batch,
                                            compute_type(ctx), CUBLAS_GEMM_DEFAULT));
}

static void cuda_gemm(const sdp_backend *be, bool ta, bool tb, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc) {
    /* sdp_cuda_gemm, which linear.cu calls too */
    sdp_cuda_gemm(cuda_ctx(be), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void cuda_ops_gemm(sdp_backend *t) {
    t->gemm = cuda_gemm;
}
