/* fuzz_topology_conf.c — Slurm topology.conf through dpt_tree_parse_topology_conf() (topology/dpt_tree_conf.c). */
#include "fuzz_tree_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  return fuzz_tree_run(dpt_tree_parse_topology_conf, data, size);
}
