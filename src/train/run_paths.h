/* The data paths a run records. config.json keeps them absolute, so a run can be resumed or
 * evaluated from any directory, and a resume checks that the data it is given is the run's own
 * by identity (the same file), not by spelling. */
#ifndef SDP_TRAIN_RUN_PATHS_H
#define SDP_TRAIN_RUN_PATHS_H

#include "train_opts.h"

#include <stdbool.h>

/* A new run: --data and --val-data made absolute (a file or directory through realpath, a glob
 * pattern against the working directory). A path that does not exist is left as given, for the
 * loader to report. */
void train_run_paths_make_absolute(train_opts *o);

/* A resume: `run` holds config.json's options (source names that file), `cli` the command line's,
 * and given_data / given_val whether the command line named --data / --val-data. A path given
 * must name the data the run recorded; one not given is the recorded one, which must be found
 * from here. Either way `run` ends with absolute paths. */
void train_run_paths_resume(train_opts *run, const train_opts *cli, bool given_data, bool given_val,
                            const char *source);

#endif
