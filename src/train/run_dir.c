#include "run_dir.h"

#include "sdp/check.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void train_run_make_dir(const char *dir, const char *what) {
    char path[4096];
    SDP_CHECK(strlen(dir) < sizeof path, "%s name too long: %s", what, dir);
    strcpy(path, dir);
    for (char *p = path + 1;; p++) {
        const bool end = *p == 0;
        if (*p == '/' || end) {
            *p = 0;
            SDP_CHECK(mkdir(path, 0755) == 0 || errno == EEXIST,
                      "cannot create the %s '%s' (%s): pick another directory", what, path,
                      strerror(errno));
            if (end) break;
            *p = '/';
        }
    }
    struct stat st;
    SDP_CHECK(stat(path, &st) == 0,
              "the %s '%s' cannot be reached (%s): it is a dangling or looping link; pick another "
              "directory",
              what, path, strerror(errno));
    SDP_CHECK(S_ISDIR(st.st_mode), "the %s '%s' is a file, not a directory: pick another directory",
              what, path);
}

/* The files a run writes; a new run must not mix its own with these. */
static const char *const RUN_FILES[] = {
    "config.json",       "plan.json",         "metrics.jsonl",         "memory.json",
    "model.safetensors", "optim.safetensors", "optim.prev.safetensors"};
enum { NRUN_FILES = sizeof RUN_FILES / sizeof *RUN_FILES };

static void file_in(char *out, size_t n, const char *dir, const char *name) {
    SDP_CHECK(snprintf(out, n, "%s/%s", dir, name) < (int)n, "path too long: %s/%s", dir, name);
}

/* Who holds the lock, as the holder wrote it. */
static void read_holder(int fd, char *holder, size_t n) {
    ssize_t got = pread(fd, holder, n - 1, 0);
    holder[got > 0 ? got : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
    if (!holder[0]) snprintf(holder, n, "another process");
}

/* False, with errno, when the disk refuses the line. */
static bool write_holder(int fd) {
    char host[256] = "?", stamp[32], line[512];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime(&now));
    int len = snprintf(line, sizeof line, "sdp train, pid %ld on %s, since %s\n", (long)getpid(),
                       host, stamp);
    return ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)len, 0) == len;
}

static _Noreturn void in_use(const char *dir, int fd) {
    char holder[256];
    read_holder(fd, holder, sizeof holder);
    sdp_fatal("run directory '%s' is in use by %s: wait for that run to end, or pick another --out",
              dir, holder);
}

void train_run_dir_check_free(const char *dir) {
    char path[4096];
    file_in(path, sizeof path, dir, ".lock");
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return; /* no run has held it: what is missing is reported by what reads it */
    /* Shared, so that ranks asking together do not see one another; a run holds it exclusively. */
    if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) in_use(dir, fd);
    close(fd);
}

void train_run_dir_check_saved(const char *dir) {
    char path[4096];
    struct stat st;
    file_in(path, sizeof path, dir, "model.safetensors");
    if (stat(path, &st) == 0 || errno != ENOENT) return;
    sdp_fatal("run directory '%s' holds no checkpoint to resume from: the run stopped before its "
              "first save (--ckpt-every sets how often it saves); start it again, with the options "
              "in its config.json and --overwrite --out %s",
              dir, dir);
}

/* created: dir did not exist before this claim, so a refusal removes it again (when empty). */
static int lock_dir(const char *dir, bool created) {
    char path[4096];
    file_in(path, sizeof path, dir, ".lock");
    const bool had_lock = access(path, F_OK) == 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    SDP_CHECK(fd >= 0, "cannot open '%s' (%s): check the run directory's permissions", path,
              strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        SDP_CHECK(errno == EWOULDBLOCK, "cannot lock '%s' (%s)", path, strerror(errno));
        in_use(dir, fd);
    }
    if (!write_holder(fd)) {
        const int err = errno;
        if (!had_lock) unlink(path); /* a refused directory is left as it was */
        if (created) rmdir(dir);
        sdp_fatal("cannot write the lock file '%s' (%s): free space on its disk or pick another "
                  "--out",
                  path, strerror(err));
    }
    return fd;
}

void train_run_dir_check_held(const char *dir, int lock_fd) {
    char path[4096];
    file_in(path, sizeof path, dir, ".lock");
    struct stat held, now;
    const bool same = fstat(lock_fd, &held) == 0 && stat(path, &now) == 0 &&
                      held.st_dev == now.st_dev && held.st_ino == now.st_ino;
    SDP_CHECK(same,
              "run directory '%s' was deleted, moved or replaced while this run trained (%s is "
              "not the lock it holds): it stops rather than write among another run's files",
              dir, path);
}

/* The first of the run files present in dir, or NULL. */
static const char *earlier_run_file(const char *dir) {
    char path[4096];
    for (int i = 0; i < NRUN_FILES; i++) {
        file_in(path, sizeof path, dir, RUN_FILES[i]);
        if (access(path, F_OK) == 0) return RUN_FILES[i];
    }
    return NULL;
}

/* Whether name is a run file's temporary copy, "<run file>.tmp.<pid>" (io/atomic_file.c). */
static bool is_temp_copy(const char *name) {
    for (int i = 0; i < NRUN_FILES; i++) {
        const size_t n = strlen(RUN_FILES[i]);
        if (strncmp(name, RUN_FILES[i], n) != 0 || strncmp(name + n, ".tmp.", 5) != 0) continue;
        const char *pid = name + n + 5;
        if (*pid && strspn(pid, "0123456789") == strlen(pid)) return true;
    }
    return false;
}

/* A process killed while writing a file leaves its temporary copy, as large as the checkpoint.
 * Whoever holds the lock is the only writer, so what is there now belongs to no live run. */
static void remove_temp_copies(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_temp_copy(e->d_name)) continue;
        char path[4096];
        file_in(path, sizeof path, dir, e->d_name);
        if (unlink(path) == 0)
            printf("sdp train: removed '%s', left by a run that was stopped while writing it\n",
                   path);
    }
    closedir(d);
}

int train_run_dir_claim(const char *dir, bool resuming, bool overwrite) {
    const bool created = access(dir, F_OK) != 0;
    train_run_make_dir(dir, "run directory");
    char lock[4096];
    file_in(lock, sizeof lock, dir, ".lock");
    const bool had_lock = access(lock, F_OK) == 0;
    const int fd = lock_dir(dir, created);
    remove_temp_copies(dir);
    const char *found = resuming ? NULL : earlier_run_file(dir);
    if (found && !overwrite) {
        if (!had_lock) unlink(lock); /* a refused directory is left as it was */
        sdp_fatal("run directory '%s' already holds a run (%s): continue it with --resume %s, "
                  "pick another --out, or pass --overwrite to replace it",
                  dir, found, dir);
    }
    for (int i = 0; found && i < NRUN_FILES; i++) {
        char path[4096];
        file_in(path, sizeof path, dir, RUN_FILES[i]);
        SDP_CHECK(unlink(path) == 0 || errno == ENOENT, "--overwrite: cannot delete '%s' (%s)",
                  path, strerror(errno));
    }
    return fd;
}
