/* The SDP plan options of a run (--sdp-mask, --sdp-unit, --sdp-owners or --sdp-coverage, ...)
 * turned into the plan's configuration: the one place the rules that resolve them live. */
#include "run_plan.h"

#include "sdp/check.h"
#include "sdp/plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

int train_run_owners(const train_opts *o, int world) {
    if (strcmp(o->sdp_mask, "none") == 0) return world; /* data parallelism: everyone owns all */
    if (o->sdp_owners > 0) return o->sdp_owners;
    return sdp_owners_from_coverage(o->sdp_coverage, world);
}

void train_run_plan_check_options(const train_opts *o, int world, const char *n_option) {
    sdp_mask_mode mask;
    SDP_CHECK_ALL(sdp_mask_mode_parse(o->sdp_mask, &mask),
                  "unknown --sdp-mask '%s': use none, forward or backward", o->sdp_mask);
    if (mask == SDP_MASK_NONE) return;
    /* One worker would own every unit: data parallelism under another name, with k = C rounded
     * to nothing useful. */
    if (world < 2) {
        if (!n_option && o->sim_world > 0) n_option = "--sim-world";
        if (n_option)
            sdp_fatal_all("SDP needs at least 2 workers: use %s N with N >= 2 (or --sdp-mask "
                          "none for data parallelism)",
                          n_option);
        sdp_fatal_all("SDP needs at least 2 workers: run it under mpirun -np N (or with "
                      "--sdp-mask none, data parallelism)");
    }
    train_run_owners(o, world); /* --sdp-coverage: a fraction that gives a whole k */
}

void train_run_plan_warn_ignored(const train_opts *o, int argc, char **argv) {
    if (strcmp(o->sdp_mask, "none") != 0) return;
    static const char *const sdp_only[] = {"sdp-unit",   "sdp-owners", "sdp-coverage", "sdp-assign",
                                           "sdp-chunks", "sdp-seed",   "branch-scale"};
    const int n_opts = (int)(sizeof sdp_only / sizeof *sdp_only);
    int given[sizeof sdp_only / sizeof *sdp_only], n = 0;
    for (int i = 0; i < n_opts; i++)
        if (train_opts_given(argc, argv, sdp_only[i])) given[n++] = i;
    if (n == 0) return;
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s",
                                 i == 0 ? "" : (i == n - 1 ? " and " : ", "), sdp_only[given[i]]);
    sdp_warn("%s %s ignored under data parallelism (--sdp-mask none): drop %s, or choose "
             "--sdp-mask forward or backward",
             list, n == 1 ? "is" : "are", n == 1 ? "it" : "them");
}

/* "worker 3", "workers 2 and 3", "workers 1, 2 and 3", or the first few and the last of many. */
static void describe_workers(char *buf, size_t len, const int *w, int n) {
    enum { SHOWN = 6 };
    size_t used = (size_t)snprintf(buf, len, "worker%s ", n == 1 ? "" : "s");
    for (int i = 0; i < n && used < len; i++) {
        if (n > SHOWN + 1 && i == SHOWN) {
            used +=
                (size_t)snprintf(buf + used, len - used, ", ... and %d (%d workers)", w[n - 1], n);
            return;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%d",
                                 i == 0 ? "" : (i == n - 1 ? " and " : ", "), w[i]);
    }
}

void train_run_plan_check_owners(const sdp_plan *p) {
    if (p->cfg.mask == SDP_MASK_NONE) return;
    const int N = p->cfg.world, k = p->cfg.owners;
    int *units = sdp_plan_units_per_worker(p),
        *idle = sdp_xmalloc((size_t)N * sizeof *idle, "checking the SDP plan");
    int nidle = 0;
    for (int w = 0; w < N; w++)
        if (units[w] == 0) idle[nidle++] = w;
    free(units);
    if (nidle == 0) {
        free(idle);
        return;
    }
    /* The plan balances shares within one unit, so this happens exactly when the units' k * U
     * owner slots are fewer than the N workers. Such a worker would train only the shared part. */
    char who[160];
    describe_workers(who, sizeof who, idle, nidle);
    free(idle);
    if (p->cfg.unit == SDP_UNIT_BLOCK)
        sdp_fatal_all("with --sdp-unit block, %d droppable block%s and k = %d of N = %d, %s would "
                      "own no block: use --sdp-unit neuron, a larger --sdp-coverage (or "
                      "--sdp-owners), or fewer workers",
                      p->nunits, p->nunits == 1 ? "" : "s", k, N, who);
    sdp_fatal_all("with --sdp-unit neuron, %d units (--sdp-chunks %d per group) and k = %d of N = "
                  "%d, %s would own no unit: use a larger --sdp-chunks, a larger --sdp-coverage "
                  "(or --sdp-owners), or fewer workers",
                  p->nunits, p->cfg.chunks, k, N, who);
}

sdp_plan_cfg train_run_plan_config(const train_opts *o, int world, const sdp_layout *full) {
    train_run_plan_check_options(o, world, NULL);
    sdp_plan_cfg c = {0};
    SDP_CHECK_ALL(sdp_mask_mode_parse(o->sdp_mask, &c.mask),
                  "unknown --sdp-mask '%s': use none, forward or backward", o->sdp_mask);
    SDP_CHECK_ALL(sdp_unit_kind_parse(o->sdp_unit, &c.unit),
                  "unknown --sdp-unit '%s': use block or neuron", o->sdp_unit);
    SDP_CHECK_ALL(sdp_assign_kind_parse(o->sdp_assign, &c.assign),
                  "unknown --sdp-assign '%s': use cyclic or random", o->sdp_assign);
    const bool auto_scale = strcmp(o->branch_scale, "auto") == 0;
    SDP_CHECK_ALL(auto_scale || sdp_branch_scale_parse(o->branch_scale, &c.scale),
                  "unknown --branch-scale '%s': use auto, none or inverse", o->branch_scale);
    if (auto_scale) c.scale = auto_branch_scale(&c, full);
    c.world = world;
    c.owners = train_run_owners(o, world);
    c.chunks = o->sdp_chunks;
    c.seed = (uint64_t)(o->sdp_seed ? o->sdp_seed : o->seed);
    c.zero = train_opts_zero(o);
    c.grad_accum = o->grad_accum;
    return c;
}
