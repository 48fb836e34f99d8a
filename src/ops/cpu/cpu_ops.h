/* The CPU backend's ops, private to src/ops/cpu. Each kernel file keeps its table entries static
 * and fills them in with one cpu_ops_<file> function, so an op's signature is written only in
 * sdp/backend.h and at its definition; sdp_backend_cpu calls them all. The entries trust their
 * arguments: src/ops/dispatch.c has checked them. */
#ifndef SDP_OPS_CPU_OPS_H
#define SDP_OPS_CPU_OPS_H

#include "sdp/backend.h"

/* The GEMM provider the backend was made with (backend_cpu.c). */
sdp_gemm_provider cpu_gemm_provider(const sdp_backend *be);

void cpu_ops_attention(sdp_backend *t);
void cpu_ops_batchnorm(sdp_backend *t);
void cpu_ops_conv2d(sdp_backend *t);
void cpu_ops_embed(sdp_backend *t);
void cpu_ops_gelu(sdp_backend *t);
void cpu_ops_gemm(sdp_backend *t);
void cpu_ops_layernorm(sdp_backend *t);
void cpu_ops_linear(sdp_backend *t);
void cpu_ops_optim(sdp_backend *t);
void cpu_ops_pool(sdp_backend *t);
void cpu_ops_reduce(sdp_backend *t);
void cpu_ops_relu(sdp_backend *t);
void cpu_ops_residual(sdp_backend *t);
void cpu_ops_rmsnorm(sdp_backend *t);
void cpu_ops_rope(sdp_backend *t);
void cpu_ops_rows(sdp_backend *t);
void cpu_ops_softmax_xent(sdp_backend *t);
void cpu_ops_swiglu(sdp_backend *t);
void cpu_ops_vit_stem(sdp_backend *t);

#endif
