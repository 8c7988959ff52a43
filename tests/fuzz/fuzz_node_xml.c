/* fuzz_node_xml.c — hwloc XML through dpt_node_load_buffer() (topology/dpt_node_load.c):
 * hwloc's XML import plus dpt's reduction (GPUs, HCAs, NUMA, path classes), and
 * on success every consumer of the result (JSON, warnings, text view, nearest
 * HCAs), which read the path matrices and cpusets hwloc handed back. */
#include <hwloc.h>

#include "dpt_node.h"
#include "fuzz_common.h"

static FILE *devnull;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct dpt_node *node = NULL;
  struct dpt_err err = {0};
  if (!devnull) {
    devnull = fopen("/dev/null", "w");
    FUZZ_CHECK(devnull != NULL);
  }
  int rc = dpt_node_load_buffer(&node, (const char *)data, size, "fuzz.xml", &err);
  if (rc) {
    fuzz_check_error(rc, &err);
    return 0;
  }
  FUZZ_CHECK(node != NULL);
  FUZZ_CHECK(node->n_gpus >= 0 && node->n_hcas >= 0 && node->n_numa >= 0);
  for (int a = 0; a < node->n_gpus; a++) {
    FUZZ_CHECK(node->gpus[a].index == a && node->gpus[a].cpuset != NULL);
    FUZZ_CHECK(dpt_node_gpu_path(node, a, a).cls == DPT_PATH_X);
    for (int b = 0; b < node->n_gpus; b++) {
      struct dpt_path p = dpt_node_gpu_path(node, a, b), q = dpt_node_gpu_path(node, b, a);
      FUZZ_CHECK(p.cls == q.cls && p.nvlinks == q.nvlinks); /* symmetric */
      FUZZ_CHECK(p.cls <= DPT_PATH_UNKNOWN && p.pcie != DPT_PATH_NV);
    }
    int near[64];
    int k = dpt_node_nearest_hcas(node, a, near, 64);
    FUZZ_CHECK(k >= 0 && k <= node->n_hcas);
    for (int i = 0; i < k && i < 64; i++)
      FUZZ_CHECK(near[i] >= 0 && near[i] < node->n_hcas);
  }
  for (int h = 0; h < node->n_hcas; h++)
    FUZZ_CHECK(node->hcas[h].index == h && node->hcas[h].cpuset != NULL);
  json_t *j = dpt_node_to_json(node);
  FUZZ_CHECK(j != NULL);
  char *s = json_dumps(j, JSON_COMPACT);
  FUZZ_CHECK(s != NULL);
  free(s);
  json_decref(j);
  char warn[16][256];
  int nw = dpt_node_warnings(node, warn, 16);
  FUZZ_CHECK(nw >= 0);
  dpt_node_print(devnull, node);
  dpt_node_print_flags(devnull, node, DPT_NODE_PRINT_PCIE);
  dpt_node_destroy(node);
  return 0;
}
