/* The CUDA backend's scratch, as sizes that need no device: the context's fixed blocks and
 * attention's scratch. The backend allocates by them and `sdp plan --device cuda` predicts
 * by them, so the two cannot drift apart. Plain C, so the CPU-only build includes it too. */
#ifndef SDP_CUDA_SCRATCH_H
#define SDP_CUDA_SCRATCH_H

#include "sdp/backend.h"

#include <stdbool.h>
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
    /* bf16 copies of GEMM operands, for the products that take native bf16 operands
     * (sdp_backend_cuda_set_bf16_operands): a product whose operands do not fit is taken in
     * slices of its inner dimension. Allocated at the first such product, and not yet in
     * sdp_cuda_context_scratch_bytes: the path is off by default until a GPU has timed it. */
    SDP_CUDA_CAST_BYTES = 64 << 20,
};

/* Bytes every CUDA context holds from its creation: both workspaces and the input-error flag. */
static inline size_t sdp_cuda_context_scratch_bytes(void) {
    return (size_t)SDP_CUDA_WORKSPACE_BYTES + (size_t)SDP_CUDA_CUBLAS_WORKSPACE_BYTES +
           sizeof(unsigned);
}

/* The head sizes the fused bf16 attention kernels are built for (src/ops/cuda/flash_attention.cuh:
 * one instantiation each); other head sizes take the cuBLAS path. */
static inline bool sdp_cuda_fused_head_size(int hs) {
    return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

/* Whether attention over B sequences of H heads of size hs runs the fused kernels, on a device
 * that has them: bf16 products with the fused attention on (the default), a head size they are
 * built for, and a grid of B*H blocks that CUDA allows. "A device that has them" is sm_80 or newer
 * with the shared memory they take, which every sm_80 and sm_90 card has; the backend checks
 * that too, and `sdp plan --device cuda` assumes it. */
static inline bool sdp_cuda_attention_fused(sdp_precision precision, bool fused_on, int B, int H,
                                            int hs) {
    return precision == SDP_PRECISION_BF16 && fused_on && sdp_cuda_fused_head_size(hs) &&
           (long long)B * H <= 65535;
}

/* Bytes of the scratch the CUDA backend's attention_fwd and _bwd take for batches of B sequences
 * of T tokens with at most H heads: one float per row of the batch (B*H*T, the rows' dO.O), and on
 * the cuBLAS path (fused false) two [H, T, T] score matrices too (probabilities and their
 * gradients, one sequence at a time). The fused kernels keep their scores on chip. */
static inline size_t sdp_cuda_attention_scratch_bytes(bool fused, int B, int T, int H) {
    const size_t rows = (size_t)B * H * T;
    return ((fused ? 0 : 2 * (size_t)H * T * T) + rows) * sizeof(float);
}

#endif
