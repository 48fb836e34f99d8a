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
            *cols[i] = sdp_xrealloc(*cols[i], sizeof(double) * (size_t)c->cap, "a run's curve");
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
    train_run_path(path, sizeof path, dir, name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A step as sdp train counts them; anything else in "step" (missing, fractional, negative, or
 * past an int, where converting it would be undefined) marks a damaged line. */
static bool is_step(double step) {
    return step >= 0 && step <= INT_MAX && step == floor(step);
}

/* Training lines carry "loss", validation lines "val_loss"; the last of each gives the final
 * figures, all of them the curves. A damaged line is skipped, like one that is not JSON: a last
 * line cut short (a run killed while writing it) silently, any other with a warning. */
static void read_metrics(report_run *r) {
    char path[1024], line[4096];
    train_run_path(path, sizeof path, r->dir, "metrics.jsonl");
    FILE *in = sdp_fopen(path, "rb");
    /* The rate over the run's training time: each line's rate weighted by its window's time
     * (its steps times ms_per_step), so a short window (a stop's line) counts for its length. */
    double tok = 0, tok_weighted = 0, weight = 0, prev_step = 0;
    int ntok = 0, lineno = 0, damaged = 0, first_damaged = 0;
    bool last_damaged = false;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        cJSON *o = cJSON_Parse(line);
        const double step = o ? number(o, "step") : NAN, flops = o ? number(o, "flops") : NAN;
        last_damaged = !o || !is_step(step);
        if (last_damaged) {
            if (!damaged++) first_damaged = lineno;
            cJSON_Delete(o);
            continue;
        }
        if (!isnan(number(o, "loss"))) {
            r->train_loss = number(o, "loss");
            r->steps = (long)step;
            r->flops = flops;
            const double rate = number(o, "tokens_per_s"),
                         window = (step - prev_step) * number(o, "ms_per_step");
            tok += rate, ntok++;
            if (isfinite(rate) && isfinite(window) && window > 0)
                tok_weighted += rate * window, weight += window;
            prev_step = step;
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
    if (last_damaged) damaged--; /* cut short by a stop: not damage */
    if (damaged > 0)
        sdp_warn("%s: %d line%s that %s not a metrics record (the first: line %d) left out of "
                 "the figures",
                 path, damaged, damaged == 1 ? "" : "s", damaged == 1 ? "is" : "are",
                 first_damaged);
    r->tok_s = weight > 0 ? tok_weighted / weight : ntok ? tok / ntok : NAN; /* older logs */
}

/* The largest worker's bytes over every rank, rank 0 included, from memory.json, which a run
 * writes when it finishes. Evaluation and checkpoint bytes count in the total (older runs'
 * memory.json lacks them and counts as zero there). */
static void read_memory(report_run *r) {
    if (!file_exists(r->dir, "memory.json")) return;
    char path[1024];
    train_run_path(path, sizeof path, r->dir, "memory.json");
    char *txt = train_run_read_text(path);
    cJSON *o = cJSON_ParseWithOpts(txt, NULL, true);
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

/* ---- config.json's "invocations" ------------------------------------------------------------ */

/* A bound on a recorded world, as for "resolved". */
enum { MAX_WORLD = 1 << 20 };

typedef struct {
    cJSON *root; /* freed before any error ends the process */
    report_run *r;
    const char *path;
    int index; /* the entry being read */
} inv_reader;

_Noreturn static void damaged(inv_reader *rd, const char *key, const char *what) {
    cJSON_Delete(rd->root);
    free(rd->r->inv);
    rd->r->inv = NULL;
    if (!key)
        sdp_fatal("%s: \"invocations\" should be %s: the file is damaged; restore the file or "
                  "start a new run",
                  rd->path, what);
    sdp_fatal("%s: \"invocations\"[%d].%s should be %s: the file is damaged; restore the file or "
              "start a new run",
              rd->path, rd->index, key, what);
}

static int inv_integer(inv_reader *rd, const cJSON *o, const char *key, long lo, long hi) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    const double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(x >= (double)lo && x <= (double)hi && x == floor(x))) {
        char what[96];
        snprintf(what, sizeof what, "an integer in [%ld, %ld]", lo, hi);
        damaged(rd, key, what);
    }
    return (int)x;
}

static void inv_string(inv_reader *rd, const cJSON *o, const char *key, char *out) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
    if (!v || !v[0] || strlen(v) >= OPT_STR_MAX) damaged(rd, key, "a non-empty string");
    strcpy(out, v);
}

static void read_invocation(inv_reader *rd, const cJSON *o, report_invocation *v, long from_min) {
    if (!cJSON_IsObject(o)) damaged(rd, NULL, "an array of objects");
    v->from = inv_integer(rd, o, "from_step", from_min, INT_MAX);
    v->steps = inv_integer(rd, o, "steps", 1, INT_MAX);
    v->world = inv_integer(rd, o, "world", 1, MAX_WORLD);
    v->owners = inv_integer(rd, o, "owners", 1, v->world);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "coverage");
    v->coverage = cJSON_IsNumber(c) ? c->valuedouble : NAN;
    if (!(v->coverage > 0 && v->coverage <= 1)) damaged(rd, "coverage", "a number in (0, 1]");
    v->chunks = inv_integer(rd, o, "chunks", 0, INT_MAX);
    sdp_branch_scale scale;
    inv_string(rd, o, "branch_scale", v->scale);
    if (!sdp_branch_scale_parse(v->scale, &scale))
        damaged(rd, "branch_scale", "\"none\" or \"inverse\"");
    /* Optional: entries of an sdp without --schedule-steps lack it. */
    v->schedule = cJSON_GetObjectItemCaseSensitive(o, "schedule-steps")
                      ? inv_integer(rd, o, "schedule-steps", 0, INT_MAX)
                      : 0;
    inv_string(rd, o, "sdp-mask", v->mask);
    inv_string(rd, o, "sdp-unit", v->unit);
    inv_string(rd, o, "sdp-assign", v->assign);
    const cJSON *changed = cJSON_GetObjectItemCaseSensitive(o, "changed");
    if (changed && !cJSON_IsObject(changed)) damaged(rd, "changed", "an object");
}

/* A run without "invocations" is one invocation: its top-level options and "resolved" record. */
static void one_invocation(report_run *r) {
    report_invocation *v = sdp_xcalloc(1, sizeof *v, "a run's invocations");
    v->steps = r->o.steps;
    v->schedule = r->o.schedule_steps;
    v->world = r->world;
    v->owners = report_run_owners(r);
    v->coverage = report_run_coverage(r);
    v->chunks = r->resolved.present ? r->resolved.chunks : 0;
    strcpy(v->mask, r->o.sdp_mask);
    strcpy(v->unit, r->o.sdp_unit);
    strcpy(v->assign, r->o.sdp_assign);
    strcpy(v->scale,
           r->resolved.present ? sdp_branch_scale_name(r->resolved.scale) : r->o.branch_scale);
    r->inv = v;
    r->ninv = 1;
}

static bool same_field(const report_invocation *a, const report_invocation *b, int field) {
    switch (field) {
    case INV_WORLD:
        return a->world == b->world;
    case INV_OWNERS:
        return a->owners == b->owners;
    case INV_COVERAGE:
        return (isnan(a->coverage) && isnan(b->coverage)) ||
               fabs(a->coverage - b->coverage) <= 1e-9;
    case INV_CHUNKS:
        return a->chunks == b->chunks;
    case INV_MASK:
        return strcmp(a->mask, b->mask) == 0;
    case INV_UNIT:
        return strcmp(a->unit, b->unit) == 0;
    case INV_ASSIGN:
        return strcmp(a->assign, b->assign) == 0;
    case INV_SCALE:
        return strcmp(a->scale, b->scale) == 0;
    case INV_SCHEDULE:
        return a->schedule == b->schedule || a->schedule == 0 || b->schedule == 0;
    }
    return false;
}

static bool same_plan(const report_invocation *a, const report_invocation *b) {
    for (int f = 0; f < INV_NFIELDS; f++)
        if (!same_field(a, b, f)) return false;
    return true;
}

/* Each invocation trained up to the next one's first step, the last one up to the last step
 * logged. One that shows no step of its own (a resume that stopped at once, or one that has not
 * logged yet) still counts: report cannot tell that it trained nothing, so a plan it changed
 * makes the run mixed rather than be passed over. */
static void set_ranges(report_run *r) {
    for (int i = 0; i < r->ninv; i++) {
        long to = i + 1 < r->ninv ? r->inv[i + 1].from : r->steps;
        if (to > r->steps) to = r->steps;
        r->inv[i].to = to > r->inv[i].from ? to : r->inv[i].from;
    }
    for (int f = 0; f < INV_NFIELDS; f++)
        for (int i = 1; i < r->ninv; i++) r->changed[f] |= !same_field(&r->inv[0], &r->inv[i], f);
}

/* The plan as recorded per invocation: config.json's top level and "resolved" describe the
 * latest one, which is the one kept here too (for a run that is not mixed they all agree). */
static void apply_latest(report_run *r) {
    const report_invocation *v = &r->inv[r->ninv - 1];
    strcpy(r->o.sdp_mask, v->mask);
    strcpy(r->o.sdp_unit, v->unit);
    strcpy(r->o.sdp_assign, v->assign);
    if (v->schedule > 0) r->o.schedule_steps = v->schedule;
    r->resolved.present = true;
    r->resolved.world = v->world;
    r->resolved.owners = v->owners;
    r->resolved.coverage = v->coverage;
    r->resolved.chunks = v->chunks;
    SDP_ASSERT(sdp_branch_scale_parse(v->scale, &r->resolved.scale));
    r->world = v->world;
}

static void read_invocations(report_run *r) {
    char path[1024];
    train_run_path(path, sizeof path, r->dir, "config.json");
    char *txt = train_run_read_text(path);
    inv_reader rd = {cJSON_ParseWithOpts(txt, NULL, true), r, path, 0};
    free(txt);
    SDP_CHECK(rd.root, "%s is not a valid JSON object: restore it or start afresh", path);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(rd.root, "invocations");
    if (!list) {
        cJSON_Delete(rd.root);
        one_invocation(r);
        set_ranges(r);
        return;
    }
    const int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
    if (n < 1) damaged(&rd, NULL, "a non-empty array of objects");
    r->inv = sdp_xcalloc((size_t)n, sizeof *r->inv, "a run's invocations");
    const cJSON *o;
    cJSON_ArrayForEach(o, list) {
        const long from_min = rd.index ? r->inv[rd.index - 1].from : 0;
        read_invocation(&rd, o, &r->inv[rd.index], from_min);
        rd.index++;
    }
    cJSON_Delete(rd.root);
    r->ninv = n;
    r->has_invocations = true;
    set_ranges(r);
    apply_latest(r);
}

bool report_run_mixed(const report_run *r) {
    for (int f = 0; f < INV_NFIELDS; f++)
        if (r->changed[f]) return true;
    return false;
}

const char *report_field_name(int field) {
    static const char *const names[INV_NFIELDS] = {"world size", "owners",       "coverage",
                                                   "chunks",     "sdp-mask",     "sdp-unit",
                                                   "sdp-assign", "branch scale", "schedule-steps"};
    return names[field];
}

/* One invocation's value of a field; the mask reads "DDP" for none in tables (ddp). */
static void put_value(FILE *f, const report_invocation *v, int field, bool ddp) {
    switch (field) {
    case INV_WORLD:
        fprintf(f, "%d", v->world);
        break;
    case INV_OWNERS:
        fprintf(f, "%d", v->owners);
        break;
    case INV_COVERAGE:
        fprintf(f, "%g", v->coverage);
        break;
    case INV_CHUNKS:
        fprintf(f, "%d", v->chunks);
        break;
    case INV_MASK:
        fputs(ddp && strcmp(v->mask, "none") == 0 ? "DDP" : v->mask, f);
        break;
    case INV_UNIT:
        fputs(v->unit, f);
        break;
    case INV_ASSIGN:
        fputs(v->assign, f);
        break;
    case INV_SCALE:
        fputs(v->scale, f);
        break;
    case INV_SCHEDULE:
        fprintf(f, "%d", v->schedule);
        break;
    }
}

const char *report_run_field(char *buf, size_t n, const report_run *r, int field) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    SDP_CHECK(f, "out of memory");
    for (int i = 0; i < r->ninv; i++) {
        if (i > 0 && same_field(&r->inv[i - 1], &r->inv[i], field)) continue;
        if (i > 0) fputs("→", f);
        put_value(f, &r->inv[i], field, true);
    }
    SDP_CHECK(fclose(f) == 0, "out of memory");
    snprintf(buf, n, "%s", text);
    free(text);
    return buf;
}

char *report_run_history(const report_run *r) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    SDP_CHECK(f, "out of memory");
    int nchanged = 0;
    for (int k = 0; k < INV_NFIELDS; k++) nchanged += r->changed[k];
    for (int i = 0; i < r->ninv;) {
        int end = i + 1; /* invocations [i, end) trained one plan */
        while (end < r->ninv && same_plan(&r->inv[i], &r->inv[end])) end++;
        fputs(i == 0 ? "" : ", then ", f);
        const char *sep = "";
        for (int k = 0; k < INV_NFIELDS; k++) {
            if (!r->changed[k]) continue;
            fputs(sep, f);
            if (i == 0 || nchanged > 1) fprintf(f, "%s ", report_field_name(k));
            put_value(f, &r->inv[i], k, false);
            sep = ", ";
        }
        const long from = r->inv[i].from, to = r->inv[end - 1].to;
        if (to > from)
            fprintf(f, " for %s%ld-%ld", i == 0 ? "steps " : "", from, to);
        else
            fprintf(f, " from step %ld", from);
        i = end;
    }
    SDP_CHECK(fclose(f) == 0, "out of memory");
    return text;
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
    train_run_load_config(&r->o, &r->resolved, dir);
    read_metrics(r);
    read_memory(r);
    if (r->world == 0 && r->resolved.present) r->world = r->resolved.world; /* unfinished */
    read_invocations(r);
}

int report_run_owners(const report_run *r) {
    if (r->resolved.present) return r->resolved.owners;
    /* A run written before config.json recorded k: derive it from the options, by today's rule,
     * for the workers memory.json counted. */
    return r->world > 0 ? train_run_owners(&r->o, r->world) : 0;
}

double report_run_coverage(const report_run *r) {
    if (r->resolved.present) return r->resolved.coverage;
    return r->world > 0 ? (double)report_run_owners(r) / r->world : NAN;
}

void report_run_free(report_run *r) {
    report_curve_free(&r->train);
    report_curve_free(&r->val);
    free(r->inv);
    r->inv = NULL;
}

const char *report_run_name(const report_run *r) {
    const char *slash = strrchr(r->dir, '/');
    return slash && slash[1] ? slash + 1 : r->dir;
}
