/* GEMMs through cuBLAS, called row-major like sdp_gemm, fp32 in memory, with the arithmetic of
 * the context's precision: plain fp32 (CUBLAS_COMPUTE_32F under the default math mode: no TF32),
 * or bf16 tensor cores (CUBLAS_COMPUTE_32F_FAST_16BF: cuBLAS rounds A and B to bf16 as it loads
 * them and accumulates in fp32).
 *
 * cuBLAS reads matrices column-major, and a row-major X[r, c] with row stride ld is, read
 * column-major with leading dimension ld, the matrix X^T. So the row-major product
 * C = op(A) op(B) is asked of cuBLAS as C^T = op(B)^T op(A)^T: B goes first with B's transpose
 * flag, A second with A's, and the sizes are (N, M, K). No data moves. */
#include "ops/cuda/common.cuh"

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

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, as sdp_gemm, through cuBLAS: in full fp32
 * (no TF32) when ctx->precision is SDP_PRECISION_FP32; with SDP_PRECISION_BF16, on tensor cores
 * with A and B rounded to bf16 and fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF; A, B and C
 * stay fp32 in memory). cuBLAS is column-major, and a row-major matrix read column-major is its
 * transpose, so this computes C^T = op(B)^T op(A)^T: B is passed as cuBLAS's first operand and A
 * as its second, with M and N swapped; the strides stay as they are. */
void sdp_cuda_gemm(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   int ldc) {
    check_gemm_args(ta, tb, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
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
