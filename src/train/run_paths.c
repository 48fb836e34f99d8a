#include "run_paths.h"

#include "sdp/check.h"

#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool is_pattern(const char *p) {
    return strpbrk(p, "*?[") != NULL;
}

/* path made absolute into out (OPT_STR_MAX bytes); false when it does not exist (out = path). */
static bool absolute(char *out, const char *path) {
    char buf[PATH_MAX];
    if (!is_pattern(path) && realpath(path, buf)) {
        SDP_CHECK(strlen(buf) < OPT_STR_MAX, "the absolute path of '%s' is too long", path);
        strcpy(out, buf);
        return true;
    }
    if (is_pattern(path) && path[0] != '/') {
        /* Through buf: out may be path itself, which snprintf must not read while writing. */
        char cwd[PATH_MAX];
        SDP_CHECK(getcwd(cwd, sizeof cwd), "cannot read the working directory");
        SDP_CHECK(snprintf(buf, sizeof buf, "%s/%s", cwd, path) < OPT_STR_MAX,
                  "the absolute path of '%s' is too long", path);
        strcpy(out, buf);
        return true;
    }
    if (out != path) strcpy(out, path);
    return is_pattern(path);
}

/* Whether the path (a glob: its pattern) can be found from the working directory. */
static bool found(const char *path) {
    if (!is_pattern(path)) return access(path, F_OK) == 0;
    glob_t g;
    const int rc = glob(path, 0, NULL, &g);
    globfree(&g);
    return rc == 0;
}

/* The same file (device and inode) or, for patterns, the same absolute pattern. */
static bool same_data(const char *a, const char *b) {
    if (is_pattern(a) || is_pattern(b)) return strcmp(a, b) == 0;
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

void train_run_paths_make_absolute(train_opts *o) {
    if (o->data[0]) absolute(o->data, o->data);
    if (o->val_data[0]) absolute(o->val_data, o->val_data);
}

static void resume_one(char *recorded, const char *cli, bool given, const char *key,
                       const char *source) {
    if (!given) {
        if (!recorded[0]) return;
        SDP_CHECK(recorded[0] == '/' || found(recorded),
                  "%s records --%s '%s', a path relative to the directory the run was started "
                  "in, and it is not found from here: run from that directory, or pass --%s with "
                  "the absolute path of the same data",
                  source, key, recorded, key);
        absolute(recorded, recorded);
        return;
    }
    SDP_CHECK(recorded[0],
              "--%s '%s': this run was trained without --%s (%s records none): drop it, or start "
              "a new run for other data",
              key, cli, key, source);
    char want[OPT_STR_MAX];
    absolute(want, cli);
    /* A relative path recorded by an older sdp, not found from here, cannot be compared: the
     * checkpoint's own checks (vocabulary, image shape) still hold the data to the model. */
    const bool comparable = recorded[0] == '/' || found(recorded);
    if (comparable) {
        char have[OPT_STR_MAX];
        absolute(have, recorded);
        SDP_CHECK(same_data(have, want),
                  "--%s '%s' is not the data this run was trained on ('%s', recorded in %s): "
                  "drop --%s to use it, or start a new run for other data",
                  key, cli, recorded, source, key);
    }
    strcpy(recorded, want);
}

void train_run_paths_resume(train_opts *run, const train_opts *cli, bool given_data, bool given_val,
                            const char *source) {
    resume_one(run->data, cli->data, given_data, "data", source);
    resume_one(run->val_data, cli->val_data, given_val, "val-data", source);
}
