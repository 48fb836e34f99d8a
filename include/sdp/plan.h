/* The SDP plan: which workers own which units. Units are whole droppable blocks, or chunks of a
 * block's inner groups (heads, MLP neurons, channels). Every unit has exactly k owners out of N
 * workers; what no unit covers (stem, head, non-droppable blocks, and in neuron mode each
 * block's whole-block tensors such as norms) is shared: owned by every worker.
 * The plan depends only on the full model's layout and the options, so every rank computes the
 * same plan independently. */
#ifndef SDP_PLAN_H
#define SDP_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sdp/layout.h"

typedef enum { SDP_MASK_NONE, SDP_MASK_FORWARD, SDP_MASK_BACKWARD } sdp_mask_mode;
typedef enum { SDP_UNIT_BLOCK, SDP_UNIT_NEURON } sdp_unit_kind;
typedef enum { SDP_ASSIGN_CYCLIC, SDP_ASSIGN_RANDOM } sdp_assign_kind;
typedef enum { SDP_SCALE_NONE, SDP_SCALE_INVERSE } sdp_branch_scale;

typedef struct {
    sdp_mask_mode mask;
    sdp_unit_kind unit;
    sdp_assign_kind assign;
    sdp_branch_scale scale;
    int world;  /* N */
    int owners; /* k; with mask NONE it is forced to N (plain data parallelism) */
    int chunks; /* neuron units per inner group; 0 = N */
    uint64_t seed;
    /* ZeRO stage (--zero): 0, or 1: each owner keeps the optimizer state of its shard of every
     * bucket only (sdp_sync_shard). It changes who holds which state, not who owns which unit. */
    int zero;
    /* Micro-batches per step (--grad-accum; 0 counts as 1). Only the bytes sent depend on it:
     * under --zero 2 each micro-batch reduce-scatters its layers' gradients (memplan.c). */
    int grad_accum;
} sdp_plan_cfg;

typedef struct {
    int block;        /* index into the full layout's blocks */
    int group;        /* -1 for a block unit; else the inner group it splits */
    int chunk;        /* chunk index within the group (0 for block units) */
    int start, width; /* atoms [start, start + width) of the group (block units: whole width) */
    int *owners;      /* k ranks, ascending */
    int owner_group;  /* index into plan.groups */
} sdp_unit;

/* A distinct set of owners. With the cyclic assignment there are at most N of them. */
typedef struct {
    int nmembers;
    int *members; /* ascending */
    size_t elems; /* elements of its units, running statistics included */
    /* The member that broadcasts the group's units under backward masking and provides them when
     * the full model is assembled. Groups of all N workers publish nothing; theirs is rank 0. */
    int publisher;
} sdp_owner_group;

/* Where rank stands among g's members (the order of the group's communicator), or -1 when it is
 * not one: a binary search, as planners ask it of every group for each of N workers. */
int sdp_owner_group_index(const sdp_owner_group *g, int rank);

typedef struct {
    sdp_plan_cfg cfg;
    int nunits;
    sdp_unit *units;
    int ngroups;
    sdp_owner_group *groups;
} sdp_plan;

bool sdp_mask_mode_parse(const char *s, sdp_mask_mode *out);
bool sdp_unit_kind_parse(const char *s, sdp_unit_kind *out);
bool sdp_assign_kind_parse(const char *s, sdp_assign_kind *out);
bool sdp_branch_scale_parse(const char *s, sdp_branch_scale *out);
const char *sdp_mask_mode_name(sdp_mask_mode m);
const char *sdp_unit_kind_name(sdp_unit_kind u);
const char *sdp_assign_kind_name(sdp_assign_kind a);
const char *sdp_branch_scale_name(sdp_branch_scale s);

/* k from a coverage C = k/N. C must be in (0, 1], and C*N within 1e-4 (relative) of a whole
 * number of at least 1: a coverage typed as a rounded fraction (0.6666667 of 3 workers) gives the
 * nearest k. Otherwise it fails with one line naming the nearest coverages that work. Every rank
 * fails alike (sdp_fatal_all). */
int sdp_owners_from_coverage(double coverage, int world);
/* The k of sdp_owners_from_coverage, or 0 where it would fail. */
int sdp_owners_from_coverage_or_0(double coverage, int world);

/* Builds the plan for a full-model layout. Impossible requests fail with a message saying what
 * would work: k < 1 or k > N; more chunks than a group's width, or a width the chunks do not
 * divide; block units on a model with no droppable block. The plan is a function of its
 * arguments alone, so every rank that builds it fails alike: once per job (sdp_fatal_all). A plan
 * under which some worker owns no unit is built: refusing it is the run's policy
 * (run_plan_build in src/train/run_plan.c).
 * Publishers balance the elements published: groups in decreasing order of elements (ties by
 * index), each to the member that has published the fewest elements so far (ties: lowest rank);
 * then chains of hand-overs between fellow members relieve the busiest and feed the idlest. */
void sdp_plan_build(sdp_plan *p, const sdp_plan_cfg *cfg, const sdp_layout *full);
void sdp_plan_free(sdp_plan *p);
bool sdp_plan_owns(const sdp_plan *p, int unit, int rank);
/* Index of the unit owning chunk `atom` of group `group` in block `block`, or the block unit of
 * `block` (group < 0), or -1 when that part of the model is shared. */
int sdp_plan_unit_of(const sdp_plan *p, int block, int group, int atom);
/* The unit that owns shared tensor i of the full layout: -1 (every worker) except for stem
 * tensors under backward masking with block units, which belong to the first droppable block's
 * unit: its owners are the only workers whose backward pass reaches the stem, and they publish
 * it to the others. */
int sdp_plan_shared_unit(const sdp_plan *p, const sdp_layout *full, int i);

/* Elements of every unit (unit_elems[nunits]) and of the shared part (shared may be NULL), from
 * tensor shapes alone. trained_only leaves out non-trained tensors (running statistics). */
void sdp_plan_unit_elems(const sdp_plan *p, const sdp_layout *full, bool trained_only,
                         size_t *unit_elems, size_t *shared);
/* Ownership fraction k/N. */
double sdp_plan_coverage(const sdp_plan *p);
/* How many units each worker owns (malloc'd, world entries; the caller frees it). */
int *sdp_plan_units_per_worker(const sdp_plan *p);

/* The plan as JSON (malloc'd): the options, and every unit with its block name, group, atom
 * range and owners. Saved in the run directory. */
char *sdp_plan_to_json(const sdp_plan *p, const sdp_layout *full);
/* A compact ownership table: one row per block, one column per worker, showing what each
 * worker owns of each block (all / none / number of chunks per group). */
void sdp_plan_print(const sdp_plan *p, const sdp_layout *full, FILE *f);

#endif
