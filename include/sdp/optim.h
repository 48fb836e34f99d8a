/* Optimizers over a flat parameter buffer: their configuration, state and step count, and the
 * scalars each step derives from them. The element updates are ops (sdp_adamw_update and
 * sdp_sgd_update of sdp/ops.h), so that the CPU's and every device's kernels take the scalars
 * computed here, once. Weight decay is applied per segment (sdp_opt_segment of sdp/ops.h), so the
 * caller decides from tensor metadata which tensors decay (by default: matrices yes; norms, biases
 * and embeddings no). Under SDP a worker only passes the segments it owns. */
#ifndef SDP_OPTIM_H
#define SDP_OPTIM_H

#include <stdbool.h>
#include <stddef.h>

#include "sdp/mem.h"
#include "sdp/ops.h"

typedef enum { SDP_OPT_ADAMW, SDP_OPT_SGD } sdp_opt_kind;

typedef struct {
    sdp_opt_kind kind;
    float beta1, beta2, eps; /* AdamW */
    float momentum;          /* SGD */
    bool nesterov;           /* SGD */
    float weight_decay;      /* decoupled (AdamW) or L2-into-gradient (SGD) */
} sdp_opt_cfg;

typedef struct {
    sdp_opt_cfg cfg;
    size_t n;
    float *m; /* AdamW first moment, or SGD momentum buffer */
    float *v; /* AdamW second moment (NULL for SGD) */
    long t;   /* number of steps taken (AdamW bias correction) */
} sdp_optim;

sdp_opt_cfg sdp_opt_defaults(sdp_opt_kind kind);
/* Fails with one line naming the setting when cfg is not one sdp_optim_init accepts: for callers
 * that check their options before anything is allocated. */
void sdp_opt_cfg_check(const sdp_opt_cfg *cfg);
/* Allocates the state for n elements (the sum of all segments' counts) in SDP_MEM_OPTIM. */
void sdp_optim_init(sdp_optim *o, const sdp_opt_cfg *cfg, size_t n, sdp_mem *mem);
void sdp_optim_free(sdp_optim *o, sdp_mem *mem);
/* Bytes of optimizer state per parameter element (8 for AdamW, 4 for SGD with momentum). */
size_t sdp_optim_state_bytes_per_param(const sdp_opt_cfg *cfg);
/* One update of params from grads, over the given segments, at learning rate lr, on host memory
 * (o's state too): it advances o->t and runs the CPU's kernel. */
void sdp_optim_step(sdp_optim *o, float *params, const float *grads, const sdp_opt_segment *segs,
                    int nseg, float lr);
/* The same step where a backend holds params, grads and o's state (m and v allocated in its
 * memory): the update runs as be's adamw_update or sgd_update. */
void sdp_optim_step_on(const sdp_backend *be, sdp_optim *o, float *params, const float *grads,
                       const sdp_opt_segment *segs, int nseg, float lr);

/* The scalars of AdamW's step t (1-based: o->t once advanced) at learning rate lr: the
 * bias-correction factors, computed in double since they involve beta^t for large t. */
sdp_adamw_scalars sdp_adamw_scalars_at(const sdp_opt_cfg *cfg, long t, float lr);
/* The scalars of SGD's step t (t == 1: the momentum buffer starts as the gradient). */
sdp_sgd_scalars sdp_sgd_scalars_at(const sdp_opt_cfg *cfg, long t, float lr);

/* Cosine decay from lr_max to lr_min over [warmup, total), after linear warmup from 0. */
float sdp_lr_at(long step, long warmup, long total, float lr_max, float lr_min);

/* The scale to apply to gradients with global norm `norm` so it does not exceed max_norm
 * (1 when max_norm <= 0 or the norm is already small). */
float sdp_clip_scale(double norm, float max_norm);

#endif
