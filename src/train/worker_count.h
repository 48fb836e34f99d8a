/* Every worker's model counted without allocating (sdp plan, io_memplan): the elements of its
 * layout, the counting allocator's peaks and its training flops. A worker's model depends on the
 * plan only through its subnetwork spec (sdp_subnet_spec_make), and through that only through
 * the kinds of block it keeps, in order, with their kept atoms (the cyclic assignment gives most
 * workers the same number of each group's chunks; with block units a transformer worker's model
 * depends on how many layers it keeps), so each distinct shape is built once: at N = 1024 a
 * handful of builds instead of 1024. */
#ifndef SDP_TRAIN_WORKER_COUNT_H
#define SDP_TRAIN_WORKER_COUNT_H

#include <stdbool.h>
#include <stddef.h>

#include "sdp/backend.h"
#include "sdp/mem.h"
#include "sdp/model.h"
#include "sdp/plan.h"

typedef struct {
    size_t numel;              /* elements of the worker's layout */
    size_t peak[SDP_MEM_NCAT]; /* what the model's creation allocated, at its peak */
    double flops_per_example;  /* the model's train_flops_per_example */
    size_t acts_pool;          /* what its activations take as one pool (sdp_mem_pool_open) */
} worker_count;

/* A backend that allocates nothing and counts into dry (the caller's choice of device). */
typedef sdp_backend *(*worker_count_backend)(const void *ctx, sdp_mem *dry);

/* A backend that allocates nothing and counts into dry what a model allocates on the CUDA device
 * (cuda, with matrix products in `precision`) or on the host: the model asks its backend for
 * scratch sizes and nothing else differs between devices, so the CPU table with CUDA's attention
 * and convolution scratch sizes counts a CUDA worker. It assumes the fused attention is on, as
 * sdp train leaves it (in bf16, a device of sm_80 or newer). The context's own scratch
 * (sdp_cuda_context_scratch_bytes) is the caller's to add. */
sdp_backend *train_counting_backend(bool cuda, sdp_precision precision, sdp_gemm_provider gemm,
                                    sdp_mem *dry);

/* Worker `rank`'s model, built in counting mode (SDP_MODEL_TRAIN_BARE) on make(ctx)'s backend:
 * the reference that train_worker_count_all equals. */
worker_count train_worker_count_one(const sdp_model_config *cfg, const sdp_plan *p,
                                    const sdp_layout *full, int rank, int B, int T,
                                    worker_count_backend make, const void *ctx);
/* out[r] for every rank r of the plan, each distinct shape built once. */
void train_worker_count_all(const sdp_model_config *cfg, const sdp_plan *p, const sdp_layout *full,
                            int B, int T, worker_count_backend make, const void *ctx,
                            worker_count *out);
/* The CPU backend counting into dry, ctx pointing at the sdp_gemm_provider. */
sdp_backend *train_worker_count_cpu(const void *ctx, sdp_mem *dry);

#endif
