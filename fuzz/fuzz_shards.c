/* llm.c token shards: header (magic, version, count) against the file's size, and the tokens. */
#include "harness.h"

#include "sdp/data.h"

static void read_shards(void *path) {
    sdp_mem mem = {0};
    sdp_tokens t;
    sdp_tokens_load_shards(&t, path, &mem);
    sdp_tokens_free(&t, &mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(read_shards, (void *)fuzz_file(0, "shard_000.bin", data, size));
    return 0;
}
