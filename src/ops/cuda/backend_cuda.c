/* The CUDA backend: the kernels of src/ops/cuda/ over device memory of one sdp_cuda_ctx
 * (be->ctx). Each kernel file fills in its own entries (cuda_ops.h), the memory ones included
 * (context.cu); this file makes the context and the table. */
#include "sdp/backend.h"
#include "sdp/check.h"
#include "ops/cuda/cuda_ops.h"

#include <stdlib.h>

/* The name of every table made here. sdp_backend_cuda_cublas compares the pointer, not the text:
 * only sdp_backend_cuda sets it, so no other table (the emulated device's, say) passes for one. */
static const char backend_name[] = "cuda";

void *sdp_backend_cuda_cublas(const sdp_backend *be) {
    SDP_CHECK(be && be->name == backend_name, "sdp_backend_cuda_cublas: not a CUDA backend");
    return cuda_ctx(be)->cublas;
}

bool sdp_backend_cuda_set_fused_attention(sdp_backend *be, bool fused) {
    SDP_CHECK(be && be->name == backend_name,
              "sdp_backend_cuda_set_fused_attention: not a CUDA backend");
    const bool was = cuda_ctx(be)->fused_attention;
    cuda_ctx(be)->fused_attention = fused;
    return was;
}

bool sdp_backend_cuda_set_bf16_operands(sdp_backend *be, bool bf16) {
    SDP_CHECK(be && be->name == backend_name,
              "sdp_backend_cuda_set_bf16_operands: not a CUDA backend");
    const bool was = cuda_ctx(be)->bf16_operands;
    cuda_ctx(be)->bf16_operands = bf16;
    return was;
}

bool sdp_backend_cuda_built(void) {
    return true;
}

bool sdp_backend_cuda_available(void) {
    return sdp_cuda_device_count() > 0;
}

int sdp_backend_cuda_devices(void) {
    return sdp_cuda_device_count();
}

bool sdp_backend_cuda_entries(sdp_backend *t) {
    cuda_ops_context(t);
    cuda_ops_comm_nccl(t);
    cuda_ops_adamw(t);
    cuda_ops_sgd(t);
    cuda_ops_reduce(t);
    cuda_ops_gemm(t);
    cuda_ops_linear(t);
    cuda_ops_embed(t);
    cuda_ops_layernorm(t);
    cuda_ops_rmsnorm(t);
    cuda_ops_activations(t);
    cuda_ops_residual(t);
    cuda_ops_dropout(t);
    cuda_ops_attention(t);
    cuda_ops_rope(t);
    cuda_ops_softmax_xent(t);
    cuda_ops_vit(t);
    cuda_ops_conv2d(t);
    cuda_ops_batchnorm(t);
    cuda_ops_relu(t);
    cuda_ops_pool(t);
    cuda_ops_add_rows(t);
    return true;
}

sdp_backend *sdp_backend_cuda(int device, sdp_precision precision) {
    sdp_cuda_ctx *ctx = sdp_cuda_ctx_create(device, precision);
    sdp_backend *be = sdp_xmalloc(sizeof *be, "the CUDA backend");
    *be = (sdp_backend){.name = backend_name, .ctx = ctx, .mem = &ctx->mem};
    sdp_backend_cuda_entries(be);
    return be;
}
