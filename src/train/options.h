/* Command-line options as one table: parsing, --help with defaults, validation, and the
 * config.json of a run are all driven from it, so they cannot disagree. */
#ifndef SDP_TRAIN_OPTIONS_H
#define SDP_TRAIN_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { OPT_INT, OPT_FLOAT, OPT_STR, OPT_FLAG } opt_type;

typedef struct {
    const char *name; /* long option, without "--" */
    opt_type type;
    size_t offset; /* into the options struct */
    const char *def;
    const char *help;
    double min; /* numeric options below min are rejected */
} opt_spec;

#define OPT_STR_MAX 512

/* Fills `opts` with the defaults, then parses argv (getopt_long). `--help` prints usage and
 * exits 0; unknown options and malformed values fail with a clear message. */
void opts_parse(const opt_spec *specs, void *opts, int argc, char **argv, const char *usage);
void opts_set_defaults(const opt_spec *specs, void *opts);
/* Parses one value into its field; returns false with a message in err when malformed. */
bool opts_set(const opt_spec *s, void *opts, const char *value, char *err, size_t errlen);
/* True when argv names this option explicitly. */
bool opts_given(int argc, char **argv, const char *name);
/* The options as a JSON object string (malloc'd). */
char *opts_to_json(const opt_spec *specs, const void *opts);
/* Sets every option present in a JSON object written by opts_to_json. */
void opts_from_json(const opt_spec *specs, void *opts, const char *json, const char *source);

#endif
