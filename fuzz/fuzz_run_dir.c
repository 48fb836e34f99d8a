/* A run directory as `sdp report` reads it: config.json, metrics.jsonl and memory.json.
 *
 * Input: the three files' bytes, separated by NUL bytes (which none of them may hold); a missing
 * part is an empty file, and memory.json is absent when the input has fewer than three parts. */
#include "harness.h"

#include "cli/report_run.h"

#include <string.h>

static void read_run_dir(void *dir) {
    report_run r;
    report_run_load(&r, dir);
    report_run_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[3] = {"config.json", "metrics.jsonl", "memory.json"};
    size_t start = 0;
    int part = 0;
    for (; part < 3 && start <= size; part++) {
        const uint8_t *end = memchr(data + start, 0, size - start);
        const size_t n = end ? (size_t)(end - (data + start)) : size - start;
        fuzz_file(part, names[part], data + start, n);
        start += n + 1;
    }
    for (; part < 3; part++) {
        if (part == 2)
            fuzz_remove(part, names[part]);
        else
            fuzz_file(part, names[part], data, 0);
    }
    fuzz_run(read_run_dir, (void *)fuzz_dir());
    return 0;
}
