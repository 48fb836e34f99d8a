/* safetensors files: the checkpoint format, readable by any safetensors reader.
 * Writes are atomic (temp file, fsync, rename, fsync of the directory), and carry a CRC32 of the
 * whole file, header included, in __metadata__["sdp.file_crc32"], verified on every read. */
#ifndef SDP_CKPT_H
#define SDP_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/mem.h"
#include "sdp/model.h"

#define SDP_ST_MAX_DIMS 8

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[SDP_ST_MAX_DIMS];
    const float *data; /* F32 */
} sdp_st_tensor;

/* meta is a NULL-terminated list of key, value, key, value, ... strings (may be NULL). */
void sdp_st_write(const char *path, const sdp_st_tensor *tensors, int n, const char *const *meta);

typedef struct {
    char *name;
    char dtype[16];
    int ndim;
    int64_t shape[SDP_ST_MAX_DIMS];
    size_t nbytes;
    const void *data; /* points into the file buffer */
} sdp_st_entry;

/* What a file's checksum covers: nothing (another tool wrote it), the data section alone
 * ("sdp.crc32", sdp's checkpoints before the header was covered), or every byte. */
typedef enum { SDP_ST_NO_CHECKSUM, SDP_ST_DATA_CHECKSUM, SDP_ST_FILE_CHECKSUM } sdp_st_checksum;

typedef struct {
    void *buf; /* the whole file (SDP_MEM_SCRATCH) */
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

void sdp_ckpt_save(const char *path, const sdp_layout *L, const sdp_ckpt_buffer *bufs, int nbufs,
                   const char *const *meta);
/* Fills the buffers from the file, checking that it carries the whole-file checksum that sdp
 * writes, and that every tensor is present with the right shape and dtype and holds only finite
 * values. The file stays open in *f so the caller can read its metadata, then close it. */
void sdp_ckpt_load(sdp_st_file *f, const char *path, const sdp_layout *L,
                   const sdp_ckpt_buffer *bufs, int nbufs, sdp_mem *mem);

#endif
