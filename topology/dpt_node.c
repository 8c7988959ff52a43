/* dpt_node.c — one node's topology with hwloc: GPUs, HCAs, NUMA, and the
 * nvidia-smi-style path class of every GPU/GPU, GPU/HCA and HCA/HCA pair.
 * This file finds the devices in a loaded hwloc topology and builds the
 * plain-data struct dpt_node from them (dpt_node_build); dpt_node_load.c loads
 * the topology (XML buffer or file, the live machine, a synthetic node), and
 * dpt_node_view.c answers queries and writes the warnings, JSON and text views.
 *
 * GPUs are NVIDIA devices only (dpt drives CUDA): those named by CUDA/NVML OS
 * devices, else NVIDIA display/3D controllers; display controllers of other
 * vendors (a server's BMC VGA) are listed as ignored, with a warning.
 *
 * Works on hwloc 2.x built without the CUDA/NVML plugins and on XML dumps:
 * devices are found by walking OS/PCI objects (never with hwloc_cuda_*), PCI
 * ancestry is walked through parent pointers (PCI objects have special
 * negative depths), and NVLink counts come from the "NVLinkBandwidth"
 * distances matrix that hwloc's NVML backend stores in the dump. */
#define _GNU_SOURCE
#include "dpt_node.h"
#include "dpt_node_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */

static const char *info(hwloc_obj_t obj, const char *name)
{
  const char *v = obj ? hwloc_obj_get_info_by_name(obj, name) : NULL;
  return v ? v : "";
}

static int has_prefix_num(const char *name, const char *prefix)
{
  size_t n = strlen(prefix);
  return name && !strncmp(name, prefix, n) && isdigit((unsigned char)name[n]);
}

static hwloc_obj_t pci_parent(hwloc_obj_t obj)
{
  for (hwloc_obj_t o = obj ? obj->parent : NULL; o; o = o->parent) {
    if (o->type == HWLOC_OBJ_PCI_DEVICE)
      return o;
    if (o->type != HWLOC_OBJ_OS_DEVICE)
      return NULL; /* OS devices hang directly below their PCI device */
  }
  return NULL;
}

static void busid_str(hwloc_obj_t pci, char *buf, size_t cap)
{
  if (!pci) {
    dpt_node_copy_str(buf, cap, "");
    return;
  }
  snprintf(buf, cap, "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain, pci->attr->pcidev.bus,
           pci->attr->pcidev.dev, pci->attr->pcidev.func);
}

static long long busid_key(hwloc_obj_t pci)
{
  if (!pci)
    return -1;
  return ((long long)pci->attr->pcidev.domain << 24) | ((long long)pci->attr->pcidev.bus << 16) |
         ((long long)pci->attr->pcidev.dev << 8) | pci->attr->pcidev.func;
}

static int is_host_bridge(hwloc_obj_t o)
{
  return o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

static int is_pci_bridge(hwloc_obj_t o)
{
  return o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

/* ------------------------------------------------------------------------ */
/* device discovery (internal view, with the hwloc objects)                  */

struct gpu_ref {
  hwloc_obj_t pci;     /* the GPU's PCI device (path endpoint) */
  hwloc_obj_t osdevs[8]; /* cuda/nvml OS devices of this GPU (NVLink matrix lookup) */
  int n_osdevs;
  int rank;            /* preference of the osdev name kept: 0 cuda, 1 nvml, 2 none */
};

struct hca_ref {
  hwloc_obj_t osdev;   /* the OpenFabrics OS device */
  hwloc_obj_t anchor;  /* PCI device, or the OS device's parent when not under PCI */
};

static int gpu_osdev_rank(hwloc_obj_t o)
{
  const char *st = o->subtype;
  if (has_prefix_num(o->name, "cuda") || (st && !strcmp(st, "CUDA")))
    return 0;
  if (has_prefix_num(o->name, "nvml") || (st && !strcmp(st, "NVML")))
    return 1;
  return -1;
}

static const char *const rdma_prefixes[] = {
  "mlx4_", "mlx5_", "mthca", "hfi1_", "qib", "rdmap", "efa_", "bnxt_re", "irdma", "i40iw",
  "cxgb4_", "qedr", "ocrdma", "hns_", "rxe", "siw", "vmw_pvrdma", "erdma", "ionic_", NULL};

static int is_rdma_osdev(hwloc_obj_t o)
{
  if (!o->name)
    return 0;
  for (int i = 0; rdma_prefixes[i]; i++)
    if (!strncmp(o->name, rdma_prefixes[i], strlen(rdma_prefixes[i])))
      return 1;
  /* hwloc's OpenFabrics OS devices always carry a NodeGUID. */
  return o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && hwloc_obj_get_info_by_name(o, "NodeGUID");
}

static void hca_kind(hwloc_obj_t osdev, hwloc_obj_t pci, char *kind, size_t cap)
{
  const char *n = osdev->name ? osdev->name : "";
  unsigned cls = pci ? pci->attr->pcidev.class_id : 0, ven = pci ? pci->attr->pcidev.vendor_id : 0;
  const char *k = "RDMA";
  if (!strncmp(n, "hfi1_", 5))
    k = "OmniPath";
  else if (!strncmp(n, "efa_", 4) || ven == 0x1d0f)
    k = "EFA";
  else if (!strncmp(n, "i40iw", 5) || !strncmp(n, "cxgb4_", 6) || !strncmp(n, "siw", 3))
    k = "iWARP";
  else if (cls == 0x0207 || cls == 0x0c06 /* serial bus: InfiniBand (ConnectX-2/3) */ ||
           !strncmp(n, "qib", 3) || !strncmp(n, "mthca", 5))
    k = "InfiniBand";
  else if (cls == 0x0200 || !strncmp(n, "rxe", 3))
    k = "RoCE";
  dpt_node_copy_str(kind, cap, k);
}

static const char *ib_port_state(const char *v)
{
  /* IB port states as the kernel numbers them (sysfs ports/N/state). */
  static const char *const names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  char *end;
  long s;
  if (!v || !*v)
    return "";
  s = strtol(v, &end, 10);
  if (*end || s < 0 || s > 5)
    return "UNKNOWN";
  return names[s];
}

/* Interface id (low 64 bits) of a GID "fe80:0000:0000:0000:248a:0703:001e:39fe". */
static void gid_to_guid(const char *gid, char *out, size_t cap)
{
  const char *p = gid;
  int colons = 0;
  dpt_node_copy_str(out, cap, "");
  if (!gid || !*gid)
    return;
  for (; *p && colons < 4; p++)
    if (*p == ':')
      colons++;
  if (colons == 4 && strlen(p) == 19)
    dpt_node_copy_str(out, cap, p);
}

/* ------------------------------------------------------------------------ */
/* path classes                                                              */

/* Which PCIe switch a bridge belongs to: a switch is an upstream port plus its
 * downstream ports.  Counting PCI bridges from the host bridge, 1 is the root
 * port (a unit of its own), even levels are switch upstream ports and odd
 * levels >= 3 are downstream ports, which belong to their parent. */
static hwloc_obj_t switch_of(hwloc_obj_t bridge)
{
  int level = 0;
  for (hwloc_obj_t o = bridge; o && is_pci_bridge(o); o = o->parent)
    level++;
  if (level >= 3 && level % 2 == 1)
    return bridge->parent;
  return bridge;
}

/* Locality of an I/O object on the CPU side: NUMA nodes that have CPUs and are
 * in the nodeset of its first non-I/O ancestor. */
static hwloc_bitmap_t io_numa_set(hwloc_topology_t topo, hwloc_obj_t obj)
{
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
  hwloc_obj_t numa = NULL;
  if (!set)
    return NULL;
  if (!anc || !anc->nodeset)
    return set;
  while ((numa = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, numa)))
    if (hwloc_bitmap_isset(anc->nodeset, numa->os_index) && numa->cpuset &&
        !hwloc_bitmap_iszero(numa->cpuset))
      hwloc_bitmap_set(set, numa->os_index);
  if (hwloc_bitmap_iszero(set)) /* only CPU-less nodes: keep what hwloc says */
    hwloc_bitmap_copy(set, anc->nodeset);
  return set;
}

#define MAX_ANC 256

static enum dpt_path_class pcie_path(hwloc_topology_t topo, hwloc_obj_t a, hwloc_obj_t b)
{
  hwloc_obj_t anc[MAX_ANC], c = NULL, sw[2 * MAX_ANC];
  int na = 0, nsw = 0;
  if (!a || !b)
    return DPT_PATH_UNKNOWN;
  if (a == b)
    return DPT_PATH_PIX; /* two functions behind the same PCI endpoint */
  for (hwloc_obj_t o = a; o && na < MAX_ANC; o = o->parent)
    anc[na++] = o;
  for (hwloc_obj_t o = b; o && !c; o = o->parent)
    for (int i = 0; i < na; i++)
      if (anc[i] == o) {
        c = o;
        break;
      }
  if (!c)
    return DPT_PATH_SYS;
  if (c->type == HWLOC_OBJ_PCI_DEVICE)
    return DPT_PATH_PIX;
  if (c->type == HWLOC_OBJ_BRIDGE) {
    if (is_host_bridge(c))
      return DPT_PATH_PHB;
    /* distinct switches on the path a -> c -> b */
    hwloc_obj_t ends[2] = {a, b};
    for (int e = 0; e < 2; e++)
      for (hwloc_obj_t o = ends[e]->parent; o && nsw < 2 * MAX_ANC; o = o->parent) {
        if (is_pci_bridge(o)) {
          hwloc_obj_t s = switch_of(o);
          int seen = 0;
          for (int i = 0; i < nsw; i++)
            seen |= sw[i] == s;
          if (!seen)
            sw[nsw++] = s;
        }
        if (o == c)
          break;
      }
    return nsw <= 1 ? DPT_PATH_PIX : DPT_PATH_PXB;
  }
  /* common ancestor on the CPU side: across host bridges */
  hwloc_bitmap_t sa = io_numa_set(topo, a), sb = io_numa_set(topo, b);
  enum dpt_path_class r = DPT_PATH_SYS;
  if (sa && sb && hwloc_bitmap_isequal(sa, sb) && hwloc_bitmap_weight(sa) == 1)
    r = DPT_PATH_NODE;
  hwloc_bitmap_free(sa);
  hwloc_bitmap_free(sb);
  return r;
}

/* ------------------------------------------------------------------------ */
/* NVLink counts from the NVLinkBandwidth matrix                             */

struct nvmat {
  unsigned n;
  hwloc_obj_t *objs;          /* [n] */
  hwloc_uint64_t *values;     /* [n * n] */
  int *gpu_of;                /* [n] GPU index of each object, -1 if not a GPU */
  int *is_switch;             /* [n] NVSwitch (any non-GPU PCI object) */
};

static hwloc_uint64_t nv_bw(const struct nvmat *m, unsigned i, unsigned j)
{
  hwloc_uint64_t x = m->values[i * m->n + j], y = m->values[j * m->n + i];
  return x > y ? x : y;
}

static int per_link_bw(const struct dpt_node *node, const struct nvmat *m)
{
  int all25 = 1, all20 = 1, any = 0;
  for (int g = 0; g < node->n_gpus; g++)
    if (strstr(node->gpus[g].model, "P100") || strstr(node->gpus[g].model, "GP100"))
      return 20000; /* Pascal: NVLink 1.0, 20 GB/s per link */
  for (unsigned i = 0; i < m->n; i++)
    for (unsigned j = 0; j < m->n; j++) {
      hwloc_uint64_t v = m->values[i * m->n + j];
      if (i == j || !v)
        continue;
      any = 1;
      all25 &= v % 25000 == 0;
      all20 &= v % 20000 == 0;
    }
  if (!any || all25 || !all20)
    return 25000;
  return 20000;
}

static void apply_nvlinks(struct dpt_node *node, const struct gpu_ref *refs)
{
  unsigned nr = 1;
  struct hwloc_distances_s *d = NULL;
  struct nvmat m = {0};
  if (hwloc_distances_get_by_name(node->topo, "NVLinkBandwidth", &nr, &d, 0) < 0 || nr < 1)
    return;
  m.n = d->nbobjs;
  m.objs = d->objs;
  m.values = d->values;
  m.gpu_of = calloc(m.n ? m.n : 1, sizeof(int));
  m.is_switch = calloc(m.n ? m.n : 1, sizeof(int));
  if (!m.gpu_of || !m.is_switch)
    goto out;
  for (unsigned i = 0; i < m.n; i++) {
    hwloc_obj_t o = m.objs[i];
    m.gpu_of[i] = -1;
    if (!o)
      continue;
    for (int g = 0; g < node->n_gpus && m.gpu_of[i] < 0; g++) {
      if (o == refs[g].pci)
        m.gpu_of[i] = g;
      for (int k = 0; k < refs[g].n_osdevs; k++)
        if (o == refs[g].osdevs[k])
          m.gpu_of[i] = g;
    }
    if (m.gpu_of[i] < 0 && o->type == HWLOC_OBJ_PCI_DEVICE)
      m.is_switch[i] = 1;
  }
  int per = per_link_bw(node, &m);
  node->nvlink_bw_per_link = per;
  /* bandwidth of each GPU to each switch, summed per GPU */
  for (int a = 0; a < node->n_gpus; a++)
    for (int b = 0; b < node->n_gpus; b++) {
      if (a == b)
        continue;
      hwloc_uint64_t direct = 0, shared = 0, tot_a = 0, tot_b = 0;
      for (unsigned i = 0; i < m.n; i++) {
        if (m.gpu_of[i] != a)
          continue;
        for (unsigned j = 0; j < m.n; j++) {
          if (m.gpu_of[j] == b)
            direct += nv_bw(&m, i, j);
        }
      }
      for (unsigned s = 0; s < m.n; s++) {
        if (!m.is_switch[s])
          continue;
        hwloc_uint64_t ba = 0, bb = 0;
        for (unsigned i = 0; i < m.n; i++) {
          if (m.gpu_of[i] == a)
            ba += nv_bw(&m, i, s);
          else if (m.gpu_of[i] == b)
            bb += nv_bw(&m, i, s);
        }
        shared += ba < bb ? ba : bb;
        tot_a += ba;
        tot_b += bb;
      }
      /* GPUs on NVSwitches with no switch in common (DGX-2: one baseboard each) reach
       * each other through the switch trunks: nvidia-smi counts the links into the fabric. */
      hwloc_uint64_t via = shared ? shared : (tot_a < tot_b ? tot_a : tot_b);
      hwloc_uint64_t bw = direct + via;
      int links = (int)((bw + (hwloc_uint64_t)per / 2) / (hwloc_uint64_t)per);
      struct dpt_path *p = &node->gpu_gpu[a * node->n_gpus + b];
      if (links > 0) {
        p->nvlinks = links;
        p->cls = DPT_PATH_NV;
      }
    }
out:
  free(m.gpu_of);
  free(m.is_switch);
  hwloc_distances_release(node->topo, d);
}

/* ------------------------------------------------------------------------ */
/* build the plain-data node from a loaded topology                          */

static int cmp_gpu_ref(const void *x, const void *y)
{
  long long a = busid_key(((const struct gpu_ref *)x)->pci), b = busid_key(((const struct gpu_ref *)y)->pci);
  return a < b ? -1 : a > b;
}

static int cmp_hca_ref(const void *x, const void *y)
{
  const struct hca_ref *a = x, *b = y;
  long long ka = busid_key(pci_parent(a->osdev)), kb = busid_key(pci_parent(b->osdev));
  if (ka < 0)
    ka = 1LL << 62;
  if (kb < 0)
    kb = 1LL << 62;
  if (ka != kb)
    return ka < kb ? -1 : 1;
  return strcmp(a->osdev->name ? a->osdev->name : "", b->osdev->name ? b->osdev->name : "");
}

static int numa_of_set(hwloc_bitmap_t set)
{
  return set && hwloc_bitmap_weight(set) == 1 ? hwloc_bitmap_first(set) : -1;
}

static int package_of_cpuset(hwloc_topology_t topo, hwloc_const_bitmap_t cpuset)
{
  hwloc_obj_t pkg = NULL;
  if (!cpuset || hwloc_bitmap_iszero(cpuset))
    return -1;
  while ((pkg = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pkg)))
    if (pkg->cpuset && hwloc_bitmap_isincluded(cpuset, pkg->cpuset))
      return (int)pkg->os_index;
  return -1;
}

static int cores_in(hwloc_topology_t topo, hwloc_const_bitmap_t cpuset)
{
  int n = 0;
  hwloc_obj_t core = NULL;
  while ((core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)))
    if (core->cpuset && !hwloc_bitmap_iszero(core->cpuset) && hwloc_bitmap_isincluded(core->cpuset, cpuset))
      n++;
  return n;
}

/* cpuset and NUMA locality of an I/O object */
static int io_locality(hwloc_topology_t topo, hwloc_obj_t obj, hwloc_bitmap_t *cpuset, int *numa)
{
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, obj);
  hwloc_bitmap_t ns;
  *cpuset = hwloc_bitmap_dup(anc && anc->cpuset ? anc->cpuset : hwloc_topology_get_topology_cpuset(topo));
  ns = io_numa_set(topo, obj);
  if (!*cpuset || !ns) {
    hwloc_bitmap_free(ns);
    return -1;
  }
  *numa = numa_of_set(ns);
  hwloc_bitmap_free(ns);
  return 0;
}

/* Append a GPU found under PCI device pci (grows the array); -1 when out of memory. */
static int gref_push(struct gpu_ref **grefs, int *ng, int *cap, hwloc_obj_t pci)
{
  if (*ng == *cap) {
    int c = *cap ? 2 * *cap : 16;
    void *p = realloc(*grefs, (size_t)c * sizeof **grefs);
    if (!p)
      return -1;
    *grefs = p;
    *cap = c;
  }
  memset(&(*grefs)[*ng], 0, sizeof **grefs);
  (*grefs)[*ng].pci = pci;
  (*grefs)[*ng].rank = 2;
  (*ng)++;
  return 0;
}

#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_BASE_CLASS_DISPLAY 0x03 /* VGA 0x0300, XGA 0x0301, 3D 0x0302, other 0x0380 */

/* Append display controller pci to node->ignored (grows it); -1 when out of memory. */
static int ignored_push(struct dpt_node *node, int *cap, hwloc_obj_t pci, enum dpt_node_ignored_why why)
{
  struct dpt_node_ignored *I;
  const char *ven = info(pci, "PCIVendor"), *dev = info(pci, "PCIDevice");
  if (node->n_ignored == *cap) {
    int c = *cap ? 2 * *cap : 4;
    void *p = realloc(node->ignored, (size_t)c * sizeof *node->ignored);
    if (!p)
      return -1;
    node->ignored = p;
    *cap = c;
  }
  I = &node->ignored[node->n_ignored++];
  memset(I, 0, sizeof *I);
  busid_str(pci, I->busid, sizeof I->busid);
  I->vendor_id = pci->attr->pcidev.vendor_id;
  I->device_id = pci->attr->pcidev.device_id;
  I->class_id = pci->attr->pcidev.class_id;
  if (*ven || *dev)
    snprintf(I->name, sizeof I->name, "%s%s%s", ven, *ven && *dev ? " " : "", dev);
  else
    dpt_node_copy_str(I->name, sizeof I->name, pci->name); /* hwloc 1.x dumps: "name" of the PCI object */
  I->why = why;
  return 0;
}

static int cmp_ignored(const void *x, const void *y)
{
  const char *a = ((const struct dpt_node_ignored *)x)->busid, *b = ((const struct dpt_node_ignored *)y)->busid;
  size_t la = strlen(a), lb = strlen(b); /* a domain above 0xffff (Intel VMD) has more digits */
  return la != lb ? (la < lb ? -1 : 1) : strcmp(a, b);
}

int dpt_node_build(struct dpt_node *node, struct dpt_err *err)
{
  hwloc_topology_t topo = node->topo;
  struct gpu_ref *grefs = NULL;
  struct hca_ref *hrefs = NULL;
  int ng = 0, nh = 0, cap_g = 0, cap_h = 0, cap_i = 0, n_osdev_gpus, rc = DPT_E_NOMEM;
  hwloc_obj_t o;

  /* machine */
  node->n_packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  node->n_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  node->n_pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  node->cpuset = hwloc_bitmap_dup(hwloc_topology_get_topology_cpuset(topo));
  if (!node->cpuset)
    goto fail;
  const char *hn = info(hwloc_get_root_obj(topo), "HostName");
  if (*hn)
    dpt_node_copy_str(node->hostname, sizeof node->hostname, hn);

  /* NUMA nodes, by OS index (hwloc's logical order is not always OS order) */
  node->n_numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  node->numa = calloc(node->n_numa ? node->n_numa : 1, sizeof *node->numa);
  if (!node->numa)
    goto fail;
  o = NULL;
  for (int i = 0; (o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o)); i++) {
    struct dpt_node_numa *n = &node->numa[i];
    n->os_index = (int)o->os_index;
    n->memory = o->attr->numanode.local_memory;
    n->cpuset = hwloc_bitmap_dup(o->cpuset ? o->cpuset : hwloc_topology_get_topology_cpuset(topo));
    if (!n->cpuset)
      goto fail;
    n->package = package_of_cpuset(topo, n->cpuset);
  }
  for (int i = 1; i < node->n_numa; i++) /* insertion sort by OS index */
    for (int j = i; j > 0 && node->numa[j - 1].os_index > node->numa[j].os_index; j--) {
      struct dpt_node_numa t = node->numa[j];
      node->numa[j] = node->numa[j - 1];
      node->numa[j - 1] = t;
    }

  /* GPUs, NVIDIA only (dpt drives CUDA): CUDA/NVML OS devices first, one GPU per PCI device */
  o = NULL;
  while ((o = hwloc_get_next_osdev(topo, o))) {
    int rank = gpu_osdev_rank(o), g;
    hwloc_obj_t pci = pci_parent(o);
    if (rank < 0 || !pci || pci->attr->pcidev.vendor_id != PCI_VENDOR_NVIDIA)
      continue;
    for (g = 0; g < ng && grefs[g].pci != pci; g++)
      ;
    if (g == ng) {
      if (gref_push(&grefs, &ng, &cap_g, pci))
        goto fail;
    }
    if (grefs[g].n_osdevs < 8)
      grefs[g].osdevs[grefs[g].n_osdevs++] = o;
  }
  /* Display/3D controllers without such an OS device: NVIDIA's are the GPUs when the dump
   * has no CUDA/NVML OS device at all (hwloc built without those plugins); the others
   * are listed as ignored. */
  n_osdev_gpus = ng;
  o = NULL;
  while ((o = hwloc_get_next_pcidev(topo, o))) {
    int g, nvidia = o->attr->pcidev.vendor_id == PCI_VENDOR_NVIDIA;
    if (o->attr->pcidev.class_id >> 8 != PCI_BASE_CLASS_DISPLAY)
      continue;
    for (g = 0; g < n_osdev_gpus && grefs[g].pci != o; g++)
      ;
    if (g < n_osdev_gpus)
      continue;
    if (nvidia && n_osdev_gpus == 0 ? gref_push(&grefs, &ng, &cap_g, o)
                                    : ignored_push(node, &cap_i, o, nvidia ? DPT_IGNORED_NO_OSDEV : DPT_IGNORED_VENDOR))
      goto fail;
  }
  if (ng > 1)
    qsort(grefs, ng, sizeof *grefs, cmp_gpu_ref);
  if (node->n_ignored > 1)
    qsort(node->ignored, node->n_ignored, sizeof *node->ignored, cmp_ignored);

  /* HCAs */
  o = NULL;
  while ((o = hwloc_get_next_osdev(topo, o))) {
    if (!is_rdma_osdev(o))
      continue;
    if (nh == cap_h) {
      cap_h = cap_h ? 2 * cap_h : 8;
      void *p = realloc(hrefs, cap_h * sizeof *hrefs);
      if (!p)
        goto fail;
      hrefs = p;
    }
    hrefs[nh].osdev = o;
    hrefs[nh].anchor = pci_parent(o) ? pci_parent(o) : o->parent;
    nh++;
  }
  if (nh > 1)
    qsort(hrefs, nh, sizeof *hrefs, cmp_hca_ref);

  node->n_gpus = ng;
  node->n_hcas = nh;
  node->gpus = calloc(ng ? ng : 1, sizeof *node->gpus);
  node->hcas = calloc(nh ? nh : 1, sizeof *node->hcas);
  node->gpu_gpu = calloc(ng ? (size_t)ng * ng : 1, sizeof *node->gpu_gpu);
  node->gpu_hca = calloc(ng && nh ? (size_t)ng * nh : 1, sizeof *node->gpu_hca);
  node->hca_hca = calloc(nh ? (size_t)nh * nh : 1, sizeof *node->hca_hca);
  if (!node->gpus || !node->hcas || !node->gpu_gpu || !node->gpu_hca || !node->hca_hca)
    goto fail;

  for (int g = 0; g < ng; g++) {
    struct dpt_node_gpu *G = &node->gpus[g];
    struct gpu_ref *R = &grefs[g];
    hwloc_obj_t best = NULL, model_src = NULL;
    G->index = g;
    for (int k = 0; k < R->n_osdevs; k++) {
      int r = gpu_osdev_rank(R->osdevs[k]);
      if (r < R->rank) {
        R->rank = r;
        best = R->osdevs[k];
      }
    }
    dpt_node_copy_str(G->osdev, sizeof G->osdev, best ? best->name : "");
    for (int k = 0; k < R->n_osdevs; k++) {
      if (!model_src && *info(R->osdevs[k], "GPUModel"))
        model_src = R->osdevs[k];
      if (!G->uuid[0] && *info(R->osdevs[k], "NVIDIAUUID"))
        dpt_node_copy_str(G->uuid, sizeof G->uuid, info(R->osdevs[k], "NVIDIAUUID"));
    }
    if (best && *info(best, "GPUModel"))
      model_src = best;
    if (model_src)
      dpt_node_copy_str(G->model, sizeof G->model, info(model_src, "GPUModel"));
    else if (*info(R->pci, "PCIDevice"))
      dpt_node_copy_str(G->model, sizeof G->model, info(R->pci, "PCIDevice"));
    else
      snprintf(G->model, sizeof G->model, "PCI %04x:%04x", R->pci->attr->pcidev.vendor_id,
               R->pci->attr->pcidev.device_id);
    busid_str(R->pci, G->busid, sizeof G->busid);
    if (io_locality(topo, R->pci, &G->cpuset, &G->numa) < 0)
      goto fail;
    G->package = package_of_cpuset(topo, G->cpuset);
    G->local_cores = cores_in(topo, G->cpuset);
  }

  for (int h = 0; h < nh; h++) {
    struct dpt_node_hca *H = &node->hcas[h];
    hwloc_obj_t os = hrefs[h].osdev, pci = pci_parent(os);
    H->index = h;
    dpt_node_copy_str(H->name, sizeof H->name, os->name);
    hca_kind(os, pci, H->kind, sizeof H->kind);
    busid_str(pci, H->busid, sizeof H->busid);
    /* companion interface: the first network OS device of the PCI function, an IPoIB
     * one (ib0) before an Ethernet one on an InfiniBand HCA (ConnectX VPI: eth2 + ib0) */
    if (pci)
      for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && c != os && !is_rdma_osdev(c) &&
            c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK &&
            (!H->netdev[0] || (!strcmp(H->kind, "InfiniBand") && has_prefix_num(c->name, "ib"))))
          dpt_node_copy_str(H->netdev, sizeof H->netdev, c->name);
    dpt_node_copy_str(H->port_state, sizeof H->port_state, ib_port_state(info(os, "Port1State")));
    gid_to_guid(info(os, "Port1GID0"), H->port_guid, sizeof H->port_guid);
    dpt_node_copy_str(H->node_guid, sizeof H->node_guid, info(os, "NodeGUID"));
    H->port_lid = *info(os, "Port1LID") ? (int)strtol(info(os, "Port1LID"), NULL, 0) : -1;
    if (io_locality(topo, hrefs[h].anchor ? hrefs[h].anchor : os, &H->cpuset, &H->numa) < 0)
      goto fail;
  }

  /* paths */
  for (int a = 0; a < ng; a++) {
    for (int b = 0; b < ng; b++) {
      struct dpt_path *p = &node->gpu_gpu[a * ng + b];
      p->pcie = a == b ? DPT_PATH_X : pcie_path(topo, grefs[a].pci, grefs[b].pci);
      p->cls = p->pcie;
      p->nvlinks = 0;
    }
    for (int h = 0; h < nh; h++) {
      struct dpt_path *p = &node->gpu_hca[a * nh + h];
      p->pcie = pcie_path(topo, grefs[a].pci, hrefs[h].anchor);
      p->cls = p->pcie;
    }
  }
  for (int x = 0; x < nh; x++)
    for (int y = 0; y < nh; y++) {
      struct dpt_path *p = &node->hca_hca[x * nh + y];
      p->pcie = x == y ? DPT_PATH_X : pcie_path(topo, hrefs[x].anchor, hrefs[y].anchor);
      p->cls = p->pcie;
    }
  if (ng > 1)
    apply_nvlinks(node, grefs);
  rc = 0;
  goto out;
fail:
  dpt_err_set(err, rc, "out of memory while reading the topology of %s", node->source);
out:
  free(grefs);
  free(hrefs);
  return rc;
}
