#include "run.h"

#include "sdp/check.h"
#include "sdp/subnet.h"

#include <glob.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void run_path(char *out, size_t n, const char *dir, const char *name) {
    int len = snprintf(out, n, "%s/%s", dir, name);
    SDP_CHECK(len > 0 && (size_t)len < n, "path too long: %s/%s", dir, name);
}

char *run_read_text(const char *path) {
    FILE *f = sdp_fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    SDP_CHECK(n >= 0, "cannot read %s", path);
    char *s = malloc((size_t)n + 1);
    SDP_CHECK(s, "out of memory");
    SDP_CHECK(fread(s, 1, (size_t)n, f) == (size_t)n, "cannot read %s", path);
    s[n] = 0;
    fclose(f);
    return s;
}

void run_load_config(train_opts *o, const char *dir) {
    char path[1024];
    run_path(path, sizeof path, dir, "config.json");
    FILE *f = fopen(path, "rb");
    SDP_CHECK(f,
              "'%s' is not a run directory (no config.json): pass the directory that "
              "sdp train wrote",
              dir);
    fclose(f);
    char *txt = run_read_text(path);
    opts_set_defaults(TRAIN_OPTS, o);
    opts_from_json(TRAIN_OPTS, o, txt, path);
    free(txt);
}

/* llm.c shards start with the int32 magic 20240520; anything else is read as text. */
static bool looks_like_shards(const char *pattern) {
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        globfree(&g);
        return false;
    }
    FILE *f = fopen(g.gl_pathv[0], "rb");
    globfree(&g);
    if (!f) return false;
    int32_t magic = 0;
    bool shards = fread(&magic, sizeof magic, 1, f) == 1 && magic == 20240520;
    fclose(f);
    return shards;
}

void run_load_data(const train_opts *o, sdp_tokens *train, sdp_tokens *val, sdp_mem *mem) {
    SDP_CHECK(o->data[0],
              "no training data: pass --data FILE (a text file such as "
              "tinyshakespeare.txt, see the README) or --data 'DIR/*train*.bin' (llm.c shards)");
    memset(train, 0, sizeof *train);
    if (val) memset(val, 0, sizeof *val);
    if (looks_like_shards(o->data)) {
        sdp_tokens_load_shards(train, o->data, mem);
        if (val && o->val_data[0]) sdp_tokens_load_shards(val, o->val_data, mem);
    } else {
        SDP_CHECK(!o->val_data[0],
                  "--val-data is for llm.c shards; '%s' is text, whose "
                  "validation split is set by --val-frac",
                  o->data);
        SDP_CHECK(o->val_frac < 1.0, "--val-frac must be below 1 (got %g)", o->val_frac);
        sdp_tokens_load_text(train, val && o->val_frac > 0 ? val : NULL, o->data,
                             val ? o->val_frac : 0.0, mem);
    }
}

sdp_tf_config run_model_config(const train_opts *o, int data_vocab) {
    sdp_tf_config c = {0};
    SDP_CHECK(sdp_tf_style_parse(o->model, &c.style), "unknown --model '%s': use gpt or llama",
              o->model);
    c.n_layer = o->layers;
    c.n_head = o->heads;
    c.d_model = o->width;
    c.d_ff = o->d_ff;
    c.seq_len = o->seq_len;
    c.vocab = o->vocab ? o->vocab : data_vocab;
    SDP_CHECK(c.vocab >= data_vocab,
              "--vocab %d is smaller than the data's vocabulary (%d tokens): raise it or use 0",
              c.vocab, data_vocab);
    c.rope_theta = (float)o->rope_theta;
    sdp_tf_config_finish(&c);
    return c;
}

sdp_gemm_provider run_gemm(const train_opts *o) {
    sdp_gemm_provider p;
    SDP_CHECK(sdp_gemm_provider_parse(o->gemm, &p), "unknown --gemm '%s': use dnnl or openblas",
              o->gemm);
    return p;
}

double run_eval_loss(sdp_tf *m, sdp_loader *loader, int batches, int *inputs, int *targets,
                     MPI_Comm comm) {
    double local[2] = {0, 0}; /* summed loss, tokens */
    uint64_t steps = sdp_loader_steps_per_epoch(loader);
    if ((uint64_t)batches > steps) batches = (int)steps;
    sdp_loader_seek(loader, (sdp_loader_pos){0, 0});
    for (int b = 0; b < batches; b++) {
        sdp_loader_next(loader, inputs, targets);
        local[0] += sdp_tf_forward(m, inputs, targets, loader->B, loader->T);
        local[1] += m->n_targets;
    }
    double global[2];
    MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, comm);
    return global[1] > 0 ? global[0] / global[1] : NAN;
}

void run_worker_shape(sdp_tf_shape *shape, const sdp_plan *p, const sdp_layout *full,
                      const sdp_tf_config *cfg, int rank) {
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, p, full, rank);
    sdp_tf_shape_from_keep(shape, cfg, spec.nblocks, spec.keep,
                           (const int(*)[SDP_MAX_GROUPS])spec.kept, spec.scale);
    sdp_subnet_spec_free(&spec);
}

void run_full_layout(sdp_layout *full, const sdp_tf_config *cfg) {
    sdp_tf_shape s;
    sdp_tf_shape_full(&s, cfg);
    sdp_tf_describe(full, cfg, &s);
    sdp_tf_shape_free(&s);
}

sdp_plan_cfg run_plan_config(const train_opts *o, int world) {
    sdp_plan_cfg c = {0};
    SDP_CHECK(sdp_mask_mode_parse(o->sdp_mask, &c.mask),
              "unknown --sdp-mask '%s': use none, forward or backward", o->sdp_mask);
    SDP_CHECK(sdp_unit_kind_parse(o->sdp_unit, &c.unit),
              "unknown --sdp-unit '%s': use block or neuron", o->sdp_unit);
    SDP_CHECK(sdp_assign_kind_parse(o->sdp_assign, &c.assign),
              "unknown --sdp-assign '%s': use cyclic or random", o->sdp_assign);
    SDP_CHECK(sdp_branch_scale_parse(o->branch_scale, &c.scale),
              "unknown --branch-scale '%s': use none or inverse", o->branch_scale);
    c.world = world;
    if (c.mask == SDP_MASK_NONE)
        c.owners = world; /* data parallelism: everyone owns all */
    else if (o->sdp_owners > 0)
        c.owners = o->sdp_owners;
    else
        c.owners = sdp_owners_from_coverage(o->sdp_coverage, world);
    c.chunks = o->sdp_chunks;
    c.seed = (uint64_t)(o->sdp_seed ? o->sdp_seed : o->seed);
    return c;
}
