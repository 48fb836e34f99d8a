/* Atomic replacement of a file: bytes go to "<path>.tmp.<pid>", which is flushed, fsynced and
 * renamed over `path`, and then the directory is fsynced so the rename itself is durable.
 * A crash or an I/O error at any point leaves the previous file at `path` untouched; on error the
 * temp file is removed and the process fails with one line naming the path and the errno text. */
#ifndef SDP_IO_ATOMIC_FILE_H
#define SDP_IO_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *path; /* the final destination (borrowed) */
    char *tmp_path;   /* "<path>.tmp.<pid>" */
    FILE *f;
} sdp_atomic_file;

void sdp_atomic_open(sdp_atomic_file *a, const char *path);
void sdp_atomic_write(sdp_atomic_file *a, const void *data, size_t len);
/* Overwrites len bytes at `offset` of what was written so far (a field known only at the end,
 * such as a checksum), leaving the append position where it was. */
void sdp_atomic_write_at(sdp_atomic_file *a, const void *data, size_t len, size_t offset);
/* Makes the new contents durable and visible at `path`; releases `a`. */
void sdp_atomic_commit(sdp_atomic_file *a);

/* Atomically replaces `path` with `len` bytes of `data` (temp file, fsync, rename). */
void sdp_write_file_atomic(const char *path, const void *data, size_t len);

#endif
