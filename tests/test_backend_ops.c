/* Every op of the backend table (include/sdp/backend.h) on a backend under test against the same
 * op on a plain CPU backend, forward and backward, over a few shapes each (odd sizes included).
 *
 *   test_backend_ops emulated   the emulated device: it runs the CPU kernels, so every result
 *                               must be bitwise equal; what this checks is the device plumbing
 *                               (upload, download, offsets, copies, the table itself)
 *   test_backend_ops cuda       the CUDA backend in fp32, to the tolerances of docs/cuda.md:
 *                               max |dut - cpu| / (|cpu| + rms(cpu)) within 1e-5 for elementwise
 *                               results, 1e-4 for reductions; exits 77 without a GPU
 *   test_backend_ops cuda-bf16  the same in bf16: the ops whose matrix products then run on tensor
 *                               cores (gemm, linear, attention) by the normwise error
 *                               |dut - cpu|_2 / |cpu|_2 within 2e-2 (bf16 keeps 8 significant
 *                               bits, unit roundoff 2e-3, and a result goes through two or three
 *                               products with rounded operands; a CPU emulation of these calls
 *                               gave 3e-3 to 6e-3; a wrong layout errs by O(1)); every other op
 *                               computes in fp32 and keeps the fp32 tolerances; attention runs
 *                               twice, by the fused kernels (the default) and by cuBLAS GEMMs;
 *                               then every matrix-product op again with the GEMMs on bf16
 *                               copies of their operands (sdp_backend_cuda_set_bf16_operands)
 *
 * Every op is called through its checked entry point (sdp_<op>(be, ...), sdp/ops.h), as the
 * models call it. Inputs are random, uploaded to the backend under test from the reference's
 * buffers (host memory), so both sides start from the same bits; outputs start from the same random
 * values too, so backward ops are checked to accumulate, and are downloaded and compared. A
 * backward op gets the reference forward's saved values (mean, rstd, lse, ...) as inputs, so each
 * op is checked alone.
 *
 * Coverage is checked, not assumed: every function-pointer slot of sdp_backend must be claimed
 * exactly once, by a case below, by the harness (which uses the memory entries on every case),
 * or by the list of communication entries (they need several ranks: tests/mpi_invariants.c
 * runs them on the emulated device). A slot added to the table without a case fails the test.
 * So does a backend with an empty slot; the CUDA table is checked for that even without a GPU
 * (sdp_backend_cuda_entries), before the cuda modes skip. */
#include "sdp/backend.h"
#include "sdp/check.h"
#include "sdp/optim.h"
#include "sdp/rng.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_BUFS = 32, MAX_FIELDS = 4 };
static const double ELEM = 1e-5; /* elementwise results (docs/cuda.md) */
static const double RED = 1e-4;  /* results of reductions: GEMMs, norms' gradients, attention */
static const double BF16 = 2e-2; /* normwise, for matrix products in bf16 (see above) */

/* One buffer on both backends: p[0] on the reference (host memory), p[1] on the one under test. */
typedef struct {
    float *p[2];
    size_t n;
} buf;
typedef struct {
    int *p[2];
    size_t n;
} ibuf;

typedef struct {
    const sdp_backend *be[2]; /* the reference, the backend under test */
    bool exact;
    sdp_rng rng;
    void *bufs[2][MAX_BUFS];
    int nbufs;
    /* the case being run */
    double tol, worst; /* worst: the largest error over the case's checks (exact: mismatches) */
    bool normwise;     /* |got - want|_2 / |want|_2 rather than the elementwise measure */
    int shapes;
    bool failed;
} harness;

/* Runs the statement once per side with `be` that side's backend and `s` its index. */
#define EACH(h, be, s)                                                                             \
    for (int s = 0; s < 2; s++)                                                                    \
        for (const sdp_backend *be = (h)->be[s]; be; be = NULL)

/* ---- buffers ------------------------------------------------------------------------------- */

/* One buffer of bytes[s] on each side s (none where 0), freed by free_all. */
static void alloc_pair(harness *h, const size_t bytes[2], void *p[2]) {
    SDP_CHECK(h->nbufs < MAX_BUFS, "test_backend_ops: a shape needs more than %d buffers",
              MAX_BUFS);
    EACH(h, be, s)
    p[s] = h->bufs[s][h->nbufs] = bytes[s] ? be->alloc(be, SDP_MEM_ACTS, bytes[s]) : NULL;
    h->nbufs++;
}

/* n floats on both sides, the same values: scale * normal (or `fill` when scale is 0). */
static buf make(harness *h, size_t n, float scale, float fill) {
    buf b = {.n = n};
    alloc_pair(h, (size_t[2]){n * sizeof(float), n * sizeof(float)}, (void **)b.p);
    for (size_t i = 0; i < n; i++) b.p[0][i] = scale != 0 ? scale * sdp_rng_normal(&h->rng) : fill;
    h->be[1]->upload(h->be[1], b.p[1], b.p[0], n * sizeof(float));
    return b;
}

static buf rnd(harness *h, size_t n) {
    return make(h, n, 1.0f, 0);
}

/* Uniform in [lo, hi): variances, rstd, positive statistics. */
static buf uni(harness *h, size_t n, float lo, float hi) {
    buf b = make(h, n, 0, 0);
    for (size_t i = 0; i < n; i++) b.p[0][i] = lo + (hi - lo) * sdp_rng_uniform(&h->rng);
    h->be[1]->upload(h->be[1], b.p[1], b.p[0], n * sizeof(float));
    return b;
}

/* Zeros, through the table's zero on both sides. */
static buf zeros(harness *h, size_t n) {
    buf b = make(h, n, 0, 1.0f);
    EACH(h, be, s) be->zero(be, b.p[s], n * sizeof(float));
    return b;
}

/* Integers in [lo, hi); with `ignore`, about one in five is -1 (an ignored target). */
static ibuf ints(harness *h, size_t n, int lo, int hi, bool ignore) {
    ibuf b = {.n = n};
    alloc_pair(h, (size_t[2]){n * sizeof(int), n * sizeof(int)}, (void **)b.p);
    for (size_t i = 0; i < n; i++)
        b.p[0][i] = ignore && sdp_rng_below(&h->rng, 5) == 0
                        ? -1
                        : lo + (int)sdp_rng_below(&h->rng, (uint64_t)(hi - lo));
    h->be[1]->upload(h->be[1], b.p[1], b.p[0], n * sizeof(int));
    return b;
}

/* Scratch of each side's own size (0: none). */
static buf scratch(harness *h, const size_t bytes[2]) {
    buf b = {.n = 0};
    alloc_pair(h, bytes, (void **)b.p);
    return b;
}

/* Frees every buffer of the shape, after checking that the backend counts them. */
static void free_all(harness *h) {
    bool any = false;
    for (int i = 0; i < h->nbufs; i++) any |= h->bufs[1][i] != NULL;
    if (any && h->be[1]->bytes_in_use(h->be[1]) == 0) {
        printf("    bytes_in_use is 0 with buffers allocated\n");
        h->failed = true;
    }
    for (int i = h->nbufs - 1; i >= 0; i--)
        EACH(h, be, s) if (h->bufs[s][i]) be->free(be, h->bufs[s][i]);
    h->nbufs = 0;
}

/* ---- comparison ---------------------------------------------------------------------------- */

static void note(harness *h, const char *what, double err, bool bad) {
    if (err > h->worst || isnan(err)) h->worst = isnan(err) ? INFINITY : err;
    if (bad) {
        printf("    %s differs: %s %.3g\n", what, h->exact ? "mismatches" : "max rel err", err);
        h->failed = true;
    }
}

/* Downloads the backend's side of b and compares it with the reference's. */
static void check(harness *h, const char *what, buf b) {
    const sdp_backend *dut = h->be[1];
    float *got = malloc(b.n * sizeof *got);
    SDP_CHECK(got, "out of memory");
    dut->download(dut, got, b.p[1], b.n * sizeof *got);
    const float *want = b.p[0];
    if (h->exact) {
        size_t bad = 0;
        for (size_t i = 0; i < b.n; i++) bad += memcmp(&got[i], &want[i], sizeof *got) != 0;
        note(h, what, (double)bad, bad != 0);
    } else if (h->normwise) {
        double diff = 0, norm = 0;
        for (size_t i = 0; i < b.n; i++) {
            double d = (double)got[i] - want[i];
            diff += d * d, norm += (double)want[i] * want[i];
        }
        double e = sqrt(diff / (norm + 1e-300));
        note(h, what, e, !(e <= h->tol));
    } else {
        double ss = 0, worst = 0;
        for (size_t i = 0; i < b.n; i++) ss += (double)want[i] * want[i];
        double floor = sqrt(ss / (double)(b.n ? b.n : 1)) + 1e-30;
        for (size_t i = 0; i < b.n; i++) {
            double e = fabs((double)got[i] - want[i]) / (fabs((double)want[i]) + floor);
            if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
        }
        note(h, what, worst, !(worst <= h->tol));
    }
    free(got);
}

static void check_value(harness *h, const char *what, const double v[2]) {
    if (h->exact) {
        note(h, what, v[0] != v[1], memcmp(&v[0], &v[1], sizeof v[0]) != 0);
    } else {
        double e = fabs(v[1] - v[0]) / (fabs(v[0]) + 1e-30);
        note(h, what, e, !(e <= h->tol));
    }
}

/* ---- the cases: dense algebra, memory, reductions, optimizers -------------------------------- */

static void case_gemm(harness *h) {
    static const int shapes[][3] = {{7, 5, 3}, {1, 9, 13}, {33, 17, 65}};
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2];
            /* strides with padding: a wrong leading dimension shows */
            int lda = (ta ? M : K) + 2, ldb = (tb ? K : N) + 1, ldc = N + 3;
            buf A = rnd(h, (size_t)(ta ? K : M) * lda), B = rnd(h, (size_t)(tb ? N : K) * ldb);
            buf C = rnd(h, (size_t)M * ldc);
            float beta = t == 3 ? 0.0f : 0.5f;
            EACH(h, be, s)
            sdp_gemm(be, ta, tb, M, N, K, 0.75f, A.p[s], lda, B.p[s], ldb, beta, C.p[s], ldc);
            check(h, "C", C);
            free_all(h);
            h->shapes++;
        }
}

static void case_linear_fwd(harness *h) {
    static const int shapes[][3] = {{5, 7, 3}, {16, 32, 48}, {1, 13, 1}};
    for (int i = 0; i < 3; i++) {
        int n = shapes[i][0], ic = shapes[i][1], oc = shapes[i][2];
        buf inp = rnd(h, (size_t)n * ic), w = rnd(h, (size_t)oc * ic), b = rnd(h, oc);
        buf out = rnd(h, (size_t)n * oc), out2 = rnd(h, (size_t)n * oc);
        EACH(h, be, s) sdp_linear_fwd(be, out.p[s], inp.p[s], w.p[s], b.p[s], n, ic, oc);
        EACH(h, be, s) sdp_linear_fwd(be, out2.p[s], inp.p[s], w.p[s], NULL, n, ic, oc);
        check(h, "out", out);
        check(h, "out (no bias)", out2);
        free_all(h);
        h->shapes++;
    }
}

static void case_linear_bwd(harness *h) {
    static const int shapes[][3] = {{5, 7, 3}, {16, 32, 48}, {1, 13, 1}};
    for (int i = 0; i < 3; i++)
        for (int mask = 1; mask < 8; mask += 3) { /* all; dinp alone; dw and dbias */
            int n = shapes[i][0], ic = shapes[i][1], oc = shapes[i][2];
            buf inp = rnd(h, (size_t)n * ic), w = rnd(h, (size_t)oc * ic);
            buf dout = rnd(h, (size_t)n * oc), dinp = rnd(h, (size_t)n * ic);
            buf dw = rnd(h, (size_t)oc * ic), db = rnd(h, oc);
            bool gi = mask != 6, gw = mask != 4;
            EACH(h, be, s)
            sdp_linear_bwd(be, gi ? dinp.p[s] : NULL, gw ? dw.p[s] : NULL, gw ? db.p[s] : NULL,
                           dout.p[s], inp.p[s], w.p[s], n, ic, oc);
            check(h, "dinp", dinp);
            check(h, "dw", dw);
            check(h, "dbias", db);
            free_all(h);
            h->shapes++;
        }
}

static void case_bias_slice_bwd(harness *h) {
    static const int shapes[][4] = {
        {6, 20, 4, 9}, {1, 8, 0, 8}, {33, 70, 61, 9}}; /* n ld col0 len */
    for (int i = 0; i < 3; i++) {
        int n = shapes[i][0], ld = shapes[i][1], col0 = shapes[i][2], len = shapes[i][3];
        buf dout = rnd(h, (size_t)n * ld), db = rnd(h, len);
        EACH(h, be, s) sdp_bias_slice_bwd(be, db.p[s], dout.p[s], n, ld, col0, len);
        check(h, "dbias", db);
        free_all(h);
        h->shapes++;
    }
}

/* copy_rows (overwrites) and add_rows (accumulates): a block between two padded matrices. */
static void rows_case(harness *h, bool add) {
    static const size_t shapes[][4] = {{5, 9, 7, 3}, {1, 4, 4, 4}, {17, 33, 40, 31}};
    for (int i = 0; i < 3; i++) {
        size_t rows = shapes[i][0], ld_dst = shapes[i][1], ld_src = shapes[i][2];
        size_t cols = shapes[i][3];
        buf src = rnd(h, rows * ld_src), dst = rnd(h, rows * ld_dst);
        /* the slice starts at an offset on both sides: offsets must carry through */
        EACH(h, be, s) {
            float *d = dst.p[s] + 1, *sp = src.p[s] + ld_src - cols;
            if (add)
                sdp_add_rows(be, d, ld_dst, sp, ld_src, rows - 1, cols);
            else
                sdp_copy_rows(be, d, ld_dst, sp, ld_src, rows - 1, cols);
        }
        check(h, "dst", dst);
        free_all(h);
        h->shapes++;
    }
}

static void case_copy_rows(harness *h) {
    rows_case(h, false);
}

static void case_add_rows(harness *h) {
    rows_case(h, true);
}

static void case_scale(harness *h) {
    static const size_t sizes[] = {1, 1000, 70001};
    static const float factors[] = {0.3f, 1.0f, -2.5f};
    for (int i = 0; i < 3; i++) {
        buf x = rnd(h, sizes[i]);
        EACH(h, be, s) sdp_scale(be, x.p[s], sizes[i], factors[i]);
        check(h, "x", x);
        free_all(h);
        h->shapes++;
    }
}

static void case_sumsq(harness *h) {
    static const size_t sizes[] = {1, 1000, 70001};
    for (int i = 0; i < 3; i++) {
        buf x = rnd(h, sizes[i]);
        double v[2] = {0, 0};
        EACH(h, be, s) v[s] = sdp_sumsq(be, x.p[s], sizes[i]);
        check_value(h, "sum of squares", v);
        free_all(h);
        h->shapes++;
    }
}

/* Three segments with gaps between them in every buffer, one without decay. */
static void optim_case(harness *h, sdp_opt_kind kind) {
    static const size_t counts[][3] = {{5, 1, 7}, {100, 33, 1}, {1000, 2049, 17}};
    for (int i = 0; i < 3; i++)
        for (long t = 1; t <= 2; t++) {
            sdp_opt_segment segs[3];
            size_t np = 0, ng = 0, ns = 0;
            for (int k = 0; k < 3; k++) {
                size_t c = counts[i][k];
                segs[k] = (sdp_opt_segment){.offset = np + 3,
                                            .count = c,
                                            .decay = k != 1,
                                            .grad_offset = ng + 1,
                                            .state_offset = ns + 2};
                np += c + 3, ng += c + 1, ns += c + 2;
            }
            sdp_opt_cfg cfg = sdp_opt_defaults(kind);
            cfg.weight_decay = 0.1f;
            if (kind == SDP_OPT_SGD) cfg.momentum = 0.9f, cfg.nesterov = t == 2;
            buf p = rnd(h, np), g = rnd(h, ng), m = rnd(h, ns), v = uni(h, ns, 0.1f, 1.0f);
            const sdp_adamw_scalars ka = sdp_adamw_scalars_at(&cfg, t, 0.01f);
            const sdp_sgd_scalars ks = sdp_sgd_scalars_at(&cfg, t, 0.01f);
            EACH(h, be, s) {
                if (kind == SDP_OPT_ADAMW)
                    sdp_adamw_update(be, &ka, m.p[s], v.p[s], p.p[s], g.p[s], segs, 3);
                else
                    sdp_sgd_update(be, &ks, m.p[s], p.p[s], g.p[s], segs, 3);
            }
            check(h, "params", p);
            check(h, kind == SDP_OPT_ADAMW ? "m" : "momentum", m);
            if (kind == SDP_OPT_ADAMW) check(h, "v", v);
            free_all(h);
            h->shapes++;
        }
}

static void case_adamw_update(harness *h) {
    optim_case(h, SDP_OPT_ADAMW);
}

static void case_sgd_update(harness *h) {
    optim_case(h, SDP_OPT_SGD);
}

/* ---- embeddings and norms ------------------------------------------------------------------ */

static const int EMBED_SHAPES[][4] = {{2, 5, 8, 11}, {1, 1, 3, 2}, {3, 17, 33, 50}}; /* B T C V */

static void case_embed_fwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int pos = 0; pos < 2; pos++) {
            int B = EMBED_SHAPES[i][0], T = EMBED_SHAPES[i][1], C = EMBED_SHAPES[i][2];
            int V = EMBED_SHAPES[i][3];
            ibuf tok = ints(h, (size_t)B * T, 0, V, false);
            buf wte = rnd(h, (size_t)V * C), wpe = rnd(h, (size_t)T * C);
            buf out = rnd(h, (size_t)B * T * C);
            EACH(h, be, s)
            sdp_embed_fwd(be, out.p[s], tok.p[s], wte.p[s], pos ? wpe.p[s] : NULL, B, T, C);
            check(h, "out", out);
            free_all(h);
            h->shapes++;
        }
}

static void case_embed_bwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int pos = 0; pos < 2; pos++) {
            int B = EMBED_SHAPES[i][0], T = EMBED_SHAPES[i][1], C = EMBED_SHAPES[i][2];
            int V = EMBED_SHAPES[i][3];
            ibuf tok = ints(h, (size_t)B * T, 0, V, false);
            buf dwte = rnd(h, (size_t)V * C), dwpe = rnd(h, (size_t)T * C);
            buf dout = rnd(h, (size_t)B * T * C);
            EACH(h, be, s)
            sdp_embed_bwd(be, dwte.p[s], pos ? dwpe.p[s] : NULL, dout.p[s], tok.p[s], B, T, C);
            check(h, "dwte", dwte);
            check(h, "dwpe", dwpe);
            free_all(h);
            h->shapes++;
        }
}

static const int NORM_SHAPES[][2] = {{7, 5}, {1, 64}, {33, 130}, {3, 769}}; /* n C */
enum { NNORM = sizeof NORM_SHAPES / sizeof NORM_SHAPES[0] };                /* n C */

static void case_layernorm_fwd(harness *h) {
    for (int i = 0; i < NNORM; i++) {
        int n = NORM_SHAPES[i][0], C = NORM_SHAPES[i][1];
        buf inp = rnd(h, (size_t)n * C), w = rnd(h, C), b = rnd(h, C);
        buf out = rnd(h, (size_t)n * C), mean = rnd(h, n), rstd = rnd(h, n);
        EACH(h, be, s)
        sdp_layernorm_fwd(be, out.p[s], mean.p[s], rstd.p[s], inp.p[s], w.p[s], b.p[s], n, C);
        check(h, "out", out);
        check(h, "mean", mean);
        check(h, "rstd", rstd);
        free_all(h);
        h->shapes++;
    }
}

static void case_layernorm_bwd(harness *h) {
    for (int i = 0; i < NNORM; i++)
        for (int all = 0; all < 2; all++) {
            int n = NORM_SHAPES[i][0], C = NORM_SHAPES[i][1];
            buf inp = rnd(h, (size_t)n * C), w = rnd(h, C), dout = rnd(h, (size_t)n * C);
            buf mean = rnd(h, n), rstd = uni(h, n, 0.5f, 2.0f);
            buf dinp = rnd(h, (size_t)n * C), dw = rnd(h, C), db = rnd(h, C);
            EACH(h, be, s)
            sdp_layernorm_bwd(be, dinp.p[s], all ? dw.p[s] : NULL, all ? db.p[s] : NULL, dout.p[s],
                              inp.p[s], w.p[s], mean.p[s], rstd.p[s], n, C);
            check(h, "dinp", dinp);
            check(h, "dw", dw);
            check(h, "db", db);
            free_all(h);
            h->shapes++;
        }
}

static void case_rmsnorm_fwd(harness *h) {
    for (int i = 0; i < NNORM; i++) {
        int n = NORM_SHAPES[i][0], C = NORM_SHAPES[i][1];
        buf inp = rnd(h, (size_t)n * C), w = rnd(h, C);
        buf out = rnd(h, (size_t)n * C), rstd = rnd(h, n);
        EACH(h, be, s) sdp_rmsnorm_fwd(be, out.p[s], rstd.p[s], inp.p[s], w.p[s], n, C);
        check(h, "out", out);
        check(h, "rstd", rstd);
        free_all(h);
        h->shapes++;
    }
}

static void case_rmsnorm_bwd(harness *h) {
    for (int i = 0; i < NNORM; i++)
        for (int all = 0; all < 2; all++) {
            int n = NORM_SHAPES[i][0], C = NORM_SHAPES[i][1];
            buf inp = rnd(h, (size_t)n * C), w = rnd(h, C), dout = rnd(h, (size_t)n * C);
            buf rstd = uni(h, n, 0.5f, 2.0f), dinp = rnd(h, (size_t)n * C), dw = rnd(h, C);
            EACH(h, be, s)
            sdp_rmsnorm_bwd(be, dinp.p[s], all ? dw.p[s] : NULL, dout.p[s], inp.p[s], w.p[s],
                            rstd.p[s], n, C);
            check(h, "dinp", dinp);
            check(h, "dw", dw);
            free_all(h);
            h->shapes++;
        }
}

/* ---- activations and residuals ------------------------------------------------------------- */

static const size_t ELEMS[] = {1, 37, 20001};

static void case_gelu_fwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int in_place = 0; in_place < 2; in_place++) {
            size_t n = ELEMS[i];
            buf inp = make(h, n, 3.0f, 0), out = in_place ? inp : rnd(h, n);
            EACH(h, be, s) sdp_gelu_fwd(be, out.p[s], inp.p[s], n);
            check(h, in_place ? "out (in place)" : "out", out);
            free_all(h);
            h->shapes++;
        }
}

static void case_gelu_bwd(harness *h) {
    for (int i = 0; i < 3; i++) {
        size_t n = ELEMS[i];
        buf inp = make(h, n, 3.0f, 0), dout = rnd(h, n), dinp = rnd(h, n);
        EACH(h, be, s) sdp_gelu_bwd(be, dinp.p[s], dout.p[s], inp.p[s], n);
        check(h, "dinp", dinp);
        free_all(h);
        h->shapes++;
    }
}

static const int SWIGLU_SHAPES[][2] = {{3, 5}, {1, 1}, {40, 129}}; /* n F */

static void case_swiglu_fwd(harness *h) {
    for (int i = 0; i < 3; i++) {
        int n = SWIGLU_SHAPES[i][0], F = SWIGLU_SHAPES[i][1];
        buf inp = make(h, (size_t)n * 2 * F, 3.0f, 0), out = rnd(h, (size_t)n * F);
        EACH(h, be, s) sdp_swiglu_fwd(be, out.p[s], inp.p[s], n, F);
        check(h, "out", out);
        free_all(h);
        h->shapes++;
    }
}

static void case_swiglu_bwd(harness *h) {
    for (int i = 0; i < 3; i++) {
        int n = SWIGLU_SHAPES[i][0], F = SWIGLU_SHAPES[i][1];
        buf inp = make(h, (size_t)n * 2 * F, 3.0f, 0), dout = rnd(h, (size_t)n * F);
        buf dinp = rnd(h, (size_t)n * 2 * F);
        EACH(h, be, s) sdp_swiglu_bwd(be, dinp.p[s], dout.p[s], inp.p[s], n, F);
        check(h, "dinp", dinp);
        free_all(h);
        h->shapes++;
    }
}

static void case_residual_fwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int alias = 0; alias < 2; alias++) { /* out = a, as the residual stream runs */
            size_t n = ELEMS[i];
            buf a = rnd(h, n), b = rnd(h, n), out = alias ? a : rnd(h, n);
            EACH(h, be, s) sdp_residual_fwd(be, out.p[s], a.p[s], b.p[s], 0.7f, n);
            check(h, alias ? "out (= a)" : "out", out);
            free_all(h);
            h->shapes++;
        }
}

static void case_residual_bwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int both = 0; both < 2; both++) {
            size_t n = ELEMS[i];
            /* da from zeros once: zero's result shows in it */
            buf da = both ? rnd(h, n) : zeros(h, n), db = rnd(h, n), dout = rnd(h, n);
            EACH(h, be, s)
            sdp_residual_bwd(be, da.p[s], both ? db.p[s] : NULL, dout.p[s], 0.7f, n);
            check(h, "da", da);
            check(h, "db", db);
            free_all(h);
            h->shapes++;
        }
}

/* ---- dropout ------------------------------------------------------------------------------- */

/* A mask's words compared bit for bit on every backend: the decisions are integer arithmetic. */
static void check_bits(harness *h, const char *what, buf b) {
    const sdp_backend *dut = h->be[1];
    uint32_t *got = malloc(b.n * sizeof *got);
    SDP_CHECK(got, "out of memory");
    dut->download(dut, got, b.p[1], b.n * sizeof *got);
    size_t bad = 0;
    for (size_t i = 0; i < b.n; i++) bad += memcmp(&got[i], &b.p[0][i], sizeof *got) != 0;
    if (bad) {
        printf("    %s differs: %zu of %zu words\n", what, bad, b.n);
        h->failed = true;
    }
    free(got);
}

/* ceil(n/32) words of random bits on both sides: a mask given to the forward and backward. */
static buf random_mask(harness *h, size_t n) {
    buf m = make(h, sdp_dropout_words(n), 0, 0);
    for (size_t i = 0; i < m.n; i++) {
        const uint32_t bits = sdp_rng_u32(&h->rng);
        memcpy(&m.p[0][i], &bits, sizeof bits);
    }
    h->be[1]->upload(h->be[1], m.p[1], m.p[0], m.n * sizeof(float));
    return m;
}

static const float DROP_P[] = {0.0f, 0.1f, 0.5f, 0.9f};

static void case_dropout_mask(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) {
            const size_t n = ELEMS[i] + 64; /* two whole words and a part */
            buf mask = random_mask(h, n);
            const sdp_dropout d = {DROP_P[k], 0x1234567890abcdefull + (uint64_t)i};
            EACH(h, be, s) sdp_dropout_mask(be, (uint32_t *)mask.p[s], n, d);
            check_bits(h, "mask", mask);
            free_all(h);
            h->shapes++;
        }
}

static void case_dropout_fwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int in_place = 0; in_place < 2; in_place++) {
            const size_t n = ELEMS[i];
            buf inp = rnd(h, n), out = in_place ? inp : rnd(h, n), mask = random_mask(h, n);
            EACH(h, be, s)
            sdp_dropout_fwd(be, out.p[s], inp.p[s], (const uint32_t *)mask.p[s], 1.25f, n);
            check(h, in_place ? "out (= inp)" : "out", out);
            free_all(h);
            h->shapes++;
        }
}

static void case_dropout_bwd(harness *h) {
    for (int i = 0; i < 3; i++) {
        const size_t n = ELEMS[i];
        buf dinp = rnd(h, n), dout = rnd(h, n), mask = random_mask(h, n);
        EACH(h, be, s)
        sdp_dropout_bwd(be, dinp.p[s], dout.p[s], (const uint32_t *)mask.p[s], 1.25f, n);
        check(h, "dinp", dinp);
        free_all(h);
        h->shapes++;
    }
}

/* ---- attention ----------------------------------------------------------------------------- */

static const int ATT_SHAPES[][5] = {{2, 7, 3, 8, 1},    {1, 16, 2, 16, 0},  {3, 5, 1, 4, 1},
                                    {1, 33, 2, 8, 0},   {1, 130, 2, 64, 1}, {2, 37, 1, 128, 0},
                                    {1, 19, 1, 256, 1}, {2, 70, 3, 32, 1}}; /* B T H hs causal */
enum { NATT = sizeof ATT_SHAPES / sizeof ATT_SHAPES[0] };                   /* B T H hs causal */

static buf att_scratch(harness *h, int B, int T, int H, int hs) {
    size_t bytes[2];
    EACH(h, be, s) bytes[s] = sdp_attention_scratch_bytes(be, B, T, H, hs);
    return scratch(h, bytes);
}

/* Each shape runs without dropout, then with dropout on the probabilities. */
static sdp_dropout att_dropout(int pass) {
    return pass ? (sdp_dropout){0.25f, 0xfeedfacecafebeefull} : SDP_NO_DROPOUT;
}

static void case_attention_fwd(harness *h) {
    for (int i = 0; i < 2 * NATT; i++) {
        const sdp_dropout drop = att_dropout(i / NATT);
        const int *shape = ATT_SHAPES[i % NATT];
        int B = shape[0], T = shape[1], H = shape[2], hs = shape[3];
        bool causal = shape[4];
        size_t rows = (size_t)B * T, D = (size_t)H * hs;
        buf qkv = rnd(h, rows * 3 * D), out = rnd(h, rows * D), lse = rnd(h, (size_t)B * H * T);
        buf sc = att_scratch(h, B, T, H, hs);
        EACH(h, be, s)
        sdp_attention_fwd(be, out.p[s], lse.p[s], qkv.p[s], B, T, H, hs, causal, drop, sc.p[s]);
        check(h, "out", out);
        check(h, "lse", lse);
        free_all(h);
        h->shapes++;
    }
}

static void case_attention_bwd(harness *h) {
    for (int i = 0; i < 2 * NATT; i++) {
        const sdp_dropout drop = att_dropout(i / NATT);
        const int *shape = ATT_SHAPES[i % NATT];
        int B = shape[0], T = shape[1], H = shape[2], hs = shape[3];
        bool causal = shape[4];
        size_t rows = (size_t)B * T, D = (size_t)H * hs;
        buf qkv = rnd(h, rows * 3 * D), out = rnd(h, rows * D), lse = rnd(h, (size_t)B * H * T);
        buf dout = rnd(h, rows * D), dqkv = rnd(h, rows * 3 * D);
        buf sc = att_scratch(h, B, T, H, hs);
        /* out and lse as the reference's forward saves them, on both sides */
        const sdp_backend *ref = h->be[0], *dut = h->be[1];
        sdp_attention_fwd(ref, out.p[0], lse.p[0], qkv.p[0], B, T, H, hs, causal, drop, sc.p[0]);
        dut->upload(dut, out.p[1], out.p[0], rows * D * sizeof(float));
        dut->upload(dut, lse.p[1], lse.p[0], lse.n * sizeof(float));
        EACH(h, be, s)
        sdp_attention_bwd(be, dqkv.p[s], dout.p[s], qkv.p[s], out.p[s], lse.p[s], B, T, H, hs,
                          causal, drop, sc.p[s]);
        check(h, "dqkv", dqkv);
        free_all(h);
        h->shapes++;
    }
}

static void rope_case(harness *h, bool bwd) {
    for (int i = 0; i < NATT; i++) {
        int B = ATT_SHAPES[i][0], T = ATT_SHAPES[i][1], H = ATT_SHAPES[i][2];
        int hs = ATT_SHAPES[i][3];
        buf qkv = rnd(h, (size_t)B * T * 3 * H * hs);
        EACH(h, be, s) {
            if (bwd)
                sdp_rope_bwd(be, qkv.p[s], B, T, H, hs, 500.0f);
            else
                sdp_rope_fwd(be, qkv.p[s], B, T, H, hs, 10000.0f);
        }
        check(h, bwd ? "dqkv" : "qkv", qkv);
        free_all(h);
        h->shapes++;
    }
}

static void case_rope_fwd(harness *h) {
    rope_case(h, false);
}

static void case_rope_bwd(harness *h) {
    rope_case(h, true);
}

/* ---- loss ---------------------------------------------------------------------------------- */

static const int XENT_SHAPES[][3] = {
    {5, 7, 8}, {1, 3, 3}, {33, 65, 128}, {2, 50257, 50304}}; /* n V Vp: GPT-2's padded vocabulary */
enum { NXENT = sizeof XENT_SHAPES / sizeof XENT_SHAPES[0] }; /* n V Vp */

static void case_softmax_xent_fwd(harness *h) {
    for (int i = 0; i < NXENT; i++)
        for (int alias = 0; alias < 2; alias++) { /* probs = logits, as the models run it */
            int n = XENT_SHAPES[i][0], V = XENT_SHAPES[i][1], Vp = XENT_SHAPES[i][2];
            buf logits = make(h, (size_t)n * Vp, 4.0f, 0), losses = rnd(h, n);
            buf probs = alias ? logits : rnd(h, (size_t)n * Vp);
            ibuf tg = ints(h, n, 0, V, true);
            double sum[2] = {0, 0};
            EACH(h, be, s)
            sum[s] =
                sdp_softmax_xent_fwd(be, losses.p[s], probs.p[s], logits.p[s], tg.p[s], n, V, Vp);
            check_value(h, "summed loss", sum);
            check(h, "losses", losses);
            check(h, "probs", probs);
            free_all(h);
            h->shapes++;
        }
}

static void case_softmax_xent_bwd(harness *h) {
    for (int i = 0; i < NXENT; i++)
        for (int alias = 0; alias < 2; alias++) { /* dlogits = probs */
            int n = XENT_SHAPES[i][0], V = XENT_SHAPES[i][1], Vp = XENT_SHAPES[i][2];
            buf probs = uni(h, (size_t)n * Vp, 0, 0.2f);
            buf dlogits = alias ? probs : rnd(h, (size_t)n * Vp);
            ibuf tg = ints(h, n, 0, V, true);
            EACH(h, be, s)
            sdp_softmax_xent_bwd(be, dlogits.p[s], probs.p[s], tg.p[s], 0.25f, n, V, Vp);
            check(h, "dlogits", dlogits);
            free_all(h);
            h->shapes++;
        }
}

static void case_count_correct(harness *h) {
    static const int shapes[][3] = {{9, 5, 8}, {1, 1, 1}, {64, 10, 10}}; /* n K ld */
    for (int i = 0; i < 3; i++) {
        int n = shapes[i][0], K = shapes[i][1], ld = shapes[i][2];
        buf logits = rnd(h, (size_t)n * ld);
        /* a tie in the first row: the first of the largest counts */
        if (K > 1) logits.p[0][1] = logits.p[0][0] = 9.0f;
        h->be[1]->upload(h->be[1], logits.p[1], logits.p[0], logits.n * sizeof(float));
        ibuf labels = ints(h, n, 0, K, true);
        double hits[2] = {0, 0};
        EACH(h, be, s) hits[s] = sdp_count_correct(be, logits.p[s], labels.p[s], n, K, ld);
        check_value(h, "hits", hits);
        free_all(h);
        h->shapes++;
    }
}

/* ---- ViT stem ------------------------------------------------------------------------------ */

static void case_patch_gather(harness *h) {
    static const int shapes[][5] = {{2, 3, 8, 12, 4}, {1, 1, 5, 5, 5}, {3, 2, 14, 7, 7}};
    for (int i = 0; i < 3; i++) {
        int B = shapes[i][0], C = shapes[i][1], H = shapes[i][2], W = shapes[i][3];
        int p = shapes[i][4];
        buf img = rnd(h, (size_t)B * C * H * W), rows = rnd(h, (size_t)B * C * H * W);
        EACH(h, be, s) sdp_patch_gather(be, rows.p[s], img.p[s], B, C, H, W, p);
        check(h, "rows", rows);
        free_all(h);
        h->shapes++;
    }
}

static const int VIT_SHAPES[][3] = {{2, 5, 8}, {1, 2, 1}, {3, 17, 33}}; /* B T C */

static void case_vit_embed_fwd(harness *h) {
    for (int i = 0; i < 3; i++) {
        int B = VIT_SHAPES[i][0], T = VIT_SHAPES[i][1], C = VIT_SHAPES[i][2];
        buf patches = rnd(h, (size_t)B * (T - 1) * C), cls = rnd(h, C), pos = rnd(h, (size_t)T * C);
        buf embed = rnd(h, (size_t)B * T * C);
        EACH(h, be, s) sdp_vit_embed_fwd(be, embed.p[s], patches.p[s], cls.p[s], pos.p[s], B, T, C);
        check(h, "embed", embed);
        free_all(h);
        h->shapes++;
    }
}

static void case_vit_embed_bwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int all = 0; all < 2; all++) {
            int B = VIT_SHAPES[i][0], T = VIT_SHAPES[i][1], C = VIT_SHAPES[i][2];
            buf dpatches = rnd(h, (size_t)B * (T - 1) * C), dcls = rnd(h, C);
            buf dpos = rnd(h, (size_t)T * C), dembed = rnd(h, (size_t)B * T * C);
            EACH(h, be, s)
            sdp_vit_embed_bwd(be, dpatches.p[s], all ? dcls.p[s] : NULL, all ? dpos.p[s] : NULL,
                              dembed.p[s], B, T, C);
            check(h, "dpatches", dpatches);
            check(h, "dcls", dcls);
            check(h, "dpos", dpos);
            free_all(h);
            h->shapes++;
        }
}

/* ---- vision (ResNet) ----------------------------------------------------------------------- */

/* B IC H W OC KH KW stride_h stride_w pad_h pad_w: a 3x3, a stride-2 3x3, a 1x1 shortcut, a stem
 * with one channel, and odd sizes everywhere. */
static const sdp_conv_shape CONV_SHAPES[] = {{2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1},
                                             {3, 4, 9, 8, 6, 3, 3, 2, 2, 1, 1},
                                             {2, 5, 7, 7, 3, 1, 1, 2, 2, 0, 0},
                                             {1, 1, 11, 13, 4, 3, 3, 1, 1, 1, 1}};

typedef struct {
    void *plan[2];
    buf inp, w, out, sc;
    size_t nout;
} conv_bufs;

static conv_bufs conv_setup(harness *h, const sdp_conv_shape *c) {
    conv_bufs k;
    size_t bytes[2];
    EACH(h, be, s) {
        k.plan[s] = sdp_conv_plan_create(be, c, SDP_CONV_DNNL);
        bytes[s] = sdp_conv_scratch_bytes(be, k.plan[s]);
    }
    int OH = (c->H + 2 * c->pad_h - c->KH) / c->stride_h + 1;
    int OW = (c->W + 2 * c->pad_w - c->KW) / c->stride_w + 1;
    k.nout = (size_t)c->B * c->OC * OH * OW;
    k.inp = rnd(h, (size_t)c->B * c->IC * c->H * c->W);
    k.w = rnd(h, (size_t)c->OC * c->IC * c->KH * c->KW);
    k.out = rnd(h, k.nout);
    k.sc = scratch(h, bytes);
    return k;
}

static void conv_done(harness *h, conv_bufs *k) {
    free_all(h);
    EACH(h, be, s) sdp_conv_plan_free(be, k->plan[s]);
    h->shapes++;
}

static void case_conv2d_fwd(harness *h) {
    for (int i = 0; i < 4; i++)
        for (int bias = 0; bias < 2; bias++) {
            conv_bufs k = conv_setup(h, &CONV_SHAPES[i]);
            buf b = rnd(h, CONV_SHAPES[i].OC);
            EACH(h, be, s)
            sdp_conv2d_fwd(be, k.plan[s], k.out.p[s], k.inp.p[s], k.w.p[s], bias ? b.p[s] : NULL,
                           k.sc.p[s]);
            check(h, "out", k.out);
            conv_done(h, &k);
        }
}

static void case_conv2d_bwd(harness *h) {
    for (int i = 0; i < 4; i++)
        for (int mask = 1; mask < 8; mask += 3) { /* all; dinp alone; dw and dbias */
            const sdp_conv_shape *c = &CONV_SHAPES[i];
            conv_bufs k = conv_setup(h, c);
            buf dinp = rnd(h, k.inp.n), dw = rnd(h, k.w.n), db = rnd(h, c->OC);
            bool gi = mask != 6, gw = mask != 4;
            EACH(h, be, s)
            sdp_conv2d_bwd(be, k.plan[s], gi ? dinp.p[s] : NULL, gw ? dw.p[s] : NULL,
                           gw ? db.p[s] : NULL, k.out.p[s], gw ? k.inp.p[s] : NULL,
                           gi ? k.w.p[s] : NULL, k.sc.p[s]);
            check(h, "dinp", dinp);
            check(h, "dw", dw);
            check(h, "dbias", db);
            conv_done(h, &k);
        }
}

static const int BN_SHAPES[][4] = {{2, 3, 5, 7}, {4, 1, 1, 1}, {3, 17, 8, 9}}; /* B C H W */

static void case_batchnorm_fwd_train(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int running = 0; running < 2; running++) {
            int B = BN_SHAPES[i][0], C = BN_SHAPES[i][1], H = BN_SHAPES[i][2], W = BN_SHAPES[i][3];
            size_t n = (size_t)B * C * H * W;
            buf inp = make(h, n, 2.0f, 0), g = rnd(h, C), b = rnd(h, C), out = rnd(h, n);
            buf mean = rnd(h, C), rstd = rnd(h, C), rm = rnd(h, C), rv = uni(h, C, 0.5f, 2.0f);
            EACH(h, be, s)
            sdp_batchnorm_fwd_train(be, out.p[s], mean.p[s], rstd.p[s], running ? rm.p[s] : NULL,
                                    running ? rv.p[s] : NULL, inp.p[s], g.p[s], b.p[s], B, C, H, W);
            check(h, "out", out);
            check(h, "mean", mean);
            check(h, "rstd", rstd);
            check(h, "running_mean", rm);
            check(h, "running_var", rv);
            free_all(h);
            h->shapes++;
        }
}

static void case_batchnorm_fwd_eval(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int in_place = 0; in_place < 2; in_place++) {
            int B = BN_SHAPES[i][0], C = BN_SHAPES[i][1], H = BN_SHAPES[i][2], W = BN_SHAPES[i][3];
            size_t n = (size_t)B * C * H * W;
            buf inp = rnd(h, n), g = rnd(h, C), b = rnd(h, C), out = in_place ? inp : rnd(h, n);
            buf rm = rnd(h, C), rv = uni(h, C, 0.5f, 2.0f);
            EACH(h, be, s)
            sdp_batchnorm_fwd_eval(be, out.p[s], inp.p[s], rm.p[s], rv.p[s], g.p[s], b.p[s], B, C,
                                   H, W);
            check(h, in_place ? "out (in place)" : "out", out);
            free_all(h);
            h->shapes++;
        }
}

static void case_batchnorm_bwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int all = 0; all < 2; all++) {
            int B = BN_SHAPES[i][0], C = BN_SHAPES[i][1], H = BN_SHAPES[i][2], W = BN_SHAPES[i][3];
            size_t n = (size_t)B * C * H * W;
            buf inp = rnd(h, n), g = rnd(h, C), dout = rnd(h, n), dinp = rnd(h, n);
            buf mean = rnd(h, C), rstd = uni(h, C, 0.5f, 2.0f), dg = rnd(h, C), db = rnd(h, C);
            EACH(h, be, s)
            sdp_batchnorm_bwd(be, dinp.p[s], all ? dg.p[s] : NULL, all ? db.p[s] : NULL, dout.p[s],
                              inp.p[s], g.p[s], mean.p[s], rstd.p[s], B, C, H, W);
            check(h, "dinp", dinp);
            check(h, "dgamma", dg);
            check(h, "dbeta", db);
            free_all(h);
            h->shapes++;
        }
}

static void case_relu_fwd(harness *h) {
    for (int i = 0; i < 3; i++)
        for (int in_place = 0; in_place < 2; in_place++) {
            size_t n = ELEMS[i];
            buf inp = rnd(h, n), out = in_place ? inp : rnd(h, n);
            EACH(h, be, s) sdp_relu_fwd(be, out.p[s], inp.p[s], n);
            check(h, in_place ? "out (in place)" : "out", out);
            free_all(h);
            h->shapes++;
        }
}

static void case_relu_bwd(harness *h) {
    for (int i = 0; i < 3; i++) {
        size_t n = ELEMS[i];
        buf out = rnd(h, n), dout = rnd(h, n), dinp = rnd(h, n);
        EACH(h, be, s) sdp_relu_bwd(be, dinp.p[s], dout.p[s], out.p[s], n);
        check(h, "dinp", dinp);
        free_all(h);
        h->shapes++;
    }
}

static const int POOL_SHAPES[][5] = {{2, 3, 8, 8, 2}, {1, 2, 7, 9, 3}, {3, 5, 4, 4, 4}}; /* +k */

static void pool_case(harness *h, bool global, bool bwd) {
    for (int i = 0; i < 3; i++) {
        int B = POOL_SHAPES[i][0], C = POOL_SHAPES[i][1], H = POOL_SHAPES[i][2];
        int W = POOL_SHAPES[i][3], k = POOL_SHAPES[i][4];
        size_t nin = (size_t)B * C * H * W;
        size_t nout = global ? (size_t)B * C : (size_t)B * C * (H / k) * (W / k);
        buf inp = rnd(h, nin), out = rnd(h, nout);
        EACH(h, be, s) {
            if (global && bwd)
                sdp_global_avgpool_bwd(be, inp.p[s], out.p[s], B, C, H, W);
            else if (global)
                sdp_global_avgpool_fwd(be, out.p[s], inp.p[s], B, C, H, W);
            else if (bwd)
                sdp_avgpool_bwd(be, inp.p[s], out.p[s], B, C, H, W, k);
            else
                sdp_avgpool_fwd(be, out.p[s], inp.p[s], B, C, H, W, k);
        }
        check(h, bwd ? "dinp" : "out", bwd ? inp : out);
        free_all(h);
        h->shapes++;
    }
}

static void case_avgpool_fwd(harness *h) {
    pool_case(h, false, false);
}

static void case_avgpool_bwd(harness *h) {
    pool_case(h, false, true);
}

static void case_global_avgpool_fwd(harness *h) {
    pool_case(h, true, false);
}

static void case_global_avgpool_bwd(harness *h) {
    pool_case(h, true, true);
}

/* ---- the table of cases, and what covers the rest of sdp_backend --------------------------- */

#define F(x) offsetof(sdp_backend, x)
typedef struct {
    const char *name;
    void (*run)(harness *);
    double tol;
    size_t fields[MAX_FIELDS]; /* the table entries the case calls (0 ends the list) */
    bool matmul;               /* runs matrix products: in bf16 on a bf16 backend */
} op_case;

static const op_case CASES[] = {
    {"adamw_update", case_adamw_update, ELEM, {F(adamw_update)}, false},
    {"sgd_update", case_sgd_update, ELEM, {F(sgd_update)}, false},
    {"scale", case_scale, ELEM, {F(scale)}, false},
    {"sumsq", case_sumsq, RED, {F(sumsq)}, false},
    {"copy_rows", case_copy_rows, 0, {F(copy_rows)}, false},
    {"gemm", case_gemm, RED, {F(gemm)}, true},
    {"linear_fwd", case_linear_fwd, RED, {F(linear_fwd)}, true},
    {"linear_bwd", case_linear_bwd, RED, {F(linear_bwd)}, true},
    {"bias_slice_bwd", case_bias_slice_bwd, RED, {F(bias_slice_bwd)}, false},
    {"embed_fwd", case_embed_fwd, ELEM, {F(embed_fwd)}, false},
    {"embed_bwd", case_embed_bwd, RED, {F(embed_bwd)}, false},
    {"layernorm_fwd", case_layernorm_fwd, RED, {F(layernorm_fwd)}, false},
    {"layernorm_bwd", case_layernorm_bwd, RED, {F(layernorm_bwd)}, false},
    {"rmsnorm_fwd", case_rmsnorm_fwd, RED, {F(rmsnorm_fwd)}, false},
    {"rmsnorm_bwd", case_rmsnorm_bwd, RED, {F(rmsnorm_bwd)}, false},
    {"gelu_fwd", case_gelu_fwd, ELEM, {F(gelu_fwd)}, false},
    {"gelu_bwd", case_gelu_bwd, ELEM, {F(gelu_bwd)}, false},
    {"swiglu_fwd", case_swiglu_fwd, ELEM, {F(swiglu_fwd)}, false},
    {"swiglu_bwd", case_swiglu_bwd, ELEM, {F(swiglu_bwd)}, false},
    {"residual_fwd", case_residual_fwd, ELEM, {F(residual_fwd)}, false},
    {"residual_bwd", case_residual_bwd, ELEM, {F(residual_bwd)}, false},
    {"dropout_mask", case_dropout_mask, 0, {F(dropout_mask)}, false},
    {"dropout_fwd", case_dropout_fwd, ELEM, {F(dropout_fwd)}, false},
    {"dropout_bwd", case_dropout_bwd, ELEM, {F(dropout_bwd)}, false},
    {"attention_fwd (+ attention_scratch_bytes)",
     case_attention_fwd,
     RED,
     {F(attention_fwd), F(attention_scratch_bytes)},
     true},
    {"attention_bwd", case_attention_bwd, RED, {F(attention_bwd)}, true},
    {"rope_fwd", case_rope_fwd, ELEM, {F(rope_fwd)}, false},
    {"rope_bwd", case_rope_bwd, ELEM, {F(rope_bwd)}, false},
    {"softmax_xent_fwd", case_softmax_xent_fwd, RED, {F(softmax_xent_fwd)}, false},
    {"softmax_xent_bwd", case_softmax_xent_bwd, ELEM, {F(softmax_xent_bwd)}, false},
    {"count_correct", case_count_correct, 0, {F(count_correct)}, false},
    {"patch_gather", case_patch_gather, 0, {F(patch_gather)}, false},
    {"vit_embed_fwd", case_vit_embed_fwd, ELEM, {F(vit_embed_fwd)}, false},
    {"vit_embed_bwd", case_vit_embed_bwd, RED, {F(vit_embed_bwd)}, false},
    {"conv2d_fwd (+ conv_plan_create, conv_scratch_bytes, conv_plan_free)",
     case_conv2d_fwd,
     RED,
     {F(conv2d_fwd), F(conv_plan_create), F(conv_scratch_bytes), F(conv_plan_free)},
     false},
    {"conv2d_bwd", case_conv2d_bwd, RED, {F(conv2d_bwd)}, false},
    {"batchnorm_fwd_train", case_batchnorm_fwd_train, RED, {F(batchnorm_fwd_train)}, false},
    {"batchnorm_fwd_eval", case_batchnorm_fwd_eval, ELEM, {F(batchnorm_fwd_eval)}, false},
    {"batchnorm_bwd", case_batchnorm_bwd, RED, {F(batchnorm_bwd)}, false},
    {"relu_fwd", case_relu_fwd, 0, {F(relu_fwd)}, false},
    {"relu_bwd", case_relu_bwd, 0, {F(relu_bwd)}, false},
    {"avgpool_fwd", case_avgpool_fwd, ELEM, {F(avgpool_fwd)}, false},
    {"avgpool_bwd", case_avgpool_bwd, ELEM, {F(avgpool_bwd)}, false},
    {"global_avgpool_fwd", case_global_avgpool_fwd, ELEM, {F(global_avgpool_fwd)}, false},
    {"global_avgpool_bwd", case_global_avgpool_bwd, ELEM, {F(global_avgpool_bwd)}, false},
    {"add_rows", case_add_rows, 0, {F(add_rows)}, false},
};
enum { NCASES = sizeof CASES / sizeof CASES[0] };

/* Entries every case runs through (buffers, transfers, the count of bytes, the end). */
static const size_t HARNESS[] = {F(alloc),    F(free), F(zero),         F(upload),
                                 F(download), F(sync), F(bytes_in_use), F(destroy)};
/* Entries that need several ranks: tests/mpi_invariants.c and tests/test_device_emulated.sh (the
 * reduce-scatter and all-gather, under --zero 1) run them on the emulated device. */
static const size_t COMM[] = {F(comm_open),       F(comm_close),           F(allreduce_start),
                              F(broadcast_start), F(reduce_scatter_start), F(allgather_start),
                              F(allreduce_wait)};

/* Every function-pointer slot of sdp_backend (those after host_memory) is claimed exactly once:
 * returns the number of op entries the cases claim, or -1 after printing what is wrong. */
static int coverage(void) {
    enum { SLOT = sizeof(void (*)(void)) };
    const size_t first = F(destroy), slots = (sizeof(sdp_backend) - first) / SLOT;
    int *claims = calloc(slots, sizeof *claims), ops = 0;
    SDP_CHECK(claims, "out of memory");
    for (int c = 0; c < NCASES; c++)
        for (int f = 0; f < MAX_FIELDS && CASES[c].fields[f]; f++, ops++)
            claims[(CASES[c].fields[f] - first) / SLOT]++;
    for (size_t i = 0; i < sizeof HARNESS / sizeof *HARNESS; i++)
        claims[(HARNESS[i] - first) / SLOT]++;
    for (size_t i = 0; i < sizeof COMM / sizeof *COMM; i++) claims[(COMM[i] - first) / SLOT]++;
    bool ok = (sizeof(sdp_backend) - first) % SLOT == 0;
    for (size_t i = 0; i < slots; i++)
        if (claims[i] != 1) {
            printf("table slot %zu (byte offset %zu) is claimed %d times: give every op one case\n",
                   i, first + i * SLOT, claims[i]);
            ok = false;
        }
    free(claims);
    return ok ? ops : -1;
}

/* How many function-pointer slots of t have no entry (each printed, with the case that calls it):
 * a backend with an empty slot would crash on the first model to call that op. */
static int empty_slots(const sdp_backend *t, const char *backend) {
    enum { SLOT = sizeof(void (*)(void)) };
    const size_t first = F(destroy);
    int empty = 0;
    for (size_t off = first; off + SLOT <= sizeof(sdp_backend); off += SLOT) {
        void (*entry)(void);
        memcpy(&entry, (const char *)t + off, SLOT);
        if (entry) continue;
        const char *user = "the harness or the communication entries";
        for (int c = 0; c < NCASES; c++)
            for (int f = 0; f < MAX_FIELDS && CASES[c].fields[f]; f++)
                if (CASES[c].fields[f] == off) user = CASES[c].name;
        printf("%s has no entry in table slot at byte offset %zu (used by %s)\n", backend, off,
               user);
        empty++;
    }
    return empty;
}

/* Runs one case on h's backends and prints its line (name + suffix): the number of table fields
 * it checked, negated when it failed or checked no shape. */
static int run_case(harness *h, const op_case *oc, bool bf16, const char *suffix) {
    h->normwise = bf16 && oc->matmul;
    h->tol = h->normwise ? BF16 : oc->tol, h->worst = 0, h->shapes = 0, h->failed = false;
    oc->run(h);
    h->be[1]->sync(h->be[1]);
    int fields = 0;
    while (fields < MAX_FIELDS && oc->fields[fields]) fields++;
    char name[64];
    snprintf(name, sizeof name, "%s%s", oc->name, suffix);
    if (h->exact)
        printf("%-4s %-24s %2d shapes, %s\n", h->failed ? "FAIL" : "ok", name, h->shapes,
               h->failed ? "not bitwise equal" : "bitwise equal");
    else
        printf("%-4s %-24s %2d shapes, %s rel err %.2e (tol %.0e)\n", h->failed ? "FAIL" : "ok",
               name, h->shapes, h->normwise ? "normwise" : "max", h->worst, h->tol);
    return h->failed || h->shapes == 0 ? -fields : fields;
}

int main(int argc, char **argv) {
    const char *which = argc == 2 ? argv[1] : "";
    bool bf16 = strcmp(which, "cuda-bf16") == 0, cuda = bf16 || strcmp(which, "cuda") == 0;
    if (!cuda && strcmp(which, "emulated") != 0) {
        fprintf(stderr, "usage: test_backend_ops emulated|cuda|cuda-bf16\n");
        return 2;
    }
    int ops = coverage();
    if (ops < 0) return 1;
    /* Without a GPU the CUDA table can still be checked for an entry in every slot. */
    sdp_backend cuda_table = {0};
    if (cuda && sdp_backend_cuda_entries(&cuda_table)) {
        if (empty_slots(&cuda_table, "the CUDA backend") > 0) return 1;
        printf("the CUDA backend has an entry in every slot of the table\n");
    }
    if (cuda && !sdp_backend_cuda_available()) {
        printf("test_backend_ops: no CUDA device (or no CUDA backend in this build): skipped\n");
        return 77;
    }
    sdp_mem mem = {0};
    harness h = {.exact = !cuda, .rng = sdp_rng_make(14, 3)};
    h.be[0] = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    h.be[1] = cuda ? sdp_backend_cuda(0, bf16 ? SDP_PRECISION_BF16 : SDP_PRECISION_FP32)
                   : sdp_backend_emulated(SDP_GEMM_DNNL, false);
    if (empty_slots(h.be[0], "the CPU backend") + empty_slots(h.be[1], which) > 0) return 1;
    int checked = 0, failed = 0;
    for (int c = 0; c < NCASES; c++) {
        const int fields = run_case(&h, &CASES[c], bf16, "");
        if (fields < 0)
            failed -= fields;
        else
            checked += fields;
    }
    /* bf16 attention runs the fused kernels by default; the cuBLAS GEMM path is checked too. */
    if (bf16) {
        sdp_backend_cuda_set_fused_attention((sdp_backend *)h.be[1], false);
        for (int c = 0; c < NCASES; c++)
            if (CASES[c].run == case_attention_fwd || CASES[c].run == case_attention_bwd)
                if (run_case(&h, &CASES[c], bf16, " [gemm]") < 0) failed++;
        /* The GEMMs on bf16 copies of their operands (native bf16 products), and the attention's
         * cuBLAS path on them. */
        sdp_backend_cuda_set_bf16_operands((sdp_backend *)h.be[1], true);
        for (int c = 0; c < NCASES; c++)
            if (CASES[c].matmul)
                if (run_case(&h, &CASES[c], bf16, " [bf16 operands]") < 0) failed++;
    }
    sdp_backend_destroy((sdp_backend *)h.be[1]);
    sdp_backend_destroy((sdp_backend *)h.be[0]);
    printf("%d of %d ops checked on %s\n", checked, ops, which);
    return failed == 0 && checked == ops ? 0 : 1;
}
