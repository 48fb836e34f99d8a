/* Where a GPU training step's time goes, without a profiler: device time per backend entry.
 *
 * op_times_install replaces the backend table's entries that the transformer step calls with
 * wrappers that record a CUDA event on the backend's stream before and after the entry, and run
 * it. After a step and a wait for the device, op_times_collect reads each pair's elapsed time
 * and adds it to that entry's total. An entry's time is its kernels' and the gaps between them,
 * as the stream ran them; what lies between entries (the trainer's own kernels and copies, and
 * the device idle while the host launches) is the step less the sum.
 *
 * For bench_cuda_train --breakdown 1, which times other steps than the ones it reports, since the
 * events cost a little. No entry calls another through the table (the CUDA backend calls its
 * GEMM directly), so no time is counted twice. */
#ifndef SDP_BENCH_CUDA_OP_TIMES_H
#define SDP_BENCH_CUDA_OP_TIMES_H

#include "sdp/backend.h"
#include "sdp/check.h"
#include "sdp/cuda_check.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The entries timed: every one a GPT step calls. */
#define OP_TIMES_LIST(X)                                                                           \
    X(gemm)                                                                                        \
    X(linear_fwd)                                                                                  \
    X(linear_bwd)                                                                                  \
    X(embed_fwd)                                                                                   \
    X(embed_bwd)                                                                                   \
    X(layernorm_fwd)                                                                               \
    X(layernorm_bwd)                                                                               \
    X(gelu_fwd)                                                                                    \
    X(gelu_bwd)                                                                                    \
    X(residual_fwd)                                                                                \
    X(residual_bwd)                                                                                \
    X(attention_fwd)                                                                               \
    X(attention_bwd)                                                                               \
    X(softmax_xent_fwd)                                                                            \
    X(softmax_xent_bwd)                                                                            \
    X(adamw_update)                                                                                \
    X(sumsq)                                                                                       \
    X(scale)                                                                                       \
    X(zero)                                                                                        \
    X(copy_rows)                                                                                   \
    X(add_rows)

#define OP_TIMES_ENUM(name) OP_##name,
enum { OP_TIMES_LIST(OP_TIMES_ENUM) OP_TIMES_N };
#define OP_TIMES_NAME(name) #name,
static const char *const OP_TIMES_NAMES[OP_TIMES_N] = {OP_TIMES_LIST(OP_TIMES_NAME)};

enum { OP_TIMES_MAX_CALLS = 8192 }; /* per step; a GPT-2 step makes about 700 */

typedef struct {
    sdp_backend original; /* the table before op_times_install */
    cudaStream_t stream;
    cudaEvent_t *events; /* 2 per call: before and after */
    int op_of[OP_TIMES_MAX_CALLS];
    int ncalls;
    long dropped; /* calls beyond OP_TIMES_MAX_CALLS in a step: not timed */
    double ms[OP_TIMES_N];
    long calls[OP_TIMES_N];
    int steps;
} op_times;

/* The wrappers have the backend table's signatures, which carry no pointer of ours: the one
 * op_times of the process is reached through this. */
static op_times *op_times_active;

static void op_times_begin(int op) {
    op_times *t = op_times_active;
    if (t->ncalls >= OP_TIMES_MAX_CALLS) {
        t->dropped++;
        return;
    }
    t->op_of[t->ncalls] = op;
    CUDA_CHECK(cudaEventRecord(t->events[2 * t->ncalls], t->stream));
}

static void op_times_end(void) {
    op_times *t = op_times_active;
    if (t->ncalls >= OP_TIMES_MAX_CALLS) return;
    CUDA_CHECK(cudaEventRecord(t->events[2 * t->ncalls + 1], t->stream));
    t->ncalls++;
}

#define OP_TIMED_VOID(name, params, args)                                                          \
    static void timed_##name params {                                                              \
        op_times_begin(OP_##name);                                                                 \
        op_times_active->original.name args;                                                       \
        op_times_end();                                                                            \
    }
#define OP_TIMED_RET(type, name, params, args)                                                     \
    static type timed_##name params {                                                              \
        op_times_begin(OP_##name);                                                                 \
        const type r = op_times_active->original.name args;                                        \
        op_times_end();                                                                            \
        return r;                                                                                  \
    }

OP_TIMED_VOID(gemm,
              (const sdp_backend *be, bool ta, bool tb, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc),
              (be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
OP_TIMED_VOID(linear_fwd,
              (const sdp_backend *be, float *out, const float *inp, const float *w,
               const float *bias, int n, int ic, int oc),
              (be, out, inp, w, bias, n, ic, oc))
OP_TIMED_VOID(linear_bwd,
              (const sdp_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
               const float *inp, const float *w, int n, int ic, int oc),
              (be, dinp, dw, dbias, dout, inp, w, n, ic, oc))
OP_TIMED_VOID(embed_fwd,
              (const sdp_backend *be, float *out, const int *tokens, const float *wte,
               const float *wpe, int B, int T, int C),
              (be, out, tokens, wte, wpe, B, T, C))
OP_TIMED_VOID(embed_bwd,
              (const sdp_backend *be, float *dwte, float *dwpe, const float *dout,
               const int *tokens, int B, int T, int C),
              (be, dwte, dwpe, dout, tokens, B, T, C))
OP_TIMED_VOID(layernorm_fwd,
              (const sdp_backend *be, float *out, float *mean, float *rstd, const float *inp,
               const float *w, const float *b, int n, int C),
              (be, out, mean, rstd, inp, w, b, n, C))
OP_TIMED_VOID(layernorm_bwd,
              (const sdp_backend *be, float *dinp, float *dw, float *db, const float *dout,
               const float *inp, const float *w, const float *mean, const float *rstd, int n,
               int C),
              (be, dinp, dw, db, dout, inp, w, mean, rstd, n, C))
OP_TIMED_VOID(gelu_fwd, (const sdp_backend *be, float *out, const float *inp, size_t n),
              (be, out, inp, n))
OP_TIMED_VOID(gelu_bwd,
              (const sdp_backend *be, float *dinp, const float *dout, const float *inp, size_t n),
              (be, dinp, dout, inp, n))
OP_TIMED_VOID(residual_fwd,
              (const sdp_backend *be, float *out, const float *a, const float *b, float s,
               size_t n),
              (be, out, a, b, s, n))
OP_TIMED_VOID(residual_bwd,
              (const sdp_backend *be, float *da, float *db, const float *dout, float s, size_t n),
              (be, da, db, dout, s, n))
OP_TIMED_VOID(attention_fwd,
              (const sdp_backend *be, float *out, float *lse, const float *qkv, int B, int T, int H,
               int hs, bool causal, sdp_dropout drop, float *scratch),
              (be, out, lse, qkv, B, T, H, hs, causal, drop, scratch))
OP_TIMED_VOID(attention_bwd,
              (const sdp_backend *be, float *dqkv, const float *dout, const float *qkv,
               const float *out, const float *lse, int B, int T, int H, int hs, bool causal,
               sdp_dropout drop, float *scratch),
              (be, dqkv, dout, qkv, out, lse, B, T, H, hs, causal, drop, scratch))
OP_TIMED_RET(double, softmax_xent_fwd,
             (const sdp_backend *be, float *losses, float *probs, const float *logits,
              const int *targets, int n, int V, int Vp),
             (be, losses, probs, logits, targets, n, V, Vp))
OP_TIMED_VOID(softmax_xent_bwd,
              (const sdp_backend *be, float *dlogits, const float *probs, const int *targets,
               float dloss, int n, int V, int Vp),
              (be, dlogits, probs, targets, dloss, n, V, Vp))
OP_TIMED_VOID(adamw_update,
              (const sdp_backend *be, const sdp_adamw_scalars *k, float *m, float *v, float *params,
               const float *grads, const sdp_opt_segment *segs, int nseg),
              (be, k, m, v, params, grads, segs, nseg))
OP_TIMED_RET(double, sumsq, (const sdp_backend *be, const float *x, size_t n), (be, x, n))
OP_TIMED_VOID(scale, (const sdp_backend *be, float *x, size_t n, float s), (be, x, n, s))
OP_TIMED_VOID(zero, (const sdp_backend *be, void *p, size_t bytes), (be, p, bytes))
OP_TIMED_VOID(copy_rows,
              (const sdp_backend *be, float *dst, size_t ld_dst, const float *src, size_t ld_src,
               size_t rows, size_t cols),
              (be, dst, ld_dst, src, ld_src, rows, cols))
OP_TIMED_VOID(add_rows,
              (const sdp_backend *be, float *dst, size_t ld_dst, const float *src, size_t ld_src,
               size_t rows, size_t cols),
              (be, dst, ld_dst, src, ld_src, rows, cols))

/* From here on, be's timed entries record their device time into t (be: the CUDA backend). */
static void op_times_install(op_times *t, sdp_backend *be) {
    memset(t, 0, sizeof *t);
    t->original = *be;
    CUBLAS_CHECK(cublasGetStream((cublasHandle_t)sdp_backend_cuda_cublas(be), &t->stream));
    t->events = malloc(sizeof(cudaEvent_t) * 2 * OP_TIMES_MAX_CALLS);
    SDP_CHECK(t->events, "out of host memory");
    for (int i = 0; i < 2 * OP_TIMES_MAX_CALLS; i++) CUDA_CHECK(cudaEventCreate(&t->events[i]));
    op_times_active = t;
#define OP_TIMES_SET(name) be->name = timed_##name;
    OP_TIMES_LIST(OP_TIMES_SET)
#undef OP_TIMES_SET
}

/* After a step and a wait for the device: its calls' times into the totals. */
static void op_times_collect(op_times *t) {
    for (int i = 0; i < t->ncalls; i++) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, t->events[2 * i], t->events[2 * i + 1]));
        t->ms[t->op_of[i]] += ms;
        t->calls[t->op_of[i]]++;
    }
    t->ncalls = 0;
    t->steps++;
}

/* Per step: each entry's calls and device time, largest first, against a step of step_ms. */
static void op_times_print(const op_times *t, double step_ms) {
    int order[OP_TIMES_N];
    double sum = 0;
    for (int i = 0; i < OP_TIMES_N; i++) order[i] = i, sum += t->ms[i] / t->steps;
    for (int i = 1; i < OP_TIMES_N; i++) /* insertion sort by time, largest first */
        for (int j = i; j > 0 && t->ms[order[j]] > t->ms[order[j - 1]]; j--) {
            const int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
    printf("device time per backend entry, over %d steps (CUDA events around each call):\n",
           t->steps);
    printf("  %-18s %8s %10s %7s\n", "entry", "calls", "ms/step", "share");
    for (int i = 0; i < OP_TIMES_N && t->calls[order[i]] > 0; i++) {
        const int k = order[i];
        printf("  %-18s %8ld %10.3f %6.1f%%\n", OP_TIMES_NAMES[k], t->calls[k] / t->steps,
               t->ms[k] / t->steps, 100 * t->ms[k] / t->steps / step_ms);
    }
    printf("  %-18s %8s %10.3f %6.1f%%  (the step's median %.1f ms less the entries)\n",
           "between entries", "", step_ms - sum, 100 * (step_ms - sum) / step_ms, step_ms);
    if (t->dropped)
        printf("  (%ld calls beyond %d a step were not timed)\n", t->dropped, OP_TIMES_MAX_CALLS);
}

static void op_times_uninstall(op_times *t, sdp_backend *be) {
#define OP_TIMES_RESTORE(name) be->name = t->original.name;
    OP_TIMES_LIST(OP_TIMES_RESTORE)
#undef OP_TIMES_RESTORE
    for (int i = 0; i < 2 * OP_TIMES_MAX_CALLS; i++) CUDA_CHECK(cudaEventDestroy(t->events[i]));
    free(t->events);
    op_times_active = NULL;
}

#endif
