/* Column sums over rows, for the parameter gradients of bias and norm layers:
 *   dst[k][c] += sum over rows i < n of term(i, c)[k],   for k < NOUT outputs at once.
 *
 * Two passes, so that no atomics are needed and the sum runs in the same order every time: the
 * rows are cut into chunks, one block per (32 columns, chunk) writes a partial sum per column
 * into the workspace, then one thread per column adds the chunks in order. In a block the 32
 * threads of a warp read 32 adjacent columns of a row, so every read is one coalesced line.
 *
 * term is a functor with  __device__ void operator()(int i, int c, float out[NOUT]) const. */
#ifndef SDP_OPS_CUDA_COLUMN_SUMS_CUH
#define SDP_OPS_CUDA_COLUMN_SUMS_CUH

#include "ops/cuda/common.cuh"

enum {
    COLSUM_ROW_THREADS = 8,     /* threads along rows in a block (32 along columns) */
    COLSUM_MIN_CHUNK_ROWS = 64, /* fewer rows per chunk and the partials outweigh the work */
    COLSUM_MAX_CHUNKS = 256     /* enough blocks to fill a GPU even for narrow rows */
};

template <int NOUT> struct column_outputs { float *dst[NOUT]; /* NULL: that sum is not wanted */ };

template <int NOUT, class Term>
__global__ void column_partials_kernel(float *partials, int n, int C, int chunk_rows, Term term) {
    __shared__ float part[NOUT][COLSUM_ROW_THREADS][WARP + 1];
    int c = blockIdx.x * WARP + threadIdx.x;
    int r0 = blockIdx.y * chunk_rows;
    int r1 = min(n, r0 + chunk_rows);
    float acc[NOUT];
    for (int k = 0; k < NOUT; k++) acc[k] = 0.0f;
    if (c < C)
        for (int i = r0 + threadIdx.y; i < r1; i += COLSUM_ROW_THREADS) {
            float v[NOUT];
            term(i, c, v);
            for (int k = 0; k < NOUT; k++) acc[k] += v[k];
        }
    for (int k = 0; k < NOUT; k++) part[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    for (int k = 0; k < NOUT; k++) {
        float s = 0.0f;
        for (int y = 0; y < COLSUM_ROW_THREADS; y++) s += part[k][y][threadIdx.x];
        partials[((size_t)k * gridDim.y + blockIdx.y) * C + c] = s;
    }
}

template <int NOUT>
__global__ void column_finish_kernel(column_outputs<NOUT> out, const float *partials, int nchunks,
                                     int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int k = 0; k < NOUT; k++) {
        if (!out.dst[k]) continue;
        float s = 0.0f;
        for (int j = 0; j < nchunks; j++) s += partials[((size_t)k * nchunks + j) * C + c];
        out.dst[k][c] += s;
    }
}

template <int NOUT, class Term>
void column_sums(sdp_cuda_ctx *ctx, column_outputs<NOUT> out, int n, int C, Term term) {
    if (n <= 0 || C <= 0) return;
    int chunk_rows = COLSUM_MIN_CHUNK_ROWS;
    if (n > chunk_rows * COLSUM_MAX_CHUNKS) chunk_rows = (int)ceil_div(n, COLSUM_MAX_CHUNKS);
    int nchunks = (int)ceil_div(n, chunk_rows);
    float *partials = (float *)sdp_cuda_workspace(ctx, (size_t)NOUT * nchunks * C * sizeof(float));
    dim3 grid(ceil_div(C, WARP), nchunks), block(WARP, COLSUM_ROW_THREADS);
    column_partials_kernel<NOUT, Term>
        <<<grid, block, 0, ctx->stream>>>(partials, n, C, chunk_rows, term);
    LAUNCH_CHECK();
    column_finish_kernel<NOUT>
        <<<ceil_div(C, ELEMENTWISE_THREADS), ELEMENTWISE_THREADS, 0, ctx->stream>>>(out, partials,
                                                                                    nchunks, C);
    LAUNCH_CHECK();
}

#endif
