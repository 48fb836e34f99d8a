#include "report_run.h"

#include "train/run.h"
#include "train/run_plan.h"

#include "sdp/check.h"
#include "sdp/mem.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *const REPORT_BAR_NAMES[REPORT_NBARS] = {"params",      "grads", "optimizer",
                                                    "activations", "data",  "other"};

void report_curve_push(report_curve *c, double step, double flops, double loss, double acc) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        double **cols[] = {&c->step, &c->flops, &c->loss, &c->acc};
        for (int i = 0; i < 4; i++) {
            *cols[i] = realloc(*cols[i], sizeof(double) * (size_t)c->cap);
            SDP_CHECK(*cols[i], "out of memory");
        }
    }
    c->step[c->n] = step, c->flops[c->n] = flops, c->loss[c->n] = loss, c->acc[c->n] = acc;
    c->n++;
}

void report_curve_free(report_curve *c) {
    free(c->step), free(c->flops), free(c->loss), free(c->acc);
    memset(c, 0, sizeof *c);
}

static double number(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static bool file_exists(const char *dir, const char *name) {
    char path[1024];
    run_path(path, sizeof path, dir, name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A step as sdp train counts them; anything else in "step" (missing, fractional, negative, or
 * past an int, where converting it would be undefined) marks a damaged line. */
static bool is_step(double step) {
    return step >= 0 && step <= INT_MAX && step == floor(step);
}

/* Training lines carry "loss", validation lines "val_loss"; the last of each gives the final
 * figures, all of them the curves. A damaged line is skipped, like one that is not JSON. */
static void read_metrics(report_run *r) {
    char path[1024], line[4096];
    run_path(path, sizeof path, r->dir, "metrics.jsonl");
    FILE *in = sdp_fopen(path, "rb");
    double tok = 0;
    int ntok = 0;
    while (fgets(line, sizeof line, in)) {
        cJSON *o = cJSON_Parse(line);
        if (!o) continue;
        const double step = number(o, "step"), flops = number(o, "flops");
        if (!is_step(step)) {
            cJSON_Delete(o);
            continue;
        }
        if (!isnan(number(o, "loss"))) {
            r->train_loss = number(o, "loss");
            r->steps = (long)step;
            r->flops = flops;
            tok += number(o, "tokens_per_s"), ntok++;
            report_curve_push(&r->train, step, flops, r->train_loss, NAN);
        }
        if (!isnan(number(o, "val_loss"))) {
            r->val_loss = number(o, "val_loss");
            r->val_acc = number(o, "val_accuracy");
            report_curve_push(&r->val, step, flops, r->val_loss, r->val_acc);
        }
        if (!isnan(number(o, "elapsed_s"))) r->elapsed = number(o, "elapsed_s");
        cJSON_Delete(o);
    }
    fclose(in);
    r->tok_s = ntok ? tok / ntok : NAN;
}

/* The largest worker's bytes over every rank, rank 0 included, from memory.json, which a run
 * writes when it finishes. Evaluation and checkpoint bytes count in the total (older runs'
 * memory.json lacks them and counts as zero there). */
static void read_memory(report_run *r) {
    if (!file_exists(r->dir, "memory.json")) return;
    char path[1024];
    run_path(path, sizeof path, r->dir, "memory.json");
    char *txt = run_read_text(path);
    cJSON *o = cJSON_Parse(txt);
    free(txt);
    SDP_CHECK(o, "%s is not valid JSON: restore it or run the training again", path);
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(o, "workers")) {
        double bytes[SDP_MEM_NCAT], total = 0;
        for (int c = 0; c < SDP_MEM_NCAT; c++) {
            bytes[c] = number(w, sdp_memcat_name((sdp_memcat)c));
            if (isnan(bytes[c])) bytes[c] = 0;
            total += bytes[c];
        }
        if (!isnan(number(w, "eval_ckpt"))) total += number(w, "eval_ckpt");
        const double state = bytes[SDP_MEM_PARAMS] + bytes[SDP_MEM_GRADS] + bytes[SDP_MEM_OPTIM];
        if (state > r->state_bytes) r->state_bytes = state;
        if (total > r->total_bytes) {
            r->total_bytes = total;
            r->bars[BAR_PARAMS] = bytes[SDP_MEM_PARAMS];
            r->bars[BAR_GRADS] = bytes[SDP_MEM_GRADS];
            r->bars[BAR_OPTIM] = bytes[SDP_MEM_OPTIM];
            r->bars[BAR_ACTS] = bytes[SDP_MEM_ACTS];
            r->bars[BAR_DATA] = bytes[SDP_MEM_DATA];
            r->bars[BAR_OTHER] = total - state - bytes[SDP_MEM_ACTS] - bytes[SDP_MEM_DATA];
        }
        if (number(w, "peak_rss") > r->peak_rss) r->peak_rss = number(w, "peak_rss");
        if (number(w, "sent_per_step") > r->sent) r->sent = number(w, "sent_per_step");
        r->world++;
    }
    cJSON_Delete(o);
}

void report_run_load(report_run *r, const char *dir) {
    memset(r, 0, sizeof *r);
    r->train_loss = r->val_loss = r->val_acc = r->flops = NAN;
    SDP_CHECK(strlen(dir) < sizeof r->dir, "path too long: %s", dir);
    strcpy(r->dir, dir);
    while (strlen(r->dir) > 1 && r->dir[strlen(r->dir) - 1] == '/') r->dir[strlen(r->dir) - 1] = 0;
    struct stat st;
    SDP_CHECK(stat(dir, &st) == 0,
              "run directory '%s' does not exist: pass directories written by "
              "sdp train",
              dir);
    SDP_CHECK(S_ISDIR(st.st_mode),
              "'%s' is not a directory: pass run directories written by sdp train", dir);
    SDP_CHECK(file_exists(dir, "config.json"),
              "'%s' has no config.json: pass a run directory written by sdp train", dir);
    SDP_CHECK(file_exists(dir, "metrics.jsonl"),
              "'%s' has no metrics.jsonl: the run has logged nothing yet, or this is not a run "
              "directory written by sdp train",
              dir);
    run_load_config(&r->o, &r->resolved, dir);
    read_metrics(r);
    read_memory(r);
    if (r->world == 0 && r->resolved.present) r->world = r->resolved.world; /* unfinished */
}

int report_run_owners(const report_run *r) {
    if (r->resolved.present) return r->resolved.owners;
    /* A run written before config.json recorded k: derive it from the options, by today's rule,
     * for the workers memory.json counted. */
    return r->world > 0 ? run_owners(&r->o, r->world) : 0;
}

double report_run_coverage(const report_run *r) {
    if (r->resolved.present) return r->resolved.coverage;
    return r->world > 0 ? (double)report_run_owners(r) / r->world : NAN;
}

void report_run_free(report_run *r) {
    report_curve_free(&r->train);
    report_curve_free(&r->val);
}

const char *report_run_name(const report_run *r) {
    const char *slash = strrchr(r->dir, '/');
    return slash && slash[1] ? slash + 1 : r->dir;
}
