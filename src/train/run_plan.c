/* The SDP plan options of a run (--sdp-mask, --sdp-unit, --sdp-owners or --sdp-coverage, ...)
 * turned into the plan's configuration: the one place the rules that resolve them live. */
#include "run_plan.h"

#include "sdp/check.h"
#include "sdp/plan.h"

#include <stdint.h>
#include <string.h>

/* --branch-scale auto: in docs/results.md scaling kept branches by 1/C helped forward masking
 * with neuron units on the transformers (a layer's outputs then add up as in the assembled model)
 * and hurt block units and the ResNet, whose recalibrated batch-norm statistics already absorb
 * the scale. A layout with buffers (running statistics) has batch norm. */
static sdp_branch_scale auto_branch_scale(const sdp_plan_cfg *c, const sdp_layout *full) {
    if (c->mask != SDP_MASK_FORWARD || c->unit != SDP_UNIT_NEURON) return SDP_SCALE_NONE;
    for (int i = 0; i < full->nparams; i++)
        if (full->params[i].buffer) return SDP_SCALE_NONE;
    return SDP_SCALE_INVERSE;
}

int run_owners(const train_opts *o, int world) {
    if (strcmp(o->sdp_mask, "none") == 0) return world; /* data parallelism: everyone owns all */
    if (o->sdp_owners > 0) return o->sdp_owners;
    return sdp_owners_from_coverage(o->sdp_coverage, world);
}

sdp_plan_cfg run_plan_config(const train_opts *o, int world, const sdp_layout *full) {
    sdp_plan_cfg c = {0};
    SDP_CHECK(sdp_mask_mode_parse(o->sdp_mask, &c.mask),
              "unknown --sdp-mask '%s': use none, forward or backward", o->sdp_mask);
    SDP_CHECK(sdp_unit_kind_parse(o->sdp_unit, &c.unit),
              "unknown --sdp-unit '%s': use block or neuron", o->sdp_unit);
    SDP_CHECK(sdp_assign_kind_parse(o->sdp_assign, &c.assign),
              "unknown --sdp-assign '%s': use cyclic or random", o->sdp_assign);
    const bool auto_scale = strcmp(o->branch_scale, "auto") == 0;
    SDP_CHECK(auto_scale || sdp_branch_scale_parse(o->branch_scale, &c.scale),
              "unknown --branch-scale '%s': use auto, none or inverse", o->branch_scale);
    if (auto_scale) c.scale = auto_branch_scale(&c, full);
    c.world = world;
    c.owners = run_owners(o, world);
    c.chunks = o->sdp_chunks;
    c.seed = (uint64_t)(o->sdp_seed ? o->sdp_seed : o->seed);
    return c;
}
