/* Fully connected layer, weights [out, in] as in PyTorch: all the heavy work is three GEMMs; the
 * bias is added, and its gradient summed, here. */
#include "ops/cpu/cpu_ops.h"

#include <stddef.h>

/* Below this many elements an OpenMP team costs more than the loop it would split. */
enum { PARALLEL_MIN_ELEMS = 1 << 14 };
/* Columns summed together by one thread in the bias gradient: a cache-friendly strip of dout. */
enum { DBIAS_STRIP = 64 };

static void add_bias(float *out, const float *bias, int n, int oc) {
    size_t work = (size_t)n * (size_t)oc;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        float *row = out + (size_t)i * oc;
        for (int o = 0; o < oc; o++) row[o] += bias[o];
    }
}

/* dbias[o] += sum_i dout[i, o]. Each thread owns whole strips of columns and adds the rows in
 * order, so the result is race-free and the same for any thread count. */
static void accumulate_column_sums(float *dbias, const float *dout, int n, int oc) {
    int nstrips = (oc + DBIAS_STRIP - 1) / DBIAS_STRIP;
    size_t work = (size_t)n * (size_t)oc;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int s = 0; s < nstrips; s++) {
        int o0 = s * DBIAS_STRIP;
        int width = oc - o0 < DBIAS_STRIP ? oc - o0 : DBIAS_STRIP;
        double sum[DBIAS_STRIP] = {0};
        for (int i = 0; i < n; i++) {
            const float *row = dout + (size_t)i * oc + o0;
            for (int k = 0; k < width; k++) sum[k] += row[k];
        }
        for (int k = 0; k < width; k++) dbias[o0 + k] += (float)sum[k];
    }
}

static void linear_fwd(const sdp_backend *be, float *out, const float *inp, const float *w,
                       const float *bias, int n, int ic, int oc) {
    sdp_gemm_provider prov = cpu_gemm_provider(be);
    /* out[n, oc] = inp[n, ic] w[oc, ic]^T */
    sdp_cpu_gemm(prov, false, true, n, oc, ic, 1.0f, inp, ic, w, ic, 0.0f, out, oc);
    if (bias) add_bias(out, bias, n, oc);
}

static void linear_bwd(const sdp_backend *be, float *dinp, float *dw, float *dbias,
                       const float *dout, const float *inp, const float *w, int n, int ic, int oc) {
    sdp_gemm_provider prov = cpu_gemm_provider(be);
    /* dinp[n, ic] += dout[n, oc] w[oc, ic] */
    if (dinp) sdp_cpu_gemm(prov, false, false, n, ic, oc, 1.0f, dout, oc, w, ic, 1.0f, dinp, ic);
    /* dw[oc, ic] += dout[n, oc]^T inp[n, ic] */
    if (dw) sdp_cpu_gemm(prov, true, false, oc, ic, n, 1.0f, dout, oc, inp, ic, 1.0f, dw, ic);
    if (dbias) accumulate_column_sums(dbias, dout, n, oc);
}

/* Summed in double, rows in order: the sum the transformer has always used for these slices. */
static void bias_slice_bwd(const sdp_backend *be, float *dbias, const float *dout, int n, int ld,
                           int col0, int len) {
    (void)be;
#pragma omp parallel for schedule(static)
    for (long j = 0; j < len; j++) {
        double sum = 0;
        for (int r = 0; r < n; r++) sum += dout[(size_t)r * ld + col0 + j];
        dbias[j] += (float)sum;
    }
}

void cpu_ops_linear(sdp_backend *t) {
    t->bias_slice_bwd = bias_slice_bwd;
    t->linear_fwd = linear_fwd;
    t->linear_bwd = linear_bwd;
}
