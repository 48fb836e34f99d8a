/* Progress lines of an evaluation pass (eval_progress.h). */
#include "eval_progress.h"

#include <stdio.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void train_eval_progress_init(eval_progress *p, double every_s, uint64_t batches, double per_batch,
                              double total, bool images) {
    *p = (eval_progress){.every_s = every_s,
                         .batches = batches,
                         .per_batch = per_batch,
                         .total = total,
                         .unit = images ? "img" : "tok"};
    p->start_s = p->last_s = now_s();
}

/* "812", "45.2k", "1.23M", "4.56G". */
static const char *fmt_count(char *buf, size_t n, double x) {
    if (x < 1e4)
        snprintf(buf, n, "%.0f", x);
    else if (x < 1e6)
        snprintf(buf, n, "%.1fk", x * 1e-3);
    else if (x < 1e9)
        snprintf(buf, n, "%.2fM", x * 1e-6);
    else
        snprintf(buf, n, "%.2fG", x * 1e-9);
    return buf;
}

const char *train_progress_fmt_duration(char *buf, size_t n, double s) {
    if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
    return buf;
}

void train_eval_progress_update(eval_progress *p, uint64_t done) {
    if (p->every_s < 0 || done == 0) return;
    const double t = now_s();
    const bool last = done >= p->batches;
    if (!(t - p->last_s >= p->every_s || (last && p->lines > 0))) return;
    p->last_s = t;
    p->lines++;
    const double elapsed = t - p->start_s, frac = (double)done / (double)p->batches;
    double did = p->per_batch * (double)done;
    if (did > p->total) did = p->total;
    const double rate = elapsed > 0 ? did / elapsed : 0;
    char a[32], b[32], r[32], eta[32];
    fmt_count(a, sizeof a, did);
    fmt_count(b, sizeof b, p->total);
    if (last)
        train_progress_fmt_duration(eta, sizeof eta, elapsed);
    else
        train_progress_fmt_duration(eta, sizeof eta, frac > 0 ? elapsed * (1 - frac) / frac : 0);
    fprintf(stderr, "eval %5.1f%% | %s/%s %s | %s %s/s | %s %s\n", 100 * frac, a, b, p->unit,
            fmt_count(r, sizeof r, rate), p->unit, last ? "done in" : "eta", eta);
    fflush(stderr);
}
