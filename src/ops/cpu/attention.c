/* Causal multi-head self-attention, fp32, forward and backward.
 *
 * One OpenMP task per (batch, head). Inside it, query rows go in blocks of BLOCK_ROWS so that
 * only a BLOCK_ROWS x T tile of scores exists at a time, in the thread's slice of the caller's
 * scratch: the forward keeps just out and the log-sum-exp of each score row, and the backward
 * recomputes the probabilities from them. Every product runs through one register-blocked
 * micro-kernel (mm_rows) that the compiler vectorises; the masked upper triangle is skipped a
 * micro-tile at a time and zeroed inside the tiles that straddle the diagonal.
 *
 * Dropout on the probabilities (sdp_dropout) draws each decision from its (batch, head, query,
 * key) index, so the backward regenerates the forward's mask instead of reading a stored one.
 */
#include "ops/cpu/fast_exp.h"
#include "ops/cpu/cpu_ops.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
    BLOCK_ROWS = 64, /* query rows whose scores are held at once */
    MR = 8,          /* rows of a micro-tile */
    NR = 32,         /* columns of a micro-tile: a few vector registers per row */
    FLOAT_ALIGN = 16 /* thread slices start on 64-byte boundaries */
};

static int min_int(int a, int b) {
    return a < b ? a : b;
}

static int max_int(int a, int b) {
    return a > b ? a : b;
}

/* ---- micro-kernel -------------------------------------------------------------------------- */

/* A is read as A[i*ars + k*aks], so one kernel serves both A and A^T; B[k, j] is B[k*ldb + j]. */
typedef struct {
    const float *a;
    ptrdiff_t ars, aks;
    const float *b;
    ptrdiff_t ldb;
    float *c;
    ptrdiff_t ldc;
} mm_args;

/* A full MR x NR tile: the accumulators stay in registers for the whole k loop. */
static void tile_full(const mm_args *p, int k0, int k1, int j0, bool add) {
    const float *restrict a = p->a;
    float acc[MR][NR] = {{0}};
    for (int k = k0; k < k1; k++) {
        const float *restrict b = p->b + k * p->ldb + j0;
        for (int i = 0; i < MR; i++) {
            float aik = a[i * p->ars + k * p->aks];
            for (int j = 0; j < NR; j++) acc[i][j] = fmaf(aik, b[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR; i++) {
        float *restrict c = p->c + i * p->ldc + j0;
        for (int j = 0; j < NR; j++) c[j] = add ? c[j] + acc[i][j] : acc[i][j];
    }
}

/* Ragged edges (fewer than MR rows or NR columns) accumulate straight into C. */
static void tile_edge(const mm_args *p, int m, int n, int k0, int k1, int j0, bool add) {
    for (int i = 0; i < m; i++) {
        float *restrict c = p->c + i * p->ldc + j0;
        if (!add) memset(c, 0, (size_t)n * sizeof *c);
        for (int k = k0; k < k1; k++) {
            float aik = p->a[i * p->ars + k * p->aks];
            const float *restrict b = p->b + k * p->ldb + j0;
            for (int j = 0; j < n; j++) c[j] = fmaf(aik, b[j], c[j]);
        }
    }
}

/* C[i, j] (+)= sum over k0 <= k < k1 of A(i, k) B[k, j], for i < m <= MR and j < n. */
static void mm_rows(const mm_args *p, int m, int n, int k0, int k1, bool add) {
    int j0 = 0;
    if (m == MR)
        for (; j0 + NR <= n; j0 += NR) tile_full(p, k0, k1, j0, add);
    if (j0 < n) tile_edge(p, m, n - j0, k0, k1, j0, add);
}

/* ---- softmax pieces ------------------------------------------------------------------------ */

/* Rows of the score tile hold raw q.k; the softmax works on scale * q.k. */
static float row_max(const float *s, int n) {
    float part[16];
    for (int j = 0; j < 16; j++) part[j] = -INFINITY;
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) part[j] = s[i + j] > part[j] ? s[i + j] : part[j];
    float m = -INFINITY;
    for (int j = 0; j < 16; j++) m = part[j] > m ? part[j] : m;
    for (; i < n; i++) m = s[i] > m ? s[i] : m;
    return m;
}

/* p[i] = exp(scale * p[i] - shift) for i < n; returns their sum (in partial sums, so that the
 * loop vectorises without reassociation flags). */
static float exp_shifted(float *p, int n, float scale, float shift) {
    float part[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) {
            float e = exp_clamped(scale * p[i + j] - shift);
            p[i + j] = e;
            part[j] += e;
        }
    float sum = 0;
    for (int j = 0; j < 16; j++) sum += part[j];
    for (; i < n; i++) {
        p[i] = exp_clamped(scale * p[i] - shift);
        sum += p[i];
    }
    return sum;
}

/* ---- per-thread scratch -------------------------------------------------------------------- */

/* Rows over keys are padded to ldt, a whole number of micro-tiles, so that score tiles can always
 * run full width: the columns computed past the diagonal are never read. */
typedef struct {
    int ldt;   /* row stride of all four: T rounded up to a multiple of NR */
    float *kt; /* [hs, ldt]: k transposed, so that scores are products of contiguous rows */
    float *vt; /* [hs, ldt]: v transposed (backward: dP = dO v^T) */
    float *p;  /* [BLOCK_ROWS, ldt]: scores, then probabilities */
    float *dp; /* [BLOCK_ROWS, ldt]: dP, then dS (backward) */
} head_scratch;

static int round_up(int n, int multiple) {
    return (n + multiple - 1) / multiple * multiple;
}

static size_t slice_floats(int T, int hs) {
    size_t ldt = (size_t)round_up(T, NR);
    size_t n = 2 * (size_t)hs * ldt + 2 * (size_t)BLOCK_ROWS * ldt;
    return (n + FLOAT_ALIGN - 1) / FLOAT_ALIGN * FLOAT_ALIGN;
}

/* One slice per thread, whatever the batch and heads. */
static size_t attention_scratch_bytes(const sdp_backend *be, int B, int T, int H, int hs) {
    (void)be, (void)B, (void)H;
    return (size_t)omp_get_max_threads() * slice_floats(T, hs) * sizeof(float);
}

/* The slice of the calling thread. The scratch was sized with omp_get_max_threads(), so the
 * thread count must not grow between sizing it and calling the kernels. */
static head_scratch my_scratch(float *scratch, int T, int hs) {
    float *s = scratch + (size_t)omp_get_thread_num() * slice_floats(T, hs);
    head_scratch h;
    h.ldt = round_up(T, NR);
    h.kt = s;
    h.vt = h.kt + (size_t)hs * h.ldt;
    h.p = h.vt + (size_t)hs * h.ldt;
    h.dp = h.p + (size_t)BLOCK_ROWS * h.ldt;
    return h;
}

/* dst[d, t] = src[t * ld + d] for t < T, and zero in the padding up to ldt. */
static void gather_transposed(float *dst, int ldt, const float *src, ptrdiff_t ld, int T, int hs) {
    for (int t = 0; t < T; t++)
        for (int d = 0; d < hs; d++) dst[(size_t)d * ldt + t] = src[t * ld + d];
    for (int d = 0; d < hs; d++)
        for (int t = T; t < ldt; t++) dst[(size_t)d * ldt + t] = 0;
}

/* Dropout on one (batch, head)'s probabilities: probability (t, s) is element first + t*T + s of
 * the mask drawn from key. */
typedef struct {
    bool on;
    uint32_t threshold;
    float keep_scale; /* 1/(1-p) */
    uint64_t key, first;
} head_dropout;

/* One (batch, head): pointers at head h of batch b, with the row strides of their tensors. */
typedef struct {
    const float *q, *k, *v; /* row stride ld_qkv */
    ptrdiff_t ld_qkv;
    int T, hs;
    float scale;
    bool causal;
    head_dropout drop;
} head_view;

/* bh = b*H + h, the (batch, head)'s index. */
static head_view view_head(const float *qkv_b, int T, int H, int hs, int h, bool causal,
                           sdp_dropout drop, int bh) {
    ptrdiff_t D = (ptrdiff_t)H * hs;
    head_view v = {qkv_b + h * hs,
                   qkv_b + D + h * hs,
                   qkv_b + 2 * D + h * hs,
                   3 * D,
                   T,
                   hs,
                   1.0f / sqrtf((float)hs),
                   causal,
                   {false, 0, 1.0f, 0, 0}};
    if (drop.p > 0.0f)
        v.drop = (head_dropout){true, sdp_dropout_threshold(drop.p), sdp_dropout_scale(drop.p),
                                drop.key, (uint64_t)bh * T * T};
    return v;
}

/* Whether query t's probability over key s survives the dropout. */
static bool kept(const head_view *hv, int t, int s) {
    const head_dropout *d = &hv->drop;
    return sdp_dropout_keeps(d->key, d->first + (uint64_t)t * hv->T + s, d->threshold);
}

/* Keys that query rows [0, t_end) may see together: the causal mask stops at their last row. */
static int keys_seen(const head_view *hv, int t_end) {
    return hv->causal ? t_end : hv->T;
}

/* dst rows r < nr (stride ldt) = x rows r (stride ld_x) times yt [hs, ldt], over the keys that
 * block rows [t0, t0 + nr) see: under the causal mask each group of MR rows goes up to its last
 * row, rounded up to whole micro-tiles (yt is zero past T). Used for the scores q k^T and for
 * dP = dO v^T. */
static void block_times_keys(float *dst, int ldt, const float *x, ptrdiff_t ld_x, const float *yt,
                             const head_view *hv, int t0, int nr) {
    for (int r0 = 0; r0 < nr; r0 += MR) {
        int m = min_int(MR, nr - r0);
        mm_args a = {x + r0 * ld_x, ld_x, 1, yt, ldt, dst + r0 * ldt, ldt};
        mm_rows(&a, m, round_up(keys_seen(hv, t0 + r0 + m), NR), 0, hv->hs, false);
    }
}

/* Causal: zeroes row r's entries past the diagonal up to the end of its MR group, so that
 * products over keys can run to the group's end. Without the mask every key is seen. */
static void mask_row(const head_view *hv, float *row, int t, int t0, int r, int nr) {
    if (!hv->causal) return;
    int group_end = t0 + min_int((r / MR + 1) * MR, nr);
    for (int s = t + 1; s < group_end; s++) row[s] = 0;
}

/* ---- forward ------------------------------------------------------------------------------- */

static void attention_fwd_head(float *out, ptrdiff_t ld_out, float *lse, const head_view *hv,
                               head_scratch *sc) {
    int T = hv->T, ldt = sc->ldt;
    gather_transposed(sc->kt, ldt, hv->k, hv->ld_qkv, T, hv->hs);
    for (int t0 = 0; t0 < T; t0 += BLOCK_ROWS) {
        int nr = min_int(BLOCK_ROWS, T - t0);
        block_times_keys(sc->p, ldt, hv->q + t0 * hv->ld_qkv, hv->ld_qkv, sc->kt, hv, t0, nr);
        for (int r = 0; r < nr; r++) {
            int t = t0 + r, seen = keys_seen(hv, t + 1);
            float *row = sc->p + r * ldt;
            float shift = hv->scale * row_max(row, seen);
            float sum = exp_shifted(row, seen, hv->scale, shift);
            float inv = 1.0f / sum;
            for (int s = 0; s < seen; s++) row[s] *= inv;
            if (hv->drop.on)
                for (int s = 0; s < seen; s++)
                    row[s] = kept(hv, t, s) ? row[s] * hv->drop.keep_scale : 0.0f;
            mask_row(hv, row, t, t0, r, nr);
            lse[t] = shift + logf(sum);
        }
        for (int r0 = 0; r0 < nr; r0 += MR) {
            int m = min_int(MR, nr - r0);
            mm_args a = {sc->p + r0 * ldt,         ldt,   1, hv->v, hv->ld_qkv,
                         out + (t0 + r0) * ld_out, ld_out};
            mm_rows(&a, m, hv->hs, 0, keys_seen(hv, t0 + r0 + m), false);
        }
    }
}

static void attention_fwd(const sdp_backend *be, float *out, float *lse, const float *qkv, int B,
                          int T, int H, int hs, bool causal, sdp_dropout drop, float *scratch) {
    (void)be;
    ptrdiff_t D = (ptrdiff_t)H * hs;
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        head_scratch s = my_scratch(scratch, T, hs);
        head_view hv = view_head(qkv + (size_t)b * T * 3 * D, T, H, hs, h, causal, drop, bh);
        attention_fwd_head(out + (size_t)b * T * D + h * hs, D, lse + (size_t)bh * T, &hv, &s);
    }
}

/* ---- backward ------------------------------------------------------------------------------ */

/* Gradient pointers at head h of batch b, rows of stride ld_qkv like the head_view. */
typedef struct {
    float *dq, *dk, *dv;
} head_grads;

/* g[s, :] += sum over block rows r of w[r, s] x[r, :], for the keys s the block sees. Under the
 * causal mask w (row stride ldt) is zero past the diagonal, so for a group of keys only rows from
 * its first key on count. */
static void accumulate_keys(float *g, ptrdiff_t ld_g, const float *w, int ldt, const float *x,
                            ptrdiff_t ld_x, const head_view *hv, int t0, int nr) {
    const int seen = keys_seen(hv, t0 + nr);
    for (int s0 = 0; s0 < seen; s0 += MR) {
        int m = min_int(MR, seen - s0);
        mm_args a = {w + s0, 1, ldt, x, ld_x, g + s0 * ld_g, ld_g};
        mm_rows(&a, m, hv->hs, hv->causal ? max_int(0, s0 - t0) : 0, nr, true);
    }
}

static void attention_bwd_block(const head_grads *g, const float *dout, const float *out,
                                ptrdiff_t ld_out, const float *lse, const head_view *hv,
                                head_scratch *sc, int t0, int nr) {
    int hs = hv->hs, ldt = sc->ldt;
    ptrdiff_t ld = hv->ld_qkv;
    const float *dout0 = dout + t0 * ld_out;

    /* Recompute the probabilities of this block from the saved log-sum-exp. */
    block_times_keys(sc->p, ldt, hv->q + t0 * ld, ld, sc->kt, hv, t0, nr);
    for (int r = 0; r < nr; r++) {
        float *row = sc->p + r * ldt;
        exp_shifted(row, keys_seen(hv, t0 + r + 1), hv->scale, lse[t0 + r]);
        mask_row(hv, row, t0 + r, t0, r, nr);
    }
    /* Without dropout dv takes P now; with it, the dropped P' below. */
    if (!hv->drop.on) accumulate_keys(g->dv, ld, sc->p, ldt, dout0, ld_out, hv, t0, nr);

    /* dP = dO v^T, then dS = P * (dP - rowsum(dO * O)), times scale for the raw q.k. Under dropout
     * (P' = M P / (1-p), O = P' v) dO v^T is the gradient of P', so dP = M dO v^T / (1-p), and
     * rowsum(P * dP) is still rowsum(dO * O). */
    block_times_keys(sc->dp, ldt, dout0, ld_out, sc->vt, hv, t0, nr);
    for (int r = 0; r < nr; r++) {
        const float *o = out + (t0 + r) * ld_out, *d_o = dout0 + r * ld_out;
        float dodo = 0;
        for (int d = 0; d < hs; d++) dodo += o[d] * d_o[d];
        float *p = sc->p + r * ldt;
        float *ds = sc->dp + r * ldt;
        const int seen = keys_seen(hv, t0 + r + 1);
        if (!hv->drop.on) {
            for (int s = 0; s < seen; s++) ds[s] = hv->scale * p[s] * (ds[s] - dodo);
        } else {
            const float ks = hv->drop.keep_scale;
            for (int s = 0; s < seen; s++) {
                const bool keep = kept(hv, t0 + r, s);
                ds[s] = hv->scale * p[s] * ((keep ? ks * ds[s] : 0.0f) - dodo);
                p[s] = keep ? ks * p[s] : 0.0f; /* P', for dv */
            }
        }
        mask_row(hv, ds, t0 + r, t0, r, nr);
    }
    if (hv->drop.on) accumulate_keys(g->dv, ld, sc->p, ldt, dout0, ld_out, hv, t0, nr);
    for (int r0 = 0; r0 < nr; r0 += MR) {
        int m = min_int(MR, nr - r0);
        mm_args a = {sc->dp + r0 * ldt, ldt, 1, hv->k, ld, g->dq + (t0 + r0) * ld, ld};
        mm_rows(&a, m, hs, 0, keys_seen(hv, t0 + r0 + m), true);
    }
    accumulate_keys(g->dk, ld, sc->dp, ldt, hv->q + t0 * ld, ld, hv, t0, nr);
}

static void attention_bwd_head(const head_grads *g, const float *dout, const float *out,
                               ptrdiff_t ld_out, const float *lse, const head_view *hv,
                               head_scratch *sc) {
    gather_transposed(sc->kt, sc->ldt, hv->k, hv->ld_qkv, hv->T, hv->hs);
    gather_transposed(sc->vt, sc->ldt, hv->v, hv->ld_qkv, hv->T, hv->hs);
    for (int t0 = 0; t0 < hv->T; t0 += BLOCK_ROWS)
        attention_bwd_block(g, dout, out, ld_out, lse, hv, sc, t0, min_int(BLOCK_ROWS, hv->T - t0));
}

static void attention_bwd(const sdp_backend *be, float *dqkv, const float *dout, const float *qkv,
                          const float *out, const float *lse, int B, int T, int H, int hs,
                          bool causal, sdp_dropout drop, float *scratch) {
    (void)be;
    if (!dqkv) return;
    ptrdiff_t D = (ptrdiff_t)H * hs;
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        head_scratch s = my_scratch(scratch, T, hs);
        size_t row0 = (size_t)b * T;
        head_view hv = view_head(qkv + row0 * 3 * D, T, H, hs, h, causal, drop, bh);
        float *dqkv_bh = dqkv + row0 * 3 * D + h * hs;
        head_grads g = {dqkv_bh, dqkv_bh + D, dqkv_bh + 2 * D};
        attention_bwd_head(&g, dout + row0 * D + h * hs, out + row0 * D + h * hs, D,
                           lse + (size_t)bh * T, &hv, &s);
    }
}

void cpu_ops_attention(sdp_backend *t) {
    t->attention_scratch_bytes = attention_scratch_bytes;
    t->attention_fwd = attention_fwd;
    t->attention_bwd = attention_bwd;
}
