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
    /* While set, sdp_free keeps blocks (still counted: the process still holds them) for an
     * sdp_alloc of the same category and at most their size to take again (the smallest that
     * fits), until sdp_mem_release. A loop that builds and destroys models then touches fresh
     * pages only for sizes it has not met yet. */
    bool keep;
    void *kept; /* the blocks kept, a list */
} sdp_mem;

/* 64-byte aligned, zero-filled. Fails with a clear message when the system is out of memory. */
void *sdp_alloc(sdp_mem *m, sdp_memcat cat, size_t bytes);
void sdp_free(sdp_mem *m, void *p);
/* Frees the blocks kept since `keep` was set, and clears it. */
void sdp_mem_release(sdp_mem *m);
size_t sdp_alloc_size(const void *p);

const char *sdp_memcat_name(sdp_memcat cat);
/* Peak resident set size of this process, in bytes (from getrusage). */
size_t sdp_peak_rss(void);
/* "12.3 MiB": writes into buf and returns it. */
const char *sdp_fmt_bytes(char *buf, size_t n, double bytes);

#endif
