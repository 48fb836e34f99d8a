#include "sdp/data.h"

#include "sdp/check.h"

#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* llm.c's token shard format (dev/data/data_common.py): a 256 x int32 header, then the tokens
 * as uint16. */
enum {
    SHARD_VERSION = 1,
    SHARD_HEADER_INTS = 256,
    SHARD_HEADER_BYTES = SHARD_HEADER_INTS * 4,
};

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Expands the pattern; names are sorted bytewise (not by locale) so every machine reads the
 * shards in the same order. */
static void expand_pattern(glob_t *g, const char *pattern) {
    int rc = glob(pattern, GLOB_ERR, NULL, g);
    SDP_CHECK_ALL(rc != GLOB_NOMATCH, "no files match '%s': check the shard path or pattern",
                  pattern);
    SDP_CHECK_ALL(rc == 0,
                  "cannot expand the shard pattern '%s' (%s): check the directory exists "
                  "and is readable",
                  pattern, rc == GLOB_NOSPACE ? "out of memory" : "read error");
    qsort(g->gl_pathv, g->gl_pathc, sizeof *g->gl_pathv, compare_names);
}

static void *map_file(const char *path, size_t *bytes) {
    int fd = sdp_open_input_all(path, "token shard", bytes);
    SDP_CHECK_ALL(
        *bytes >= sizeof(int32_t),
        "token shard '%s' holds %zu bytes, too few for even its magic number: it is not an "
        "llm.c token shard, or is truncated",
        path, *bytes);
    void *p = mmap(NULL, *bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    SDP_CHECK_ALL(p != MAP_FAILED, "cannot map token shard '%s' (%s): check available memory", path,
                  strerror(errno));
    close(fd);
    return p;
}

/* Checks the header against the file size and returns the span of tokens it describes. */
static sdp_token_span validate_shard(const char *path, const void *map, size_t bytes) {
    const int32_t *header = map;
    SDP_CHECK_ALL(header[0] == SDP_SHARD_MAGIC,
                  "'%s' has magic number %d, expected %d: it is not an llm.c token shard", path,
                  header[0], SDP_SHARD_MAGIC);
    SDP_CHECK_ALL(
        bytes >= SHARD_HEADER_BYTES,
        "token shard '%s' is truncated: it holds %zu bytes, less than the %d-byte header; "
        "regenerate it",
        path, bytes, SHARD_HEADER_BYTES);
    SDP_CHECK_ALL(header[1] == SHARD_VERSION,
                  "token shard '%s' has version %d, expected %d: regenerate it with llm.c's "
                  "current scripts",
                  path, header[1], SHARD_VERSION);
    /* The count is written as int32; read it unsigned so a corrupt negative value is reported
     * as a size mismatch rather than wrapping around. */
    size_t count = (uint32_t)header[2];
    size_t held = (bytes - SHARD_HEADER_BYTES) / sizeof(uint16_t);
    SDP_CHECK_ALL(
        bytes == SHARD_HEADER_BYTES + count * sizeof(uint16_t),
        "token shard '%s' is truncated or corrupt: header says %zu tokens, file holds %zu; "
        "regenerate it",
        path, count, held);
    return (sdp_token_span){(const uint16_t *)((const char *)map + SHARD_HEADER_BYTES), count};
}

static int vocab_of(const sdp_tokens *t) {
    uint16_t max = 0;
    for (int s = 0; s < t->nspans; s++)
        for (size_t i = 0; i < t->spans[s].n; i++)
            if (t->spans[s].tok[i] > max) max = t->spans[s].tok[i];
    return t->ntokens ? max + 1 : 0;
}

void sdp_tokens_load_shards(sdp_tokens *out, const char *pattern, sdp_mem *mem) {
    memset(out, 0, sizeof *out);
    glob_t g;
    expand_pattern(&g, pattern);
    SDP_CHECK_ALL(g.gl_pathc <= (size_t)INT32_MAX,
                  "pattern '%s' matches %zu files, too many: narrow "
                  "it",
                  pattern, (size_t)g.gl_pathc);
    int n = (int)g.gl_pathc;
    out->spans = sdp_alloc(mem, SDP_MEM_DATA, (size_t)n * sizeof *out->spans);
    out->maps = sdp_alloc(mem, SDP_MEM_DATA, (size_t)n * sizeof *out->maps);
    out->map_bytes = sdp_alloc(mem, SDP_MEM_DATA, (size_t)n * sizeof *out->map_bytes);
    out->nspans = n;
    for (int i = 0; i < n; i++) {
        const char *path = g.gl_pathv[i];
        out->maps[i] = map_file(path, &out->map_bytes[i]);
        out->spans[i] = validate_shard(path, out->maps[i], out->map_bytes[i]);
        out->ntokens += out->spans[i].n;
    }
    globfree(&g);
    out->vocab = vocab_of(out);
}
