/* Shared helpers for the cmocka tests: random inputs, error measures, finite differences in
 * double precision, and checks that a call fails with the expected one-line message. */
#ifndef SDP_TESTUTIL_H
#define SDP_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "sdp/backend.h"
#include "sdp/rng.h"

/* The CPU backend with GEMMs by prov, over host memory counted in a tally of its own: how the op
 * tests run each CPU kernel, through the checked entry points of sdp/ops.h. One per provider,
 * made on first use, kept for the life of the test program. */
static inline const sdp_backend *tu_cpu(sdp_gemm_provider prov) {
    static sdp_mem mem[2];
    static sdp_backend *be[2];
    int i = prov == SDP_GEMM_OPENBLAS;
    if (!be[i]) be[i] = sdp_backend_cpu(prov, &mem[i]);
    return be[i];
}

static inline void tu_fill(float *x, size_t n, sdp_rng *r, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * sdp_rng_normal(r);
}

/* max |a-b| / (atol + rtol*|b|) over all elements: <= 1 means "within tolerance". */
static inline double tu_err_ratio(const float *a, const double *b, size_t n, double atol,
                                  double rtol) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static inline double tu_err_ratio_ff(const float *a, const float *b, size_t n, double atol,
                                     double rtol) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs((double)b[i]));
        if (e > worst || isnan(e)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

/* Central differences of a scalar function f(x) computed in double precision.
 * grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h. x is restored on return. */
typedef double (*tu_scalar_fn)(const double *x, void *ctx);
static inline void tu_fd_grad(tu_scalar_fn f, double *x, size_t n, void *ctx, double h,
                              double *grad) {
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + h;
        double fp = f(x, ctx);
        x[i] = x0 - h;
        double fm = f(x, ctx);
        x[i] = x0;
        grad[i] = (fp - fm) / (2 * h);
    }
}

static inline void tu_to_double(double *d, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}

/* Runs fn(ctx) in a child process with stderr captured into buf, and returns its wait status.
 * With `seconds` > 0 an alarm ends a child still running after that long (a hang), and *elapsed
 * gets the seconds the child took. */
static inline int tu_run_child(void (*fn)(void *), void *ctx, char *buf, size_t size,
                               unsigned seconds, double *elapsed) {
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    fflush(stdout);
    fflush(stderr);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        if (seconds) alarm(seconds);
        fn(ctx);
        _exit(0); /* reaching here means the call did not fail */
    }
    close(pipefd[1]);
    size_t len = 0;
    ssize_t r;
    while ((r = read(pipefd[0], buf + len, size - 1 - len)) > 0) len += (size_t)r;
    buf[len] = 0;
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (elapsed)
        *elapsed = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    return status;
}

/* Runs fn(ctx) in a child process and asserts that it exits non-zero and that its stderr
 * contains `needle`. This is how tests check sdp_fatal paths (which exit the process). */
static inline void tu_expect_fatal(void (*fn)(void *), void *ctx, const char *needle) {
    char buf[4096];
    int status = tu_run_child(fn, ctx, buf, sizeof buf, 0, NULL);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) != 0) || !strstr(buf, needle)) {
        print_error("expected a fatal error containing '%s'; got exit status %d, stderr: %s\n",
                    needle, status, buf);
        fail();
    }
}

/* tu_expect_fatal for input a hostile file may give: the failure must also come within
 * `seconds` (a hang is ended by an alarm and fails the test), and be one line on stderr with no
 * control character in it, so that text from the file can neither forge a line nor reach the
 * terminal as an escape sequence. */
static inline void tu_expect_fatal_quick(void (*fn)(void *), void *ctx, const char *needle,
                                         unsigned seconds) {
    char buf[4096];
    double took = 0;
    int status = tu_run_child(fn, ctx, buf, sizeof buf, seconds, &took);
    size_t len = strlen(buf), lines = 0, controls = 0;
    for (size_t i = 0; i < len; i++) {
        lines += buf[i] == '\n';
        controls += ((unsigned char)buf[i] < 0x20 && buf[i] != '\n') || buf[i] == 0x7f;
    }
    if (!(WIFEXITED(status) && WEXITSTATUS(status) != 0) || !strstr(buf, needle) ||
        took > seconds || lines != 1 || len == 0 || buf[len - 1] != '\n' || controls) {
        print_error("expected one line, within %u s, containing '%s'; got exit status %d after "
                    "%.1f s, %zu lines, %zu control characters, stderr: %s\n",
                    seconds, needle, status, took, lines, controls, buf);
        fail();
    }
}

/* A fresh directory per test, under $SDP_TEST_TMP (ctest's) or /tmp, removed afterwards. Use
 * tu_tmpdir_setup and tu_tmpdir_teardown as a cmocka test's setup and teardown; the state is a
 * tu_tmpdir whose dir names the directory. */
typedef struct {
    char dir[512];
} tu_tmpdir;

static inline int tu_tmpdir_setup(void **state) {
    tu_tmpdir *t = calloc(1, sizeof *t);
    const char *base = getenv("SDP_TEST_TMP");
    if (!t) return -1;
    if (!base || !*base) base = "/tmp";
    mkdir(base, 0755); /* ctest's test_tmp may not exist yet */
    snprintf(t->dir, sizeof t->dir, "%s/sdp_test_XXXXXX", base);
    if (!mkdtemp(t->dir)) return -1;
    *state = t;
    return 0;
}

static inline int tu_tmpdir_teardown(void **state) {
    tu_tmpdir *t = *state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    int rc = system(cmd);
    free(t);
    return rc == 0 ? 0 : -1;
}

#endif
