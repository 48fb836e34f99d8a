/* Model checkpoints (src/io/checkpoint.c): every tensor of a layout, from one or more flat
 * buffers, in a safetensors file (sdp/safetensors.h). */
#ifndef SDP_CHECKPOINT_H
#define SDP_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "sdp/layout.h"
#include "sdp/mem.h"
#include "sdp/safetensors.h"

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
/* Every tensor of L with each suffix present in f as F32 of the right shape, and nothing else: a
 * file of another model (or a configuration edited since it was written) is refused. */
void sdp_ckpt_check_tensors(const sdp_st_file *f, const char *path, const sdp_layout *L,
                            const char *const *suffixes, int nbufs);
/* Elements [first, first + n) of buf's flat buffer (buf->data unused) from a file opened by
 * sdp_ckpt_open, read straight into dst and checked as sdp_ckpt_load checks them. */
void sdp_ckpt_read_range(const sdp_st_file *f, const sdp_layout *L, const sdp_ckpt_buffer *buf,
                         size_t first, size_t n, float *dst);

#endif
