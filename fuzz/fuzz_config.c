/* A run directory's config.json, read as `sdp eval`, `sdp sample`, `sdp report` and
 * `sdp train --resume` read it: every option's type, then the checks a run's options pass (as
 * set-up would apply them: run_config_check), then its "resolved" record. */
#include "harness.h"

#include "train/options.h"
#include "train/run_config_check.h"
#include "train/run_resolved.h"
#include "train/train_opts.h"

#include <string.h>

typedef struct {
    const char *json;
} config_input;

static void read_config(void *ctx) {
    const config_input *in = ctx;
    train_opts o;
    memset(&o, 0, sizeof o);
    train_opts_set_defaults(TRAIN_OPTS, &o);
    /* No required keys: the fuzzer reaches the value checks without first finding every key. */
    train_opts_from_json(TRAIN_OPTS, &o, in->json, "RUN/config.json", NULL);
    train_run_config_check(&o, "RUN/config.json");
    run_resolved r;
    train_run_resolved_from_json(&r, in->json, "RUN/config.json");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *json = malloc(size + 1);
    if (!json) return 0;
    memcpy(json, data, size);
    json[size] = 0;
    config_input in = {json};
    fuzz_run(read_config, &in);
    free(json);
    return 0;
}
