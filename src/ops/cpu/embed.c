/* Token and position embeddings. The backward scatters rows into the token table, where two
 * positions may hit the same token: to stay race-free and deterministic each thread owns a
 * contiguous range of channels and walks all positions in order. */
#include "sdp/check.h"
#include "ops/cpu/cpu_ops.h"

#include <omp.h>
#include <stddef.h>

enum { PARALLEL_MIN_ELEMS = 1 << 14 };

/* The vocabulary size is not passed in, so only negative ids can be caught here; the data loader
 * checks the upper bound. Checked before any parallel region so a bad id fails cleanly. */
static void check_tokens(const int *tokens, int n) {
    for (int i = 0; i < n; i++)
        SDP_CHECK(tokens[i] >= 0,
                  "embedding: token id %d at position %d is negative: check the dataset", tokens[i],
                  i);
}

static void embed_fwd(const sdp_backend *be, float *out, const int *tokens, const float *wte,
                      const float *wpe, int B, int T, int C) {
    (void)be;
    int n = B * T;
    check_tokens(tokens, n);
    size_t work = (size_t)n * (size_t)C;
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * C;
        const float *e = wte + (size_t)tokens[i] * C;
        if (wpe) {
            const float *p = wpe + (size_t)(i % T) * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        } else {
            for (int c = 0; c < C; c++) o[c] = e[c];
        }
    }
}

/* dwte[tokens[i], c0:c1] += dout[i, c0:c1] for all positions i, in position order. */
static void scatter_token_grads(float *dwte, const float *dout, const int *tokens, int n, int C,
                                int c0, int c1) {
    for (int i = 0; i < n; i++) {
        float *d = dwte + (size_t)tokens[i] * C;
        const float *g = dout + (size_t)i * C;
        for (int c = c0; c < c1; c++) d[c] += g[c];
    }
}

static void embed_bwd(const sdp_backend *be, float *dwte, float *dwpe, const float *dout,
                      const int *tokens, int B, int T, int C) {
    (void)be;
    int n = B * T;
    size_t work = (size_t)n * (size_t)C;
    if (dwte) {
        check_tokens(tokens, n);
#pragma omp parallel if (work >= PARALLEL_MIN_ELEMS)
        {
            int nth = omp_get_num_threads(), th = omp_get_thread_num();
            int c0 = (int)((long)C * th / nth), c1 = (int)((long)C * (th + 1) / nth);
            scatter_token_grads(dwte, dout, tokens, n, C, c0, c1);
        }
    }
    if (dwpe) {
        /* Each position's row is owned by one thread, which sums the batch in order. */
#pragma omp parallel for schedule(static) if (work >= PARALLEL_MIN_ELEMS)
        for (int t = 0; t < T; t++) {
            float *d = dwpe + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                const float *g = dout + ((size_t)b * T + t) * C;
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        }
    }
}

void cpu_ops_embed(sdp_backend *t) {
    t->embed_fwd = embed_fwd;
    t->embed_bwd = embed_bwd;
}
