/* Command-line options as one table: parsing, --help with defaults, validation, and the
 * config.json of a run are all driven from it, so they cannot disagree. */
#ifndef SDP_TRAIN_OPTIONS_H
#define SDP_TRAIN_OPTIONS_H

#include <getopt.h>
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

/* Fills `opts` with the defaults, then parses argv (getopt_long). `--help` prints usage (on the
 * lead process alone) and exits 0; unknown options and malformed values fail with a clear
 * message. Option names must be given whole (train_opts_names_ok). */
void train_opts_parse(const opt_spec *specs, void *opts, int argc, char **argv, const char *usage);
/* Whether every "--name" of argv names an option of `lo` exactly (getopt_long would take a unique
 * abbreviation as the option it abbreviates), with a value where it takes one and none where it
 * does not. Otherwise false, with one line in err that names the option meant ("unknown option
 * '--batch': did you mean --batches?"). Stops at "--". */
bool train_opts_names_ok(const struct option *lo, int argc, char **argv, char *err, size_t errlen);
/* train_opts_names_ok, failing with its message. For commands that call getopt_long themselves. */
void train_opts_check_names(const struct option *lo, int argc, char **argv);
void train_opts_set_defaults(const opt_spec *specs, void *opts);
/* Parses one value into its field; returns false with a message in err when malformed. */
bool train_opts_set(const opt_spec *s, void *opts, const char *value, char *err, size_t errlen);
/* Whether option s holds the same value in a and b (two options structs). */
bool train_opts_same(const opt_spec *s, const void *a, const void *b);
/* Option s's value in opts as a command line would give it, into buf (n bytes). */
const char *train_opts_value_text(const opt_spec *s, const void *opts, char *buf, size_t n);
/* True when argv names this option explicitly. */
bool train_opts_given(int argc, char **argv, const char *name);
/* The options as a JSON object string (malloc'd). */
char *train_opts_to_json(const opt_spec *specs, const void *opts);
/* Sets every option present in a JSON object written by train_opts_to_json. Each name of
 * `required` (NULL-terminated; NULL for none) must be present: a default standing in for it would
 * change the run unseen. */
void train_opts_from_json(const opt_spec *specs, void *opts, const char *json, const char *source,
                          const char *const *required);

#endif
