/* fuzz_ibnetdiscover.c — ibnetdiscover -p dumps through dpt_tree_parse_ibnetdiscover() (topology/dpt_tree_ibnet.c). */
#include "fuzz_tree_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  return fuzz_tree_run(dpt_tree_parse_ibnetdiscover, data, size);
}
