/* sdp plan's step-time options, configuration and output (plan_steptime.h). */
#include "plan_steptime.h"

#include "sdp/check.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int plan_steptime_specs(opt_spec *specs, size_t base) {
#define AT(f) (base + offsetof(plan_steptime_opts, f))
    const opt_spec s[] = {
        {"link-gbps", OPT_FLOAT, AT(link_gbps), "0",
         "step-time model: each host's network link, Gbit/s per direction (0: no model)", 0},
        {"link-latency-us", OPT_FLOAT, AT(latency_us), "5",
         "step-time model: latency of a message step between hosts, microseconds", 0},
        {"ranks-per-host", OPT_INT, AT(ranks_per_host), "1",
         "step-time model: workers sharing a host and its link (rank r on host r / this)", 1},
        {"host-gbps", OPT_FLOAT, AT(host_gbps), "0",
         "step-time model: bytes a worker's transport moves (CPU copies over TCP), Gbit/s; "
         "0: free",
         0},
        {"host-bcast-gbps", OPT_FLOAT, AT(host_bcast_gbps), "0",
         "step-time model: the same for the blocking publishing broadcasts (backward masking), "
         "which drive their transfers without pause; 0: --host-gbps",
         0},
        {"gflops", OPT_FLOAT, AT(gflops), "0",
         "step-time model: one worker's compute rate, GFLOP/s; 0: this machine's sgemm peak, "
         "from --calibration (measured the first time)",
         0},
        {"measure-compute", OPT_INT, AT(measure_steps), "0",
         "step-time model: time each worker's forward and backward on this machine, alone at "
         "the plan's threads, the median of this many steps (CPU only); 0: price its FLOPs at "
         "--gflops",
         0},
        {"calibration", OPT_STR, AT(calibration), "",
         "step-time model: the file that keeps this machine's measured speeds; default "
         "$SDP_CALIBRATION, else $XDG_CACHE_HOME/sdp/calibration.json, else "
         "~/.cache/sdp/calibration.json",
         0},
        {"recalibrate", OPT_FLAG, AT(recalibrate), "false",
         "step-time model: measure this machine's speeds again and store them in --calibration", 0},
        {"mem-gbs", OPT_FLOAT, AT(mem_gbs), "0",
         "step-time model: memory bandwidth of the optimizer step, GB/s; 0: not timed", 0},
        {"comm", OPT_STR, AT(comm), "auto",
         "step-time model: mpi (Open MPI over TCP, as sdp on CPUs), nccl (GPUs), or auto", 0},
    };
#undef AT
    const int n = (int)(sizeof s / sizeof *s);
    for (int i = 0; i < n; i++) specs[i] = s[i];
    return n;
}

bool plan_steptime_on(const plan_steptime_opts *o) {
    return o->link_gbps > 0;
}

void plan_steptime_warn_ignored(const plan_steptime_opts *o, bool fitting, int argc, char **argv) {
    if (plan_steptime_on(o) && !fitting) return;
    opt_spec s[32]; /* more than the model has */
    const int n = plan_steptime_specs(s, 0);
    char list[512] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++)
        if (train_opts_given(argc, argv, s[i].name) && used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s", used ? ", " : "",
                                     s[i].name);
    if (used == 0) return;
    if (fitting)
        sdp_warn("%s ignored: --fit prints no step times; drop --fit to see them", list);
    else
        sdp_warn("%s ignored: the step-time model is off without --link-gbps; give each "
                 "host's link rate, e.g. --link-gbps 10",
                 list);
}

/* Clipping reads and writes the gradient, the optimizer reads it again, reads and writes the
 * weight and every state buffer (bf16 adds the fp32 master weight to the state). */
static double update_bytes(bool bf16, double state_bytes) {
    const double w = bf16 ? 2 : 4;
    return 3 * w + 2 * w + 2 * (state_bytes + (bf16 ? 4 : 0));
}

void plan_steptime_config(const plan_steptime_opts *o, int world, bool cuda, bool bf16,
                          double state_bytes, sdp_steptime_cfg *cfg, plan_calibration *cal) {
    sdp_comm_lib lib = cuda ? SDP_COMM_NCCL : SDP_COMM_MPI;
    SDP_CHECK(!strcmp(o->comm, "auto") || sdp_comm_lib_parse(o->comm, &lib),
              "unknown --comm '%s': use mpi, nccl or auto", o->comm);
    SDP_CHECK(o->measure_steps == 0 || !cuda,
              "--measure-compute times this machine's CPU, which says nothing of a GPU: give the "
              "GPU's rate with --gflops, e.g. --gflops 400000");
    SDP_CHECK(o->measure_steps == 0 || o->gflops == 0,
              "--measure-compute and --gflops %g both set the compute: give one", o->gflops);
    SDP_CHECK(o->gflops > 0 || o->measure_steps > 0 || !cuda,
              "--gflops 0 measures this machine's sgemm peak, which says nothing of a GPU: give "
              "the GPU's rate, e.g. --gflops 400000");
    memset(cfg, 0, sizeof *cfg);
    memset(cal, 0, sizeof *cal);
    if (o->gflops <= 0 && o->measure_steps == 0)
        plan_calibration_get(cal, o->calibration, omp_get_max_threads(), o->recalibrate);
    if (o->measure_steps > 0) {
        cal->timed_steps = o->measure_steps;
        cal->threads = omp_get_max_threads();
    }
    cfg->net = (sdp_net){.world = world,
                         .ranks_per_host = o->ranks_per_host,
                         .link_Bps = o->link_gbps * 1e9 / 8,
                         .latency_s = o->latency_us * 1e-6,
                         .host_Bps = o->host_gbps * 1e9 / 8};
    cfg->lib = lib;
    cfg->overlap = lib == SDP_COMM_NCCL;
    cfg->flops_per_s = (o->gflops > 0 ? o->gflops : cal->sgemm_gflops) * 1e9; /* 0: timed */
    cfg->mem_Bps = o->mem_gbs * 1e9;
    cfg->bcast_host_Bps = o->host_bcast_gbps * 1e9 / 8;
    cfg->wire_bytes = bf16 ? 2 : 4;
    cfg->update_bytes = update_bytes(bf16, state_bytes);
}

/* "812.3 ms", "12.53 s", or "3.21e+09 s": a link or compute rate given absurdly low (say
 * --link-gbps 1e-300) still leaves every time inside its 12-character column. */
static const char *fmt_time(char *buf, size_t n, double s) {
    if (s < 1)
        snprintf(buf, n, "%.1f ms", 1e3 * s);
    else if (s < 1e6)
        snprintf(buf, n, "%.2f s", s);
    else
        snprintf(buf, n, "%.2e s", s);
    return buf;
}

static void print_row(const char *name, const sdp_step_times *t) {
    char c[5][32];
    printf("  %-8s %12s %12s %12s %12s %12s\n", name, fmt_time(c[0], 32, t->forward),
           fmt_time(c[1], 32, t->backward), fmt_time(c[2], 32, t->exposed),
           fmt_time(c[3], 32, t->update), fmt_time(c[4], 32, t->step));
}

static const sdp_step_times *slowest(const sdp_step_times *t, int world) {
    const sdp_step_times *s = &t[0];
    for (int r = 1; r < world; r++)
        if (t[r].step > s->step) s = &t[r];
    return s;
}

/* Where the compute rate came from: the calibration file, or --gflops. */
static void print_speeds(const sdp_steptime_cfg *cfg, const plan_calibration *cal) {
    if (cal->timed_steps > 0) {
        printf("  compute timed on this machine (--measure-compute %d): each worker's forward "
               "and backward, alone at %d thread%s, the median over %d step%s\n",
               cal->timed_steps, cal->threads, cal->threads == 1 ? "" : "s", cal->timed_steps,
               cal->timed_steps == 1 ? "" : "s");
        return;
    }
    if (!cal->path[0]) {
        printf("  machine speeds from the options (--gflops %.4g)\n", cfg->flops_per_s * 1e-9);
        return;
    }
    char date[64], host[1024]; /* read from the file: escaped */
    char day[11] = {0};
    memcpy(day, cal->measured, sizeof day - 1); /* the date of "2026-11-26T10:31:02Z" */
    printf("  machine speeds from %s, measured %s on %s: sgemm %.4g GFLOP/s at %d thread%s; "
           "--recalibrate to measure again, or --gflops R to give the rate\n",
           cal->path, sdp_escape(date, sizeof date, day), sdp_escape(host, sizeof host, cal->host),
           cal->sgemm_gflops, cal->threads, cal->threads == 1 ? "" : "s");
}

void plan_steptime_print(const sdp_steptime_cfg *cfg, const plan_calibration *cal,
                         const sdp_step_times *t, int world, int show, const sdp_step_times *ddp) {
    const sdp_net *n = &cfg->net;
    char transport[64] = "free";
    if (n->host_Bps > 0) snprintf(transport, sizeof transport, "%.4g Gbit/s", n->host_Bps * 8e-9);
    if (cfg->bcast_host_Bps > 0)
        snprintf(transport + strlen(transport), sizeof transport - strlen(transport),
                 " (broadcasts %.4g Gbit/s)", cfg->bcast_host_Bps * 8e-9);
    char micro[64] = "";
    if (cfg->micro_batches > 1)
        snprintf(micro, sizeof micro, ", %d micro-batches a step", cfg->micro_batches);
    char compute[64] = "compute timed";
    if (cal->timed_steps == 0)
        snprintf(compute, sizeof compute, "%.4g GFLOP/s per worker", cfg->flops_per_s * 1e-9);
    printf("  step time (model, docs/network.md): link %.4g Gbit/s per direction, latency %.3g us, "
           "%d worker%s per host, transport %s, %s, %s collectives %s%s\n",
           n->link_Bps * 8e-9, n->latency_s * 1e6, n->ranks_per_host,
           n->ranks_per_host == 1 ? "" : "s", transport, compute, sdp_comm_lib_name(cfg->lib),
           cfg->overlap ? "overlapped with the backward" : "after the backward", micro);
    print_speeds(cfg, cal);
    printf("  %-8s %12s %12s %12s %12s %12s\n", "worker", "forward", "backward", "exposed",
           "update", "step");
    for (int r = 0; r < world && r < show; r++) {
        char name[16];
        snprintf(name, sizeof name, "%d", r);
        print_row(name, &t[r]);
    }
    if (world > show) printf("  ... (%d more workers; --show N lists more)\n", world - show);
    print_row("slowest", slowest(t, world));
    print_row("DDP", ddp);
    printf("  step vs DDP: %.3gx; exposed: the wait for the gradient sync after the backward; "
           "update: optimizer%s%s\n",
           slowest(t, world)->step / ddp->step,
           t[0].gather > 0 ? ", all-gathers of the updated shards (--zero)" : "",
           t[0].publish > 0 ? " and publishing" : "");
}

void plan_steptime_json_fields(const sdp_step_times *t, double flops) {
    printf(", \"flops\": %.6g, \"forward_s\": %.6g, \"backward_s\": %.6g, \"exposed_s\": %.6g, "
           "\"optimizer_s\": %.6g, \"gather_s\": %.6g, \"publish_s\": %.6g, \"update_s\": %.6g, "
           "\"step_s\": %.6g",
           flops, t->forward, t->backward, t->exposed, t->optimizer, t->gather, t->publish,
           t->update, t->step);
}

void plan_steptime_json_summary(const sdp_steptime_cfg *cfg, const plan_calibration *cal,
                                const sdp_step_times *t, int world, const sdp_step_times *ddp) {
    const sdp_net *n = &cfg->net;
    printf("  \"steptime\": {\"link_gbps\": %.6g, \"latency_us\": %.6g, \"ranks_per_host\": %d, "
           "\"host_gbps\": %.6g, \"host_bcast_gbps\": %.6g, \"gflops\": %.6g, \"mem_gbs\": %.6g, "
           "\"comm\": \"%s\", "
           "\"overlap\": %s, \"micro_batches\": %d, \"step_s\": %.6g, \"ddp_step_s\": %.6g",
           n->link_Bps * 8e-9, n->latency_s * 1e6, n->ranks_per_host, n->host_Bps * 8e-9,
           cfg->bcast_host_Bps * 8e-9, cfg->flops_per_s * 1e-9, cfg->mem_Bps * 1e-9,
           sdp_comm_lib_name(cfg->lib), cfg->overlap ? "true" : "false",
           cfg->micro_batches > 1 ? cfg->micro_batches : 1, slowest(t, world)->step, ddp->step);
    if (cal->timed_steps > 0)
        printf(", \"measure_compute\": {\"steps\": %d, \"threads\": %d}", cal->timed_steps,
               cal->threads);
    /* The calibration's path and date as JSON strings: the path is the user's, so escaped. */
    if (cal->path[0]) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "file", cal->path);
        cJSON_AddStringToObject(s, "measured", cal->measured);
        cJSON_AddStringToObject(s, "host", cal->host);
        cJSON_AddNumberToObject(s, "threads", cal->threads);
        char *txt = cJSON_PrintUnformatted(s);
        SDP_CHECK(txt, "out of memory");
        printf(", \"calibration\": %s", txt);
        free(txt);
        cJSON_Delete(s);
    }
    printf("}\n");
}
