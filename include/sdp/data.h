/* Token data: byte-level text and llm.c token shards, and a deterministic, seeded batch loader
 * with a disjoint stream per rank. */
#ifndef SDP_DATA_H
#define SDP_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sdp/mem.h"

/* The int32 that opens every llm.c token shard. */
#define SDP_SHARD_MAGIC 20240520

/* A contiguous run of tokens: one text split or one shard. */
typedef struct {
    const uint16_t *tok;
    size_t n;
} sdp_token_span;

typedef struct {
    sdp_token_span *spans;
    int nspans;
    int vocab;       /* 256 for text; 1 + largest token id seen for shards */
    size_t ntokens;  /* total over spans */
    uint16_t *owned; /* text: the bytes as tokens (SDP_MEM_DATA) */
    void **maps;     /* shards: mmapped files */
    size_t *map_bytes;
} sdp_tokens;

/* Reads a UTF-8 (or any) text file as bytes. The last val_frac of the file is the validation
 * split (val may be NULL to skip it). Fails clearly on a missing or too-small file. */
void sdp_tokens_load_text(sdp_tokens *train, sdp_tokens *val, const char *path, double val_frac,
                          sdp_mem *mem);
/* Loads every file matching a glob pattern (sorted by name) as llm.c token shards:
 * 256 int32 header (magic 20240520, version 1, token count), then uint16 tokens.
 * Fails clearly on no match, wrong magic or version, or a size that disagrees with the count. */
void sdp_tokens_load_shards(sdp_tokens *out, const char *pattern, sdp_mem *mem);
void sdp_tokens_free(sdp_tokens *t, sdp_mem *mem);

/* Position in the stream: enough to resume exactly. */
typedef struct {
    uint64_t epoch;
    uint64_t step; /* batches taken in this epoch */
} sdp_loader_pos;

/* What every loader shares (src/data/epoch.c): the order of n items in an epoch, the identity or
 * a Fisher-Yates shuffle seeded by (seed, epoch); and positions, where a step at or past the end
 * of an epoch means the start of a later one. */
void sdp_epoch_order(uint32_t *perm, size_t n, uint64_t seed, uint64_t epoch, bool shuffle);
sdp_loader_pos sdp_loader_pos_normalize(sdp_loader_pos pos, uint64_t steps_per_epoch);
/* One batch on; rolls into the next epoch eagerly (so a saved position is always readable) and
 * returns true when it did. */
bool sdp_loader_pos_advance(sdp_loader_pos *pos, uint64_t steps_per_epoch);
/* A position saved by old_world workers, for new_world workers with the same batch size: the
 * step at which the new workers' batches go on in the epoch's order where the old ones stopped.
 * Rounded up, so that no item is dealt twice in an epoch: when old_world * step is not a multiple
 * of new_world, fewer than new_world batches' items are skipped. A step at or past the new
 * epoch's end is the start of the next epoch (what the old workers had left of the epoch was
 * less than one new step's worth: the loaders drop an epoch's short tail anyway). The same world
 * gives pos back unchanged. */
sdp_loader_pos sdp_loader_pos_rescale(sdp_loader_pos pos, int old_world, int new_world,
                                      uint64_t new_steps_per_epoch);

/* Splits the tokens into sequences of T+1 tokens at stride T, shuffles their order each epoch
 * with a seeded permutation (or keeps it when shuffle is false), and hands rank r of `world`
 * the batches it alone reads: batch s of rank r takes sequences [(s*world + r)*B, ... + B). */
typedef struct {
    const sdp_tokens *src;
    int B, T, rank, world;
    uint64_t seed;
    bool shuffle;
    size_t nseq;      /* sequences in the data */
    size_t *seq_span; /* cumulative sequence count per span (nspans + 1 entries) */
    uint32_t *perm;   /* this epoch's order */
    sdp_loader_pos pos;
} sdp_loader;

/* The sequences of T + 1 tokens a loader over src takes (none crosses a span's end). Callers
 * that know where the data came from check it first, to name the file in the error. */
size_t sdp_loader_count(const sdp_tokens *src, int T);
void sdp_loader_init(sdp_loader *L, const sdp_tokens *src, int B, int T, int rank, int world,
                     uint64_t seed, bool shuffle, sdp_mem *mem);
void sdp_loader_free(sdp_loader *L, sdp_mem *mem);
/* Batches per epoch for each rank (the same on every rank). */
uint64_t sdp_loader_steps_per_epoch(const sdp_loader *L);
/* Fills inputs[B*T] and targets[B*T] (targets are inputs shifted by one), then advances. */
void sdp_loader_next(sdp_loader *L, int *inputs, int *targets);
void sdp_loader_seek(sdp_loader *L, sdp_loader_pos pos);

#endif
