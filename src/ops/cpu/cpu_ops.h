/* The CPU backend's ops, private to src/ops/cpu. Each kernel file keeps its table entries static
 * and fills them in with one cpu_ops_<file> function, so an op's signature is written only in
 * sdp/backend.h and at its definition; sdp_backend_cpu calls them all. The entries trust their
 * arguments: src/ops/ops.c has checked them. */
#ifndef SDP_OPS_CPU_OPS_H
#define SDP_OPS_CPU_OPS_H

#include "sdp/backend.h"

/* What sdp_backend_cpu (backend_cpu.c) allocates: the table handed out, and what its kernels
 * read through ctx. Defined here, not there, so that the kernels depend on this header alone
 * and backend_cpu.c, which calls them, is not called back. */
typedef struct {
    sdp_backend table;
    sdp_gemm_provider gemm;
} cpu_backend;

/* The GEMM provider the backend was made with. Read through ctx, which the emulated device's
 * copy of the table keeps. */
static inline sdp_gemm_provider cpu_gemm_provider(const sdp_backend *be) {
    return ((const cpu_backend *)be->ctx)->gemm;
}

void cpu_ops_attention(sdp_backend *t);
void cpu_ops_batchnorm(sdp_backend *t);
void cpu_ops_conv2d(sdp_backend *t);
void cpu_ops_dropout(sdp_backend *t);
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
