/* Memory accounting: every large buffer comes from sdp_alloc with a category, so the bytes each
 * worker holds for params, grads, optimizer state and activations are exact and printable. */
#ifndef SDP_MEM_H
#define SDP_MEM_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    SDP_MEM_PARAMS,
    SDP_MEM_GRADS,
    SDP_MEM_OPTIM,
    SDP_MEM_ACTS,    /* forward activations and their gradients */
    SDP_MEM_BUFFERS, /* communication buckets and packing buffers */
    SDP_MEM_SCRATCH, /* per-kernel temporaries */
    SDP_MEM_DATA,    /* datasets and batches */
    SDP_MEM_NCAT
} sdp_memcat;

typedef struct {
    size_t cur[SDP_MEM_NCAT];
    size_t peak[SDP_MEM_NCAT];
    size_t total_cur, total_peak;
    size_t nallocs;
    bool dry; /* count only: sdp_alloc returns NULL (used to predict memory without using it) */
    /* An arena (sdp_mem_use_arena): sdp_alloc carves each block from one region in turn and
     * sdp_free gives no bytes back until sdp_mem_arena_reset. A loop that builds and destroys
     * models of several shapes then reuses the same pages, and its bytes are the region's size. */
    char *arena;
    size_t arena_cap;
    /* Bytes carved since the last reset, block headers and alignment included: in counting mode,
     * the arena that the same allocations would need (sdp_mem_block_bytes each). */
    size_t carved;
    /* What each category's allocations would take from a pool, counted always: in counting mode,
     * the pool (below) that a model's activations need. */
    size_t pooled_by[SDP_MEM_NCAT];
    /* A pool (sdp_mem_pool_open): while open, blocks of category pool_cat are carved from
     * [pool, pool + pool_cap) and still counted here. They carry no header in the pool (their
     * sizes are kept in pool_block), so the pool's bytes are one range of data that another user
     * may overwrite while they lie idle: block-streamed evaluation borrows the training
     * activations between steps (eval_stream.c). */
    char *pool;
    size_t pool_cap, pool_carved;
    sdp_memcat pool_cat;
    bool pool_open;
    size_t *pool_block; /* per block carved, in order: its offset in the pool, then its bytes */
    size_t pool_nblocks, pool_block_cap;
} sdp_mem;

/* 64-byte aligned, zero-filled. Fails with a clear message when the system is out of memory. */
void *sdp_alloc(sdp_mem *m, sdp_memcat cat, size_t bytes);
void sdp_free(sdp_mem *m, void *p);
/* Makes m allocate from [region, region + bytes) (64-byte aligned, at least sdp_mem_block_bytes
 * per allocation), counting from zero. */
void sdp_mem_use_arena(sdp_mem *m, void *region, size_t bytes);
/* Empties the arena: every block carved from it must have been freed. */
void sdp_mem_arena_reset(sdp_mem *m);
/* Makes m carve its allocations of category cat from [region, region + bytes) (64-byte aligned;
 * the category's pooled_by, as counted before) until sdp_mem_pool_close. The region stays the
 * caller's: sdp_mem_pool_drop forgets it once every block carved from it is freed, and the caller
 * frees it then. */
void sdp_mem_pool_open(sdp_mem *m, sdp_memcat cat, void *region, size_t bytes);
void sdp_mem_pool_close(sdp_mem *m);
void sdp_mem_pool_drop(sdp_mem *m);
/* What one allocation of `bytes` takes from an arena. */
size_t sdp_mem_block_bytes(size_t bytes);

const char *sdp_memcat_name(sdp_memcat cat);
/* Peak resident set size of this process, in bytes (from getrusage). */
size_t sdp_peak_rss(void);
/* "12.3 MiB": writes into buf and returns it. */
const char *sdp_fmt_bytes(char *buf, size_t n, double bytes);

#endif
