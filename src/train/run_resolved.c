#include "run_resolved.h"

#include "run_plan.h"

#include "sdp/check.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A bound on a recorded world, so that a damaged record cannot make resume build a plan for
 * billions of workers. */
enum { MAX_WORLD = 1 << 20 };

run_resolved train_run_resolved_of(const sdp_plan *p) {
    const sdp_plan_cfg *c = &p->cfg;
    run_resolved r = {.present = true,
                      .world = c->world,
                      .owners = c->owners,
                      .chunks = c->chunks,
                      .coverage = sdp_plan_coverage(p),
                      .scale = c->scale};
    int *count = sdp_plan_units_per_worker(p);
    r.units_min = r.units_max = count[0];
    for (int w = 1; w < c->world; w++) {
        if (count[w] < r.units_min) r.units_min = count[w];
        if (count[w] > r.units_max) r.units_max = count[w];
    }
    free(count);
    return r;
}

char *train_run_resolved_config_json(const train_opts *o, const run_resolved *r) {
    char *opts = train_opts_to_json(TRAIN_OPTS, o);
    cJSON *root = cJSON_Parse(opts);
    free(opts);
    SDP_CHECK(root, "out of memory");
    cJSON *res = cJSON_AddObjectToObject(root, "resolved");
    SDP_CHECK(res, "out of memory");
    cJSON_AddNumberToObject(res, "world", r->world);
    cJSON_AddNumberToObject(res, "owners", r->owners);
    cJSON_AddNumberToObject(res, "coverage", r->coverage);
    cJSON_AddNumberToObject(res, "chunks", r->chunks);
    cJSON_AddStringToObject(res, "branch_scale", sdp_branch_scale_name(r->scale));
    cJSON_AddNumberToObject(res, "units_per_worker_min", r->units_min);
    cJSON_AddNumberToObject(res, "units_per_worker_max", r->units_max);
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    SDP_CHECK(txt, "out of memory");
    return txt;
}

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct {
    cJSON *root; /* freed before any error ends the process */
    const cJSON *res;
    const char *source;
} reader;

_Noreturn static void damaged(reader *rd, const char *key, const char *what) {
    cJSON_Delete(rd->root);
    sdp_fatal("%s: \"resolved\".%s should be %s: the file is damaged; restore it or start a new "
              "run",
              rd->source, key, what);
}

static int integer(reader *rd, const char *key, int lo, int hi) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rd->res, key);
    const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(x >= lo && x <= hi && x == floor(x))) {
        char what[96];
        snprintf(what, sizeof what, "an integer in [%d, %d]", lo, hi);
        damaged(rd, key, what);
    }
    return (int)x;
}

static void read_record(reader *rd, run_resolved *r) {
    r->world = integer(rd, "world", 1, MAX_WORLD);
    r->owners = integer(rd, "owners", 1, r->world);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(rd->res, "coverage");
    r->coverage = cJSON_IsNumber(c) ? c->valuedouble : NAN;
    /* Written as owners / world: anything else means one of them was changed alone. */
    if (!(fabs(r->coverage - (double)r->owners / r->world) <= 1e-9))
        damaged(rd, "coverage", "owners / world");
    r->chunks = integer(rd, "chunks", 0, INT_MAX); /* 0 with block units, as in plan.json */
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(rd->res, "branch_scale");
    if (!sdp_branch_scale_parse(cJSON_GetStringValue(s), &r->scale))
        damaged(rd, "branch_scale", "\"none\" or \"inverse\"");
    r->units_min = integer(rd, "units_per_worker_min", 0, INT_MAX);
    r->units_max = integer(rd, "units_per_worker_max", r->units_min, INT_MAX);
}

void train_run_resolved_from_json(run_resolved *r, const char *json, const char *source) {
    memset(r, 0, sizeof *r);
    reader rd = {cJSON_ParseWithOpts(json, NULL, true), NULL, source};
    if (!cJSON_IsObject(rd.root)) {
        cJSON_Delete(rd.root);
        sdp_fatal("%s is not a valid JSON object: restore it or start afresh", source);
    }
    rd.res = cJSON_GetObjectItemCaseSensitive(rd.root, "resolved");
    if (rd.res) {
        if (!cJSON_IsObject(rd.res)) {
            cJSON_Delete(rd.root);
            sdp_fatal("%s: \"resolved\" should be an object: the file is damaged; restore it or "
                      "start a new run",
                      source);
        }
        read_record(&rd, r);
        r->present = true;
    }
    cJSON_Delete(rd.root);
}

/* ---- resume ------------------------------------------------------------------------------- */

static void must_match(const char *source, const char *key, const char *recorded,
                       const char *derived, int world) {
    SDP_CHECK(strcmp(recorded, derived) == 0,
              "%s: \"resolved\".%s is %s, but the run's options give %s for N = %d: its options "
              "were edited, or another version of sdp wrote it under another rule; restore the "
              "file, resume with the sdp that wrote it, or start a new run",
              source, key, recorded, derived, world);
}

static void match_int(const char *source, const char *key, int recorded, int derived, int world) {
    char a[16], b[16];
    snprintf(a, sizeof a, "%d", recorded);
    snprintf(b, sizeof b, "%d", derived);
    must_match(source, key, a, b, world);
}

void train_run_resolved_check(const run_resolved *r, const train_opts *o, const sdp_layout *full,
                              const char *source) {
    if (!r->present) return; /* written before the record existed: nothing to compare with */
    sdp_plan_cfg pc = train_run_plan_config(o, r->world, full);
    sdp_plan p;
    sdp_plan_build(&p, &pc, full);
    const run_resolved d = train_run_resolved_of(&p);
    sdp_plan_free(&p);
    match_int(source, "owners", r->owners, d.owners, r->world);
    match_int(source, "chunks", r->chunks, d.chunks, r->world);
    must_match(source, "branch_scale", sdp_branch_scale_name(r->scale),
               sdp_branch_scale_name(d.scale), r->world);
    match_int(source, "units_per_worker_min", r->units_min, d.units_min, r->world);
    match_int(source, "units_per_worker_max", r->units_max, d.units_max, r->world);
}
