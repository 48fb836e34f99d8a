#include "sdp/mem.h"

#include "sdp/check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Each block carries a header so that sdp_free knows what to give back to which category. */
typedef struct {
    size_t bytes;
    uint32_t cat;
    uint32_t magic;
    char pad[48];
} block_header;

enum { HEADER_MAGIC = 0x5d9a110cu };

static void account(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    m->cur[cat] += bytes;
    if (m->cur[cat] > m->peak[cat]) m->peak[cat] = m->cur[cat];
    m->total_cur += bytes;
    if (m->total_cur > m->total_peak) m->total_peak = m->total_cur;
    m->nallocs++;
}

size_t sdp_mem_block_bytes(size_t bytes) {
    return sizeof(block_header) + (bytes + 63) / 64 * 64;
}

static bool in_pool(const sdp_mem *m, const void *p) {
    return m->pool && (const char *)p >= m->pool && (const char *)p < m->pool + m->pool_cap;
}

/* What one allocation takes from a pool: at least 64 bytes, so that every block has an address
 * of its own inside the pool (a model may ask for none, e.g. for heads a worker does not keep). */
static size_t pool_block_size(size_t bytes) {
    return bytes ? (bytes + 63) / 64 * 64 : 64;
}

/* A block of the open pool: no header, its offset and bytes in m->pool_block. */
static void *carve_pool(sdp_mem *m, size_t bytes) {
    const size_t at = m->pool_carved;
    m->pool_carved += pool_block_size(bytes);
    SDP_ASSERT(m->pool_carved <= m->pool_cap && "the pool was sized for other allocations");
    if (m->pool_nblocks == m->pool_block_cap) {
        m->pool_block_cap = m->pool_block_cap ? 2 * m->pool_block_cap : 64;
        m->pool_block = sdp_xrealloc(m->pool_block, 2 * m->pool_block_cap * sizeof(size_t),
                                     "the pool's block sizes");
    }
    m->pool_block[2 * m->pool_nblocks] = at;
    m->pool_block[2 * m->pool_nblocks + 1] = bytes;
    m->pool_nblocks++;
    return m->pool + at;
}

/* The bytes of pool block p, found by its offset (blocks are carved in ascending order). */
static size_t pool_block_bytes(const sdp_mem *m, const void *p) {
    const size_t at = (size_t)((const char *)p - m->pool);
    size_t lo = 0, hi = m->pool_nblocks;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (m->pool_block[2 * mid] < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    SDP_ASSERT(lo < m->pool_nblocks && m->pool_block[2 * lo] == at && "not a block of the pool");
    return m->pool_block[2 * lo + 1];
}

/* The next block of the arena, or NULL without one. */
static block_header *carve(sdp_mem *m, size_t bytes) {
    const size_t at = m->carved;
    m->carved += sdp_mem_block_bytes(bytes);
    if (!m->arena) return NULL;
    SDP_ASSERT(m->carved <= m->arena_cap && "the arena was sized for other allocations");
    return (block_header *)(m->arena + at);
}

void *sdp_alloc(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    SDP_ASSERT(m && cat < SDP_MEM_NCAT);
    m->pooled_by[cat] += pool_block_size(bytes);
    if (m->pool_open && cat == m->pool_cat) {
        void *p = carve_pool(m, bytes);
        memset(p, 0, bytes);
        account(m, cat, bytes);
        return p;
    }
    block_header *h = carve(m, bytes);
    if (m->dry) {
        account(m, cat, bytes);
        return NULL;
    }
    void *raw = h;
    if (!h && posix_memalign(&raw, 64, sizeof(block_header) + (bytes ? bytes : 1)) != 0)
        sdp_fatal("out of memory allocating %zu bytes for %s: use a smaller model or batch", bytes,
                  sdp_memcat_name(cat));
    h = raw;
    h->bytes = bytes;
    h->cat = cat;
    h->magic = HEADER_MAGIC;
    void *p = h + 1;
    memset(p, 0, bytes);
    account(m, cat, bytes);
    return p;
}

static block_header *header_of(const void *p) {
    block_header *h = (block_header *)p - 1;
    SDP_ASSERT(h->magic == HEADER_MAGIC);
    return h;
}

static void unaccount(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    SDP_ASSERT(m->cur[cat] >= bytes);
    m->cur[cat] -= bytes;
    m->total_cur -= bytes;
    m->nallocs--;
}

void sdp_free(sdp_mem *m, void *p) {
    if (!p) return;
    if (in_pool(m, p)) {
        unaccount(m, m->pool_cat, pool_block_bytes(m, p));
        return;
    }
    block_header *h = header_of(p);
    unaccount(m, h->cat, h->bytes);
    h->magic = 0;
    if (!m->arena) free(h);
}

void sdp_mem_use_arena(sdp_mem *m, void *region, size_t bytes) {
    SDP_ASSERT(((uintptr_t)region & 63) == 0);
    memset(m, 0, sizeof *m);
    m->arena = region;
    m->arena_cap = bytes;
}

void sdp_mem_pool_open(sdp_mem *m, sdp_memcat cat, void *region, size_t bytes) {
    SDP_ASSERT(!m->pool && !m->dry && ((uintptr_t)region & 63) == 0);
    m->pool = region;
    m->pool_cap = bytes;
    m->pool_carved = 0;
    m->pool_cat = cat;
    m->pool_open = true;
}

void sdp_mem_pool_close(sdp_mem *m) {
    m->pool_open = false;
}

void sdp_mem_pool_drop(sdp_mem *m) {
    SDP_ASSERT(!m->pool_open);
    free(m->pool_block);
    m->pool = NULL;
    m->pool_block = NULL;
    m->pool_cap = m->pool_carved = m->pool_nblocks = m->pool_block_cap = 0;
}

void sdp_mem_arena_reset(sdp_mem *m) {
    SDP_ASSERT(m->total_cur == 0 && "a block of the arena is still in use");
    m->carved = 0;
}

const char *sdp_memcat_name(sdp_memcat cat) {
    static const char *names[SDP_MEM_NCAT] = {"params",  "grads",   "optimizer", "activations",
                                              "buffers", "scratch", "data"};
    return cat < SDP_MEM_NCAT ? names[cat] : "?";
}

size_t sdp_peak_rss(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

const char *sdp_fmt_bytes(char *buf, size_t n, double bytes) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) bytes /= 1024.0, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
    return buf;
}
