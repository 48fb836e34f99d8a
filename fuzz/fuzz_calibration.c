/* sdp plan's calibration file (--calibration, $SDP_CALIBRATION or the cache's), read as the
 * step-time model reads it before deciding whether to measure: the file's checks, then the
 * entry of one host and thread count. */
#include "harness.h"

#include "cli/plan_calibration.h"

static void read_calibration(void *path) {
    plan_calibration c;
    plan_calibration_read(&c, path, "node1", 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_run(read_calibration, (void *)fuzz_file(0, "calibration.json", data, size));
    return 0;
}
