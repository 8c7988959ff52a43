/* tree_dump — load a switch tree and print it (for golden tests).
 *   tree_dump conf|addr|ibnet FILE [--json]
 * Text form: one line per switch, indented by depth, with its uplink and its
 * hosts as a Slurm hostlist (compacted by libslurm). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>

#include "dpt_tree.h"

/* Most frequent host link speed under switch sw (0 hosts: -1). */
static double mode_gbps(const struct dpt_tree *t, int sw)
{
  double best = -1;
  int best_n = 0;
  for (int a = 0; a < t->n_hosts; a++) {
    int n = 0;
    if (t->hosts[a].sw != sw)
      continue;
    for (int b = 0; b < t->n_hosts; b++)
      n += t->hosts[b].sw == sw && t->hosts[b].link_gbps == t->hosts[a].link_gbps;
    if (n > best_n) {
      best_n = n;
      best = t->hosts[a].link_gbps;
    }
  }
  return best;
}

static void print_tree(const struct dpt_tree *t)
{
  int nvirt = 0;
  for (int i = 0; i < t->n_switches; i++)
    nvirt += t->sw[i].is_virtual;
  printf("source %s: %d switches (%d virtual), %d hosts\n", t->source, t->n_switches, nvirt, t->n_hosts);
  for (int i = 0; i < t->n_switches; i++) {
    const struct dpt_tree_switch *s = &t->sw[i];
    hostlist_t hl = slurm_hostlist_create("");
    int nh = 0;
    double hg = mode_gbps(t, i);
    for (int h = 0; h < t->n_hosts; h++)
      if (t->hosts[h].sw == i) {
        slurm_hostlist_push_host(hl, t->hosts[h].name);
        nh++;
      }
    printf("%*s%s%s", 2 * s->depth, "", s->name, s->is_virtual ? " [virtual]" : "");
    if (s->parent >= 0)
      printf(" uplink %g Gbit/s x%d", s->link_gbps, s->uplinks);
    if (s->link_speed > 0)
      printf(" LinkSpeed=%g", s->link_speed);
    if (nh > 0) {
      char *r;
      slurm_hostlist_uniq(hl); /* sorts */
      r = slurm_hostlist_ranged_string_malloc(hl);
      printf(" hosts=%d host_gbps=%g %s", nh, hg, r);
      free(r);
      for (int h = 0; h < t->n_hosts; h++)
        if (t->hosts[h].sw == i && t->hosts[h].link_gbps != hg)
          printf(" (%s: %g Gbit/s)", t->hosts[h].name, t->hosts[h].link_gbps);
    }
    printf("\n");
    slurm_hostlist_destroy(hl);
  }
}

int main(int argc, char **argv)
{
  struct dpt_err err = {0};
  struct dpt_tree *t = NULL;
  int rc;

  if (argc < 3) {
    fprintf(stderr, "usage: tree_dump conf|addr|ibnet FILE [--json]\n");
    return 2;
  }
  if (strcmp(argv[1], "conf") == 0)
    rc = dpt_tree_load_topology_conf(&t, argv[2], &err);
  else if (strcmp(argv[1], "addr") == 0)
    rc = dpt_tree_load_addr_list(&t, argv[2], &err);
  else if (strcmp(argv[1], "ibnet") == 0)
    rc = dpt_tree_load_ibnetdiscover(&t, argv[2], &err);
  else {
    fprintf(stderr, "tree_dump: unknown source '%s'\n", argv[1]);
    return 2;
  }
  if (rc < 0) {
    fprintf(stderr, "tree_dump: %s\n", err.msg);
    return dpt_err_exit_status(&err);
  }
  if (argc > 3 && strcmp(argv[3], "--json") == 0) {
    json_t *j = dpt_tree_to_json(t);
    char *s = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    printf("%s\n", s);
    free(s);
    json_decref(j);
  } else {
    print_tree(t);
  }
  dpt_tree_destroy(t);
  return 0;
}
