#include "sdp/atomic_file.h"

#include "sdp/check.h"
#include "sdp/interrupt.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Large writes go out in pieces of this size, so no single call is asked for gigabytes. */
enum { WRITE_CHUNK = 4 << 20 };

/* Removes the temp file, then fails: the previous file at `path` was never touched. */
static _Noreturn void fail_and_clean(sdp_atomic_file *a, const char *what, int err) {
    if (a->f) fclose(a->f);
    a->f = NULL;
    unlink(a->tmp_path);
    sdp_interrupt_temp_file(NULL);
    sdp_fatal("cannot write '%s': %s failed (%s); check that the directory exists, is writable "
              "and has free space",
              a->path, what, strerror(err));
}

void sdp_atomic_open(sdp_atomic_file *a, const char *path) {
    size_t n = strlen(path) + 32;
    a->path = path;
    a->tmp_path = sdp_xmalloc(n, "a temporary file's name");
    snprintf(a->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    sdp_interrupt_temp_file(a->tmp_path); /* a second SIGINT or SIGTERM removes it */
    a->f = fopen(a->tmp_path, "wb");
    if (!a->f) fail_and_clean(a, "creating its temp file", errno);
}

void sdp_atomic_write(sdp_atomic_file *a, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        size_t piece = len < WRITE_CHUNK ? len : WRITE_CHUNK;
        if (fwrite(p, 1, piece, a->f) != piece) fail_and_clean(a, "writing", errno);
        p += piece;
        len -= piece;
    }
}

void sdp_atomic_write_at(sdp_atomic_file *a, const void *data, size_t len, size_t offset) {
    /* Buffered bytes must reach the file first, or they would land over this write later. */
    if (fflush(a->f) != 0) fail_and_clean(a, "flushing", errno);
    const char *p = data;
    while (len > 0) {
        ssize_t w = pwrite(fileno(a->f), p, len, (off_t)offset);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail_and_clean(a, "writing", w < 0 ? errno : EIO);
        p += w;
        len -= (size_t)w;
        offset += (size_t)w;
    }
}

/* The directory holding `path` ("." when `path` has no slash). */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* Without this the rename may still be only in memory when the machine loses power. */
static void fsync_dir(const char *path) {
    char *dir = dir_of(path);
    SDP_CHECK(dir, "out of memory syncing the directory of '%s'", path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int err = fd < 0 ? errno : 0;
    /* Some file systems cannot fsync a directory (EINVAL); the rename is as durable as they allow.
     */
    if (fd >= 0 && fsync(fd) != 0 && errno != EINVAL) err = errno;
    if (fd >= 0) close(fd);
    SDP_CHECK(err == 0,
              "cannot sync directory '%s' after writing '%s' (%s): the file was written "
              "but may not survive a crash; check the file system",
              dir, path, strerror(err));
    free(dir);
}

void sdp_atomic_commit(sdp_atomic_file *a) {
    if (fflush(a->f) != 0) fail_and_clean(a, "flushing", errno);
    if (fsync(fileno(a->f)) != 0) fail_and_clean(a, "fsync", errno);
    FILE *f = a->f;
    a->f = NULL;
    if (fclose(f) != 0) fail_and_clean(a, "closing", errno);
    if (rename(a->tmp_path, a->path) != 0)
        fail_and_clean(a, "renaming its temp file over it", errno);
    sdp_interrupt_temp_file(NULL);
    fsync_dir(a->path);
    free(a->tmp_path);
    a->tmp_path = NULL;
}

void sdp_write_file_atomic(const char *path, const void *data, size_t len) {
    sdp_atomic_file a;
    sdp_atomic_open(&a, path);
    sdp_atomic_write(&a, data, len);
    sdp_atomic_commit(&a);
}
