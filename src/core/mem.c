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

size_t sdp_alloc_size(const void *p) {
    return p ? header_of(p)->bytes : 0;
}

void sdp_free(sdp_mem *m, void *p) {
    if (!p) return;
    block_header *h = header_of(p);
    SDP_ASSERT(m->cur[h->cat] >= h->bytes);
    m->cur[h->cat] -= h->bytes;
    m->total_cur -= h->bytes;
    m->nallocs--;
    h->magic = 0;
    if (!m->arena) free(h);
}

void sdp_mem_use_arena(sdp_mem *m, void *region, size_t bytes) {
    SDP_ASSERT(((uintptr_t)region & 63) == 0);
    memset(m, 0, sizeof *m);
    m->arena = region;
    m->arena_cap = bytes;
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
