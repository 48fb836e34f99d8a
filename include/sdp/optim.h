/* Optimizers over a flat parameter buffer (on host memory; sdp_adamw_update and sdp_sgd_update of
 * sdp/ops.h run them where the parameters are). Weight decay is applied per segment, so the caller
 * decides from tensor metadata which tensors decay (by default: matrices yes; norms, biases and
 * embeddings no). Under SDP a worker only passes the segments it owns. */
#ifndef SDP_OPTIM_H
#define SDP_OPTIM_H

#include <stdbool.h>
#include <stddef.h>

#include "sdp/mem.h"

typedef enum { SDP_OPT_ADAMW, SDP_OPT_SGD } sdp_opt_kind;

typedef struct {
    sdp_opt_kind kind;
    float beta1, beta2, eps; /* AdamW */
    float momentum;          /* SGD */
    bool nesterov;           /* SGD */
    float weight_decay;      /* decoupled (AdamW) or L2-into-gradient (SGD) */
} sdp_opt_cfg;

/* A run of parameters updated together. Gradients and optimizer state may live in compact
 * buffers (SDP keeps them only for owned units), so each has its own offset. */
typedef struct {
    size_t offset, count; /* in the parameter buffer */
    bool decay;
    size_t grad_offset;  /* in the gradient buffer */
    size_t state_offset; /* in the optimizer state buffers (m, v) */
} sdp_opt_segment;

typedef struct {
    sdp_opt_cfg cfg;
    size_t n;
    float *m; /* AdamW first moment, or SGD momentum buffer */
    float *v; /* AdamW second moment (NULL for SGD) */
    long t;   /* number of steps taken (AdamW bias correction) */
} sdp_optim;

sdp_opt_cfg sdp_opt_defaults(sdp_opt_kind kind);
/* Allocates the state for n elements (the sum of all segments' counts) in SDP_MEM_OPTIM. */
void sdp_optim_init(sdp_optim *o, const sdp_opt_cfg *cfg, size_t n, sdp_mem *mem);
void sdp_optim_free(sdp_optim *o, sdp_mem *mem);
/* Bytes of optimizer state per parameter element (8 for AdamW, 4 for SGD with momentum). */
size_t sdp_optim_state_bytes_per_param(const sdp_opt_cfg *cfg);
/* One update of params from grads, over the given segments, at learning rate lr. */
void sdp_optim_step(sdp_optim *o, float *params, const float *grads, const sdp_opt_segment *segs,
                    int nseg, float lr);

/* Cosine decay from lr_max to lr_min over [warmup, total), after linear warmup from 0. */
float sdp_lr_at(long step, long warmup, long total, float lr_max, float lr_min);

/* The scale to apply to gradients with global norm `norm` so it does not exceed max_norm
 * (1 when max_norm <= 0 or the norm is already small). */
float sdp_clip_scale(double norm, float max_norm);

#endif
