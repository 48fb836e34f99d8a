/* Token and position embeddings. The vocabulary size is not passed in (as on the CPU), so only
 * negative ids are caught: such a row stays zero and raises BAD_TOKEN for the next waiting call.
 *
 * The token-table gradient scatters rows into dwte, where positions with the same token meet; it
 * uses atomicAdd, so the order of those additions (and the last bits of dwte) may vary from run to
 * run. The position-table gradient is one thread per (t, c) adding the batch in order. */
#include "ops/cuda/common.cuh"

__global__ void embed_fwd_kernel(float *out, const int *tokens, const float *wte, const float *wpe,
                                 int T, int C, size_t total, unsigned *errors) {
    FOR_EACH_INDEX(i, total) {
        size_t row = i / C, c = i % C;
        int tok = tokens[row];
        if (tok < 0) {
            atomicOr(errors, BAD_TOKEN);
            out[i] = 0.0f;
            continue;
        }
        float e = wte[(size_t)tok * C + c];
        if (wpe) e += wpe[(row % T) * C + c];
        out[i] = e;
    }
}

__global__ void embed_dwte_kernel(float *dwte, const float *dout, const int *tokens, int C,
                                  size_t total) {
    FOR_EACH_INDEX(i, total) {
        size_t row = i / C, c = i % C;
        int tok = tokens[row];
        if (tok >= 0) atomicAdd(&dwte[(size_t)tok * C + c], dout[i]);
    }
}

__global__ void embed_dwpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    size_t TC = (size_t)T * C;
    FOR_EACH_INDEX(i, TC) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dout[b * TC + i];
        dwpe[i] += s;
    }
}

/* A negative token id gives a zero row and raises the bad-id flag. */
static void cuda_embed_fwd(const sdp_backend *be, float *out, const int *tokens, const float *wte,
                           const float *wpe, int B, int T, int C) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    size_t total = (size_t)B * T * C;
    if (total == 0) return;
    embed_fwd_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
        out, tokens, wte, wpe, T, C, total, ctx->input_errors);
    LAUNCH_CHECK();
}

static void cuda_embed_bwd(const sdp_backend *be, float *dwte, float *dwpe, const float *dout,
                           const int *tokens, int B, int T, int C) {
    sdp_cuda_ctx *ctx = cuda_ctx(be);
    size_t total = (size_t)B * T * C;
    if (total == 0) return;
    if (dwte) {
        embed_dwte_kernel<<<elementwise_blocks(total), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
            dwte, dout, tokens, C, total);
        LAUNCH_CHECK();
    }
    if (dwpe) {
        size_t TC = (size_t)T * C;
        embed_dwpe_kernel<<<elementwise_blocks(TC), ELEMENTWISE_THREADS, 0, ctx->stream>>>(
            dwpe, dout, B, T, C);
        LAUNCH_CHECK();
    }
}

void cuda_ops_embed(sdp_backend *t) {
    t->embed_fwd = cuda_embed_fwd;
    t->embed_bwd = cuda_embed_bwd;
}
