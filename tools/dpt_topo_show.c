/* dpt_topo_show.c — `dpt-topo [show]`: how this node (or an hwloc XML dump) is
 * wired, like `nvidia-smi topo -m`, or as a "dpt.node/1" JSON document.
 * The whole output is built in memory first: on any error nothing reaches
 * stdout, only a message naming the file and the problem on stderr. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "dpt_err.h"
#include "dpt_node.h"
#include "dpt_topo_cli.h"

static void show_usage(FILE *f)
{
  fprintf(f,
          "usage: dpt-topo [show] [--input FILE.xml] [--json] [--pcie]\n"
          "\n"
          "Show this node's GPUs, InfiniBand/RoCE/EFA HCAs, NUMA nodes and the path class of\n"
          "every GPU/GPU and GPU/HCA pair, in the words of `nvidia-smi topo -m`.  GPUs are NVIDIA\n"
          "devices only, in PCI bus id order (CUDA_DEVICE_ORDER=PCI_BUS_ID); a display controller\n"
          "of another vendor (a server's BMC VGA) is not a GPU: a warning names it, on stderr too.\n"
          "\n"
          "  --input FILE  read an hwloc XML topology (`lstopo --of xml FILE`) instead of\n"
          "                discovering this machine; the HWLOC_XMLFILE variable does the same\n"
          "  --json        print a \"dpt.node/1\" JSON document (docs/schema-node.md)\n"
          "  --pcie        show PCIe paths only, also between NVLink-connected GPUs\n"
          "                (like `nvidia-smi topo -mp`)\n"
          "  --help        this help\n"
          "\n"
          "Exit status: 0 ok, 1 runtime failure, 2 bad usage or unreadable/invalid input.\n");
}

int dpt_topo_show_main(int argc, char **argv)
{
  const char *input = NULL;
  int json = 0, pcie = 0, status = 2;
  struct dpt_err err;
  struct dpt_node *node = NULL;
  char *out = NULL;
  size_t out_len = 0;

  dpt_err_clear(&err);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      show_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--pcie")) {
      pcie = 1;
    } else if (!strcmp(a, "--input") || !strcmp(a, "-i")) {
      if (i + 1 >= argc || !argv[i + 1][0]) {
        fprintf(stderr, "dpt-topo show: %s needs a file name (an hwloc XML topology)\n", a);
        return 2;
      }
      input = argv[++i];
    } else if (!strncmp(a, "--input=", 8)) {
      input = a + 8;
      if (!*input) {
        fprintf(stderr, "dpt-topo show: --input= needs a file name (an hwloc XML topology)\n");
        return 2;
      }
    } else {
      fprintf(stderr, "dpt-topo show: unknown argument '%s' (see dpt-topo show --help)\n", a);
      return 2;
    }
  }

  if (dpt_node_load(&node, input, &err) < 0) {
    fprintf(stderr, "dpt-topo: %s\n", err.msg);
    return dpt_err_exit_status(&err);
  }
  /* A display controller that is not a GPU changes the GPU count a user may expect (a
   * server's BMC VGA): said on stderr too, so that --json users see it. */
  for (int i = 0; i < node->n_ignored; i++) {
    char w[256];
    dpt_node_ignored_warning(node, i, w, sizeof w);
    fprintf(stderr, "dpt-topo: warning: %s\n", w);
  }

  if (json) {
    json_t *doc = dpt_node_to_json(node);
    out = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(doc);
    if (out)
      out_len = strlen(out);
  } else {
    FILE *m = open_memstream(&out, &out_len);
    if (m) {
      dpt_node_print_flags(m, node, pcie ? DPT_NODE_PRINT_PCIE : 0);
      if (fclose(m) != 0) {
        free(out);
        out = NULL;
      }
    }
  }
  if (!out) {
    fprintf(stderr, "dpt-topo: out of memory while formatting the topology of %s\n", node->source);
    status = 1;
    goto done;
  }
  if (fwrite(out, 1, out_len, stdout) != out_len || (json && fputc('\n', stdout) == EOF) || fflush(stdout)) {
    fprintf(stderr, "dpt-topo: cannot write to standard output\n");
    status = 1;
    goto done;
  }
  status = 0;
done:
  free(out);
  dpt_node_destroy(node);
  return status;
}
