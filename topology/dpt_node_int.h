/* dpt_node_int.h — private to the node module (dpt_node.c, which builds a node
 * from a loaded hwloc topology, and dpt_node_load.c, which loads it).  Not
 * installed, not for other modules. */
#ifndef DPT_NODE_INT_H
#define DPT_NODE_INT_H

#include <stddef.h>
#include <stdio.h>

#include "dpt_node.h"

/* Fill node (its topo loaded by hwloc, everything else zero) with the machine,
 * NUMA nodes, GPUs, HCAs, ignored display controllers and the path matrices.
 * 0, or DPT_E_NOMEM / DPT_E_INPUT with err set; the caller destroys node. */
int dpt_node_build(struct dpt_node *node, struct dpt_err *err);

/* src (NULL: "") into dst, truncated to cap - 1 bytes. */
static inline void dpt_node_copy_str(char *dst, size_t cap, const char *src)
{
  snprintf(dst, cap, "%s", src ? src : "");
}

#endif
