/* safetensors files: the checkpoint format, readable by any safetensors reader.
 * Writes are atomic (temp file, fsync, rename, fsync of the directory), and carry a CRC32 of the
 * whole file, header included, in __metadata__["sdp.file_crc32"], verified on every read. */
#ifndef SDP_CKPT_H
#define SDP_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/atomic_file.h"
#include "sdp/mem.h"
#include "sdp/layout.h"

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

/* Atomically replaces `path` with `len` bytes of `data` (temp file, fsync, rename). */
void sdp_write_file_atomic(const char *path, const void *data, size_t len);

/* ---- model checkpoints: every tensor of a layout, from one or more flat buffers -------------- */

/* One flat buffer laid out like the model, saved as "<tensor name><suffix>" per tensor
 * (suffix "" for the parameters, ".exp_avg" for AdamW's first moment, and so on). */
typedef struct {
    float *data;
    const char *suffix;
    bool nonnegative; /* loading refuses values below zero (AdamW's second moment) */
} sdp_ckpt_buffer;

/* At most this many buffers go in one checkpoint file (parameters; or AdamW's two moments). */
#define SDP_CKPT_MAX_BUFFERS 4

/* The data section of a checkpoint file is each buffer's flat layout in turn (the layout's
 * tensors lie at consecutive offsets, which these functions check). */
void sdp_ckpt_save(const char *path, const sdp_layout *L, const sdp_ckpt_buffer *bufs, int nbufs,
                   const char *const *meta);
/* The same file streamed: the header of every tensor of L with each of the nbufs suffixes; then
 * sdp_st_writer_append takes the buffers' L->numel floats each, in order and in pieces of any
 * size, and sdp_st_writer_commit finishes it. */
void sdp_ckpt_writer_open(sdp_st_writer *w, const char *path, const sdp_layout *L,
                          const char *const *suffixes, int nbufs, const char *const *meta);
/* Fills the buffers from the file, checking that it carries the whole-file checksum that sdp
 * writes, and that every tensor is present with the right shape and dtype and holds only finite
 * values. The file stays open in *f so the caller can read its metadata, then close it. */
void sdp_ckpt_load(sdp_st_file *f, const char *path, const sdp_layout *L,
                   const sdp_ckpt_buffer *bufs, int nbufs, sdp_mem *mem);
/* The streaming counterpart: sdp_st_open (header checks, whole-file checksum streamed through a
 * bounded buffer), the checksum that sdp writes required, and every tensor of L with each suffix
 * present as F32 of the right shape; no data is read. */
void sdp_ckpt_open(sdp_st_file *f, const char *path, const sdp_layout *L,
                   const char *const *suffixes, int nbufs, sdp_mem *mem);
/* Elements [first, first + n) of buf's flat buffer (buf->data unused) from a file opened by
 * sdp_ckpt_open, read straight into dst and checked as sdp_ckpt_load checks them. */
void sdp_ckpt_read_range(const sdp_st_file *f, const sdp_layout *L, const sdp_ckpt_buffer *buf,
                         size_t first, size_t n, float *dst);

#endif
