/* sdp plan's stored machine speeds (plan_calibration.h). */
#include "plan_calibration.h"

#include "sdp/atomic_file.h"

#include "sdp/bench.h"
#include "sdp/check.h"
#include "sdp/ops.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The sgemm the benchmarks take as this machine's practical peak (bench/bench_train.c). */
enum { PEAK_SIZE = 2048, PEAK_REPEATS = 3, MAX_THREADS = 1 << 16 };

static const char FORMAT[] = "sdp-calibration", GEMM[] = "dnnl";

void plan_calibration_path(char *out, size_t n, const char *given) {
    const char *env = getenv("SDP_CALIBRATION"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    int len;
    if (given && given[0])
        len = snprintf(out, n, "%s", given);
    else if (env && env[0])
        len = snprintf(out, n, "%s", env);
    else if (xdg && xdg[0] == '/') /* the XDG spec ignores a relative one */
        len = snprintf(out, n, "%s/sdp/calibration.json", xdg);
    else if (home && home[0])
        len = snprintf(out, n, "%s/.cache/sdp/calibration.json", home);
    else
        sdp_fatal("sdp plan keeps this machine's measured speeds in a file, and no place for it is "
                  "known (HOME is not set): pass --calibration FILE, or give the rate with "
                  "--gflops R");
    SDP_CHECK(len > 0 && (size_t)len < n, "the calibration file's path is too long: %s", out);
}

static _Noreturn void damaged(const char *path, const char *what) {
    sdp_fatal("%s: %s: the calibration file is damaged or was edited; delete it, or run sdp plan "
              "with --recalibrate to measure again",
              path, what);
}

static bool is_int(const cJSON *v, double lo, double hi) {
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= lo &&
           v->valuedouble <= hi;
}

/* Whether entry i is well formed: the fields this version reads, of the right types and in range.
 * Otherwise `what` names the key at fault. */
static bool entry_ok(const cJSON *e, int i, char *what, size_t n) {
    if (!cJSON_IsObject(e)) {
        snprintf(what, n, "\"machines\"[%d] is not an object", i);
        return false;
    }
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(e, "host"),
                *threads = cJSON_GetObjectItemCaseSensitive(e, "threads"),
                *gemm = cJSON_GetObjectItemCaseSensitive(e, "gemm"),
                *size = cJSON_GetObjectItemCaseSensitive(e, "sgemm_size"),
                *rate = cJSON_GetObjectItemCaseSensitive(e, "sgemm_gflops"),
                *when = cJSON_GetObjectItemCaseSensitive(e, "measured");
    const char *bad = NULL;
    if (!cJSON_IsString(host) || !host->valuestring[0] || strlen(host->valuestring) >= 256)
        bad = "\"host\" is not a host name";
    else if (!is_int(threads, 1, MAX_THREADS))
        bad = "\"threads\" is not a thread count from 1 to 65536";
    else if (!cJSON_IsString(gemm))
        bad = "\"gemm\" is not a GEMM provider's name";
    else if (!is_int(size, 1, 1 << 20))
        bad = "\"sgemm_size\" is not a matrix size";
    else if (!cJSON_IsNumber(rate) || !isfinite(rate->valuedouble) || rate->valuedouble <= 0 ||
             rate->valuedouble > 1e9)
        bad = "\"sgemm_gflops\" is not a rate above 0 GFLOP/s";
    else if (!cJSON_IsString(when) || strlen(when->valuestring) < 10 ||
             strlen(when->valuestring) >= 32)
        bad = "\"measured\" is not a date";
    if (bad) snprintf(what, n, "\"machines\"[%d]: %s", i, bad);
    return !bad;
}

/* The entries of the file's text, detached from it; NULL with the problem in `what` when the text
 * is not a calibration file this version reads. */
static cJSON *parse_machines(const char *txt, char *what, size_t n) {
    cJSON *root = cJSON_ParseWithOpts(txt, NULL, true), *m = NULL;
    const bool object = cJSON_IsObject(root);
    const cJSON *fmt = object ? cJSON_GetObjectItemCaseSensitive(root, "format") : NULL,
                *ver = object ? cJSON_GetObjectItemCaseSensitive(root, "version") : NULL;
    if (!object)
        snprintf(what, n, "not a JSON object");
    else if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT))
        snprintf(what, n, "\"format\" is not \"%s\"", FORMAT);
    else if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        snprintf(what, n, "\"version\" is not 1, the version this sdp reads");
    else if (!cJSON_IsArray(m = cJSON_GetObjectItemCaseSensitive(root, "machines")))
        snprintf(what, n, "\"machines\" is not a list"), m = NULL;
    else {
        bool ok = true;
        for (int i = 0; ok && i < cJSON_GetArraySize(m); i++)
            ok = entry_ok(cJSON_GetArrayItem(m, i), i, what, n);
        m = ok ? cJSON_DetachItemViaPointer(root, m) : NULL;
    }
    cJSON_Delete(root);
    return m;
}

/* The file's entries: none when it does not exist. A damaged file fails, unless it is to be
 * measured again anyway (`replace`): then its entries are dropped. */
static cJSON *read_machines(const char *path, bool replace) {
    cJSON *m = NULL;
    if (access(path, F_OK) == 0) {
        size_t size = 0;
        FILE *f = sdp_fopen_input(path, "calibration file", &size);
        char *txt = sdp_xmalloc(size + 1, "the calibration file"), what[256];
        const size_t got = fread(txt, 1, size, f);
        fclose(f);
        SDP_CHECK(got == size, "cannot read %s: delete it, or run sdp plan with --recalibrate",
                  path);
        txt[size] = 0;
        m = parse_machines(txt, what, sizeof what);
        free(txt);
        if (!m && !replace) damaged(path, what);
    }
    if (!m) m = cJSON_CreateArray();
    SDP_CHECK(m, "out of memory");
    return m;
}

static const char *str_of(const cJSON *e, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(e, key)->valuestring;
}

static double num_of(const cJSON *e, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(e, key)->valuedouble;
}

/* The entry for this host and thread count, measured as this version measures. */
static int find(const cJSON *machines, const char *host, int threads) {
    for (int i = 0; i < cJSON_GetArraySize(machines); i++) {
        const cJSON *e = cJSON_GetArrayItem(machines, i);
        if (!strcmp(str_of(e, "host"), host) && (int)num_of(e, "threads") == threads &&
            !strcmp(str_of(e, "gemm"), GEMM) && (int)num_of(e, "sgemm_size") == PEAK_SIZE)
            return i;
    }
    return -1;
}

/* mkdir -p of the directory that holds path. */
static void make_parent(const char *path) {
    char dir[CALIBRATION_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return;
    *slash = 0;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(dir, 0755);
        *p = '/';
    }
    SDP_CHECK(mkdir(dir, 0755) == 0 || errno == EEXIST,
              "cannot create the directory of the calibration file %s (%s): pass --calibration "
              "FILE in a writable place, or give the rate with --gflops R",
              path, strerror(errno));
}

static void write_file(const char *path, cJSON *machines) {
    cJSON *root = cJSON_CreateObject();
    SDP_CHECK(root, "out of memory");
    cJSON_AddStringToObject(root, "format", FORMAT);
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddItemReferenceToObject(root, "machines", machines);
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    SDP_CHECK(txt, "out of memory");
    make_parent(path);
    sdp_atomic_file a;
    sdp_atomic_open(&a, path);
    sdp_atomic_write(&a, txt, strlen(txt));
    sdp_atomic_write(&a, "\n", 1);
    sdp_atomic_commit(&a);
    free(txt);
}

/* Measures the peak now and stores it in place of entry `at` (or as a new one). */
static void measure_into(const char *path, cJSON *machines, int at, const char *host, int threads) {
    const double gflops = sdp_measure_sgemm_peak(SDP_GEMM_DNNL, PEAK_SIZE, PEAK_REPEATS);
    char stamp[32];
    const time_t now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON *e = cJSON_CreateObject();
    SDP_CHECK(e, "out of memory");
    cJSON_AddStringToObject(e, "host", host);
    cJSON_AddNumberToObject(e, "threads", threads);
    cJSON_AddStringToObject(e, "gemm", GEMM);
    cJSON_AddNumberToObject(e, "sgemm_size", PEAK_SIZE);
    cJSON_AddNumberToObject(e, "sgemm_gflops", gflops);
    cJSON_AddStringToObject(e, "measured", stamp);
    if (at >= 0)
        cJSON_ReplaceItemInArray(machines, at, e);
    else
        cJSON_AddItemToArray(machines, e);
    write_file(path, machines);
}

static void fill(plan_calibration *c, const cJSON *e, int threads) {
    c->threads = threads;
    c->sgemm_gflops = num_of(e, "sgemm_gflops");
    snprintf(c->measured, sizeof c->measured, "%s", str_of(e, "measured"));
}

static void start(plan_calibration *c, const char *path, const char *host) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    snprintf(c->host, sizeof c->host, "%s", host);
}

bool plan_calibration_read(plan_calibration *c, const char *path, const char *host, int threads) {
    start(c, path, host);
    cJSON *machines = read_machines(path, false);
    const int at = find(machines, host, threads);
    if (at >= 0) fill(c, cJSON_GetArrayItem(machines, at), threads);
    cJSON_Delete(machines);
    return at >= 0;
}

void plan_calibration_get(plan_calibration *c, const char *given, int threads, bool recalibrate) {
    char path[CALIBRATION_PATH_MAX], host[256] = {0};
    plan_calibration_path(path, sizeof path, given);
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    if (!recalibrate && plan_calibration_read(c, path, host, threads)) return;
    start(c, path, host);
    cJSON *machines = read_machines(c->path, recalibrate);
    int at = find(machines, c->host, threads);
    measure_into(c->path, machines, at, c->host, threads);
    at = find(machines, c->host, threads);
    SDP_ASSERT(at >= 0);
    fill(c, cJSON_GetArrayItem(machines, at), threads);
    cJSON_Delete(machines);
}
