/* dpt-topo — the admins' tool: how a node is wired (show, the default) and
 * what dpt will do with a job on the cluster (plan). */
#include <stdio.h>
#include <string.h>

#include "dpt_topo_cli.h"

static void usage(FILE *f)
{
  fprintf(f,
          "usage: dpt-topo [show] [--input FILE.xml] [--json] [--pcie]\n"
          "       dpt-topo plan [--topology-conf FILE | --ibnetdiscover FILE | --addr-list FILE]\n"
          "                     --nodes HOSTLIST [--gpus-per-node N | --node-xml FILE | --node-xml-dir DIR] ...\n"
          "       dpt-topo --help | --version\n"
          "\n"
          "  show   this node's GPUs, HCAs and their PCIe/NVLink paths (like nvidia-smi topo -m)\n"
          "  plan   the topology-aware ring, per-rank binding and predicted all-reduce cost\n"
          "\n"
          "`dpt-topo SUBCOMMAND --help` describes each subcommand's options.\n");
}

int main(int argc, char **argv)
{
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "--version")) {
    printf("dpt-topo %s\n", DPT_VERSION);
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "plan"))
    return dpt_topo_plan_main(argc - 1, argv + 1, argv[0]);
  if (argc >= 2 && !strcmp(argv[1], "show"))
    return dpt_topo_show_main(argc - 1, argv + 1);
  if (argc >= 2 && argv[1][0] != '-') {
    fprintf(stderr, "dpt-topo: unknown subcommand '%s' (expected show or plan; see dpt-topo --help)\n",
            argv[1]);
    return 2;
  }
  /* no subcommand: show, with all arguments as its options */
  argv[0] = "show";
  return dpt_topo_show_main(argc, argv);
}
