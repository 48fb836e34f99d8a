#include "run_history.h"

#include "sdp/check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static cJSON *parse_object(const char *txt) {
    cJSON *o = cJSON_Parse(txt);
    SDP_CHECK(o, "out of memory");
    return o;
}

/* The settings that re-slicing may change, copied from a config.json object (options plus
 * "resolved"), as one invocation entry. */
static cJSON *entry_of(const cJSON *config, long from_step) {
    static const char *const options[] = {"steps", "schedule-steps", "sdp-mask", "sdp-unit",
                                          "sdp-assign"};
    static const char *const resolved[] = {"world", "owners", "coverage", "chunks", "branch_scale"};
    cJSON *e = cJSON_CreateObject();
    SDP_CHECK(e, "out of memory");
    cJSON_AddNumberToObject(e, "from_step", (double)from_step);
    for (size_t i = 0; i < sizeof options / sizeof *options; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, options[i]);
        if (v) cJSON_AddItemToObject(e, options[i], cJSON_Duplicate(v, true));
    }
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(config, "resolved");
    for (size_t i = 0; res && i < sizeof resolved / sizeof *resolved; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(res, resolved[i]);
        if (v) cJSON_AddItemToObject(e, resolved[i], cJSON_Duplicate(v, true));
    }
    return e;
}

/* The invocations recorded before this one: the previous file's array, or that file itself as
 * the first invocation when an older sdp wrote it. */
static cJSON *earlier_invocations(const char *previous, const char *source) {
    if (!previous) return cJSON_CreateArray();
    cJSON *prev = parse_object(previous);
    cJSON *list = cJSON_DetachItemFromObjectCaseSensitive(prev, "invocations");
    if (list && !cJSON_IsArray(list)) {
        cJSON_Delete(list);
        cJSON_Delete(prev);
        sdp_fatal("%s: \"invocations\" should be an array: the file is damaged; restore it or "
                  "start a new run",
                  source);
    }
    if (!list) {
        cJSON_Delete(list);
        list = cJSON_CreateArray();
        cJSON *first = entry_of(prev, 0);
        cJSON_AddItemToObject(first, "changed", cJSON_CreateObject());
        cJSON_AddItemToArray(list, first);
    }
    cJSON_Delete(prev);
    return list;
}

/* The options argv names, with the values they resolved to (o's JSON). Options only about the
 * invocation's own run directory are left out. */
static cJSON *changed_options(const cJSON *config, int argc, char **argv) {
    cJSON *changed = cJSON_CreateObject();
    SDP_CHECK(changed, "out of memory");
    for (const opt_spec *s = TRAIN_OPTS; s->name; s++) {
        if (!strcmp(s->name, "resume") || !train_opts_given(argc, argv, s->name)) continue;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(config, s->name);
        if (v) cJSON_AddItemToObject(changed, s->name, cJSON_Duplicate(v, true));
    }
    return changed;
}

char *train_run_history_config_json(const train_opts *o, const run_resolved *r,
                                    const char *previous, const char *source, long from_step,
                                    int argc, char **argv) {
    char *base = train_run_resolved_config_json(o, r);
    cJSON *root = parse_object(base);
    free(base);
    cJSON *list = earlier_invocations(previous, source);
    cJSON *entry = entry_of(root, from_step);
    cJSON_AddItemToObject(entry, "changed",
                          previous ? changed_options(root, argc, argv) : cJSON_CreateObject());
    cJSON_AddItemToArray(list, entry);
    cJSON_AddItemToObject(root, "invocations", list);
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    SDP_CHECK(txt, "out of memory");
    return txt;
}
