/* dpt_plan_view.c — a computed plan as the JSON document (dpt.plan/1,
 * docs/schema-plan.md) and as `dpt-topo plan`'s text. */
#include "dpt_plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Host name of job host index h (nodes[] is in ring order). */
static const char *plan_host(const struct dpt_plan *plan, int h)
{
  for (int i = 0; i < plan->n_nodes; i++)
    if (plan->nodes[i].host_index == h)
      return plan->nodes[i].host;
  return "?";
}

json_t *dpt_plan_to_json(const struct dpt_plan *plan)
{
  json_t *root = json_object(), *nodes = json_array(), *ranks = json_array(), *alts = json_array();
  const struct dpt_plan_opts *o = &plan->opts;

  if (!root || !nodes || !ranks || !alts)
    goto fail;
  json_object_set_new(root, "schema", json_string("dpt.plan/1"));
  json_object_set_new(root, "digest", json_string(plan->digest));
  json_object_set_new(root, "tree_source", json_string(plan->tree_source));
  json_object_set_new(root, "size_bytes", json_integer((json_int_t)plan->size_bytes));
  json_object_set_new(root, "fp16", json_boolean(o->fp16));
  json_object_set_new(root, "n_nodes", json_integer(plan->n_nodes));
  json_object_set_new(root, "n_ranks", json_integer(plan->n_ranks));
  json_object_set_new(root, "n_groups", json_integer(plan->n_groups));
  json_object_set_new(root, "link_gbps",
                      json_pack("{s:f, s:f, s:f, s:f}", "host_min", plan->host_gbps_min, "host_max",
                                plan->host_gbps_max, "uplink_min", plan->uplink_gbps_min,
                                "uplink_max", plan->uplink_gbps_max));
  json_object_set_new(root, "model",
                      json_pack("{s:f, s:f, s:f, s:f, s:I, s:i, s:b, s:i}", "alpha_us", o->alpha_us,
                                "host_gbps", o->host_gbps, "uplink_gbps", o->uplink_gbps,
                                "intra_gbps", o->intra_gbps, "seed", (json_int_t)o->seed,
                                "ranks_per_node", o->ranks_per_node, "oversubscribe",
                                o->allow_oversubscribe, "threads_per_rank", o->threads_per_rank));
  for (int i = 0; i < plan->n_nodes; i++) {
    const struct dpt_plan_node *n = &plan->nodes[i];
    json_array_append_new(nodes, json_pack("{s:s, s:s, s:i, s:i, s:i, s:s}", "host", n->host,
                                           "group", n->group, "first_rank", n->first_rank,
                                           "n_ranks", n->n_ranks, "n_gpus", n->n_gpus, "hcas",
                                           n->hcas));
  }
  for (int i = 0; i < plan->n_ranks; i++) {
    const struct dpt_plan_rank *r = &plan->ranks[i];
    json_array_append_new(ranks, json_pack("{s:i, s:s, s:i, s:i, s:i, s:s, s:s, s:i, s:i}",
                                           "rank", r->rank, "host", plan->nodes[r->node].host,
                                           "node", r->node, "local_rank", r->local_rank, "gpu",
                                           r->gpu, "gpu_busid", r->gpu_busid, "cpuset", r->cpuset,
                                           "numa", r->numa, "threads", r->threads));
  }
  for (int i = 0; i < plan->n_alts; i++) {
    const struct dpt_plan_alt *a = &plan->alts[i];
    json_t *order = json_array(), *links = json_array();
    for (int k = 0; k < plan->n_nodes; k++)
      json_array_append_new(order, json_string(plan_host(plan, a->node_order[k])));
    for (int k = 0; k < a->n_links; k++)
      json_array_append_new(links, json_pack("{s:s, s:s, s:i, s:f}", "from", a->links[k].from,
                                             "to", a->links[k].to, "flows", a->links[k].flows,
                                             "gbps", a->links[k].gbps));
    json_array_append_new(alts, json_pack("{s:s, s:o, s:i, s:i, s:s, s:f, s:f, s:f, s:o}", "name",
                                          a->name, "node_order", order, "inter_group_hops",
                                          a->inter_group_hops, "busiest_flows", a->busiest_flows,
                                          "busiest_link", a->busiest_link, "predicted_s",
                                          a->predicted_s, "bound_s", a->bound_s, "busbw_gbs",
                                          a->busbw_gbs, "links", links));
  }
  json_object_set_new(root, "nodes", nodes);
  json_object_set_new(root, "ranks", ranks);
  json_object_set_new(root, "alternatives", alts);
  return root;
fail:
  json_decref(root);
  json_decref(nodes);
  json_decref(ranks);
  json_decref(alts);
  return NULL;
}

static const struct dpt_plan_alt *find_alt(const struct dpt_plan *plan, const char *name)
{
  for (int i = 0; i < plan->n_alts; i++)
    if (!strcmp(plan->alts[i].name, name))
      return &plan->alts[i];
  return NULL;
}

void dpt_plan_print(FILE *f, const struct dpt_plan *plan)
{
  const struct dpt_plan_opts *o = &plan->opts;
  const struct dpt_plan_alt *pl = find_alt(plan, "planned"), *rnd = find_alt(plan, "random"),
                            *sl = find_alt(plan, "slurm-order");

  fprintf(f, "dpt plan %s (dpt.plan/1)\n", plan->digest);
  fprintf(f, "%d rank%s on %d node%s in %d group%s (tree: %s); all-reduce of %" PRIu64
             " bytes (%s)\n", plan->n_ranks, plan->n_ranks == 1 ? "" : "s", plan->n_nodes,
          plan->n_nodes == 1 ? "" : "s", plan->n_groups, plan->n_groups == 1 ? "" : "s",
          plan->tree_source, plan->size_bytes, o->fp16 ? "fp16" : "fp32");
  {
    char hl[64], ul[64];
    if (plan->host_gbps_min == plan->host_gbps_max)
      snprintf(hl, sizeof hl, "%g", plan->host_gbps_min);
    else
      snprintf(hl, sizeof hl, "%g-%g", plan->host_gbps_min, plan->host_gbps_max);
    if (plan->uplink_gbps_min == plan->uplink_gbps_max)
      snprintf(ul, sizeof ul, "%g", plan->uplink_gbps_min);
    else
      snprintf(ul, sizeof ul, "%g-%g", plan->uplink_gbps_min, plan->uplink_gbps_max);
    fprintf(f, "model: host links %s Gb/s, switch uplinks %s Gb/s, intra-node %g Gb/s, %g us per "
               "step (defaults where the tree gives no speed: host %g, uplink %g)\n\n",
            hl, plan->uplink_gbps_max > 0 ? ul : "-", o->intra_gbps, o->alpha_us, o->host_gbps,
            o->uplink_gbps);
  }

  int hw = 4, gw = 5, lw = 12;
  for (int i = 0; i < plan->n_nodes; i++) {
    int a = (int)strlen(plan->nodes[i].host), b = (int)strlen(plan->nodes[i].group);
    hw = a > hw ? a : hw;
    gw = b > gw ? b : gw;
  }
  for (int i = 0; i < plan->n_alts; i++) {
    int a = (int)strlen(plan->alts[i].busiest_link);
    lw = a > lw ? a : lw;
  }
  fprintf(f, "ring: nodes in ring order, each one contiguous block of ranks\n");
  fprintf(f, "  %5s  %-*s  %-*s  %-11s %4s  %s\n", "node", hw, "host", gw, "group", "ranks", "gpus",
          "NCCL_IB_HCA");
  for (int i = 0; i < plan->n_nodes; i++) {
    const struct dpt_plan_node *n = &plan->nodes[i];
    char rr[32];
    if (n->n_ranks == 1)
      snprintf(rr, sizeof rr, "%d", n->first_rank);
    else
      snprintf(rr, sizeof rr, "%d-%d", n->first_rank, n->first_rank + n->n_ranks - 1);
    fprintf(f, "  %5d  %-*s  %-*s  %-11s %4d  %s\n", i, hw, n->host, gw, n->group, rr, n->n_gpus,
            n->hcas[0] ? n->hcas : "-");
  }

  fprintf(f, "\nranks\n");
  fprintf(f, "  %6s  %-*s  %5s %4s  %-14s %4s %7s  %s\n", "rank", hw, "host", "local", "gpu", "busid",
          "numa", "threads", "cpuset");
  for (int i = 0; i < plan->n_ranks; i++) {
    const struct dpt_plan_rank *r = &plan->ranks[i];
    char gpu[16], numa[16];
    snprintf(gpu, sizeof gpu, r->gpu >= 0 ? "%d" : "-", r->gpu);
    snprintf(numa, sizeof numa, r->numa >= 0 ? "%d" : "-", r->numa);
    fprintf(f, "  %6d  %-*s  %5d %4s  %-14s %4s %7d  %s\n", r->rank, hw, plan->nodes[r->node].host,
            r->local_rank, gpu, r->gpu_busid[0] ? r->gpu_busid : "-", numa, r->threads,
            r->cpuset[0] ? r->cpuset : "-");
  }

  fprintf(f, "\nalternatives: all-reduce of %" PRIu64 " bytes over %d ranks\n", plan->size_bytes,
          plan->n_ranks);
  fprintf(f, "  %-13s %5s  %-*s  %5s  %11s %11s %6s %10s\n", "order", "hops", lw, "busiest link",
          "flows", "predicted", "bound", "ratio", "busbw");
  for (int i = 0; i < plan->n_alts; i++) {
    const struct dpt_plan_alt *a = &plan->alts[i];
    char ratio[16];
    if (a->bound_s > 0)
      snprintf(ratio, sizeof ratio, "%.2f", a->predicted_s / a->bound_s);
    else
      snprintf(ratio, sizeof ratio, "-");
    fprintf(f, "  %-13s %5d  %-*s  %5d  %8.3f ms %8.3f ms %6s %5.2f GB/s\n", a->name,
            a->inter_group_hops, lw, a->busiest_link[0] ? a->busiest_link : "-", a->busiest_flows,
            a->predicted_s * 1e3, a->bound_s * 1e3, ratio, a->busbw_gbs);
  }
  fprintf(f, "  (hops: ring edges between leaf switches, 2d summed over its rings; flows: ring "
             "flows on the busiest link direction)\n\n");
  if (plan->n_groups <= 1) {
    fprintf(f, "all nodes hang off one switch: no inter-group link to cross.\n");
  } else if (pl && rnd && sl) {
    fprintf(f, "random order crosses inter-group links %d times vs %d for the planned ring "
               "(Slurm's order: %d);\nbusiest link: %d flow%s planned, %d random, %d Slurm's order; "
               "predicted all-reduce %.3f ms planned, %.3f ms random, %.3f ms Slurm's order.\n",
            rnd->inter_group_hops, pl->inter_group_hops, sl->inter_group_hops, pl->busiest_flows,
            pl->busiest_flows == 1 ? "" : "s", rnd->busiest_flows, sl->busiest_flows,
            pl->predicted_s * 1e3, rnd->predicted_s * 1e3, sl->predicted_s * 1e3);
  }
}
