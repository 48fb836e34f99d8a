/* safetensors files: the whole-file reader and the streaming one (header, metadata, tiling,
 * checksum), then every tensor's bytes through sdp_st_pread and the numeric metadata sdp reads. */
#include "harness.h"

#include "sdp/safetensors.h"

static void read_whole(void *path) {
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_read(&f, path, &mem);
    sdp_st_close(&f, &mem);
}

static void read_streaming(void *path) {
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_open(&f, path, &mem);
    float buf[64];
    for (int i = 0; i < f.n; i++) {
        const size_t n = f.entries[i].nbytes < sizeof buf ? f.entries[i].nbytes : sizeof buf;
        sdp_st_pread(&f, &f.entries[i], 0, buf, n);
    }
    if (sdp_st_meta(&f, "sdp.step")) sdp_st_meta_number(&f, "sdp.step", 0, 1e15, true);
    sdp_st_close(&f, &mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *path = (char *)fuzz_file(0, "model.safetensors", data, size);
    fuzz_run(read_whole, path);
    fuzz_run(read_streaming, path);
    return 0;
}
