/* One function per subcommand; argv[0] is the subcommand's name. */
#ifndef SDP_CLI_COMMANDS_H
#define SDP_CLI_COMMANDS_H

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_report(int argc, char **argv);

#endif
