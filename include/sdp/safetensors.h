/* safetensors files (src/io/safetensors.c): the checkpoint format, readable by any safetensors
 * reader.
 * Writes are atomic (temp file, fsync, rename, fsync of the directory), and carry a CRC32 of the
 * whole file, header included, in __metadata__["sdp.file_crc32"], verified on every read. */
#ifndef SDP_SAFETENSORS_H
#define SDP_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sdp/atomic_file.h"
#include "sdp/mem.h"

#define SDP_ST_MAX_DIMS 8

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[SDP_ST_MAX_DIMS];
    const float *data; /* F32 */
} sdp_st_tensor;

/* meta is a NULL-terminated list of key, value, key, value, ... strings (may be NULL).
 * The whole file at once: sdp_st_writer below, fed every tensor in turn. */
void sdp_st_write(const char *path, const sdp_st_tensor *tensors, int n, const char *const *meta);

/* A file written in pieces, so that no one buffer need hold all its tensors: open takes every
 * tensor's name and shape (data unused) and the metadata, and writes the header to the temp file
 * with placeholder checksum digits; append takes the data section's bytes in order, tensor after
 * tensor, in pieces of any size, updating the CRC; commit checks that exactly the declared bytes
 * came, writes the digits in place and replaces `path` atomically. The result is byte for byte
 * what sdp_st_write gives for the same content. */
typedef struct {
    sdp_atomic_file file;
    uint32_t crc; /* of every byte so far but the checksum's digits */
    uint64_t data_len, written;
} sdp_st_writer;

void sdp_st_writer_open(sdp_st_writer *w, const char *path, const sdp_st_tensor *tensors, int n,
                        const char *const *meta);
void sdp_st_writer_append(sdp_st_writer *w, const void *data, size_t len);
void sdp_st_writer_commit(sdp_st_writer *w);

typedef struct {
    char *name;
    char dtype[16];
    int ndim;
    int64_t shape[SDP_ST_MAX_DIMS];
    size_t nbytes;
    size_t offset;    /* of its first byte in the file */
    const void *data; /* points into the file buffer (sdp_st_read); NULL after sdp_st_open */
} sdp_st_entry;

/* What a file's checksum covers: nothing (another tool wrote it), the data section alone
 * ("sdp.crc32", sdp's checkpoints before the header was covered), or every byte. */
typedef enum { SDP_ST_NO_CHECKSUM, SDP_ST_DATA_CHECKSUM, SDP_ST_FILE_CHECKSUM } sdp_st_checksum;

typedef struct {
    void *buf; /* the whole file (SDP_MEM_SCRATCH), or NULL after sdp_st_open */
    FILE *fp;  /* open for sdp_st_pread after sdp_st_open */
    size_t len;
    int n;
    sdp_st_entry *entries; /* in the header's order */
    int *by_name;          /* entry indices sorted by name */
    int nmeta;
    char **meta_keys, **meta_vals;
    char *path; /* as given to sdp_st_read, for messages */
    sdp_st_checksum checksum;
} sdp_st_file;

/* Reads and validates a file: header length and JSON, dtypes, shapes against byte ranges, ranges
 * that tile the data section exactly, unique names, and the checksum when present. The header is
 * checked against the file's size before the rest is read. Fails with a clear message otherwise. */
void sdp_st_read(sdp_st_file *f, const char *path, sdp_mem *mem);
/* The same checks without holding the file: reads and validates the header alone, verifies the
 * checksum by streaming the file through a bounded buffer (4 MiB at most), and keeps the file
 * open so that sdp_st_pread reads any tensor's bytes on demand. Entries' data is NULL. */
void sdp_st_open(sdp_st_file *f, const char *path, sdp_mem *mem);
/* sdp_st_open without the checksum, which reads the whole file: for a look at the tensors a file
 * holds before committing to it. Its data must not be trusted until sdp_st_open or sdp_st_read
 * has verified it. */
void sdp_st_open_header(sdp_st_file *f, const char *path, sdp_mem *mem);
/* len bytes of entry e's data from byte `at` into dst (after sdp_st_open or sdp_st_read). */
void sdp_st_pread(const sdp_st_file *f, const sdp_st_entry *e, size_t at, void *dst, size_t len);
const sdp_st_entry *sdp_st_find(const sdp_st_file *f, const char *name);
const char *sdp_st_meta(const sdp_st_file *f, const char *key);
/* The metadata `key` as `count` numbers separated by single spaces, each in [lo, hi] and an
 * integer when `integer` is set, as sdp writes them (no nan, inf or hex). Fails with one line
 * naming the file and the field when it is missing, malformed or out of range. */
void sdp_st_meta_numbers(const sdp_st_file *f, const char *key, int count, double *out, double lo,
                         double hi, bool integer);
double sdp_st_meta_number(const sdp_st_file *f, const char *key, double lo, double hi,
                          bool integer);
void sdp_st_close(sdp_st_file *f, sdp_mem *mem);

#endif
