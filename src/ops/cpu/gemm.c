/* Single-precision GEMM through one of two vendor libraries, chosen at run time so that both can
 * be measured on the same machine. Both are called row-major; the arguments are checked here so
 * that a bad stride fails the same clear way whichever library is in use. */
#include "sdp/check.h"
#include "sdp/ops.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <string.h>

static int max1(int x) {
    return x > 1 ? x : 1;
}

static void check_gemm_args(bool ta, bool tb, int M, int N, int K, int lda, int ldb, int ldc) {
    SDP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=%d N=%d K=%d: pass sizes >= 0", M,
              N, K);
    /* Row-major: the stored A is [M, K], or [K, M] when transposed; likewise for B. */
    int a_cols = ta ? M : K, b_cols = tb ? K : N;
    SDP_CHECK(lda >= max1(a_cols),
              "gemm: lda=%d is less than the %d columns of A as stored: "
              "pass the row stride of A",
              lda, a_cols);
    SDP_CHECK(ldb >= max1(b_cols),
              "gemm: ldb=%d is less than the %d columns of B as stored: "
              "pass the row stride of B",
              ldb, b_cols);
    SDP_CHECK(ldc >= max1(N),
              "gemm: ldc=%d is less than the %d columns of C: "
              "pass the row stride of C",
              ldc, N);
}

static void gemm_dnnl(bool ta, bool tb, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success)
        sdp_fatal("oneDNN sgemm failed with status %d (M=%d N=%d K=%d): try --gemm openblas",
                  (int)st, M, N, K);
}

static void gemm_openblas(bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                          int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
                K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* K = 0 is an empty sum, C = beta C; oneDNN leaves C unscaled then, so it is done here. */
static void scale_c(int M, int N, float beta, float *C, int ldc) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float *c = C + (size_t)m * ldc + n;
            *c = beta == 0.0f ? 0.0f : beta * *c; /* beta = 0: C is output only, may hold NaN */
        }
}

void sdp_gemm(sdp_gemm_provider prov, bool ta, bool tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    check_gemm_args(ta, tb, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    if (K == 0) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    switch (prov) {
    case SDP_GEMM_DNNL:
        gemm_dnnl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    case SDP_GEMM_OPENBLAS:
        gemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    sdp_fatal("unknown gemm provider %d: use dnnl or openblas", (int)prov);
}

const char *sdp_gemm_provider_name(sdp_gemm_provider prov) {
    switch (prov) {
    case SDP_GEMM_DNNL:
        return "dnnl";
    case SDP_GEMM_OPENBLAS:
        return "openblas";
    }
    return "unknown";
}

bool sdp_gemm_provider_parse(const char *s, sdp_gemm_provider *out) {
    if (!s) return false;
    if (strcmp(s, "dnnl") == 0) {
        *out = SDP_GEMM_DNNL;
        return true;
    }
    if (strcmp(s, "openblas") == 0) {
        *out = SDP_GEMM_OPENBLAS;
        return true;
    }
    return false;
}

/* oneDNN is built on the OpenMP runtime and follows omp_set_num_threads; OpenBLAS keeps its own
 * count, so both are set. */
void sdp_set_threads(int n) {
    SDP_CHECK(n >= 1, "thread count %d is not positive: pass a count >= 1", n);
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}
