/* sdp: Subnetwork Data Parallelism. Dispatches to one subcommand. */
#include "commands.h"

#include <stdio.h>
#include <string.h>

static int usage(void) {
    printf("usage: sdp <command> [options]\n\n"
           "commands:\n"
           "  train    train a model (run with mpirun -np N for N workers)\n"
           "  eval     validation loss of a trained run\n"
           "  sample   generate text from a trained run\n"
           "  plan     predict each worker's memory and communication, without allocating\n"
           "  report   a Markdown table of the final figures of one or more runs\n\n"
           "Run 'sdp <command> --help' for a command's options.\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "sdp: error: no command given: run 'sdp --help' to list the commands\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) return usage();
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(cmd, "sample")) return cmd_sample(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "report")) return cmd_report(argc - 1, argv + 1);
    fprintf(stderr, "sdp: error: unknown command '%s': run 'sdp --help' to list the commands\n",
            cmd);
    return 2;
}
