/* CUDA kernels, row-major, fp32 storage: the GPU counterparts of the CPU kernels, behind the CUDA
 * backend's table (backend_cuda.c). Private to src/ops/cuda/: everything else runs them through
 * the backend, sdp_backend_cuda (sdp/backend.h), and the ops of sdp/ops.h.
 * Matrix products run in the context's precision (sdp_precision: plain fp32, or bf16 tensor cores
 * with fp32 accumulation); every other kernel computes in fp32.
 *
 * Every sdp_cuda_<name> has the arguments of sdp_<name> in the same order, with a leading
 * sdp_cuda_ctx * and without the GEMM provider or CPU scratch; every array argument is a device
 * pointer. The conventions of sdp/ops.h hold unchanged: backward kernels ACCUMULATE (+=) into every
 * gradient they are given and skip a NULL one; sdp_cuda_softmax_xent_bwd alone overwrites.
 *
 * Everything runs asynchronously, in order, on ctx->stream. Only the calls that return a value
 * computed on the device (sdp_cuda_softmax_xent_fwd), sdp_cuda_download and sdp_cuda_sync wait
 * for the stream. Bad ids met on the device (a negative token, a target >= V) cannot fail at
 * once: the kernel leaves that element out, raises a flag, and the next of those waiting calls
 * fails with a clear message.
 *
 * Results match the CPU kernels to rounding, and are the same run to run, except that
 * sdp_cuda_embed_bwd adds token gradients with atomics, so its dwte may differ in the last bits
 * from run to run when a token repeats within a batch.
 */
#ifndef SDP_OPS_CUDA_H
#define SDP_OPS_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
/* MPI's C API only, also when nvcc compiles this header as C++. */
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <cudnn.h>

/* The sdp headers are C headers without extern "C" of their own. */
#ifdef __cplusplus
extern "C" {
#endif

#include "sdp/backend.h"
#include "sdp/mem.h"
#include "sdp/optim.h"

/* ---- context and device memory ------------------------------------------------------------- */

typedef struct sdp_cuda_block sdp_cuda_block; /* one live device allocation (context.cu) */

typedef struct {
    int device;
    sdp_precision precision; /* of every matrix product (sdp_cuda_gemm, attention) */
    cudaStream_t stream;     /* every kernel, copy and cuBLAS call of this context runs here */
    cublasHandle_t cublas;   /* bound to stream */
    /* Bound to stream; made by the first convolution plan (ops_cuda_vision.h), so that
     * contexts without convolutions (the transformers') never pay for a cuDNN handle's start-up
     * and device memory. NULL until then. */
    cudnnHandle_t cudnn;
    /* Device scratch of the kernels that need temporaries (column sums, attention's score
     * matrices and row sums, the loss total, the rope table). Reused by every call, which is safe
     * because all of them run in stream order; grown on demand. Counted as SDP_MEM_SCRATCH. */
    void *workspace;
    size_t workspace_bytes;
    unsigned *input_errors; /* device: flags raised by kernels that met bad ids */
    /* Device bytes by category, kept apart from the host sdp_mem because sdp_alloc cannot hold
     * device memory (its block header lives in front of the buffer). Only the tally fields are
     * used; dry is always false. */
    sdp_mem mem;
    sdp_cuda_block *blocks; /* host-side list of live allocations: pointer, bytes, category */
    /* Gradient reductions among devices (comm_nccl.c), made by the first comm_open: they run on
     * comm_stream, after comm_ready (recorded on stream), and stream waits for comm_done. */
    cudaStream_t comm_stream;
    cudaEvent_t comm_ready, comm_done;
} sdp_cuda_ctx;

/* Number of CUDA devices, or 0 when there is none or no working driver (never fails). */
int sdp_cuda_device_count(void);
/* Bytes in use on the current device by every process and context (cudaMemGetInfo's total minus
 * free), or 0 when the query fails. Sampled by callers to find a peak. */
size_t sdp_cuda_bytes_in_use(void);
/* Selects the device, creates the stream and the cuBLAS handle; matrix products will run in
 * `precision`. Failures are fatal. */
sdp_cuda_ctx *sdp_cuda_ctx_create(int device, sdp_precision precision);
/* Waits for the stream, then frees every allocation still live and the context itself. */
void sdp_cuda_ctx_destroy(sdp_cuda_ctx *ctx);

/* Zero-filled device memory, counted in ctx->mem under cat. */
void *sdp_cuda_malloc(sdp_cuda_ctx *ctx, sdp_memcat cat, size_t bytes);
void sdp_cuda_free(sdp_cuda_ctx *ctx, void *p);
/* Host to device (asynchronous with respect to the stream: src must stay valid until the next
 * waiting call) and device to host (waits, then reports bad ids like sdp_cuda_sync). */
void sdp_cuda_upload(sdp_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
void sdp_cuda_download(sdp_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
void sdp_cuda_zero(sdp_cuda_ctx *ctx, void *p, size_t bytes);
/* Waits for all work on the stream; fails clearly if a kernel met a bad id since the last check. */
void sdp_cuda_sync(sdp_cuda_ctx *ctx);
/* dst[r * ld_dst + c] = src[r * ld_src + c] for r < rows, c < cols, device to device. */
void sdp_cuda_copy_rows(sdp_cuda_ctx *ctx, float *dst, size_t ld_dst, const float *src,
                        size_t ld_src, size_t rows, size_t cols);

/* ---- GEMM ---------------------------------------------------------------------------------- */

/* C[M,N] = alpha * op(A) op(B) + beta * C, row-major, as sdp_gemm, through cuBLAS: in full fp32
 * (no TF32) when ctx->precision is SDP_PRECISION_FP32; with SDP_PRECISION_BF16, on tensor cores
 * with A and B rounded to bf16 and fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF; A, B and C
 * stay fp32 in memory). cuBLAS is column-major, and a row-major matrix read column-major is its
 * transpose, so this computes C^T = op(B)^T op(A)^T: B is passed as cuBLAS's first operand and A
 * as its second, with M and N swapped; the strides stay as they are. */
void sdp_cuda_gemm(sdp_cuda_ctx *ctx, bool ta, bool tb, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* ---- linear -------------------------------------------------------------------------------- */

void sdp_cuda_linear_fwd(sdp_cuda_ctx *ctx, float *out, const float *inp, const float *w,
                         const float *bias, int n, int ic, int oc);
void sdp_cuda_linear_bwd(sdp_cuda_ctx *ctx, float *dinp, float *dw, float *dbias, const float *dout,
                         const float *inp, const float *w, int n, int ic, int oc);
/* dbias[j] += sum over rows r < n of dout[r * ld + col0 + j], j < len (the gradient of a slice of
 * a bias; the CPU counterpart is the transformer's sliced bias gradient). Deterministic. */
void sdp_cuda_bias_slice_bwd(sdp_cuda_ctx *ctx, float *dbias, const float *dout, int n, int ld,
                             int col0, int len);

/* ---- embeddings ---------------------------------------------------------------------------- */

/* A negative token id gives a zero row and raises the bad-id flag. */
void sdp_cuda_embed_fwd(sdp_cuda_ctx *ctx, float *out, const int *tokens, const float *wte,
                        const float *wpe, int B, int T, int C);
void sdp_cuda_embed_bwd(sdp_cuda_ctx *ctx, float *dwte, float *dwpe, const float *dout,
                        const int *tokens, int B, int T, int C);

/* ---- norms (eps = 1e-5) -------------------------------------------------------------------- */

void sdp_cuda_layernorm_fwd(sdp_cuda_ctx *ctx, float *out, float *mean, float *rstd,
                            const float *inp, const float *w, const float *b, int n, int C);
void sdp_cuda_layernorm_bwd(sdp_cuda_ctx *ctx, float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean, const float *rstd,
                            int n, int C);
void sdp_cuda_rmsnorm_fwd(sdp_cuda_ctx *ctx, float *out, float *rstd, const float *inp,
                          const float *w, int n, int C);
void sdp_cuda_rmsnorm_bwd(sdp_cuda_ctx *ctx, float *dinp, float *dw, const float *dout,
                          const float *inp, const float *w, const float *rstd, int n, int C);

/* ---- activations --------------------------------------------------------------------------- */

void sdp_cuda_gelu_fwd(sdp_cuda_ctx *ctx, float *out, const float *inp, size_t n);
void sdp_cuda_gelu_bwd(sdp_cuda_ctx *ctx, float *dinp, const float *dout, const float *inp,
                       size_t n);
void sdp_cuda_swiglu_fwd(sdp_cuda_ctx *ctx, float *out, const float *inp, int n, int F);
void sdp_cuda_swiglu_bwd(sdp_cuda_ctx *ctx, float *dinp, const float *dout, const float *inp, int n,
                         int F);

/* ---- residual ------------------------------------------------------------------------------ */

void sdp_cuda_residual_fwd(sdp_cuda_ctx *ctx, float *out, const float *a, const float *b, float s,
                           size_t n);
void sdp_cuda_residual_bwd(sdp_cuda_ctx *ctx, float *da, float *db, const float *dout, float s,
                           size_t n);

/* ---- attention ----------------------------------------------------------------------------- */

/* Layouts as sdp_attention_fwd: qkv [B, T, 3*D], out [B, T, D], lse [B, H, T], D = H*hs, scale
 * 1/sqrt(hs). causal: query t sees keys 0..t; otherwise every key (bidirectional, as in ViT).
 * The products (scores, P V and the five of the backward) are cuBLAS GEMMs in the context's
 * precision, batched over the heads of one sequence at a time. scratch is device memory of
 * sdp_cuda_attention_scratch_bytes(B, T, H) bytes (sdp/cuda_scratch.h): the score matrices of one
 * sequence and the backward's row sums. */
void sdp_cuda_attention_fwd(sdp_cuda_ctx *ctx, float *out, float *lse, const float *qkv, int B,
                            int T, int H, int hs, bool causal, float *scratch);
/* dqkv += gradient w.r.t. qkv; out and lse are those saved by the forward with the same causal. */
void sdp_cuda_attention_bwd(sdp_cuda_ctx *ctx, float *dqkv, const float *dout, const float *qkv,
                            const float *out, const float *lse, int B, int T, int H, int hs,
                            bool causal, float *scratch);

void sdp_cuda_rope_fwd(sdp_cuda_ctx *ctx, float *qkv, int B, int T, int H, int hs, float theta);
void sdp_cuda_rope_bwd(sdp_cuda_ctx *ctx, float *dqkv, int B, int T, int H, int hs, float theta);

/* ---- loss ---------------------------------------------------------------------------------- */

/* As sdp_softmax_xent_fwd (probs may alias logits; targets < 0 ignored; returns the sum of the
 * losses, in double). Waits for the stream to return the sum, and fails there if a target was
 * >= V. */
double sdp_cuda_softmax_xent_fwd(sdp_cuda_ctx *ctx, float *losses, float *probs,
                                 const float *logits, const int *targets, int n, int V, int Vp);
/* As sdp_softmax_xent_bwd: OVERWRITES dlogits (which may alias probs). A target >= V (already
 * reported by the forward) gives a zero row. */
void sdp_cuda_softmax_xent_bwd(sdp_cuda_ctx *ctx, float *dlogits, const float *probs,
                               const int *targets, float dloss, int n, int V, int Vp);

/* How many rows r < n with labels[r] >= 0 have their largest logit (the first on a tie) at
 * column labels[r]; logits is [n, ld] with K <= ld classes. Waits for the stream. */
int sdp_cuda_count_correct(sdp_cuda_ctx *ctx, const float *logits, const int *labels, int n, int K,
                           int ld);

/* ---- ViT stem ------------------------------------------------------------------------------ */

/* As sdp_patch_gather: rows [B * (H/p) * (W/p), C*p*p] = the p x p patches of images
 * [B, C, H, W], each row in the order (c, i, j) of a conv weight. */
void sdp_cuda_patch_gather(sdp_cuda_ctx *ctx, float *rows, const float *images, int B, int C, int H,
                           int W, int p);
/* embed[b, 0] = cls + pos[0]; embed[b, t] = patches[b, t - 1] + pos[t] for 0 < t < T. */
void sdp_cuda_vit_embed_fwd(sdp_cuda_ctx *ctx, float *embed, const float *patches, const float *cls,
                            const float *pos, int B, int T, int C);
/* Its backward: dcls and dpos accumulate the batch's rows in order (NULL: skipped); dpatches
 * [B, T - 1, C] is overwritten with rows 1.. of each image's dembed. */
void sdp_cuda_vit_embed_bwd(sdp_cuda_ctx *ctx, float *dpatches, float *dcls, float *dpos,
                            const float *dembed, int B, int T, int C);

/* ---- optimizer ----------------------------------------------------------------------------- */

/* One AdamW step with the formula of src/optim/adamw.c (torch.optim.AdamW). The state is what
 * sdp_optim holds, passed apart because it lives on the device: cfg, t (the 1-based number of
 * this step, as o->t after sdp_optim_step has advanced it) and the moments m and v (device).
 * params, grads, m and v are device pointers; segs is a host array, offsets as in sdp_optim_step.
 */
void sdp_cuda_adamw_update(sdp_cuda_ctx *ctx, const sdp_opt_cfg *cfg, long t, float *m, float *v,
                           float *params, const float *grads, const sdp_opt_segment *segs, int nseg,
                           float lr);
/* One SGD step with the formula of src/optim/sgd.c (torch.optim.SGD, dampening 0), arguments as
 * above: buf is the momentum buffer (NULL when cfg->momentum is 0) at the segments' state offsets,
 * and t == 1 makes it start as the gradient. */
void sdp_cuda_sgd_update(sdp_cuda_ctx *ctx, const sdp_opt_cfg *cfg, long t, float *buf,
                         float *params, const float *grads, const sdp_opt_segment *segs, int nseg,
                         float lr);

/* ---- reductions (reduce.cu) ---------------------------------------------------------------- */

/* x *= s (nothing when s == 1). */
void sdp_cuda_scale(sdp_cuda_ctx *ctx, float *x, size_t n, float s);
/* Waits: sum of x[i]^2 in double, in an order that depends on n alone. */
double sdp_cuda_sumsq(sdp_cuda_ctx *ctx, const float *x, size_t n);

/* ---- communication among devices (comm_nccl.c) --------------------------------------------- */

/* The backend's comm_open, comm_close, allreduce_start, broadcast_start and allreduce_wait
 * (sdp/backend.h) over
 * NCCL: one NCCL communicator per MPI communicator, bootstrapped over it, and one communication
 * stream per context, ordered after the compute stream by events. */
void *sdp_cuda_comm_open(sdp_cuda_ctx *ctx, MPI_Comm comm);
void sdp_cuda_comm_close(sdp_cuda_ctx *ctx, void *dc);
void sdp_cuda_allreduce_start(sdp_cuda_ctx *ctx, void *dc, float *x, size_t n);
void sdp_cuda_broadcast_start(sdp_cuda_ctx *ctx, void *dc, float *x, size_t n, int root);
void sdp_cuda_allreduce_wait(sdp_cuda_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
