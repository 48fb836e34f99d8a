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

bool sdp_backend_cuda_available(void) {
    return sdp_cuda_device_count() > 0;
}

int sdp_backend_cuda_devices(void) {
    return sdp_cuda_device_count();
}

sdp_backend *sdp_backend_cuda(int device, sdp_precision precision) {
    sdp_cuda_ctx *ctx = sdp_cuda_ctx_create(device, precision);
    sdp_backend *be = malloc(sizeof *be);
    SDP_CHECK(be, "out of memory creating the CUDA backend");
    *be = (sdp_backend){.name = backend_name, .ctx = ctx, .mem = &ctx->mem};
    cuda_ops_context(be);
    cuda_ops_comm_nccl(be);
    cuda_ops_adamw(be);
    cuda_ops_sgd(be);
    cuda_ops_reduce(be);
    cuda_ops_gemm(be);
    cuda_ops_linear(be);
    cuda_ops_embed(be);
    cuda_ops_layernorm(be);
    cuda_ops_rmsnorm(be);
    cuda_ops_activations(be);
    cuda_ops_residual(be);
    cuda_ops_attention(be);
    cuda_ops_rope(be);
    cuda_ops_softmax_xent(be);
    cuda_ops_vit(be);
    cuda_ops_conv2d(be);
    cuda_ops_batchnorm(be);
    cuda_ops_relu(be);
    cuda_ops_pool(be);
    cuda_ops_add_rows(be);
    return be;
}
