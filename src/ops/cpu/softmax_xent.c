/* Fused softmax and cross-entropy over the real classes of a padded vocabulary. Each row is
 * independent, so rows run in parallel; the total loss is then summed serially in row order so
 * that it is bitwise reproducible (an OpenMP reduction combines partial sums in arrival order).
 * Every pass reads an element before writing the same element, which is what lets probs alias
 * logits and dlogits alias probs. */
#include "ops/cpu/fast_exp.h"
#include "sdp/check.h"
#include "ops/cpu/cpu_ops.h"

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

static double softmax_xent_fwd(const sdp_backend *be, float *losses, float *probs,
                               const float *logits, const int *targets, int n, int V, int Vp) {
    (void)be;
    check_targets(targets, n, V);
    size_t work = (size_t)n * (size_t)Vp;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++)
        losses[i] = softmax_row(probs + (size_t)i * Vp, logits + (size_t)i * Vp, targets[i], V, Vp);
    double total = 0;
    for (int i = 0; i < n; i++) total += losses[i];
    return total;
}

static void softmax_xent_bwd(const sdp_backend *be, float *dlogits, const float *probs,
                             const int *targets, float dloss, int n, int V, int Vp) {
    (void)be;
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

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int count_correct(const sdp_backend *be, const float *logits, const int *labels, int n,
                         int K, int ld) {
    (void)be;
    int hits = 0;
    for (int r = 0; r < n; r++)
        hits += labels[r] >= 0 && argmax(logits + (size_t)r * ld, K) == labels[r];
    return hits;
}

void cpu_ops_softmax_xent(sdp_backend *t) {
    t->count_correct = count_correct;
    t->softmax_xent_fwd = softmax_xent_fwd;
    t->softmax_xent_bwd = softmax_xent_bwd;
}
