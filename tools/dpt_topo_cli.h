/* dpt_topo_cli.h — subcommands of the dpt-topo tool (internal to the tool).
 * Each returns the process exit status: 0 ok, 1 runtime failure, 2 bad usage/input.
 * argv[0] is the subcommand name. */
#ifndef DPT_TOPO_CLI_H
#define DPT_TOPO_CLI_H

int dpt_topo_show_main(int argc, char **argv);
/* program: the tool as it was called (argv[0] of dpt-topo), for the job report's command. */
int dpt_topo_plan_main(int argc, char **argv, const char *program);

#endif
