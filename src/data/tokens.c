#include "sdp/data.h"

#include <string.h>
#include <sys/mman.h>

/* Releases whichever storage the loader used: the owned byte buffer (text) or the mapped
 * files (shards). Safe on a zeroed struct, so callers may free unconditionally. */
void sdp_tokens_free(sdp_tokens *t, sdp_mem *mem) {
    if (t->maps) {
        for (int i = 0; i < t->nspans; i++)
            if (t->maps[i]) munmap(t->maps[i], t->map_bytes[i]);
    }
    sdp_free(mem, t->maps);
    sdp_free(mem, t->map_bytes);
    sdp_free(mem, t->spans);
    sdp_free(mem, t->owned);
    memset(t, 0, sizeof *t);
}
