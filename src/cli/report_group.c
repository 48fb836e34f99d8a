#include "report_group.h"

#include "train/run.h"

#include "sdp/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Grouping compares every option of TRAIN_OPTS except these, so a new option separates groups
 * unless it is listed here on purpose: the seed, and what one invocation of sdp train may set
 * without changing what the run learns (where it lives, how often it logs, validates, saves and
 * checks, how it computes). --steps is not compared either: the steps actually trained are. */
bool report_option_ignored_by_group(const char *name) {
    static const char *ignored[] = {"seed",           "out",           "resume",    "threads",
                                    "stop-after",     "ckpt-every",    "log-every", "val-every",
                                    "check-replicas", "stall-timeout", "gemm",      "overwrite",
                                    "steps",          "reschedule"};
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++)
        if (strcmp(ignored[i], name) == 0) return true;
    return false;
}

static const void *field(const train_opts *o, const opt_spec *s) {
    return (const char *)o + s->offset;
}

static void format_option(char *buf, size_t n, const opt_spec *s, const train_opts *o) {
    const void *f = field(o, s);
    switch (s->type) {
    case OPT_INT:
        snprintf(buf, n, "%d", *(const int *)f);
        break;
    case OPT_FLOAT:
        snprintf(buf, n, "%g", *(const double *)f);
        break;
    case OPT_STR:
        snprintf(buf, n, "%s", (const char *)f);
        break;
    case OPT_FLAG:
        snprintf(buf, n, "%s", *(const bool *)f ? "true" : "false");
        break;
    }
}

/* Runs whose options resolved differently (under different rules) trained different plans. */
static bool same_resolved(const report_run *a, const report_run *b) {
    const run_resolved *x = &a->resolved, *y = &b->resolved;
    if (report_run_owners(a) != report_run_owners(b)) return false;
    if (!x->present || !y->present) return true; /* older runs: their options decide the rest */
    return x->chunks == y->chunks && x->scale == y->scale;
}

/* The options that only ask for k, chunks and a branch scale: where both runs record what they
 * resolved to, the record decides (runs that asked alike for one plan trained one plan, and the
 * top level of config.json holds only the latest invocation's request). */
static bool plan_request(const char *name) {
    return !strcmp(name, "sdp-owners") || !strcmp(name, "sdp-coverage") ||
           !strcmp(name, "sdp-chunks") || !strcmp(name, "branch-scale");
}

static bool same_group(const report_run *a, const report_run *b) {
    if (report_run_mixed(a) || report_run_mixed(b)) return false; /* each is reported alone */
    if (a->steps != b->steps || a->world != b->world || !same_resolved(a, b)) return false;
    const bool recorded = a->resolved.present && b->resolved.present;
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++) {
        if (report_option_ignored_by_group(s->name) || (recorded && plan_request(s->name)))
            continue;
        if (!train_opts_same(s, &a->o, &b->o)) return false;
    }
    return true;
}

static bool is_ddp(const report_run *r) {
    return strcmp(r->o.sdp_mask, "none") == 0;
}

/* Whether the label's fixed part already says an option's value. */
static bool label_shows(const char *name, const report_run *r) {
    if (!strcmp(name, "model") || !strcmp(name, "sdp-mask")) return true;
    const bool sdp_part =
        !strcmp(name, "sdp-unit") || !strcmp(name, "sdp-coverage") || !strcmp(name, "sdp-owners");
    return sdp_part && !is_ddp(r);
}

/* Whether two groups' labels would start alike: same model, mode (and for SDP unit and
 * coverage), steps trained and N. */
static bool same_label_start(const report_run *a, const report_run *b) {
    if (a->world != b->world || a->steps != b->steps) return false;
    if (!is_ddp(a) && report_run_coverage(a) != report_run_coverage(b) &&
        !(isnan(report_run_coverage(a)) && isnan(report_run_coverage(b))))
        return false;
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++)
        if (label_shows(s->name, a) && !train_opts_same(s, &a->o, &b->o)) return false;
    return true;
}

/* Closes the label's memstream f (whose buffer is *label, *len bytes) and returns the label
 * escaped: it quotes config.json's strings, and is printed and written into data files. */
static char *escaped_label(FILE *f, char **label, size_t *len) {
    SDP_CHECK(fclose(f) == 0, "out of memory");
    char *escaped = sdp_xmalloc(4 * *len + 1, "a group's label");
    sdp_escape(escaped, 4 * *len + 1, *label);
    free(*label);
    return escaped;
}

/* "DDP, 300 steps" or "forward/block C=0.5, 300 steps" (after the model's name, and then N, when
 * these differ between groups), then each option that tells this group from another whose label
 * starts alike, so that every label is distinct and none lists what the start already implies
 * (such as a warmup derived from --steps). */
static char *make_label(const report_run *r, const report_group *all, int ngroups) {
    char *label = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&label, &len);
    SDP_CHECK(f, "out of memory");
    bool model_varies = false, world_varies = false;
    for (int i = 0; i < ngroups; i++) {
        model_varies |= strcmp(all[i].runs[0]->o.model, r->o.model) != 0;
        world_varies |= all[i].runs[0]->world != r->world;
    }
    if (model_varies) fprintf(f, "%s ", r->o.model);
    if (is_ddp(r))
        fprintf(f, "DDP");
    else if (!isnan(report_run_coverage(r)))
        fprintf(f, "%s/%s C=%g", r->o.sdp_mask, r->o.sdp_unit, report_run_coverage(r));
    else if (r->o.sdp_owners > 0)
        fprintf(f, "%s/%s k=%d", r->o.sdp_mask, r->o.sdp_unit, r->o.sdp_owners);
    else
        fprintf(f, "%s/%s C=%g", r->o.sdp_mask, r->o.sdp_unit, r->o.sdp_coverage);
    fprintf(f, ", %ld steps", r->steps);
    if (world_varies) fprintf(f, ", N=%d", r->world);
    bool chunks_vary = false, scale_varies = false;
    for (int i = 0; i < ngroups; i++) {
        const report_run *o = all[i].runs[0];
        if (all[i].mixed || !same_label_start(o, r)) continue;
        chunks_vary |=
            o->resolved.present && r->resolved.present && o->resolved.chunks != r->resolved.chunks;
        scale_varies |=
            o->resolved.present && r->resolved.present && o->resolved.scale != r->resolved.scale;
    }
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++) {
        if (report_option_ignored_by_group(s->name) || label_shows(s->name, r)) continue;
        bool varies = false;
        for (int i = 0; i < ngroups; i++)
            varies |= !all[i].mixed && same_label_start(all[i].runs[0], r) &&
                      !train_opts_same(s, &all[i].runs[0]->o, &r->o);
        if (!varies) continue;
        char value[OPT_STR_MAX + 32];
        format_option(value, sizeof value, s, &r->o);
        fprintf(f, ", %s=%s", s->name, value);
    }
    /* Resolved alike from other requests, or from equal ones under another rule. */
    if (chunks_vary) fprintf(f, ", chunks %d", r->resolved.chunks);
    if (scale_varies) fprintf(f, ", branch scale %s", sdp_branch_scale_name(r->resolved.scale));
    return escaped_label(f, &label, &len);
}

/* "x (mixed: sdp-mask forward→backward), 60 steps": a run whose invocations trained different
 * plans stands alone, under its own name and what changed. */
static char *mixed_label(const report_run *r) {
    char *label = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&label, &len);
    SDP_CHECK(f, "out of memory");
    fprintf(f, "%s (mixed:", report_run_name(r));
    const char *sep = " ";
    for (int k = 0; k < INV_NFIELDS; k++) {
        if (!r->changed[k]) continue;
        char value[256];
        fprintf(f, "%s%s %s", sep, report_field_name(k),
                report_run_field(value, sizeof value, r, k));
        sep = ", ";
    }
    fprintf(f, "), %ld steps", r->steps);
    return escaped_label(f, &label, &len);
}

/* The index of the point at `step` in c, searching from *from on (steps only increase). */
static int find_step(const report_curve *c, double step, int *from) {
    while (*from < c->n && c->step[*from] < step) (*from)++;
    return *from < c->n && c->step[*from] == step ? *from : -1;
}

/* The mean of the runs' curves at every step that all of them logged, up to the steps the
 * tables count (a run's last training step), so that charts and tables show the same runs. */
static void mean_curve(report_curve *out, const report_group *g, bool val) {
    const report_curve *first = val ? &g->runs[0]->val : &g->runs[0]->train;
    double last = INFINITY;
    for (int k = 0; k < g->nruns; k++)
        if (g->runs[k]->train.n) last = fmin(last, (double)g->runs[k]->steps);
    int *pos = sdp_xcalloc((size_t)g->nruns, sizeof *pos, "a group's mean curve");
    for (int i = 0; i < first->n && first->step[i] <= last; i++) {
        const double step = first->step[i];
        double flops = 0, loss = 0, acc = 0;
        bool everywhere = true;
        for (int k = 0; k < g->nruns && everywhere; k++) {
            const report_curve *c = val ? &g->runs[k]->val : &g->runs[k]->train;
            const int j = find_step(c, step, &pos[k]);
            everywhere = j >= 0;
            if (everywhere) flops += c->flops[j], loss += c->loss[j], acc += c->acc[j];
        }
        if (everywhere)
            report_curve_push(out, step, flops / g->nruns, loss / g->nruns, acc / g->nruns);
    }
    free(pos);
}

static void finish_group(report_group *g) {
    mean_curve(&g->train, g, false);
    mean_curve(&g->val, g, true);
    double most = -1;
    for (int k = 0; k < g->nruns; k++)
        if (g->runs[k]->total_bytes > most) {
            most = g->runs[k]->total_bytes;
            memcpy(g->bars, g->runs[k]->bars, sizeof g->bars);
        }
}

/* "sdp: warning: " and a message whose quoted paths and values are escaped. */
static void warn(const char *message) {
    const size_t n = 4 * strlen(message) + 1;
    char *escaped = sdp_xmalloc(n, "a warning");
    fflush(stdout);
    fprintf(stderr, "sdp: warning: %s\n", sdp_escape(escaped, n, message));
    free(escaped);
}

static void warn_mixed(const report_run *r) {
    char *history = report_run_history(r), *message = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&message, &len);
    SDP_CHECK(f, "out of memory");
    fprintf(f, "%s: trained with %s: reported alone, not grouped", r->dir, history);
    SDP_CHECK(fclose(f) == 0, "out of memory");
    warn(message);
    free(message);
    free(history);
}

/* A second run of the group with a seed it already has (a copy of a run, or a resumed copy) is
 * not another seed: the one that trained more steps stays (the first given, when equal). */
static void add_seed(report_group *g, const report_run *r) {
    int j = 0;
    while (j < g->nruns && g->runs[j]->o.seed != r->o.seed) j++;
    if (j == g->nruns) {
        g->runs[g->nruns++] = r;
        return;
    }
    const report_run *kept = r->steps > g->runs[j]->steps ? r : g->runs[j];
    const report_run *dropped = kept == r ? g->runs[j] : r;
    g->runs[j] = kept;
    char *message = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&message, &len);
    SDP_CHECK(f, "out of memory");
    fprintf(f,
            "%s has the configuration, steps and seed (%d) of %s (a copy of one run?): the "
            "seed counts once, with the figures of %s",
            dropped->dir, r->o.seed, kept->dir, kept->dir);
    SDP_CHECK(fclose(f) == 0, "out of memory");
    warn(message);
    free(message);
}

int report_group_runs(report_group *g, const report_run *runs, int n, bool by_seed) {
    int ngroups = 0;
    memset(g, 0, sizeof *g * (size_t)n);
    for (int i = 0; i < n; i++) {
        const report_run *r = &runs[i];
        if (by_seed && report_run_mixed(r)) warn_mixed(r);
        int k = 0;
        while (by_seed && k < ngroups && !same_group(g[k].runs[0], r)) k++;
        if (!by_seed || k == ngroups) {
            k = ngroups++;
            g[k].runs = sdp_xcalloc((size_t)n, sizeof *g[k].runs, "a group's runs");
            g[k].mixed = report_run_mixed(r);
        }
        add_seed(&g[k], r);
    }
    for (int k = 0; k < ngroups; k++) {
        const report_run *r = g[k].runs[0];
        g[k].label = !by_seed     ? sdp_xstrdup(report_run_name(r), "a group's label")
                     : g[k].mixed ? mixed_label(r)
                                  : make_label(r, g, ngroups);
        finish_group(&g[k]);
    }
    return ngroups;
}

void report_group_free(report_group *g) {
    free(g->runs);
    free(g->label);
    report_curve_free(&g->train);
    report_curve_free(&g->val);
    memset(g, 0, sizeof *g);
}

/* One final figure of a run; the group table shows each over the group's runs. */
enum { FIG_TRAIN, FIG_VAL, FIG_ACC, FIG_FLOPS, FIG_STATE, FIG_RSS, FIG_SENT, NFIGS };

static double figure(const report_run *r, int which) {
    const double v[NFIGS] = {r->train_loss,  r->val_loss, r->val_acc, r->flops,
                             r->state_bytes, r->peak_rss, r->sent};
    return v[which];
}

/* "mean ± sample std" over the runs that know the figure, the mean alone for one, "-" for
 * none; values are multiplied by scale first. */
static const char *mean_std(char *buf, size_t n, const report_group *g, int which, double scale,
                            int decimals, const char *unit) {
    double sum = 0, sq = 0;
    int known = 0;
    for (int k = 0; k < g->nruns; k++)
        if (!isnan(figure(g->runs[k], which))) sum += scale * figure(g->runs[k], which), known++;
    if (!known) return snprintf(buf, n, "-"), buf;
    const double mean = sum / known;
    for (int k = 0; k < g->nruns; k++) {
        const double v = scale * figure(g->runs[k], which);
        if (!isnan(v)) sq += (v - mean) * (v - mean);
    }
    if (known == 1)
        snprintf(buf, n, "%.*f%s", decimals, mean, unit);
    else
        snprintf(buf, n, "%.*f%s ± %.*f", decimals, mean, unit, decimals, sqrt(sq / (known - 1)));
    return buf;
}

/* The largest of a figure over the group's runs, in MiB. */
static const char *max_mib(char *buf, size_t n, const report_group *g, int which) {
    double most = 0;
    for (int k = 0; k < g->nruns; k++)
        if (figure(g->runs[k], which) > most) most = figure(g->runs[k], which);
    if (most > 0)
        snprintf(buf, n, "%.1f", most / 1048576.0);
    else
        snprintf(buf, n, "-");
    return buf;
}

void report_group_print_table(const report_group *g, int ngroups) {
    printf("| group | seeds | N | TFLOP/worker | train loss | val loss | val acc | "
           "params+grads+opt MiB | peak RSS MiB | sent/step MiB |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < ngroups; i++) {
        const report_group *gr = &g[i];
        double flops = 0;
        for (int k = 0; k < gr->nruns; k++) flops += figure(gr->runs[k], FIG_FLOPS) / gr->nruns;
        char train[64], val[64], acc[64], a[32], b[32], c[32];
        char world[256];
        printf("| %s | %d | %s | %.4g | %s | %s | %s | %s | %s | %s |\n", gr->label, gr->nruns,
               report_run_field(world, sizeof world, gr->runs[0], INV_WORLD), flops / 1e12,
               mean_std(train, sizeof train, gr, FIG_TRAIN, 1, 4, ""),
               mean_std(val, sizeof val, gr, FIG_VAL, 1, 4, ""),
               mean_std(acc, sizeof acc, gr, FIG_ACC, 100, 2, "%"),
               max_mib(a, sizeof a, gr, FIG_STATE), max_mib(b, sizeof b, gr, FIG_RSS),
               max_mib(c, sizeof c, gr, FIG_SENT));
    }
}
