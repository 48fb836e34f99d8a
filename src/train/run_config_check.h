/* A run's options as read back from its config.json, checked before anything is built from them.
 * Each value has passed its option's own type and range check (options.c); these are the checks
 * the model, plan, optimizer and data set-up would apply later (the same predicates, from the
 * models' headers), phrased for a file rather than a command line:
 *
 *   <path>: "<key>" is <value>, which <problem>: the file is damaged or was edited; restore it or
 *   start a new run
 *
 * so that a damaged or hand-edited file is never reported as an option the user did not give. */
#ifndef SDP_TRAIN_RUN_CONFIG_CHECK_H
#define SDP_TRAIN_RUN_CONFIG_CHECK_H

#include "run.h"
#include "train_opts.h"

/* Fails with one line, as above, at the first value that set-up would refuse. */
void train_run_config_check(const train_opts *o, const char *path);

/* The image shape of a dataset name (fashion-mnist, mnist, cifar10, cifar100); false when the
 * name is none of them. */
bool train_run_dataset_lookup(const char *name, run_data_shape *out);
/* Whether channels, size and classes are those of one of these datasets (a checkpoint's
 * sdp.image_shape). */
bool train_run_image_shape_known(double channels, double size, double classes);

#endif
