/* fuzz_addr_list.c — SLURM_TOPOLOGY_ADDR lists through dpt_tree_parse_addr_list() (topology/dpt_tree_addr.c). */
#include "fuzz_tree_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  return fuzz_tree_run(dpt_tree_parse_addr_list, data, size);
}
