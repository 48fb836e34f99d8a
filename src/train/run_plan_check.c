/* A run's SDP setup checked from its options alone, so that a job that cannot run stops before it
 * loads data, builds a model or creates its run directory. It sits apart from run_plan.c because
 * it builds the model's layout (run.c), and run.c reads config.json records that call back into
 * run_plan.c. */
#include "run_plan_check.h"

#include "run.h"
#include "run_plan.h"

#include "sdp/plan.h"

#include <string.h>

void train_run_plan_check(const train_opts *o, int world, int argc, char **argv) {
    train_run_plan_warn_ignored(o, argc, argv);
    train_run_plan_check_options(o, world, NULL);
    if (strcmp(o->sdp_mask, "none") == 0) return;
    /* The units are the model's droppable blocks and the chunks of its inner groups (heads, MLP
     * neurons, channels), which the data does not change: its vocabulary sizes the embedding and
     * the head, which every worker shares. So the shape sdp plan assumes gives the same units. */
    sdp_model_config cfg = train_run_model_config(o, train_run_dataset_shape(o));
    sdp_layout full;
    train_run_full_layout(&full, &cfg);
    sdp_plan_cfg pc = train_run_plan_config(o, world, &full);
    sdp_plan p;
    sdp_plan_build(&p, &pc, &full);
    train_run_plan_check_owners(&p);
    sdp_plan_free(&p);
    sdp_layout_free(&full);
}
