/* Opening a finished run for inference: its configuration, its model, its weights. */
#ifndef SDP_CLI_LOAD_RUN_H
#define SDP_CLI_LOAD_RUN_H

#include "train/run.h"

/* Reads the run's configuration into o, builds its model for batches of B x T (0 = the run's
 * own batch and sequence length; 1 for images) on a CPU backend over mem with the run's GEMM
 * provider, *be, and loads model.safetensors into it. The caller destroys the model, then *be.
 * Returns the data shape the model was trained on (vocabulary, or image channels, size and
 * classes). */
run_data_shape load_run_model(sdp_model *m, sdp_backend **be, train_opts *o, const char *dir, int B,
                              int T, sdp_mem *mem);

#endif
