/* What a model tells the rest of sdp about itself: a flat parameter buffer described as named
 * tensors (HF/PyTorch names), grouped into blocks and, inside blocks, into inner groups whose
 * width can be split into neuron units. The SDP engine (src/sdp/) needs nothing else: this
 * header is plain data and arithmetic on it (src/models/layout.c), with no backend or MPI, so the
 * planner can be read and tested without either. */
#ifndef SDP_LAYOUT_H
#define SDP_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SDP_NAME_MAX   96
#define SDP_MAX_GROUPS 4

typedef enum { SDP_INIT_NORMAL, SDP_INIT_ONES, SDP_INIT_ZEROS } sdp_init_kind;

typedef struct {
    char name[SDP_NAME_MAX];
    int ndim;
    int64_t shape[4];
    size_t offset, numel; /* elements, in the model's flat buffers */
    int block;            /* -1: shared by every worker (stem, head); else a block index */
    int group;            /* -1: whole-block tensor; else the inner group whose width it spans */
    int axis;             /* the axis along which the group's width runs (group >= 0) */
    int segments;         /* that axis holds `segments` consecutive copies of the group width */
    bool decay;           /* weight decay applies */
    bool buffer;          /* state, not trained (batch-norm running statistics): no gradient or
                           * optimizer state; mapped, published and checkpointed like a parameter,
                           * averaged among its owners before evaluation and checkpoints
                           * (sdp_layout_add leaves it false; a model sets it afterwards) */
    sdp_init_kind init;
    float init_std;
} sdp_param;

/* A block's inner dimension that neuron units split: attention heads, MLP hidden neurons,
 * conv inner channels. `width` atoms of `atom` elements each along the tensors' axis. */
typedef struct {
    char name[16];
    int width;
    int atom;
} sdp_group;

typedef struct {
    char name[SDP_NAME_MAX]; /* e.g. "transformer.h.3" */
    int global_index;        /* index of this block in the full model */
    bool droppable;          /* has an identity shortcut, so block units may drop it */
    int ngroups;
    sdp_group groups[SDP_MAX_GROUPS];
} sdp_block;

typedef struct {
    int nparams, cap_params;
    sdp_param *params;
    int nblocks;
    sdp_block *blocks;
    size_t numel;
    /* Open-addressing hash of the tensor names (index + 1, 0 = empty; a power of two of slots,
     * at least twice nparams): sdp_layout_find is called per tensor, and a scan made that n^2,
     * minutes for a model of thousands of layers. */
    int *by_name, name_slots;
} sdp_layout;

/* The owned slices of a tensor that a worker owns only in part (neuron units under backward
 * masking), and where their gradients live in its compact gradient buffer. Slice i spans
 * [start[i], start[i] + len[i]) along `axis`, and its gradient begins at dst[i] with rows ld[i]
 * apart: along axis 0 a slice is len[i] whole rows; along axis 1 it is len[i] columns of every
 * row. A model computes these gradients as one GEMM per slice. */
typedef struct {
    int n, axis;
    long *start, *len, *dst, *ld;
} sdp_grad_slices;

/* Marks a tensor whose gradient is sliced (see sdp_grad_slices) in a gradient-offset table. */
#define SDP_GRAD_SLICED (-2L)

/* What a worker instantiates of a model, per block of the full model: whether the block is kept,
 * how many atoms of each inner group, and the scale of its residual branch. Made by SDP
 * (src/sdp/subnet.c); every model turns it into its own shape. */
typedef struct {
    int nblocks;
    bool *keep;
    int (*kept)[SDP_MAX_GROUPS];
    float *scale;
} sdp_subnet_spec;

/* Builders used by models. */
void sdp_layout_init(sdp_layout *L, int nblocks);
void sdp_layout_free(sdp_layout *L);
/* Appends a tensor at the end of the flat buffer and returns its index. */
int sdp_layout_add(sdp_layout *L, const char *name, int ndim, const int64_t *shape, int block,
                   int group, int axis, int segments, bool decay, sdp_init_kind init,
                   float init_std);
const sdp_param *sdp_layout_find(const sdp_layout *L, const char *name);

/* A stem tensor: shared (block -1) and declared before every block's tensors, i.e. consumed
 * below all blocks (embeddings, a ResNet's first conv). */
bool sdp_param_is_stem(const sdp_layout *L, int i);
/* The lowest local block a backward pass must reach for the tensors that have gradients
 * (grad_offset[i] != -1): -1 when a stem tensor has one (the whole pass), else the lowest block
 * with one, else nblocks (the head alone). */
int sdp_layout_backward_floor(const sdp_layout *L, const long *grad_offset);

/* Deterministic initial value of element `index` of the full-model tensor `name`: the same on
 * every rank and for every subnetwork, so a compact model initialises as a slice of the full. */
float sdp_param_init_value(const sdp_param *p, uint64_t seed, uint64_t index);
/* Initialises every tensor of a full (unsliced) model. */
void sdp_layout_init_values(const sdp_layout *L, float *params, uint64_t seed);

#endif
