/* tree_check.h — a tree invariant checker and a structure comparison shared by
 * the switch-tree tests (CHECK comes from tests/dpt_check.h). */
#ifndef TREE_CHECK_H
#define TREE_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_check.h" /* CHECK, failures */
#include "dpt_tree.h"

/* Structural invariants promised by dpt_tree.h; returns a description of the
 * first violation or NULL. */
static inline const char *tree_invariant_violation(const struct dpt_tree *t)
{
  static char why[256];
  int *below, *kids;
  if (t->n_switches < 1 || t->n_hosts < 1)
    return "no switches or no hosts";
  if (t->sw[0].parent != -1 || t->sw[0].depth != 0)
    return "sw[0] is not the root";
  below = calloc((size_t)t->n_switches, sizeof *below);
  kids = calloc((size_t)t->n_switches, sizeof *kids);
  for (int i = 1; i < t->n_switches; i++) {
    int p = t->sw[i].parent;
    if (p < 0 || p >= i) {
      snprintf(why, sizeof why, "switch %d: parent %d not before it", i, p);
      goto bad;
    }
    if (t->sw[i].depth != t->sw[p].depth + 1) {
      snprintf(why, sizeof why, "switch %d: depth %d", i, t->sw[i].depth);
      goto bad;
    }
    if (t->sw[i].uplinks < 1) {
      snprintf(why, sizeof why, "switch %d: uplinks %d", i, t->sw[i].uplinks);
      goto bad;
    }
    kids[p]++;
    if (dpt_tree_find_switch(t, t->sw[i].name) != i) {
      snprintf(why, sizeof why, "find_switch(%s) != %d", t->sw[i].name, i);
      goto bad;
    }
  }
  /* preorder: the subtree of i is i+1 .. (next index whose depth <= depth(i)) - 1 */
  for (int i = 1; i < t->n_switches; i++)
    if (t->sw[i].depth > t->sw[i - 1].depth + 1) {
      snprintf(why, sizeof why, "switch %d breaks preorder", i);
      goto bad;
    }
  for (int h = 0; h < t->n_hosts; h++) {
    int s = t->hosts[h].sw;
    if (s < 0 || s >= t->n_switches || kids[s] != 0) {
      snprintf(why, sizeof why, "host %s on switch %d which is not a leaf", t->hosts[h].name, s);
      goto bad;
    }
    if (dpt_tree_find_host(t, t->hosts[h].name) != h) {
      snprintf(why, sizeof why, "find_host(%s) != %d (duplicate?)", t->hosts[h].name, h);
      goto bad;
    }
    below[s]++;
  }
  for (int i = t->n_switches - 1; i > 0; i--)
    below[t->sw[i].parent] += below[i];
  for (int i = 0; i < t->n_switches; i++)
    if (below[i] == 0) {
      snprintf(why, sizeof why, "switch %s has no hosts below", t->sw[i].name);
      goto bad;
    }
  free(below);
  free(kids);
  return NULL;
bad:
  free(below);
  free(kids);
  return why;
}

/* Same cluster: same host set, same leaf per host, and the same chain of
 * switch names from every leaf to the root. */
static inline const char *tree_structure_diff(const struct dpt_tree *a, const struct dpt_tree *b)
{
  static char why[512];
  if (a->n_hosts != b->n_hosts || a->n_switches != b->n_switches) {
    snprintf(why, sizeof why, "sizes differ: %d/%d hosts, %d/%d switches", a->n_hosts, b->n_hosts,
             a->n_switches, b->n_switches);
    return why;
  }
  for (int i = 0; i < a->n_switches; i++)
    if (strcmp(a->sw[i].name, b->sw[i].name) != 0 || a->sw[i].parent != b->sw[i].parent) {
      snprintf(why, sizeof why, "switch %d: %s (parent %d) vs %s (parent %d)", i, a->sw[i].name,
               a->sw[i].parent, b->sw[i].name, b->sw[i].parent);
      return why;
    }
  for (int h = 0; h < a->n_hosts; h++) {
    int k = dpt_tree_find_host(b, a->hosts[h].name);
    if (k < 0 || b->hosts[k].sw != a->hosts[h].sw) {
      snprintf(why, sizeof why, "host %s: leaf %s vs %s", a->hosts[h].name, a->sw[a->hosts[h].sw].name,
               k < 0 ? "(absent)" : b->sw[b->hosts[k].sw].name);
      return why;
    }
  }
  return NULL;
}

#endif
