/* A compute backend: every op the models (gpt, llama, vit, resnet) run, and the memory their
 * buffers live in, as one table of function pointers. The model code is written once against
 * this table and runs on the CPU (sdp_backend_cpu: the kernels of src/ops/cpu/ over host memory)
 * or on a CUDA device (sdp_backend_cuda: those of src/ops/cuda/ over device memory).
 *
 * Where an op lives:
 *  - declared here, once: its table entry is the signature every backend implements;
 *  - called and checked through sdp_<op>(be, ...) of sdp/ops.h and sdp/ops_vision.h (the same
 *    arguments), defined in src/ops/ops.c, which checks shapes and arguments and then runs
 *    the entry: implementations may assume valid arguments;
 *  - implemented by each backend (the CPU's kernel files fill in their own entries);
 *  - tested by tests/test_backend_ops.c, every entry of a backend against the CPU's.
 * The memory, communication and lifetime entries (alloc ... sync, comm_open ... allreduce_wait,
 * destroy, bytes_in_use) are the backend's services, not ops: they are called as be->x(be, ...).
 *
 * Every entry takes the backend as its first argument, and every array is backend memory (host
 * memory for the CPU, device memory for CUDA). The conventions of sdp/ops.h hold: backward ops
 * accumulate (+=) into the gradients they are given and skip NULL ones; softmax_xent_bwd alone
 * overwrites. Ops run in call order; on CUDA they are asynchronous, and only the entries that
 * return a value computed from backend memory (softmax_xent_fwd, count_correct, sumsq), download
 * and sync wait for them.
 *
 * Host arrays cross only through upload and download. */
#ifndef SDP_BACKEND_H
#define SDP_BACKEND_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>

#include "sdp/mem.h"
#include "sdp/ops.h"
#include "sdp/ops_vision.h"

typedef struct sdp_backend sdp_backend;

struct sdp_backend {
    const char *name; /* "cpu" or "cuda", for reports */
    void *ctx;        /* the implementation's state (cuda: its sdp_cuda_ctx *) */
    sdp_mem *mem;     /* bytes of this backend's memory by category (host or device) */
    bool host_memory; /* its buffers are host memory, which MPI and the host may read in place */

    /* Waits, frees what ctx holds and the backend itself (sdp_backend_destroy calls it). */
    void (*destroy)(sdp_backend *be);
    /* The optimizers' updates of sdp/ops.h on backend memory, with the step's scalars as
     * src/optim computed them (sdp_adamw_scalars_at, sdp_sgd_scalars_at): m and v are AdamW's
     * moments, buf SGD's momentum buffer (NULL when k->momentum is 0), all indexed by the
     * segments' state offsets. The CPU's run sdp_cpu_adamw_update and sdp_cpu_sgd_update. */
    void (*adamw_update)(const sdp_backend *be, const sdp_adamw_scalars *k, float *m, float *v,
                         float *params, const float *grads, const sdp_opt_segment *segs, int nseg);
    void (*sgd_update)(const sdp_backend *be, const sdp_sgd_scalars *k, float *buf, float *params,
                       const float *grads, const sdp_opt_segment *segs, int nseg);
    /* The bytes in use in the backend's memory (for the peak): the device's, or on the CPU its
     * mem's total. */
    size_t (*bytes_in_use)(const sdp_backend *be);

    /* ---- reductions: the gradient norm and clipping where the gradients are ---- */
    void (*scale)(const sdp_backend *be, float *x, size_t n, float s);
    /* Waits: the sum of squares of x, accumulated in double in a fixed order (the same result
     * from run to run). */
    double (*sumsq)(const sdp_backend *be, const float *x, size_t n);

    /* ---- communication among devices ---- */
    /* A communicator over the ranks of `comm` that reduces device memory directly (NCCL), or NULL
     * when the ranks cannot have one (two of them share a device, or there is one rank): the
     * caller then stages through host memory. The CPU's is always NULL: with host_memory, MPI
     * reduces the buffers in place. Collective over comm; every rank gets the same answer. */
    void *(*comm_open)(const sdp_backend *be, MPI_Comm comm);
    void (*comm_close)(const sdp_backend *be, void *dc);
    /* Starts summing x[0, n) in place over dc's ranks once every kernel issued so far is done, on
     * a communication stream, so the kernels issued next overlap it. Every rank of dc must start
     * the same reductions in the same order. */
    void (*allreduce_start)(const sdp_backend *be, void *dc, float *x, size_t n);
    /* Starts sending x[0, n) from dc's rank `root` to its other ranks, in place, ordered as
     * allreduce_start is (allreduce_wait orders later kernels after it too). */
    void (*broadcast_start)(const sdp_backend *be, void *dc, float *x, size_t n, int root);
    /* --zero 1, ordered as allreduce_start is. Rank j of dc owns x[displs[j], displs[j] +
     * counts[j]) (counts may differ by rank). reduce_scatter_start leaves at each rank's own
     * part the sum over dc's ranks (the rest of x is spent); allgather_start sends each rank's
     * part to every other rank, in place. */
    void (*reduce_scatter_start)(const sdp_backend *be, void *dc, float *x, const int *counts,
                                 const int *displs);
    void (*allgather_start)(const sdp_backend *be, void *dc, float *x, const int *counts,
                            const int *displs);
    /* Orders every kernel issued from now on after the reductions and broadcasts started so far. */
    void (*allreduce_wait)(const sdp_backend *be);

    /* ---- memory ---- */
    /* Zero-filled, counted in mem under cat. With a dry mem (CPU only) returns NULL. */
    void *(*alloc)(const sdp_backend *be, sdp_memcat cat, size_t bytes);
    void (*free)(const sdp_backend *be, void *p);
    void (*zero)(const sdp_backend *be, void *p, size_t bytes);
    /* Host to backend: the host array may be reused as soon as upload returns. */
    void (*upload)(const sdp_backend *be, void *dst, const void *src, size_t bytes);
    /* Backend to host: waits. */
    void (*download)(const sdp_backend *be, void *dst, const void *src, size_t bytes);
    /* Waits for every kernel issued so far. */
    void (*sync)(const sdp_backend *be);
    /* dst[r * ld_dst + c] = src[r * ld_src + c] for r < rows, c < cols (backend to backend). */
    void (*copy_rows)(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                      size_t ld_src, size_t rows, size_t cols);

    /* ---- dense algebra ---- */
    void (*gemm)(const sdp_backend *be, bool ta, bool tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
    void (*linear_fwd)(const sdp_backend *be, float *out, const float *inp, const float *w,
                       const float *bias, int n, int ic, int oc);
    void (*linear_bwd)(const sdp_backend *be, float *dinp, float *dw, float *dbias,
                       const float *dout, const float *inp, const float *w, int n, int ic, int oc);
    /* dbias[j] += sum over rows r < n of dout[r * ld + col0 + j], j < len: the gradient of a slice
     * of a bias (SDP backward masking with neuron units). */
    void (*bias_slice_bwd)(const sdp_backend *be, float *dbias, const float *dout, int n, int ld,
                           int col0, int len);

    /* ---- embeddings and norms ---- */
    void (*embed_fwd)(const sdp_backend *be, float *out, const int *tokens, const float *wte,
                      const float *wpe, int B, int T, int C);
    void (*embed_bwd)(const sdp_backend *be, float *dwte, float *dwpe, const float *dout,
                      const int *tokens, int B, int T, int C);
    void (*layernorm_fwd)(const sdp_backend *be, float *out, float *mean, float *rstd,
                          const float *inp, const float *w, const float *b, int n, int C);
    void (*layernorm_bwd)(const sdp_backend *be, float *dinp, float *dw, float *db,
                          const float *dout, const float *inp, const float *w, const float *mean,
                          const float *rstd, int n, int C);
    void (*rmsnorm_fwd)(const sdp_backend *be, float *out, float *rstd, const float *inp,
                        const float *w, int n, int C);
    void (*rmsnorm_bwd)(const sdp_backend *be, float *dinp, float *dw, const float *dout,
                        const float *inp, const float *w, const float *rstd, int n, int C);

    /* ---- activations and residuals ---- */
    /* out may be inp */
    void (*gelu_fwd)(const sdp_backend *be, float *out, const float *inp, size_t n);
    void (*gelu_bwd)(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                     size_t n);
    void (*swiglu_fwd)(const sdp_backend *be, float *out, const float *inp, int n, int F);
    void (*swiglu_bwd)(const sdp_backend *be, float *dinp, const float *dout, const float *inp,
                       int n, int F);
    void (*residual_fwd)(const sdp_backend *be, float *out, const float *a, const float *b, float s,
                         size_t n);
    void (*residual_bwd)(const sdp_backend *be, float *da, float *db, const float *dout, float s,
                         size_t n);

    /* ---- dropout (masks of bits, drawn from a stream: sdp/ops.h) ---- */
    void (*dropout_mask)(const sdp_backend *be, uint32_t *mask, size_t n, sdp_dropout d);
    void (*dropout_fwd)(const sdp_backend *be, float *out, const float *inp, const uint32_t *mask,
                        float scale, size_t n);
    void (*dropout_bwd)(const sdp_backend *be, float *dinp, const float *dout, const uint32_t *mask,
                        float scale, size_t n);

    /* ---- attention ---- */
    /* Bytes of the scratch that attention_fwd/bwd need for batches of B sequences of T tokens
     * with at most H heads of hs (0 where the backend keeps its own). */
    size_t (*attention_scratch_bytes)(const sdp_backend *be, int B, int T, int H, int hs);
    void (*attention_fwd)(const sdp_backend *be, float *out, float *lse, const float *qkv, int B,
                          int T, int H, int hs, bool causal, sdp_dropout drop, float *scratch);
    void (*attention_bwd)(const sdp_backend *be, float *dqkv, const float *dout, const float *qkv,
                          const float *out, const float *lse, int B, int T, int H, int hs,
                          bool causal, sdp_dropout drop, float *scratch);
    void (*rope_fwd)(const sdp_backend *be, float *qkv, int B, int T, int H, int hs, float theta);
    void (*rope_bwd)(const sdp_backend *be, float *dqkv, int B, int T, int H, int hs, float theta);

    /* ---- loss ---- */
    /* Waits: returns the summed loss (in double) to the host. */
    double (*softmax_xent_fwd)(const sdp_backend *be, float *losses, float *probs,
                               const float *logits, const int *targets, int n, int V, int Vp);
    void (*softmax_xent_bwd)(const sdp_backend *be, float *dlogits, const float *probs,
                             const int *targets, float dloss, int n, int V, int Vp);
    /* Waits: how many rows r < n with labels[r] >= 0 have their largest logit (the first, on a
     * tie) at column labels[r]; logits is [n, ld]. */
    int (*count_correct)(const sdp_backend *be, const float *logits, const int *labels, int n,
                         int K, int ld);

    /* ---- ViT stem ---- */
    /* rows [B * (H/p) * (W/p), C*p*p] = the non-overlapping p x p patches of images
     * [B, C, H, W], each row in the order (c, i, j) of a conv weight [D, C, p, p]. The patch
     * embedding is this gather and a linear layer. */
    void (*patch_gather)(const sdp_backend *be, float *rows, const float *images, int B, int C,
                         int H, int W, int p);
    /* embed[b, 0] = cls + pos[0]; embed[b, t] = patches[b, t - 1] + pos[t] for 0 < t < T. */
    void (*vit_embed_fwd)(const sdp_backend *be, float *embed, const float *patches,
                          const float *cls, const float *pos, int B, int T, int C);
    /* Its backward from dembed [B, T, C]: dcls and dpos accumulate (NULL: skipped); dpatches
     * [B, T - 1, C] is overwritten. */
    void (*vit_embed_bwd)(const sdp_backend *be, float *dpatches, float *dcls, float *dpos,
                          const float *dembed, int B, int T, int C);

    /* ---- vision (ResNet) ---- */
    /* The ops of sdp/ops_vision.h. A convolution runs through a plan, made once per shape by
     * conv_plan_create: algo picks the CPU implementation, and other backends choose their own.
     * Plans allocate nothing through be->mem, so they are made under a dry mem as well.
     * conv_scratch_bytes is the scratch conv2d_fwd and conv2d_bwd take (0 where the backend keeps
     * its own). As on the CPU, the backward accumulates into dinp, dw and dbias and skips NULL
     * ones; inp is needed only for dw, w only for dinp. */
    void *(*conv_plan_create)(const sdp_backend *be, const sdp_conv_shape *shape,
                              sdp_conv_algo algo);
    void (*conv_plan_free)(const sdp_backend *be, void *plan);
    size_t (*conv_scratch_bytes)(const sdp_backend *be, const void *plan);
    void (*conv2d_fwd)(const sdp_backend *be, const void *plan, float *out, const float *inp,
                       const float *w, const float *bias, float *scratch);
    void (*conv2d_bwd)(const sdp_backend *be, const void *plan, float *dinp, float *dw,
                       float *dbias, const float *dout, const float *inp, const float *w,
                       float *scratch);
    void (*batchnorm_fwd_train)(const sdp_backend *be, float *out, float *mean, float *rstd,
                                float *running_mean, float *running_var, const float *inp,
                                const float *gamma, const float *beta, int B, int C, int H, int W);
    void (*batchnorm_fwd_eval)(const sdp_backend *be, float *out, const float *inp,
                               const float *running_mean, const float *running_var,
                               const float *gamma, const float *beta, int B, int C, int H, int W);
    void (*batchnorm_bwd)(const sdp_backend *be, float *dinp, float *dgamma, float *dbeta,
                          const float *dout, const float *inp, const float *gamma,
                          const float *mean, const float *rstd, int B, int C, int H, int W);
    void (*relu_fwd)(const sdp_backend *be, float *out, const float *inp, size_t n);
    void (*relu_bwd)(const sdp_backend *be, float *dinp, const float *dout, const float *out,
                     size_t n);
    void (*avgpool_fwd)(const sdp_backend *be, float *out, const float *inp, int B, int C, int H,
                        int W, int k);
    void (*avgpool_bwd)(const sdp_backend *be, float *dinp, const float *dout, int B, int C, int H,
                        int W, int k);
    void (*global_avgpool_fwd)(const sdp_backend *be, float *out, const float *inp, int B, int C,
                               int H, int W);
    void (*global_avgpool_bwd)(const sdp_backend *be, float *dinp, const float *dout, int B, int C,
                               int H, int W);
    /* dst[r * ld_dst + c] += src[r * ld_src + c] for r < rows, c < cols (backend to backend): an
     * owned slice of a whole gradient added into the caller's buffer (the ResNet's sliced
     * gradients under SDP backward masking). */
    void (*add_rows)(const sdp_backend *be, float *dst, size_t ld_dst, const float *src,
                     size_t ld_src, size_t rows, size_t cols);
};

/* The CPU backend: the kernels of src/ops/cpu/ with GEMMs by `gemm`, over host memory from
 * sdp_alloc counted in mem (which may be dry: then nothing is allocated or computed). */
sdp_backend *sdp_backend_cpu(sdp_gemm_provider gemm, sdp_mem *mem);

/* The emulated device (--device emulated): the CPU backend behind a device's interface, its
 * buffers host memory flagged as a device's (host_memory false), counted in a tally of its own,
 * its owner groups reduced over MPI communicators standing in for NCCL's, or, when `shared` (as
 * for ranks that share one GPU), over none, so that the synchronisation stages through host
 * memory. It runs the trainer's device paths on any machine, computing exactly what the CPU
 * backend computes. */
sdp_backend *sdp_backend_emulated(sdp_gemm_provider gemm, bool shared);

/* Arithmetic of the CUDA backend's matrix products (GEMMs and attention's products).
 * FP32: plain fp32 cuBLAS (no TF32), results equal the CPU's to rounding: for parity tests.
 * BF16: tensor cores; operands are rounded to bf16 inside cuBLAS, products accumulate in fp32.
 * Parameters, gradients, optimizer state and activations stay fp32 in memory in both modes. */
typedef enum { SDP_PRECISION_FP32, SDP_PRECISION_BF16 } sdp_precision;

/* The CUDA backend on device `device` (its own context, stream and device memory, counted in
 * its own mem), its matrix products in `precision`. Defined by the sdp_cuda library; programs
 * built without it link src/ops/nocuda/, where it fails: "this sdp was built without CUDA: ...". */
sdp_backend *sdp_backend_cuda(int device, sdp_precision precision);
/* The cuBLAS handle (a cublasHandle_t) of a backend made by sdp_backend_cuda, bound to its stream:
 * for programs that time cuBLAS itself beside the backend (bench/bench_cuda_train.c). */
void *sdp_backend_cuda_cublas(const sdp_backend *be);
/* Whether bf16 attention on a backend made by sdp_backend_cuda runs the fused kernels (true: the
 * score matrices stay on chip, the default, since it measured faster on the H200 (docs/cuda.md))
 * or cuBLAS GEMMs over score matrices in device memory (false; how fp32 always runs it, and how
 * bf16 runs head sizes other than 16, 32, 64 and 128, and devices with too little shared memory
 * for the fused kernels). Returns the previous setting. For the benchmarks and tests that
 * compare them (bench/bench_cuda_train.c, tests/test_backend_ops.c). */
bool sdp_backend_cuda_set_fused_attention(sdp_backend *be, bool fused);
/* Whether bf16 GEMMs on a backend made by sdp_backend_cuda round their operands into bf16 copies
 * first (true: cuBLAS then runs native bf16 tensor-core kernels) or hand cuBLAS the fp32 operands
 * with the FAST_16BF compute type (false, the default: cuBLAS serves those through TF32 kernels).
 * Both accumulate in fp32 into fp32 outputs. No effect in fp32. Returns the previous setting. For
 * the benchmarks and tests that compare them, until a GPU has shown which is faster. */
bool sdp_backend_cuda_set_bf16_operands(sdp_backend *be, bool bf16);
/* Fills t's entries with the CUDA backend's, leaving name, ctx and mem alone: what
 * sdp_backend_cuda does after making its context. Needs no device, so that a build without a
 * GPU can check that every slot of the table has a CUDA entry (tests/test_backend_ops.c). Returns
 * false, filling nothing, in a build without the CUDA backend. */
bool sdp_backend_cuda_entries(sdp_backend *t);
/* Whether this program was linked with the CUDA backend (sdp-cuda), whatever the devices; never
 * touches a device. SDP_CUDA_ABSENT says what to do when it was not. */
bool sdp_backend_cuda_built(void);
#define SDP_CUDA_ABSENT                                                                            \
    "this sdp was built without CUDA: run sdp-cuda (built beside sdp when nvcc is found), or "     \
    "install nvcc (CUDA 12 or 13) and rebuild"
/* Whether this build has the CUDA backend and a device to run it on (never fails). */
bool sdp_backend_cuda_available(void);
/* The CUDA devices this process sees (0 without the CUDA backend or a device; never fails). */
int sdp_backend_cuda_devices(void);

/* Waits for the backend, frees what its context holds, and the backend itself. NULL: nothing. */
void sdp_backend_destroy(sdp_backend *be);

#endif
