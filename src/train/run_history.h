/* config.json's "invocations": one entry per `sdp train` on a run. A resumed run may be trained
 * on another N, k, coverage, mask or unit (every worker re-slices the full checkpoint), so the
 * record says which stretch of steps each setting trained, and readers never attribute a mixed
 * run to one setting. */
#ifndef SDP_TRAIN_RUN_HISTORY_H
#define SDP_TRAIN_RUN_HISTORY_H

#include "run_resolved.h"
#include "train_opts.h"

/* config.json's text for the invocation that starts at from_step: o's options and r's record at
 * the top level (they describe the latest invocation, which a further resume continues), and the
 * invocations of `previous` (the file's text before this invocation, NULL for a new run) with
 * this one appended (source names the file in errors). `changed` lists the options this
 * invocation's command line gave (argv), with their values. A config.json of an older sdp, without
 * the key, counts as one invocation. */
char *train_run_history_config_json(const train_opts *o, const run_resolved *r,
                                    const char *previous, const char *source, long from_step,
                                    int argc, char **argv);

#endif
