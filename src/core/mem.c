#include "sdp/mem.h"

#include "sdp/check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* Each block carries a header so that sdp_free knows what to give back to which category. */
typedef struct block_header {
    size_t bytes;
    uint32_t cat;
    uint32_t magic;
    struct block_header *next; /* in sdp_mem.kept */
    char pad[40];
} block_header;

enum { HEADER_MAGIC = 0x5d9a110cu };

static void account(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    m->cur[cat] += bytes;
    if (m->cur[cat] > m->peak[cat]) m->peak[cat] = m->cur[cat];
    m->total_cur += bytes;
    if (m->total_cur > m->total_peak) m->total_peak = m->total_cur;
    m->nallocs++;
}

/* The smallest kept block of this category that holds `bytes`, zero-filled again, or NULL. It
 * stays counted at its own size: a model of another shape takes the blocks of the last one
 * rather than touching fresh pages, and what the process holds is what the tallies say. */
static void *take_kept(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    block_header **best = NULL;
    for (block_header **at = (block_header **)&m->kept; *at; at = &(*at)->next) {
        const block_header *h = *at;
        if (h->cat == cat && h->bytes >= bytes && (!best || h->bytes < (*best)->bytes)) best = at;
    }
    if (!best) return NULL;
    block_header *h = *best;
    *best = h->next;
    h->next = NULL;
    memset(h + 1, 0, h->bytes);
    return h + 1;
}

void *sdp_alloc(sdp_mem *m, sdp_memcat cat, size_t bytes) {
    SDP_ASSERT(m && cat < SDP_MEM_NCAT);
    if (m->dry) {
        account(m, cat, bytes);
        return NULL;
    }
    void *again = take_kept(m, cat, bytes);
    if (again) return again;
    void *raw = NULL;
    if (posix_memalign(&raw, 64, sizeof(block_header) + (bytes ? bytes : 1)) != 0)
        sdp_fatal("out of memory allocating %zu bytes for %s: use a smaller model or batch", bytes,
                  sdp_memcat_name(cat));
    block_header *h = raw;
    h->bytes = bytes;
    h->cat = cat;
    h->magic = HEADER_MAGIC;
    h->next = NULL;
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

static void release(sdp_mem *m, block_header *h) {
    SDP_ASSERT(m->cur[h->cat] >= h->bytes);
    m->cur[h->cat] -= h->bytes;
    m->total_cur -= h->bytes;
    m->nallocs--;
    h->magic = 0;
    free(h);
}

void sdp_free(sdp_mem *m, void *p) {
    if (!p) return;
    block_header *h = header_of(p);
    if (m->keep) {
        h->next = m->kept;
        m->kept = h;
        return;
    }
    release(m, h);
}

void sdp_mem_release(sdp_mem *m) {
    m->keep = false;
    while (m->kept) {
        block_header *h = m->kept;
        m->kept = h->next;
        release(m, h);
    }
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
