/* sdp train: set-up of a worker's subnetwork and the training loop. One code path serves data
 * parallelism (--sdp-mask none) and both SDP masking regimes. */
#include "commands.h"
#include "train_report.h"
#include "train/run_dir.h"
#include "train/run_paths.h"
#include "train/run_plan_check.h"

#include "sdp/check.h"
#include "sdp/interrupt.h"
#include "sdp/ops.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- options ------------------------------------------------------------------------------ */

/* A resumed run keeps its own learning-rate schedule unless --reschedule stretches it to the
 * new --steps; returns the schedule's length before this invocation. */
static int resume_schedule(train_opts *o, int recorded_steps) {
    if (!o->schedule_steps) o->schedule_steps = recorded_steps; /* config.json of an older sdp */
    const int before = o->schedule_steps;
    if (o->reschedule) o->schedule_steps = o->steps;
    return before;
}

/* The one line a resume prints when --steps no longer matches the schedule, or --reschedule
 * changed it: what the learning rate does from here. */
static void schedule_note(const train_opts *o, int before, long step, char *note, size_t n) {
    note[0] = 0;
    const float lr = (float)o->lr, lr_min = (float)o->lr_min;
    if (o->schedule_steps != before) {
        snprintf(note, n,
                 "resume: --reschedule stretches the schedule from %d to %d steps: the learning "
                 "rate at step %ld moves from %.2e to %.2e",
                 before, o->schedule_steps, step, sdp_lr_at(step, o->warmup, before, lr, lr_min),
                 sdp_lr_at(step, o->warmup, o->schedule_steps, lr, lr_min));
    } else if (o->steps > o->schedule_steps) {
        snprintf(note, n,
                 "resume: the run keeps its schedule of %d steps, so from step %d on the learning "
                 "rate holds at --lr-min %.2e; pass --reschedule to stretch it to %d steps",
                 o->schedule_steps, o->schedule_steps, lr_min, o->steps);
    } else if (o->steps < o->schedule_steps) {
        snprintf(note, n,
                 "resume: --steps %d ends the run before its schedule of %d steps does, at a "
                 "learning rate of %.2e; pass --reschedule to fit the schedule to %d steps",
                 o->steps, o->schedule_steps,
                 sdp_lr_at(o->steps, o->warmup, o->schedule_steps, lr, lr_min), o->steps);
    }
}

/* On resume the run's own config.json decides everything but the options a user may change
 * (train_opt_may_change_on_resume) and the data's path, which may be spelt another way. */
static int apply_resume_config(trainer *t, int argc, char **argv, train_opts *recorded,
                               run_resolved *resolved) {
    train_opts cli = t->o;
    train_run_dir_check_free(cli.resume); /* a live run's files are still changing */
    train_run_load_config(&t->o, resolved, cli.resume);
    train_run_dir_check_saved(cli.resume);
    *recorded = t->o;
    char source[1024];
    train_run_path(source, sizeof source, cli.resume, "config.json");
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++) {
        if (!train_opts_given(argc, argv, s->name)) continue;
        if (!strcmp(s->name, "data") || !strcmp(s->name, "val-data")) continue;
        /* Given again with the run's own value (the first command line, say, with --resume
         * added), an option changes nothing. */
        if (!train_opt_may_change_on_resume(s->name) && !train_opts_same(s, &cli, &t->o)) {
            char given[OPT_STR_MAX + 8], own[OPT_STR_MAX + 8];
            sdp_fatal("--%s %s cannot change when resuming: the run was configured with %s (%s): "
                      "drop it, or start a new run",
                      s->name, train_opts_value_text(s, &cli, given, sizeof given),
                      train_opts_value_text(s, &t->o, own, sizeof own), source);
        }
        size_t size = s->type == OPT_STR    ? OPT_STR_MAX
                      : s->type == OPT_INT  ? sizeof(int)
                      : s->type == OPT_FLAG ? sizeof(bool)
                                            : sizeof(double);
        memcpy((char *)&t->o + s->offset, (char *)&cli + s->offset, size);
    }
    train_run_paths_resume(&t->o, &cli, train_opts_given(argc, argv, "data"),
                           train_opts_given(argc, argv, "val-data"), source);
    strcpy(t->o.resume, cli.resume);
    /* Stopping early, replacing a run and re-stretching its schedule are about one invocation,
     * not the run: they never carry over. */
    if (!train_opts_given(argc, argv, "stop-after")) t->o.stop_after = 0;
    if (!train_opts_given(argc, argv, "reschedule")) t->o.reschedule = false;
    t->o.overwrite = false;
    return resume_schedule(&t->o, recorded->steps);
}

static void validate_options(train_opts *o) {
    SDP_CHECK(o->resume[0] || !o->reschedule,
              "--reschedule stretches a resumed run's schedule to a new --steps: use it with "
              "--resume, or set a new run's schedule with --schedule-steps");
    if (!o->resume[0]) train_run_paths_make_absolute(o);
    if (o->schedule_steps == 0) o->schedule_steps = o->steps;
    const int span = o->schedule_steps;
    if (o->warmup < 0) o->warmup = span / 10 < 100 ? span / 10 : 100;
    SDP_CHECK(o->warmup <= span,
              "--warmup %d exceeds the schedule's %d steps (--steps, or "
              "--schedule-steps)",
              o->warmup, span);
    SDP_CHECK(o->lr_min <= o->lr, "--lr-min %g exceeds --lr %g", o->lr_min, o->lr);
    train_opts_check_precision(o);
    train_opts_recompute(o); /* an unknown --recompute fails here, once for the job */
    train_opts_check_zero(o);
    /* What the options alone decide, checked here, before MPI_Init, so that an error is one line
     * for the job: the model's shape (the data's own vocabulary is checked once it is loaded),
     * the GEMM provider, the optimizer and the device. */
    train_run_model_config(o, train_run_dataset_shape(o));
    SDP_CHECK(!o->val_data[0] || !train_run_images(o),
              "--val-data is for llm.c token shards: an image model validates on the test split "
              "of its --data directory; drop --val-data");
    train_run_gemm(o);
    train_run_optimizer_config(o);
    train_device_check(o);
    if (o->sim_world == 0) {
        SDP_CHECK(o->sim_rank == 0, "--sim-rank %d needs --sim-world N (the simulated job's size)",
                  o->sim_rank);
        return;
    }
    SDP_CHECK(o->sim_rank >= 0 && o->sim_rank < o->sim_world,
              "--sim-rank %d is not a worker of --sim-world %d: use a rank in [0, %d)", o->sim_rank,
              o->sim_world, o->sim_world);
    SDP_CHECK(!o->resume[0],
              "--sim-world runs write no checkpoints, so none can be resumed: start a new run");
    SDP_CHECK(o->check_replicas == 0,
              "--check-replicas compares owners across ranks, which a --sim-world run does not "
              "have: drop it");
}

/* A simulated worker stands for one rank of a job that is not running: it must be alone. */
static void check_simulation_world(const trainer *t) {
    SDP_CHECK_ALL(
        !simulating(t) || t->world.size == 1,
        "--sim-world runs one worker alone, but %d MPI ranks were started: run it without "
        "mpirun (or with -n 1)",
        t->world.size);
}

/* ---- set-up ------------------------------------------------------------------------------- */

static void choose_run_dir(trainer *t) {
    /* Every rank has loaded its data and built its worker: one that failed has ended the job
     * (MPI_Abort) before rank 0 passes here, so a run that cannot start creates no directory. */
    MPI_Barrier(MPI_COMM_WORLD);
    if (t->o.resume[0]) {
        strcpy(t->o.out, t->o.resume); /* and it is locked like any other run's */
    } else if (!t->o.out[0]) {
        /* All ranks must agree on the name, so rank 0's clock decides. */
        long long s = (long long)time(NULL);
        MPI_Bcast(&s, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
        time_t now = (time_t)s;
        char stamp[32], dir[OPT_STR_MAX + 64];
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
        snprintf(dir, sizeof dir, "runs/%s-%s", t->o.model, stamp);
        SDP_CHECK(strlen(dir) < sizeof t->o.out, "run directory name too long");
        strcpy(t->o.out, dir);
    }
    if (is_rank0(t))
        t->run_lock = train_run_dir_claim(t->o.out, t->o.resume[0] != 0, t->o.overwrite);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* note: the line that a resume prints about its schedule (empty when there is none). */
static void setup(trainer *t, int argc, char **argv, char *note, size_t n) {
    SDP_CHECK(!(t->o.overwrite && t->o.resume[0]),
              "--overwrite starts a new run and --resume continues one: pass one of them");
    train_opts recorded = t->o;
    run_resolved resolved = {0};
    int schedule_before = 0;
    note[0] = 0;
    if (t->o.resume[0]) schedule_before = apply_resume_config(t, argc, argv, &recorded, &resolved);
    train_opts_warn_unused(&t->o, argc, argv);
    validate_options(&t->o);
    sdp_world_init(&t->world, &argc, &argv, t->o.threads);
    sdp_set_threads(t->world.threads);
    sdp_interrupt_install(); /* a signal from now on stops the run after a step */
    check_simulation_world(t);
    train_run_plan_check(&t->o, job_workers(t), argc, argv); /* before any data loads */
    trainer_build(t);
    if (t->o.resume[0]) {
        char path[1024];
        train_run_path(path, sizeof path, t->o.resume, "config.json");
        train_run_resolved_check(&resolved, &recorded, &t->full, path);
        strcpy(t->o.out, t->o.resume);
        train_load_checkpoint(t);
        check_metrics_log(t);
        schedule_note(&t->o, schedule_before, t->step, note, n);
    }
    choose_run_dir(t); /* only once the data, the model and any checkpoint are known to be good */
}

/* ---- stopping on a signal ------------------------------------------------------------------- */

/* One line saying where the run stopped and how to go on. */
static void report_interrupt(const trainer *t, int sig) {
    if (!is_rank0(t)) return;
    const char *name = sdp_interrupt_name(sig);
    if (simulating(t)) {
        fprintf(stderr,
                "sdp: stopped by %s after step %ld of %d (--sim-world writes no "
                "checkpoint)\n",
                name, t->step, t->o.steps);
        return;
    }
    char launch[64] = "";
    if (t->world.size > 1) snprintf(launch, sizeof launch, "mpirun -np %d ", t->world.size);
    fprintf(stderr,
            "sdp: stopped by %s after step %ld of %d; checkpoint saved in %s; resume with: "
            "%ssdp train --resume %s\n",
            name, t->step, t->o.steps, t->o.out, launch, t->o.out);
}

/* ---- entry point ---------------------------------------------------------------------------- */

int cmd_train(int argc, char **argv) {
    sdp_interrupt_defer(); /* before any thread starts: see interrupt.h */
    trainer t;
    memset(&t, 0, sizeof t);
    train_opts_parse(
        TRAIN_OPTS, &t.o, argc, argv,
        "usage: [mpirun -np N] sdp train --data FILE|DIR [options]\n"
        "Trains on N workers, with data parallelism or subnetwork data parallelism "
        "(--sdp-mask):\na transformer (--model gpt or llama) on bytes of text or llm.c token "
        "shards (--data FILE),\nor an image model (--model resnet or vit) on --dataset "
        "(--data DIR; Fashion-MNIST by default).\n"
        "--sim-world N --sim-rank r runs worker r of an N-worker job alone (one process, "
        "no\ncommunication, no checkpoints), to measure one worker's memory and speed.\n"
        "--device cuda trains on GPUs, one per rank (sdp-cuda only).");
    char schedule[512];
    setup(&t, argc, argv, schedule, sizeof schedule);
    /* A lone process waits on no other rank: a long pause there (a large checkpoint) is work. */
    t.watchdog = sdp_watchdog_start(t.world.size > 1 ? t.o.stall_timeout : -1, t.world.rank);
    t.data.watchdog = t.watchdog;
    write_run_files(&t, argc, argv);
    const double before = open_metrics(&t); /* earlier invocations' seconds */
    print_start(&t);
    if (is_rank0(&t) && schedule[0]) printf("%s\n", schedule);

    const double t0 = now_s();
    double window_t = t0, window_loss = 0;
    /* Validation, checkpoints and replica checks pause training: the rate leaves them out, and
     * the ETA adds the validations still to come at their measured cost. */
    double paused = 0, val_s = 0;
    int nval = 0;
    sdp_metrics final_val = {NAN, 0, NAN};
    int window_steps = 0;
    trainer_step_result parts = {0}; /* summed over the window */
    const long first = t.step;
    int interrupted = 0;
    sdp_watchdog_begin(t.watchdog);
    while (t.step < t.o.steps) {
        trainer_step_result r = trainer_step(&t);
        if (t.step == first + 1) sdp_watchdog_arm(t.watchdog);
        window_loss += r.loss;
        window_steps++;
        parts.ms_forward += r.ms_forward;
        parts.ms_backward += r.ms_backward;
        parts.ms_sync += r.ms_sync;
        parts.ms_update += r.ms_update;
        const bool last = t.step == t.o.steps;
        interrupted = trainer_agreed_interrupt(&t);
        const bool stop =
            (t.o.stop_after > 0 && t.step - first >= t.o.stop_after) || interrupted != 0;
        if (t.step % t.o.log_every == 0 || last || stop) {
            double now = now_s();
            const progress_timing pt = {.window_s = now - window_t - paused,
                                        .elapsed_s = before + now - t0,
                                        .val_s_each = nval > 0 ? val_s / nval : NAN};
            log_progress(&t, window_loss / window_steps, r.lr, r.grad_norm, window_steps, &pt,
                         &parts);
            parts = (trainer_step_result){0};
            window_t = now;
            paused = 0;
            window_loss = 0;
            window_steps = 0;
        }
        const double pause_t = now_s();
        if (t.o.check_replicas > 0 && t.step % t.o.check_replicas == 0)
            train_device_check_replicas(&t);
        if ((t.o.val_every > 0 && t.step % t.o.val_every == 0) || last) {
            const double v0 = now_s();
            final_val = trainer_validate(&t);
            val_s += now_s() - v0;
            nval++;
            log_validation(&t, final_val, before + now_s() - t0);
        }
        const bool ckpt_due = (t.o.ckpt_every > 0 && t.step % t.o.ckpt_every == 0) || last || stop;
        if (ckpt_due && !simulating(&t)) train_save_checkpoint(&t);
        paused += now_s() - pause_t;
        if (stop) break;
    }
    sdp_watchdog_stop(t.watchdog);
    if (interrupted) {
        print_summary(&t, final_val, now_s() - t0, false); /* memory.json: the run's record */
        report_interrupt(&t, interrupted);
        close_metrics(&t);
        trainer_free(&t);
        sdp_world_finalize();
        return 128 + interrupted;
    }
    print_summary(&t, final_val, now_s() - t0, true);
    close_metrics(&t);
    trainer_free(&t);
    sdp_world_finalize();
    return 0;
}
