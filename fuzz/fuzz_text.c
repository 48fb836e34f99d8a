/* Text files read as bytes, split into training and validation parts. */
#include "harness.h"

#include "sdp/data.h"

static void read_text(void *path) {
    sdp_mem mem = {0};
    sdp_tokens train, val;
    sdp_tokens_load_text(&train, &val, path, 0.1, &mem);
    sdp_tokens_free(&train, &mem);
    sdp_tokens_free(&val, &mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(read_text, (void *)fuzz_file(0, "text.txt", data, size));
    return 0;
}
