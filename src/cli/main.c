/* sdp: Subnetwork Data Parallelism. Dispatches to one subcommand. */
#include "commands.h"

#include <stdio.h>
#include <string.h>

static int usage(FILE *f) {
    fprintf(f, "usage: sdp <command> [options]\n\n"
               "commands:\n"
               "  train    train a model (run with mpirun -np N for N workers)\n"
               "  eval     validation loss of a trained run\n"
               "  sample   generate text from a trained run\n\n"
               "Run 'sdp <command> --help' for a command's options.\n");
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) return usage(stdout);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample")) return cmd_sample(argc - 1, argv + 1);
    fprintf(stderr, "sdp: error: unknown command '%s'\n", cmd);
    return usage(stderr);
}
