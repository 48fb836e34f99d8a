/* Fused softmax and cross-entropy over the real classes of a padded vocabulary. Each row is
 * independent, so rows run in parallel; the total loss is then summed serially in row order so
 * that it is bitwise reproducible (an OpenMP reduction combines partial sums in arrival order).
 * Every pass reads an element before writing the same element, which is what lets probs alias
 * logits and dlogits alias probs. */
#include "ops/cpu/fast_exp.h"
#include "sdp/check.h"
#include "sdp/ops.h"

#include <math.h>
#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

static void check_targets(const int *targets, int n, int V) {
    for (int i = 0; i < n; i++)
        SDP_CHECK(targets[i] < V,
                  "cross-entropy: target %d at row %d is not below the vocabulary size %d: "
                  "check the dataset and the model's vocab_size",
                  targets[i], i, V);
}

/* The maximum is exact in any order, so the compiler may split it across vector lanes. */
static float row_max(const float *x, int n) {
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* probs[v] = e^(logits[v] - shift) for v < n; returns their sum, accumulated in double. The
 * loop is declared simd: each element is read before it is written, so it is safe when probs is
 * logits, and the reduction splits into vector lanes combined in an order fixed at compile time,
 * so the sum is the same on every run and whichever thread runs the row. */
static double exp_shifted_sum(float *probs, const float *logits, int n, float shift) {
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; i++) {
        float e = exp_clamped(logits[i] - shift);
        probs[i] = e;
        sum += e;
    }
    return sum;
}

/* probs = softmax(logits[0:V]), zeros in the padding; returns -log p[target] (0 if ignored). */
static float softmax_row(float *probs, const float *logits, int target, int V, int Vp) {
    float mx = row_max(logits, V);
    float target_shifted = target >= 0 ? logits[target] - mx : 0.0f; /* read before overwrite */
    double sum = exp_shifted_sum(probs, logits, V, mx);
    float inv = (float)(1.0 / sum);
    for (int v = 0; v < V; v++) probs[v] *= inv;
    for (int v = V; v < Vp; v++) probs[v] = 0.0f;
    return target >= 0 ? (float)(log(sum) - target_shifted) : 0.0f;
}

double sdp_softmax_xent_fwd(float *losses, float *probs, const float *logits, const int *targets,
                            int n, int V, int Vp) {
    SDP_CHECK(V >= 1 && V <= Vp,
              "cross-entropy: vocabulary size %d must be in [1, padded size %d]: fix the model "
              "config",
              V, Vp);
    check_targets(targets, n, V);
    size_t work = (size_t)n * (size_t)Vp;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++)
        losses[i] = softmax_row(probs + (size_t)i * Vp, logits + (size_t)i * Vp, targets[i], V, Vp);
    double total = 0;
    for (int i = 0; i < n; i++) total += losses[i];
    return total;
}

void sdp_softmax_xent_bwd(float *dlogits, const float *probs, const int *targets, float dloss,
                          int n, int V, int Vp) {
    SDP_CHECK(V >= 1 && V <= Vp,
              "cross-entropy: vocabulary size %d must be in [1, padded size %d]: fix the model "
              "config",
              V, Vp);
    check_targets(targets, n, V);
    size_t work = (size_t)n * (size_t)Vp;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        float *d = dlogits + (size_t)i * Vp;
        const float *p = probs + (size_t)i * Vp;
        int t = targets[i];
        if (t < 0) {
            for (int v = 0; v < Vp; v++) d[v] = 0.0f;
            continue;
        }
        float p_target = p[t]; /* read before the row is overwritten, as d may alias p */
        for (int v = 0; v < V; v++) d[v] = dloss * p[v];
        d[t] = dloss * (p_target - 1.0f);
        for (int v = V; v < Vp; v++) d[v] = 0.0f;
    }
}
