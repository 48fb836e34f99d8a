/* sdp report: turns run directories into a Markdown table of their final figures (and, with
 * --plots DIR, gnuplot charts of loss against steps and FLOPs, and of memory per worker). */
#include "commands.h"
#include "run.h"

#include "sdp/check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char dir[OPT_STR_MAX];
    train_opts o;
    long steps;
    double train_loss, val_loss, val_acc, flops, tok_s, elapsed;
    double state_bytes, total_bytes, peak_rss, sent;
    int world;
} run_figures;

static double number(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The last training and validation lines of metrics.jsonl. */
static void read_metrics(run_figures *f) {
    char path[1024], line[4096];
    run_path(path, sizeof path, f->dir, "metrics.jsonl");
    FILE *in = sdp_fopen(path, "rb");
    double tok = 0;
    int ntok = 0;
    while (fgets(line, sizeof line, in)) {
        cJSON *o = cJSON_Parse(line);
        if (!o) continue;
        if (!isnan(number(o, "loss"))) {
            f->train_loss = number(o, "loss");
            f->steps = (long)number(o, "step");
            f->flops = number(o, "flops");
            tok += number(o, "tokens_per_s"), ntok++;
        }
        if (!isnan(number(o, "val_loss"))) f->val_loss = number(o, "val_loss");
        if (!isnan(number(o, "val_accuracy"))) f->val_acc = number(o, "val_accuracy");
        if (!isnan(number(o, "elapsed_s"))) f->elapsed = number(o, "elapsed_s");
        cJSON_Delete(o);
    }
    fclose(in);
    f->tok_s = ntok ? tok / ntok : NAN;
}

/* The largest worker's bytes from memory.json. */
static void read_memory(run_figures *f) {
    char path[1024];
    run_path(path, sizeof path, f->dir, "memory.json");
    FILE *probe = fopen(path, "rb");
    if (!probe) return; /* a run that has not finished */
    fclose(probe);
    char *txt = run_read_text(path);
    cJSON *o = cJSON_Parse(txt);
    free(txt);
    SDP_CHECK(o, "%s is not valid JSON", path);
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(o, "workers")) {
        double state = number(w, "params") + number(w, "grads") + number(w, "optimizer");
        double total = state + number(w, "activations") + number(w, "buffers") +
                       number(w, "scratch") + number(w, "data");
        if (state > f->state_bytes) f->state_bytes = state;
        if (total > f->total_bytes) f->total_bytes = total;
        /* Rank 0 also holds the evaluation copy of the model; the others show a worker's own. */
        if ((f->world > 0 || !w->next) && number(w, "peak_rss") > f->peak_rss)
            f->peak_rss = number(w, "peak_rss");
        if (number(w, "sent_per_step") > f->sent) f->sent = number(w, "sent_per_step");
        f->world++;
    }
    cJSON_Delete(o);
}

static void load_run(run_figures *f, const char *dir) {
    memset(f, 0, sizeof *f);
    f->train_loss = f->val_loss = f->val_acc = NAN;
    SDP_CHECK(strlen(dir) < sizeof f->dir, "path too long: %s", dir);
    strcpy(f->dir, dir);
    run_load_config(&f->o, dir);
    read_metrics(f);
    read_memory(f);
}

static const char *mib(char *b, size_t n, double bytes) {
    if (bytes <= 0 || isnan(bytes)) return "-";
    snprintf(b, n, "%.1f", bytes / 1048576.0);
    return b;
}

static void print_table(const run_figures *r, int n) {
    printf("| run | mode | unit | N | k | steps | TFLOP/worker | train loss | val loss | val acc | "
           "examples/s/worker | params+grads+opt MiB | total MiB | peak RSS MiB | sent/step MiB "
           "|\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        const run_figures *f = &r[i];
        const bool ddp = strcmp(f->o.sdp_mask, "none") == 0;
        char k[16], a[32], b[32], c[32], d[32];
        if (ddp)
            snprintf(k, sizeof k, "%d", f->world);
        else if (f->o.sdp_owners > 0)
            snprintf(k, sizeof k, "%d", f->o.sdp_owners);
        else
            snprintf(k, sizeof k, "%g", f->o.sdp_coverage * f->world);
        const char *name = strrchr(f->dir, '/') ? strrchr(f->dir, '/') + 1 : f->dir;
        char acc[32] = "-";
        if (!isnan(f->val_acc)) snprintf(acc, sizeof acc, "%.2f%%", 100 * f->val_acc);
        printf(
            "| %s | %s | %s | %d | %s | %ld | %.4g | %.4f | %.4f | %s | %.0f | %s | %s | %s | %s "
            "|\n",
            name, ddp ? "DDP" : f->o.sdp_mask, ddp ? "-" : f->o.sdp_unit, f->world, k, f->steps,
            f->flops / 1e12, f->train_loss, f->val_loss, acc, f->tok_s,
            mib(a, sizeof a, f->state_bytes), mib(b, sizeof b, f->total_bytes),
            mib(c, sizeof c, f->peak_rss), mib(d, sizeof d, f->sent));
    }
}

int cmd_report(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: sdp report RUN_DIR...\n"
               "Prints a Markdown table of each run's final figures: mode, unit, N, k, steps,\n"
               "FLOPs per worker, final train and validation loss (and accuracy for image\n"
               "models), tokens or images per second per worker, the\n"
               "largest worker's memory (training bytes; peak RSS over ranks 1..N-1, as rank 0\n"
               "also holds the evaluation copy of the model), and bytes sent per step.\n");
        return 0;
    }
    SDP_CHECK(argc >= 2, "sdp report needs one or more run directories (written by sdp train)");
    run_figures *runs = calloc((size_t)argc, sizeof *runs);
    SDP_CHECK(runs, "out of memory");
    for (int i = 1; i < argc; i++) load_run(&runs[i - 1], argv[i]);
    print_table(runs, argc - 1);
    free(runs);
    return 0;
}
