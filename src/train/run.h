/* What train, eval and sample share: reading a run's configuration, loading its data, building
 * its model, and measuring loss over a data split. */
#ifndef SDP_TRAIN_RUN_H
#define SDP_TRAIN_RUN_H

#include <mpi.h>

#include "sdp/comm.h"
#include "sdp/data.h"
#include "sdp/plan.h"
#include "sdp/model.h"
#include "sdp/optim.h"
#include "run_resolved.h"
#include "train_opts.h"

/* Reads DIR/config.json into opts, and its "resolved" record into resolved (NULL: checked, then
 * dropped); fails clearly when the directory is not a run or the file is damaged. */
void train_run_load_config(train_opts *o, run_resolved *resolved, const char *dir);
/* Whether --data names llm.c token shards (a glob, a name ending in .bin, or a file that starts
 * with the shard magic), else byte-level text. */
bool train_run_data_is_shards(const char *pattern);
/* Loads the training data (and validation data when val is not NULL). */
void train_run_load_data(const train_opts *o, sdp_tokens *train, sdp_tokens *val, sdp_mem *mem);
/* The model configuration of a run (its defaults filled in) for data with this vocabulary (token
 * models, used when --vocab is 0) or these images (image models). */
typedef struct {
    int vocab, channels, image_size, classes;
} run_data_shape;
sdp_model_config train_run_model_config(const train_opts *o, run_data_shape data);
/* The data a run's options name, without reading it: --vocab (default 256) for token models, the
 * dataset's image shape and classes for image models. */
run_data_shape train_run_dataset_shape(const train_opts *o);
/* Whether the run's model reads images. */
bool train_run_images(const train_opts *o);
const sdp_model_family *train_run_family(const sdp_model_config *cfg);
sdp_gemm_provider train_run_gemm(const train_opts *o);
/* The optimizer the options name, checked as sdp_optim_init checks it. */
sdp_opt_cfg train_run_optimizer_config(const train_opts *o);
/* Builds worker `rank`'s (sub)network under a plan over the full layout, on cfg->backend. */
void train_run_create_worker_model(sdp_model *m, const sdp_model_config *cfg, const sdp_plan *p,
                                   const sdp_layout *full, int rank, int B, int T,
                                   sdp_model_mode mode);
/* Describes the full model of cfg. */
void train_run_full_layout(sdp_layout *full, const sdp_model_config *cfg);

/* path = dir + "/" + name */
void train_run_path(char *out, size_t n, const char *dir, const char *name);
/* Reads a whole small text file (malloc'd, NUL-terminated). */
char *train_run_read_text(const char *path);

#endif
