/* dpt_tree.h — the cluster's switch tree, from Slurm or the fabric.
 *
 * Sources: Slurm topology.conf (topology/tree), the SLURM_TOPOLOGY_ADDR /
 * SLURM_TOPOLOGY_ADDR_PATTERN strings every Slurm task sees, an
 * `ibnetdiscover -p` dump, or none (every host under one switch).  Host and
 * switch names in Slurm syntax are expanded with libslurm's hostlist API. */
#ifndef DPT_TREE_H
#define DPT_TREE_H

#include <jansson.h>

#include "dpt_err.h"

struct dpt_tree_switch {
  char name[64];      /* "leaf3", "spine", or the ibnetdiscover switch description/GUID */
  int parent;         /* index of the parent switch, -1 for the root */
  int depth;          /* 0 for the root */
  double link_gbps;   /* bandwidth of the link to the parent (Gbit/s); 0 = unknown (use defaults) */
};

struct dpt_tree_host {
  char name[64];      /* host name as Slurm knows it */
  int sw;             /* index of the leaf switch it hangs off */
  double link_gbps;   /* host-to-leaf link bandwidth (Gbit/s); 0 = unknown */
};

struct dpt_tree {
  char source[64];    /* "topology.conf", "addr", "ibnetdiscover", "flat" */
  int n_switches;
  struct dpt_tree_switch *sw;   /* [n_switches]; exactly one root (a virtual one is added
                                   when the input has several top-level switches) */
  int n_hosts;
  struct dpt_tree_host *hosts;  /* [n_hosts], in input order */
};

/* Slurm topology.conf.  Errors (DPT_E_INPUT, naming the file and line): syntax,
 * hostlist errors, a host under two switches, a switch with two parents, cycles
 * in Switches=, unknown switch names, unknown keys. */
int dpt_tree_load_topology_conf(struct dpt_tree **out, const char *path, struct dpt_err *err);

/* SLURM_TOPOLOGY_ADDR strings (one per host, e.g. "core.leaf1.n2") with their
 * patterns (e.g. "switch.switch.node"; NULL entries mean all components but the
 * last are switches). */
int dpt_tree_from_addrs(struct dpt_tree **out, const char *const *addrs,
                        const char *const *patterns, int n, struct dpt_err *err);

/* A file with one "ADDR [PATTERN]" per line ('#' comments), as collected with
 * `srun -N... sh -c 'echo $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN'`. */
int dpt_tree_load_addr_list(struct dpt_tree **out, const char *path, struct dpt_err *err);

/* `ibnetdiscover -p` dump: leaf switches are those with host HCAs; host names
 * are taken from the CA description ("'<host> HCA-1'"). */
int dpt_tree_load_ibnetdiscover(struct dpt_tree **out, const char *path, struct dpt_err *err);

/* No topology: every host under one switch. */
int dpt_tree_flat(struct dpt_tree **out, const char *const *hosts, int n, struct dpt_err *err);

void dpt_tree_destroy(struct dpt_tree *tree);

/* Index of a host by name, -1 if absent. */
int dpt_tree_find_host(const struct dpt_tree *tree, const char *name);

/* Expand a Slurm hostlist ("n[1-4,7],m2") with libslurm; *out is a malloc'd
 * array of malloc'd strings (free with dpt_tree_hostlist_free). */
int dpt_tree_hostlist_expand(const char *hostlist, char ***out, int *n, struct dpt_err *err);
void dpt_tree_hostlist_free(char **hosts, int n);

/* JSON "dpt.tree/1": switches (name, parent, depth, link_gbps) and hosts. */
json_t *dpt_tree_to_json(const struct dpt_tree *tree);

#endif /* DPT_TREE_H */
