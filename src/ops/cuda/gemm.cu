/* Single-precision GEMM through cuBLAS, called row-major like sdp_gemm.
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

void sdp_cuda_gemm(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   int ldc) {
    check_gemm_args(ta, tb, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    CUBLAS_CHECK(cublasSgemm(ctx->cublas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A, lda, &beta,
                             C, ldc));
}
