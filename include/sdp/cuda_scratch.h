/* The CUDA backend's scratch, as sizes that need no device: the context's fixed blocks and
 * attention's score matrices. The backend allocates by them and `sdp plan --device cuda` predicts
 * by them, so the two cannot drift apart. Plain C, so the CPU-only build includes it too. */
#ifndef SDP_CUDA_SCRATCH_H
#define SDP_CUDA_SCRATCH_H

#include <stddef.h>

enum {
    /* The context's own workspace for small kernel temporaries (the gradient norm's partial
     * sums, RoPE's tables, batch-norm partials, cuDNN's convolution workspace). It grows, by
     * doubling, only when a kernel asks for more; of those only cuDNN's request depends on the
     * model, and it is chosen by cuDNN at run time. */
    SDP_CUDA_WORKSPACE_BYTES = 16 << 20,
    /* cuBLAS's scratch: the size its documentation recommends for Hopper (4 MiB suffices before
     * it). Given explicitly so that it is counted, and so that no GEMM runs short. */
    SDP_CUDA_CUBLAS_WORKSPACE_BYTES = 32 << 20,
};

/* Bytes every CUDA context holds from its creation: both workspaces and the input-error flag. */
static inline size_t sdp_cuda_context_scratch_bytes(void) {
    return (size_t)SDP_CUDA_WORKSPACE_BYTES + (size_t)SDP_CUDA_CUBLAS_WORKSPACE_BYTES +
           sizeof(unsigned);
}

/* Bytes of the scratch the CUDA backend's attention_fwd and _bwd take for batches of B sequences
 * of T tokens with at most H heads: two [H, T, T] score matrices (probabilities and their
 * gradients, one sequence at a time) and one float per row of the batch (B*H*T, the rows' dO.O). */
static inline size_t sdp_cuda_attention_scratch_bytes(int B, int T, int H) {
    return (2 * (size_t)H * T * T + (size_t)B * H * T) * sizeof(float);
}

#endif
