/* dpt_tree.h — the cluster's switch tree, from Slurm or the fabric.
 *
 * Sources: Slurm topology.conf (topology/tree), the SLURM_TOPOLOGY_ADDR /
 * SLURM_TOPOLOGY_ADDR_PATTERN strings every Slurm task sees, an
 * `ibnetdiscover -p` dump, or none (every host under one switch).  Host and
 * switch names in Slurm syntax are expanded with libslurm's hostlist API.
 *
 * Invariants of every tree the loaders (and dpt_tree_finish()) return:
 *  - exactly one root, sw[0]; switches are in depth-first preorder, so a
 *    parent's index is always smaller than its children's and every subtree
 *    is a contiguous run of sw[]; siblings are in natural order of their names
 *    ("leaf2" before "leaf10", strverscmp), whatever the source and the input
 *    order, so the same cluster described by topology.conf or by
 *    SLURM_TOPOLOGY_ADDR strings gives the same tree (host order, however,
 *    follows the input: sort hosts yourself if you need a canonical order);
 *  - every switch has at least one host below it; hosts hang only off switches
 *    without child switches ("leaves"); host and switch names are unique.
 *
 * Bandwidths (link_gbps, Gbit/s; 0 = unknown, the cost model uses its defaults):
 *  - topology.conf: Slurm says LinkSpeed is "the speed of this switch's links"
 *    in arbitrary units; dpt reads it as Gbit/s.  A switch's LinkSpeed applies to
 *    all its links (to its children and to its parent), so the link between a
 *    switch and its parent runs at the lower of the two LinkSpeeds given (or the
 *    one given), and a host's link is its leaf's LinkSpeed.  The raw value is
 *    kept in link_speed.  Slurm cannot say how many parallel cables a link has:
 *    uplinks = 1.
 *  - ibnetdiscover: per-lane data rate (after 8b/10b or 64b/66b encoding: SDR 2,
 *    DDR 4, QDR 8, FDR10 10, FDR 13.64, EDR 25, HDR 50, NDR 100, XDR 200) times
 *    the width (1x/2x/4x/8x/12x); a switch's link_gbps is the SUM over all its
 *    cables to its parent (uplinks counts them), a host's the sum over its
 *    HCA ports on its leaf.
 *  - SLURM_TOPOLOGY_ADDR and flat trees carry no speeds: 0.
 *
 * Virtual switches (is_virtual = 1) are added by dpt: "virtual-root" over
 * several top-level switches (every source), "virtual-core" standing for a
 * fat-tree spine level that ibnetdiscover shows (a leaf with cables to several
 * spine switches: the spines are collapsed into one core switch, see
 * dpt_tree_load_ibnetdiscover), "flat" for dpt_tree_flat().  Names get a
 * "-2", "-3"... suffix if the input already uses them. */
#ifndef DPT_TREE_H
#define DPT_TREE_H

#include <stddef.h>

#include <jansson.h>

#include "dpt_err.h"

#define DPT_TREE_NAME_MAX 64          /* name buffers, including the NUL */
#define DPT_TREE_MAX_HOSTS (1 << 20)  /* per hostlist and per tree */

struct dpt_tree_switch {
  char name[64];      /* "leaf3", "spine", or the ibnetdiscover switch description
                         ("sw-0x<guid>" when the description is empty, too long or shared) */
  int parent;         /* index of the parent switch, -1 for the root (sw[0]) */
  int depth;          /* 0 for the root */
  double link_gbps;   /* bandwidth of the link(s) to the parent (Gbit/s, see above); 0 = unknown */
  double link_speed;  /* topology.conf LinkSpeed as written (0 = absent / other source) */
  int uplinks;        /* physical cables to the parent: ibnetdiscover counts them; 1 otherwise, 0 for the root */
  int is_virtual;     /* 1 = added by dpt, not in the input (see above) */
  int line;           /* input line (topology.conf, addr list, ibnetdiscover) that defined it; 0 = none */
};

struct dpt_tree_host {
  char name[64];      /* host name as Slurm knows it */
  int sw;             /* index of the leaf switch it hangs off */
  double link_gbps;   /* host-to-leaf link bandwidth (Gbit/s); 0 = unknown */
  int line;           /* input line that placed it (0 = none) */
};

struct dpt_tree_index; /* private: name hash tables and capacities */

struct dpt_tree {
  char source[64];    /* "topology.conf", "addr", "ibnetdiscover", "flat" (or the creator's tag) */
  int n_switches;
  struct dpt_tree_switch *sw;   /* [n_switches]; exactly one root (a virtual one is added
                                   when the input has several top-level switches) */
  int n_hosts;
  struct dpt_tree_host *hosts;  /* [n_hosts], in input order (ibnetdiscover: by leaf
                                   switch, then by the leaf's port number) */
  struct dpt_tree_index *index; /* private (NULL in hand-made trees: lookups scan) */
};

/* Slurm topology.conf, Slurm 22.05 syntax: one "SwitchName=NAME" per line
 * followed by Switches=HOSTLIST or Nodes=HOSTLIST (not both, as in Slurm) and
 * an optional LinkSpeed=N; keys are case-insensitive, values may be "quoted",
 * '#' starts a comment ("\#" is a literal '#'), a line ending in '\' continues
 * on the next one.  Errors (DPT_E_INPUT, "FILE:LINE: ..."): syntax, unknown
 * keys, hostlist errors, a host under two switches (or twice under one), a
 * switch defined twice or listed under two parents, Switches= naming an unknown
 * switch, cycles, a switch with both or neither Nodes= and Switches=, no
 * switches at all. */
int dpt_tree_load_topology_conf(struct dpt_tree **out, const char *path, struct dpt_err *err);
/* The same from a buffer (need not be NUL-terminated); name is used in messages. */
int dpt_tree_parse_topology_conf(struct dpt_tree **out, const char *buf, size_t len,
                                 const char *name, struct dpt_err *err);

/* SLURM_TOPOLOGY_ADDR strings (one per host, e.g. "core.leaf1.n2") with their
 * patterns (e.g. "switch.switch.node"; NULL patterns or entries mean all
 * components but the last are switches; with a pattern, extra components are
 * part of the host name, which may then contain dots).  As Slurm writes them,
 * component i is the switch at the same tree level for every host, and an
 * empty component means the host's path skips that level (unbalanced trees);
 * a component that is a range ("s[1-2]") means a host under several switches.
 * The same host may appear several times (one line per task) with the same
 * address.  If no entry names any switch (pattern "node"), the tree is flat.
 * Errors (DPT_E_INPUT, naming the entry): a host with two different addresses,
 * a switch at two levels or with two parents, a switch with hosts and child
 * switches, a host in no switch while others are, bad patterns, names longer
 * than 63 characters. */
int dpt_tree_from_addrs(struct dpt_tree **out, const char *const *addrs,
                        const char *const *patterns, int n, struct dpt_err *err);

/* A file with one "ADDR [PATTERN]" per line ('#' comments, blank lines ignored,
 * an `srun -l` label "N:" in front is skipped), as collected with
 * `srun -N... sh -c 'echo $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN'`. */
int dpt_tree_load_addr_list(struct dpt_tree **out, const char *path, struct dpt_err *err);
int dpt_tree_parse_addr_list(struct dpt_tree **out, const char *buf, size_t len,
                             const char *name, struct dpt_err *err);

/* `ibnetdiscover -p` dump.  "DR path" lines, blank lines and '#' comments are
 * skipped; every other line must be a CA/SW/RT port line.  Each cable is taken
 * once even though the dump shows it from both ends; a port linked to two
 * different peers is an error.
 *  - Hosts: a CA whose description is "<host>" or "<host> <device>" (device
 *    like "HCA-1", "mlx5_0", "qib0", "hfi1_0") where <host> is a host name;
 *    the domain part (after the first '.') is dropped.  Other CAs (e.g.
 *    "Mellanox Technologies Aggregation Node", "MF0;sw..." management
 *    ports) and routers are ignored.  A host whose HCAs reach two different
 *    leaf switches (multi-rail) is an error: describe it with a topology.conf.
 *  - Leaf switches: switches with hosts.  Upper levels: a switch's level is its
 *    hop distance from the nearest leaf.  Going up level by level, while every
 *    switch has cables to at most one switch of the next level, that switch is
 *    its parent.  At the first level where a switch has cables to several
 *    switches of the next level (a fat tree: leaves cabled to every spine),
 *    everything above is collapsed into one "virtual-core" switch; the uplink
 *    bandwidth of each switch below it is the sum of all its upward cables. */
int dpt_tree_load_ibnetdiscover(struct dpt_tree **out, const char *path, struct dpt_err *err);
int dpt_tree_parse_ibnetdiscover(struct dpt_tree **out, const char *buf, size_t len,
                                 const char *name, struct dpt_err *err);

/* No topology: every host under one virtual switch "flat".  hosts are plain
 * names (not hostlists); duplicates are an error. */
int dpt_tree_flat(struct dpt_tree **out, const char *const *hosts, int n, struct dpt_err *err);

/* Building a tree by hand (generated trees in tests, other sources): create,
 * add switches (parent = -1 or an index already returned) and hosts (on a
 * switch index), then dpt_tree_finish().  Names must be unique per kind and
 * 1..63 characters.  add_* return the new index (>= 0) or a negative DPT_E_*.
 * finish() adds a virtual root over several roots, puts the switches in
 * preorder with siblings in natural name order (host sw indices follow),
 * sets depth and uplinks, checks the
 * invariants above and builds the lookup index. */
int dpt_tree_create(struct dpt_tree **out, const char *source, struct dpt_err *err);
int dpt_tree_add_switch(struct dpt_tree *tree, const char *name, int parent, struct dpt_err *err);
int dpt_tree_add_host(struct dpt_tree *tree, const char *name, int sw, struct dpt_err *err);
int dpt_tree_finish(struct dpt_tree *tree, struct dpt_err *err);

void dpt_tree_destroy(struct dpt_tree *tree);

/* Index of a host / switch by name, -1 if absent.  O(1) (hash) on trees from
 * the loaders or dpt_tree_finish(); a linear scan on hand-made structs. */
int dpt_tree_find_host(const struct dpt_tree *tree, const char *name);
int dpt_tree_find_switch(const struct dpt_tree *tree, const char *name);

/* Expand a Slurm hostlist ("n[1-4,7],m2") with libslurm; *out is a malloc'd
 * array of malloc'd strings (free with dpt_tree_hostlist_free).  An empty list
 * gives n = 0.  Errors (DPT_E_INPUT): what libslurm rejects, unbalanced or
 * nested brackets (libslurm silently mangles those), more than
 * DPT_TREE_MAX_HOSTS names. */
int dpt_tree_hostlist_expand(const char *hostlist, char ***out, int *n, struct dpt_err *err);
void dpt_tree_hostlist_free(char **hosts, int n);

/* JSON "dpt.tree/1": {"schema", "source", "switches": [{"name", "parent",
 * "depth", "link_gbps", "link_speed", "uplinks", "virtual"}], "hosts": [{"name",
 * "switch", "link_gbps"}]} (parent/switch are indices into "switches"). */
json_t *dpt_tree_to_json(const struct dpt_tree *tree);

#endif /* DPT_TREE_H */
