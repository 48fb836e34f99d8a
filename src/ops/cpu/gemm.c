/* Single-precision GEMM through one of two vendor libraries, chosen at run time so that both can
 * be measured on the same machine. Both are called row-major. sdp_gemm checks the arguments
 * (src/ops/ops.c), so that a bad stride fails the same clear way whichever library, or
 * backend, is in use. */
#include "ops/cpu/cpu_ops.h"
#include "sdp/check.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>
#include <string.h>

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

/* C = A B^T is the forward of every linear layer (weights [out, in]). For the skinny products of
 * training (256 tokens against a 768 x 3072 weight) oneDNN's own threading splits the work so
 * that each thread packs (nearly) all of B, and with a long K it falls to 140 GFLOP/s on 2 cores
 * where 200 is reached otherwise. Splitting C here into one band per thread, along the longer of
 * M and N, and running oneDNN single-threaded on each band measured 5-35% faster on every such
 * shape of GPT-2 124M and up to 15% on 2048-token batches. The other layouts measured the same
 * or worse this way and are left to oneDNN. Each band is a fixed sub-product for a given thread
 * count, so results stay reproducible. */
enum {
    SPLIT_ALIGN = 16,   /* bands start on whole 64-byte lines of C */
    SPLIT_MIN_BAND = 64 /* narrower bands leave oneDNN's kernels short of work */
};

static int round_up(int x, int m) {
    return (x + m - 1) / m * m;
}

static void gemm_dnnl_abt_banded(int M, int N, int K, float alpha, const float *A, int lda,
                                 const float *B, int ldb, float beta, float *C, int ldc) {
    const int nth = omp_in_parallel() ? 1 : omp_get_max_threads();
    const bool split_cols = N > M;
    const int len = split_cols ? N : M;
    const int band = round_up((len + nth - 1) / nth, SPLIT_ALIGN);
    if (nth == 1 || band < SPLIT_MIN_BAND) {
        gemm_dnnl(false, true, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#pragma omp parallel num_threads(nth)
    {
        const int lo = omp_get_thread_num() * band;
        const int hi = lo + band < len ? lo + band : len;
        if (lo < hi && split_cols) /* rows lo..hi of B are columns lo..hi of C */
            gemm_dnnl(false, true, M, hi - lo, K, alpha, A, lda, B + (size_t)lo * ldb, ldb, beta,
                      C + lo, ldc);
        else if (lo < hi)
            gemm_dnnl(false, true, hi - lo, N, K, alpha, A + (size_t)lo * lda, lda, B, ldb, beta,
                      C + (size_t)lo * ldc, ldc);
    }
}

/* K = 0 is an empty sum, C = beta C; oneDNN leaves C unscaled then, so it is done here. */
static void scale_c(int M, int N, float beta, float *C, int ldc) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float *c = C + (size_t)m * ldc + n;
            *c = beta == 0.0f ? 0.0f : beta * *c; /* beta = 0: C is output only, may hold NaN */
        }
}

void sdp_cpu_gemm(sdp_gemm_provider prov, bool ta, bool tb, int M, int N, int K, float alpha,
                  const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
    switch (prov) {
    case SDP_GEMM_DNNL:
        if (!ta && tb)
            gemm_dnnl_abt_banded(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        else
            gemm_dnnl(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    case SDP_GEMM_OPENBLAS:
        gemm_openblas(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    sdp_fatal("unknown gemm provider %d: use dnnl or openblas", (int)prov);
}

static void gemm(const sdp_backend *be, bool ta, bool tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    sdp_cpu_gemm(cpu_gemm_provider(be), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void cpu_ops_gemm(sdp_backend *t) {
    t->gemm = gemm;
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
