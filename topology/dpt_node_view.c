/* dpt_node_view.c — what is read from a built node: the path queries
 * (GPU/GPU, GPU/HCA, nearest HCAs), the warnings, the dpt.node/1 JSON
 * (docs/schema-node.md) and the human view of `dpt-topo show`. */
#define _GNU_SOURCE
#include "dpt_node.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* queries                                                                   */

struct dpt_path dpt_node_gpu_path(const struct dpt_node *node, int a, int b)
{
  struct dpt_path unknown = {DPT_PATH_UNKNOWN, 0, DPT_PATH_UNKNOWN};
  if (!node || a < 0 || b < 0 || a >= node->n_gpus || b >= node->n_gpus)
    return unknown;
  return node->gpu_gpu[a * node->n_gpus + b];
}

struct dpt_path dpt_node_hca_path(const struct dpt_node *node, int g, int h)
{
  struct dpt_path unknown = {DPT_PATH_UNKNOWN, 0, DPT_PATH_UNKNOWN};
  if (!node || g < 0 || h < 0 || g >= node->n_gpus || h >= node->n_hcas)
    return unknown;
  return node->gpu_hca[g * node->n_hcas + h];
}

static const char *class_word(enum dpt_path_class c)
{
  switch (c) {
  case DPT_PATH_X: return "X";
  case DPT_PATH_NV: return "NV";
  case DPT_PATH_PIX: return "PIX";
  case DPT_PATH_PXB: return "PXB";
  case DPT_PATH_PHB: return "PHB";
  case DPT_PATH_NODE: return "NODE";
  case DPT_PATH_SYS: return "SYS";
  default: return "?";
  }
}

const char *dpt_path_str(struct dpt_path p, char *buf, size_t len)
{
  if (!buf || !len)
    return "";
  if (p.cls == DPT_PATH_NV)
    snprintf(buf, len, "NV%d", p.nvlinks);
  else
    snprintf(buf, len, "%s", class_word(p.cls));
  return buf;
}

int dpt_node_nearest_hcas(const struct dpt_node *node, int g, int *out, int cap)
{
  enum dpt_path_class best = DPT_PATH_UNKNOWN;
  int n = 0;
  if (!node || g < 0 || g >= node->n_gpus || node->n_hcas == 0)
    return 0;
  for (int h = 0; h < node->n_hcas; h++) {
    enum dpt_path_class c = node->gpu_hca[g * node->n_hcas + h].pcie;
    if (c < best)
      best = c;
  }
  if (best == DPT_PATH_UNKNOWN)
    return 0;
  for (int h = 0; h < node->n_hcas; h++)
    if (node->gpu_hca[g * node->n_hcas + h].pcie == best) {
      if (n < cap && out)
        out[n] = h;
      n++;
    }
  return n < cap ? n : cap;
}

/* ------------------------------------------------------------------------ */
/* warnings, JSON and the human view                                         */

void dpt_node_ignored_warning(const struct dpt_node *node, int i, char *buf, size_t len)
{
  const struct dpt_node_ignored *I = &node->ignored[i];
  char name[sizeof I->name + 3] = "";
  if (I->name[0])
    snprintf(name, sizeof name, "(%s) ", I->name);
  snprintf(buf, len, "ignored display controller %04x:%04x %sat %s: %s", I->vendor_id, I->device_id, name,
           I->busid,
           I->why == DPT_IGNORED_VENDOR
               ? "not an NVIDIA device, CUDA cannot drive it"
               : "NVIDIA, but the dump has CUDA/NVML devices for other GPUs and none for it "
                 "(hidden from CUDA when the dump was taken?)");
}

int dpt_node_warnings(const struct dpt_node *node, char (*out)[256], int cap)
{
  int n = 0;
#define WARN(...)                                   \
  do {                                              \
    if (n < cap)                                    \
      snprintf(out[n], sizeof out[n], __VA_ARGS__); \
    n++;                                            \
  } while (0)
  if (!node)
    return 0;
  if (node->n_gpus == 0)
    WARN("no GPU found (no CUDA/NVML device nor NVIDIA display/3D controller): dpt will run on CPUs");
  for (int i = 0; i < node->n_ignored; i++) {
    if (n < cap)
      dpt_node_ignored_warning(node, i, out[n], sizeof out[n]);
    n++;
  }
  if (node->n_gpus > 0 && node->n_hcas == 0 && node->topo)
    WARN("no InfiniBand/RoCE/EFA HCA found: inter-node all-reduce would fall back to TCP");
  for (int g = 0; g < node->n_gpus && node->n_hcas > 0; g++) {
    int near[1];
    if (dpt_node_nearest_hcas(node, g, near, 1) == 1 &&
        node->gpu_hca[g * node->n_hcas + near[0]].pcie >= DPT_PATH_SYS)
      WARN("GPU%d has no HCA closer than SYS", g);
  }
  for (int g = 0; g < node->n_gpus && node->topo; g++)
    if (node->gpus[g].numa < 0)
      WARN("GPU%d has no known NUMA locality (the topology attaches it to the whole machine)", g);
  for (int h = 0; h < node->n_hcas; h++)
    if (node->hcas[h].port_state[0] && strcmp(node->hcas[h].port_state, "ACTIVE"))
      WARN("HCA %s port 1 is %s, not ACTIVE", node->hcas[h].name, node->hcas[h].port_state);
#undef WARN
  return n < cap ? n : cap;
}

#define MAX_WARN 256

static char *list_str(hwloc_const_bitmap_t set)
{
  char *s = NULL;
  if (!set || hwloc_bitmap_iszero(set))
    return strdup("");
  if (hwloc_bitmap_list_asprintf(&s, set) < 0)
    return NULL;
  return s;
}

static int json_set_str(json_t *o, const char *k, const char *v)
{
  return json_object_set_new(o, k, json_string(v ? v : ""));
}

static json_t *json_cpuset(hwloc_const_bitmap_t set)
{
  char *s = list_str(set);
  json_t *j = s ? json_string(s) : NULL;
  free(s);
  return j;
}

static json_t *path_matrix(const struct dpt_path *m, int rows, int cols, int what)
{
  json_t *a = json_array();
  char buf[16];
  for (int r = 0; a && r < rows; r++) {
    json_t *row = json_array();
    for (int c = 0; row && c < cols; c++) {
      struct dpt_path p = m[r * cols + c];
      json_t *v;
      if (what == 0)
        v = json_string(dpt_path_str(p, buf, sizeof buf));
      else if (what == 1)
        v = json_string(class_word(p.pcie));
      else
        v = json_integer(p.nvlinks);
      json_array_append_new(row, v);
    }
    json_array_append_new(a, row);
  }
  return a;
}

json_t *dpt_node_to_json(const struct dpt_node *node)
{
  json_t *doc = json_object(), *m, *arr;
  char (*warns)[256] = NULL;
  if (!doc || !node)
    goto fail;
  json_set_str(doc, "schema", "dpt.node/1");
  json_set_str(doc, "hostname", node->hostname);
  json_set_str(doc, "source", node->source);
  m = json_object();
  json_object_set_new(doc, "machine", m);
  json_object_set_new(m, "packages", json_integer(node->n_packages));
  json_object_set_new(m, "numa_nodes", json_integer(node->n_numa));
  json_object_set_new(m, "cores", json_integer(node->n_cores));
  json_object_set_new(m, "pus", json_integer(node->n_pus));
  json_object_set_new(m, "cpuset", json_cpuset(node->cpuset));

  arr = json_array();
  json_object_set_new(doc, "numa", arr);
  for (int i = 0; i < node->n_numa; i++) {
    const struct dpt_node_numa *n = &node->numa[i];
    json_t *o = json_object();
    json_object_set_new(o, "os_index", json_integer(n->os_index));
    json_object_set_new(o, "package", json_integer(n->package));
    json_object_set_new(o, "memory_bytes", json_integer((json_int_t)n->memory));
    json_object_set_new(o, "cpuset", json_cpuset(n->cpuset));
    json_array_append_new(arr, o);
  }

  arr = json_array();
  json_object_set_new(doc, "gpus", arr);
  for (int g = 0; g < node->n_gpus; g++) {
    const struct dpt_node_gpu *G = &node->gpus[g];
    json_t *o = json_object(), *near = json_array();
    int idx[64], nn = dpt_node_nearest_hcas(node, g, idx, 64);
    json_object_set_new(o, "index", json_integer(G->index));
    json_set_str(o, "osdev", G->osdev);
    json_set_str(o, "busid", G->busid);
    json_set_str(o, "model", G->model);
    json_set_str(o, "uuid", G->uuid);
    json_object_set_new(o, "numa", json_integer(G->numa));
    json_object_set_new(o, "package", json_integer(G->package));
    json_object_set_new(o, "cpuset", json_cpuset(G->cpuset));
    json_object_set_new(o, "local_cores", json_integer(G->local_cores));
    json_object_set_new(o, "local_pus", json_integer(G->cpuset ? hwloc_bitmap_weight(G->cpuset) : 0));
    for (int i = 0; i < nn; i++)
      json_array_append_new(near, json_integer(idx[i]));
    json_object_set_new(o, "nearest_hcas", near);
    json_array_append_new(arr, o);
  }

  arr = json_array();
  json_object_set_new(doc, "hcas", arr);
  for (int h = 0; h < node->n_hcas; h++) {
    const struct dpt_node_hca *H = &node->hcas[h];
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(H->index));
    json_set_str(o, "name", H->name);
    json_set_str(o, "kind", H->kind);
    json_set_str(o, "busid", H->busid);
    json_set_str(o, "netdev", H->netdev);
    json_set_str(o, "port_state", H->port_state);
    json_set_str(o, "port_guid", H->port_guid);
    json_set_str(o, "node_guid", H->node_guid);
    json_object_set_new(o, "port_lid", json_integer(H->port_lid));
    json_object_set_new(o, "numa", json_integer(H->numa));
    json_object_set_new(o, "cpuset", json_cpuset(H->cpuset));
    json_array_append_new(arr, o);
  }

  m = json_object();
  json_object_set_new(doc, "paths", m);
  json_object_set_new(m, "nvlink_bw_per_link", json_integer(node->nvlink_bw_per_link));
  json_object_set_new(m, "gpu_gpu", path_matrix(node->gpu_gpu, node->n_gpus, node->n_gpus, 0));
  json_object_set_new(m, "gpu_gpu_pcie", path_matrix(node->gpu_gpu, node->n_gpus, node->n_gpus, 1));
  json_object_set_new(m, "gpu_gpu_nvlinks", path_matrix(node->gpu_gpu, node->n_gpus, node->n_gpus, 2));
  json_object_set_new(m, "gpu_hca", path_matrix(node->gpu_hca, node->n_gpus, node->n_hcas, 0));
  json_object_set_new(m, "hca_hca", path_matrix(node->hca_hca, node->n_hcas, node->n_hcas, 0));

  warns = calloc(MAX_WARN, sizeof *warns);
  if (!warns)
    goto fail;
  arr = json_array();
  json_object_set_new(doc, "warnings", arr);
  int nw = dpt_node_warnings(node, warns, MAX_WARN);
  for (int i = 0; i < nw; i++)
    json_array_append_new(arr, json_string(warns[i]));
  free(warns);
  return doc;
fail:
  free(warns);
  json_decref(doc);
  return NULL;
}

static void print_affinity(FILE *f, hwloc_const_bitmap_t cpuset, int numa, int width)
{
  char *s = list_str(cpuset);
  char nbuf[16];
  snprintf(nbuf, sizeof nbuf, "%d", numa);
  fprintf(f, "  %-*s %s\n", width, s && *s ? s : "N/A", numa >= 0 ? nbuf : "N/A");
  free(s);
}

static int cpuset_width(hwloc_const_bitmap_t set)
{
  char *s = list_str(set);
  int n = s ? (int)strlen(s) : 0;
  free(s);
  return n;
}

static void fmt_mem(uint64_t b, char *buf, size_t len)
{
  if (b >= (1ULL << 30))
    snprintf(buf, len, "%.1f GiB", (double)b / (double)(1ULL << 30));
  else
    snprintf(buf, len, "%.1f MiB", (double)b / (double)(1ULL << 20));
}

void dpt_node_print_flags(FILE *f, const struct dpt_node *node, unsigned flags)
{
  int ng = node->n_gpus, nh = node->n_hcas, any_nv = 0;
  int pcie_only = !!(flags & DPT_NODE_PRINT_PCIE);
  char buf[16], mem[32];
  char (*warns)[256] = calloc(MAX_WARN, sizeof *warns);

  for (int i = 0; i < ng * ng; i++)
    any_nv |= node->gpu_gpu[i].cls == DPT_PATH_NV;
  fprintf(f, "Node %s (%s)\n", node->hostname[0] ? node->hostname : "(unknown host)", node->source);
  fprintf(f, "%d GPU%s, %d HCA%s, %d socket%s, %d NUMA node%s, %d cores, %d PUs\n\n", ng, ng == 1 ? "" : "s",
          nh, nh == 1 ? "" : "s", node->n_packages, node->n_packages == 1 ? "" : "s", node->n_numa,
          node->n_numa == 1 ? "" : "s", node->n_cores, node->n_pus);

  int aw = 12; /* "CPU Affinity" */
  for (int g = 0; g < ng; g++)
    aw = cpuset_width(node->gpus[g].cpuset) > aw ? cpuset_width(node->gpus[g].cpuset) : aw;
  for (int h = 0; h < nh; h++)
    aw = cpuset_width(node->hcas[h].cpuset) > aw ? cpuset_width(node->hcas[h].cpuset) : aw;
  if (ng + nh == 0)
    fprintf(f, "No GPU and no HCA on this node: there is no GPU/HCA matrix to show.\n");
  if (ng + nh > 0) {
    if (pcie_only)
      fprintf(f, "PCIe paths (NVLinks not shown, like nvidia-smi topo -mp):\n");
    fprintf(f, "%-8s", "");
    for (int g = 0; g < ng; g++) {
      snprintf(buf, sizeof buf, "GPU%d", g);
      fprintf(f, " %-6s", buf);
    }
    for (int h = 0; h < nh; h++) {
      snprintf(buf, sizeof buf, "NIC%d", h);
      fprintf(f, " %-6s", buf);
    }
    fprintf(f, "  %-*s %s\n", aw, "CPU Affinity", "NUMA Affinity");
    for (int a = 0; a < ng; a++) {
      snprintf(buf, sizeof buf, "GPU%d", a);
      fprintf(f, "%-8s", buf);
      for (int b = 0; b < ng; b++) {
        struct dpt_path p = node->gpu_gpu[a * ng + b];
        if (pcie_only)
          p.cls = p.pcie;
        fprintf(f, " %-6s", dpt_path_str(p, buf, sizeof buf));
      }
      for (int h = 0; h < nh; h++)
        fprintf(f, " %-6s", dpt_path_str(node->gpu_hca[a * nh + h], buf, sizeof buf));
      print_affinity(f, node->gpus[a].cpuset, node->gpus[a].numa, aw);
    }
    for (int x = 0; x < nh; x++) {
      snprintf(buf, sizeof buf, "NIC%d", x);
      fprintf(f, "%-8s", buf);
      for (int g = 0; g < ng; g++)
        fprintf(f, " %-6s", dpt_path_str(node->gpu_hca[g * nh + x], buf, sizeof buf));
      for (int y = 0; y < nh; y++)
        fprintf(f, " %-6s", dpt_path_str(node->hca_hca[x * nh + y], buf, sizeof buf));
      print_affinity(f, node->hcas[x].cpuset, node->hcas[x].numa, aw);
    }
    fprintf(f, "\nLegend:\n\n"
               "  X    = Self\n"
               "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (QPI/UPI/X-Bus)\n"
               "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
               "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
               "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
               "  PIX  = Connection traversing at most a single PCIe bridge (one PCIe switch)\n");
    if (!pcie_only)
      fprintf(f, "  NV#  = Connection traversing a bonded set of # NVLinks (directly or through NVSwitches)\n");
    if (any_nv && !pcie_only)
      fprintf(f, "  (GPU pairs with NVLink show NV#; `dpt-topo --pcie` shows their PCIe paths)\n");
  }

  if (ng > 0) {
    fprintf(f, "\nGPUs:\n");
    for (int g = 0; g < ng; g++) {
      const struct dpt_node_gpu *G = &node->gpus[g];
      int near[64], nn = dpt_node_nearest_hcas(node, g, near, 64);
      char nb[16] = "N/A";
      if (G->numa >= 0)
        snprintf(nb, sizeof nb, "%d", G->numa);
      fprintf(f, "  GPU%-3d %-12s %-24s %-7s NUMA %-3s %3d local cores", g, G->busid, G->model,
              G->osdev[0] ? G->osdev : "-", nb, G->local_cores);
      if (nn > 0) {
        fprintf(f, "  nearest HCA:");
        for (int i = 0; i < nn; i++)
          fprintf(f, " %s", node->hcas[near[i]].name);
        fprintf(f, " (%s)", class_word(node->gpu_hca[g * nh + near[0]].pcie));
      }
      fprintf(f, "\n");
    }
  }
  if (nh > 0) {
    fprintf(f, "\nNIC Legend:\n\n");
    for (int h = 0; h < nh; h++) {
      const struct dpt_node_hca *H = &node->hcas[h];
      fprintf(f, "  NIC%-3d %-11s %-10s %-12s netdev %-6s port %s", h, H->name, H->kind,
              H->busid[0] ? H->busid : "-", H->netdev[0] ? H->netdev : "-",
              H->port_state[0] ? H->port_state : "?");
      if (H->port_guid[0])
        fprintf(f, "  guid %s", H->port_guid);
      fprintf(f, "\n");
    }
  }
  fprintf(f, "\nNUMA nodes:\n");
  for (int i = 0; i < node->n_numa; i++) {
    const struct dpt_node_numa *n = &node->numa[i];
    char *cs = list_str(n->cpuset);
    fmt_mem(n->memory, mem, sizeof mem);
    fprintf(f, "  node %-3d package %-2d %10s  CPUs %s", n->os_index, n->package, mem, cs && *cs ? cs : "none");
    free(cs);
    int first = 1;
    for (int g = 0; g < ng; g++)
      if (node->gpus[g].numa == n->os_index) {
        fprintf(f, "%s GPU%d", first ? "  GPUs:" : "", g);
        first = 0;
      }
    first = 1;
    for (int h = 0; h < nh; h++)
      if (node->hcas[h].numa == n->os_index) {
        fprintf(f, "%s %s", first ? "  HCAs:" : "", node->hcas[h].name);
        first = 0;
      }
    fprintf(f, "\n");
  }

  int nw = warns ? dpt_node_warnings(node, warns, MAX_WARN) : 0;
  fprintf(f, "\nSummary: %d GPU%s, %d HCA%s, %d socket%s", ng, ng == 1 ? "" : "s", nh, nh == 1 ? "" : "s",
          node->n_packages, node->n_packages == 1 ? "" : "s");
  if (nw == 0)
    fprintf(f, "; no warnings\n");
  else {
    fprintf(f, "\nWarnings:\n");
    for (int i = 0; i < nw; i++)
      fprintf(f, "  %s\n", warns[i]);
  }
  free(warns);
}

void dpt_node_print(FILE *f, const struct dpt_node *node)
{
  dpt_node_print_flags(f, node, 0);
}
