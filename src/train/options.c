#include "options.h"

#include "sdp/check.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *field(void *opts, const opt_spec *s) {
    return (char *)opts + s->offset;
}

bool train_opts_set(const opt_spec *s, void *opts, const char *value, char *err, size_t errlen) {
    char *end = NULL;
    errno = 0;
    switch (s->type) {
    case OPT_INT: {
        long v = strtol(value, &end, 10);
        if (!*value || *end || errno || v < s->min || v > 2147483647L) {
            snprintf(err, errlen, "--%s expects an integer from %g to 2147483647, got '%s'",
                     s->name, s->min, value);
            return false;
        }
        *(int *)field(opts, s) = (int)v;
        return true;
    }
    case OPT_FLOAT: {
        double v = strtod(value, &end);
        /* Most of these values become floats: above FLT_MAX they would be infinite. */
        if (!*value || *end || errno || !isfinite(v) || v < s->min || v > FLT_MAX) {
            snprintf(err, errlen, "--%s expects a number from %g to %g, got '%s'", s->name, s->min,
                     (double)FLT_MAX, value);
            return false;
        }
        *(double *)field(opts, s) = v;
        return true;
    }
    case OPT_STR:
        if (strlen(value) >= OPT_STR_MAX) {
            snprintf(err, errlen, "--%s value is %zu bytes long: give at most %d", s->name,
                     strlen(value), OPT_STR_MAX - 1);
            return false;
        }
        strcpy((char *)field(opts, s), value);
        return true;
    case OPT_FLAG:
        if (strcmp(value, "1") && strcmp(value, "0") && strcmp(value, "true") &&
            strcmp(value, "false")) {
            snprintf(err, errlen, "--%s is a flag (true or false), got '%s'", s->name, value);
            return false;
        }
        *(bool *)field(opts, s) = value[0] == '1' || value[0] == 't';
        return true;
    }
    return false;
}

void train_opts_set_defaults(const opt_spec *specs, void *opts) {
    char err[256];
    for (const opt_spec *s = specs; s->name; s++)
        if (!train_opts_set(s, opts, s->def, err, sizeof err)) sdp_fatal("bad default: %s", err);
}

static void print_usage(const opt_spec *specs, const char *usage) {
    printf("%s\n\nOptions (default in brackets):\n", usage);
    for (const opt_spec *s = specs; s->name; s++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s", s->name, s->type == OPT_FLAG ? "" : " V");
        char def[64]; /* a default such as sample's "\n" would break the line */
        printf("  %-22s %s [%s]\n", left, s->help,
               *s->def ? sdp_escape(def, sizeof def, s->def) : "none");
    }
    printf("  %-22s %s\n", "--help", "print this help");
}

/* Levenshtein distance between a and b[0, blen), for suggesting the option meant. */
static size_t edit_distance(const char *a, const char *b, size_t blen) {
    const size_t alen = strlen(a);
    if (alen > 64 || blen > 64) return (size_t)-1; /* no option name is that long */
    size_t row[65];
    for (size_t j = 0; j <= blen; j++) row[j] = j;
    for (size_t i = 1; i <= alen; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= blen; j++) {
            const size_t up = row[j];
            const size_t sub = diag + (a[i - 1] != b[j - 1]);
            const size_t del = (up < row[j - 1] ? up : row[j - 1]) + 1;
            row[j] = sub < del ? sub : del;
            diag = up;
        }
    }
    return row[blen];
}

/* The option that `name` (len bytes, without "--") most likely meant, or NULL: one it abbreviates
 * (getopt would have taken a unique abbreviation silently), else the nearest by edit distance
 * when that is small. Ties go to the earlier option of the table. */
static const char *closest_option(const struct option *lo, const char *name, size_t len) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (const struct option *o = lo; o->name; o++) {
            const bool abbreviates = strncmp(o->name, name, len) == 0;
            if (pass == 0 && !abbreviates) continue;
            const size_t d = edit_distance(o->name, name, len);
            const size_t limit = len / 3 > 2 ? len / 3 : 2;
            if ((pass == 0 || d <= limit) && d < best_d) best = o->name, best_d = d;
        }
    return best;
}

bool train_opts_names_ok(const struct option *lo, int argc, char **argv, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) return true;  /* the end of the options */
        if (strncmp(a, "--", 2) != 0) continue; /* an argument, or a short option (getopt's) */
        const char *name = a + 2, *eq = strchr(name, '=');
        const size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct option *o = lo;
        while (o->name && !(strlen(o->name) == len && strncmp(o->name, name, len) == 0)) o++;
        if (!o->name) {
            const char *near = closest_option(lo, name, len);
            if (near)
                snprintf(err, errlen,
                         "unknown option '--%.*s': did you mean --%s? (run with "
                         "--help to list the options)",
                         (int)len, name, near);
            else
                snprintf(err, errlen,
                         "unknown option '--%.*s': run with --help to list the options", (int)len,
                         name);
            return false;
        }
        if (o->has_arg == no_argument && eq) {
            snprintf(err, errlen, "--%s takes no value, got '%s': give it alone", o->name, a);
            return false;
        }
        if (o->has_arg == required_argument && !eq) {
            if (i + 1 == argc) {
                snprintf(err, errlen, "--%s needs a value: --%s V (see --help)", o->name, o->name);
                return false;
            }
            i++; /* its value, whatever it looks like */
        }
    }
    return true;
}

void train_opts_check_names(const struct option *lo, int argc, char **argv) {
    char err[512];
    if (!train_opts_names_ok(lo, argc, argv, err, sizeof err)) sdp_fatal("%s", err);
}

void train_opts_parse(const opt_spec *specs, void *opts, int argc, char **argv, const char *usage) {
    train_opts_set_defaults(specs, opts);
    int n = 0;
    while (specs[n].name) n++;
    struct option *lo = sdp_xcalloc((size_t)n + 2, sizeof *lo, "the command line's options");
    for (int i = 0; i < n; i++)
        lo[i] = (struct option){specs[i].name,
                                specs[i].type == OPT_FLAG ? no_argument : required_argument, NULL,
                                1000 + i};
    lo[n] = (struct option){"help", no_argument, NULL, 'h'};
    char err[512];
    /* getopt_long takes any unique abbreviation of a long option: `sdp eval --batch 1` would
     * silently be --batches 1. Names must be whole. */
    if (!train_opts_names_ok(lo, argc, argv, err, sizeof err)) {
        free(lo);
        sdp_fatal("%s", err);
    }
    optind = 1;
    opterr = 0;
    int c, idx = 0;
    while ((c = getopt_long(argc, argv, "h", lo, &idx)) != -1) {
        if (c == 'h') {
            if (sdp_is_lead()) print_usage(specs, usage); /* once under mpirun */
            exit(0);
        }
        if (c == '?' || c == ':') {
            const char *bad = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
            free(lo);
            sdp_fatal("unknown option '%s': run with --help to list the options", bad);
        }
        const opt_spec *s = &specs[c - 1000];
        if (!train_opts_set(s, opts, s->type == OPT_FLAG ? "1" : optarg, err, sizeof err)) {
            free(lo);
            sdp_fatal("%s", err);
        }
    }
    if (optind < argc) {
        free(lo);
        sdp_fatal("unexpected argument '%s': options start with -- (see --help)", argv[optind]);
    }
    free(lo);
}

bool train_opts_given(int argc, char **argv, const char *name) {
    size_t len = strlen(name);
    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--", 2) == 0 && strncmp(argv[i] + 2, name, len) == 0 &&
            (argv[i][2 + len] == 0 || argv[i][2 + len] == '='))
            return true;
    return false;
}

bool train_opts_same(const opt_spec *s, const void *a, const void *b) {
    const void *x = (const char *)a + s->offset, *y = (const char *)b + s->offset;
    switch (s->type) {
    case OPT_INT:
        return *(const int *)x == *(const int *)y;
    case OPT_FLOAT:
        return *(const double *)x == *(const double *)y;
    case OPT_STR:
        return strcmp((const char *)x, (const char *)y) == 0;
    case OPT_FLAG:
        return *(const bool *)x == *(const bool *)y;
    }
    return false;
}

const char *train_opts_value_text(const opt_spec *s, const void *opts, char *buf, size_t n) {
    const void *f = (const char *)opts + s->offset;
    switch (s->type) {
    case OPT_INT:
        snprintf(buf, n, "%d", *(const int *)f);
        break;
    case OPT_FLOAT: /* the fewest digits that read back as the same double */
        for (int digits = 1; digits <= 17; digits++) {
            snprintf(buf, n, "%.*g", digits, *(const double *)f);
            if (strtod(buf, NULL) == *(const double *)f) break;
        }
        break;
    case OPT_STR:
        snprintf(buf, n, "'%s'", (const char *)f);
        break;
    case OPT_FLAG:
        snprintf(buf, n, "%s", *(const bool *)f ? "on" : "off");
        break;
    }
    return buf;
}

char *train_opts_to_json(const opt_spec *specs, const void *opts) {
    cJSON *o = cJSON_CreateObject();
    for (const opt_spec *s = specs; s->name; s++) {
        const void *f = (const char *)opts + s->offset;
        switch (s->type) {
        case OPT_INT:
            cJSON_AddNumberToObject(o, s->name, *(const int *)f);
            break;
        case OPT_FLOAT:
            cJSON_AddNumberToObject(o, s->name, *(const double *)f);
            break;
        case OPT_STR:
            cJSON_AddStringToObject(o, s->name, (const char *)f);
            break;
        case OPT_FLAG:
            cJSON_AddBoolToObject(o, s->name, *(const bool *)f);
            break;
        }
    }
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    SDP_CHECK(txt, "out of memory");
    return txt;
}

/* A JSON value as the text a command line would give for option s, or NULL when its type is
 * wrong. Numbers keep every digit, so the flag's own checks (integer, minimum) judge them. */
static const char *json_as_flag_text(const opt_spec *s, const cJSON *v, char *buf, size_t n) {
    switch (s->type) {
    case OPT_INT:
    case OPT_FLOAT:
        if (!cJSON_IsNumber(v)) return NULL;
        snprintf(buf, n, "%.17g", v->valuedouble);
        return buf;
    case OPT_STR:
        return cJSON_IsString(v) ? v->valuestring : NULL;
    case OPT_FLAG:
        return cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? "true" : "false") : NULL;
    }
    return NULL;
}

static const char *type_name(const opt_spec *s) {
    return s->type == OPT_STR ? "a string" : s->type == OPT_FLAG ? "true or false" : "a number";
}

void train_opts_from_json(const opt_spec *specs, void *opts, const char *json, const char *source,
                          const char *const *required) {
    cJSON *o = cJSON_ParseWithOpts(json, NULL, true);
    if (!cJSON_IsObject(o)) { /* valid JSON, such as a number, that is not an object too */
        cJSON_Delete(o);
        sdp_fatal("%s is not a valid JSON object: restore it or start afresh", source);
    }
    for (const char *const *k = required; k && *k; k++)
        if (!cJSON_GetObjectItemCaseSensitive(o, *k)) {
            cJSON_Delete(o);
            sdp_fatal("%s lacks \"%s\", which every run's config.json records: the file is "
                      "damaged; restore it or start a new run",
                      source, *k);
        }
    for (const opt_spec *s = specs; s->name; s++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, s->name);
        if (!v) continue;
        char buf[64], err[256];
        const char *text = json_as_flag_text(s, v, buf, sizeof buf);
        if (!text) {
            cJSON_Delete(o);
            sdp_fatal("%s: \"%s\" should be %s: the file is damaged; restore it or start a new run",
                      source, s->name, type_name(s));
        }
        if (!train_opts_set(s, opts, text, err, sizeof err)) {
            cJSON_Delete(o);
            sdp_fatal("%s: \"%s\" is out of range (%s): the file is damaged; restore it or start "
                      "a new run",
                      source, s->name, err);
        }
    }
    cJSON_Delete(o);
}
