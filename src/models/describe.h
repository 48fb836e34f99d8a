/* A model's tensors described by field name: the families fill a tensor_desc with designated
 * initializers, naming only what sets a tensor apart, and tensor_desc_add passes it on to
 * sdp_layout_add. Not part of the public interface. */
#ifndef SDP_MODELS_DESCRIBE_H
#define SDP_MODELS_DESCRIBE_H

#include "sdp/check.h"
#include "sdp/model.h"

/* Each field left out is zero, which means what most tensors want. */
typedef struct {
    const char *name;
    int ndim; /* shape[ndim..3] stay 0 */
    int64_t shape[4];
    /* The block's group whose atoms the tensor holds, counted from 1: sdp_block.groups[group - 1]
     * (sdp_param.group is one less). 0: none, the tensor belongs to its block (or the stem or
     * head) whole. */
    int group;
    int axis;           /* the axis along which the group's width runs */
    int segments;       /* copies of the group's width along that axis; 0 is 1 */
    bool decay;         /* weight decay applies */
    sdp_init_kind init; /* SDP_INIT_NORMAL, the zero value, needs a std */
    float std;
} tensor_desc;

/* Adds the tensor to block `block` of L (-1: the stem or the head) and returns its index. */
static inline int tensor_desc_add(sdp_layout *L, int block, const tensor_desc *d) {
    SDP_ASSERT(d->name && d->ndim >= 1 && d->ndim <= 4);
    for (int i = d->ndim; i < 4; i++) SDP_ASSERT(d->shape[i] == 0);
    SDP_ASSERT(d->group >= 0 && d->group <= SDP_MAX_GROUPS);
    SDP_ASSERT(d->init != SDP_INIT_NORMAL || d->std > 0);
    return sdp_layout_add(L, d->name, d->ndim, d->shape, block, d->group - 1, d->axis,
                          d->segments ? d->segments : 1, d->decay, d->init, d->std);
}

#endif
