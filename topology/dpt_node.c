/* dpt_node.c — one node's topology with hwloc: GPUs, HCAs, NUMA, and the
 * nvidia-smi-style path class of every GPU/GPU, GPU/HCA and HCA/HCA pair.
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
#include "dpt_file.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */

static const char *info(hwloc_obj_t obj, const char *name)
{
  const char *v = obj ? hwloc_obj_get_info_by_name(obj, name) : NULL;
  return v ? v : "";
}

static void copy_str(char *dst, size_t cap, const char *src)
{
  snprintf(dst, cap, "%s", src ? src : "");
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
    copy_str(buf, cap, "");
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
  copy_str(kind, cap, k);
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
  copy_str(out, cap, "");
  if (!gid || !*gid)
    return;
  for (; *p && colons < 4; p++)
    if (*p == ':')
      colons++;
  if (colons == 4 && strlen(p) == 19)
    copy_str(out, cap, p);
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
    copy_str(I->name, sizeof I->name, pci->name); /* hwloc 1.x dumps: "name" of the PCI object */
  I->why = why;
  return 0;
}

static int cmp_ignored(const void *x, const void *y)
{
  const char *a = ((const struct dpt_node_ignored *)x)->busid, *b = ((const struct dpt_node_ignored *)y)->busid;
  size_t la = strlen(a), lb = strlen(b); /* a domain above 0xffff (Intel VMD) has more digits */
  return la != lb ? (la < lb ? -1 : 1) : strcmp(a, b);
}

static int build(struct dpt_node *node, struct dpt_err *err)
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
    copy_str(node->hostname, sizeof node->hostname, hn);

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
    copy_str(G->osdev, sizeof G->osdev, best ? best->name : "");
    for (int k = 0; k < R->n_osdevs; k++) {
      if (!model_src && *info(R->osdevs[k], "GPUModel"))
        model_src = R->osdevs[k];
      if (!G->uuid[0] && *info(R->osdevs[k], "NVIDIAUUID"))
        copy_str(G->uuid, sizeof G->uuid, info(R->osdevs[k], "NVIDIAUUID"));
    }
    if (best && *info(best, "GPUModel"))
      model_src = best;
    if (model_src)
      copy_str(G->model, sizeof G->model, info(model_src, "GPUModel"));
    else if (*info(R->pci, "PCIDevice"))
      copy_str(G->model, sizeof G->model, info(R->pci, "PCIDevice"));
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
    copy_str(H->name, sizeof H->name, os->name);
    hca_kind(os, pci, H->kind, sizeof H->kind);
    busid_str(pci, H->busid, sizeof H->busid);
    /* companion interface: the first network OS device of the PCI function, an IPoIB
     * one (ib0) before an Ethernet one on an InfiniBand HCA (ConnectX VPI: eth2 + ib0) */
    if (pci)
      for (hwloc_obj_t c = pci->io_first_child; c; c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && c != os && !is_rdma_osdev(c) &&
            c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK &&
            (!H->netdev[0] || (!strcmp(H->kind, "InfiniBand") && has_prefix_num(c->name, "ib"))))
          copy_str(H->netdev, sizeof H->netdev, c->name);
    copy_str(H->port_state, sizeof H->port_state, ib_port_state(info(os, "Port1State")));
    gid_to_guid(info(os, "Port1GID0"), H->port_guid, sizeof H->port_guid);
    copy_str(H->node_guid, sizeof H->node_guid, info(os, "NodeGUID"));
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

/* ------------------------------------------------------------------------ */
/* loading                                                                   */

static struct dpt_node *node_alloc(const char *source)
{
  struct dpt_node *n = calloc(1, sizeof *n);
  if (n)
    copy_str(n->source, sizeof n->source, source);
  return n;
}

/* End of the start tag at p ('<'): the first '>' outside quoted attribute values. */
static const char *tag_end(const char *p, const char *end)
{
  char q = 0;
  for (; p < end; p++) {
    if (q)
      q = *p == q ? 0 : q;
    else if (*p == '"' || *p == '\'')
      q = *p;
    else if (*p == '>')
      return p;
  }
  return NULL;
}

/* Attribute attr of the start tag [tag, end): its value in *val (*vlen bytes) and the
 * position just after its closing quote; NULL when the tag has no such attribute.  The tag
 * is walked attribute by attribute (name, '=', quoted value), so a name inside another
 * attribute's value never matches; the walk stops at the first thing that is not an
 * attribute (a malformed tag: hwloc's parser refuses it). */
static const char *tag_attr(const char *tag, const char *end, const char *attr, const char **val, size_t *vlen)
{
  size_t n = strlen(attr);
  const char *p = tag;
  if (p < end && *p == '<')
    p++;
  while (p < end && !isspace((unsigned char)*p) && *p != '/' && *p != '>') /* the element's name */
    p++;
  for (;;) {
    const char *name, *q, *close;
    while (p < end && isspace((unsigned char)*p))
      p++;
    name = p;
    while (p < end && (isalnum((unsigned char)*p) || (*p && strchr("_:.-", *p))))
      p++;
    if (p == name)
      return NULL; /* '/', '>', the end, or not an attribute */
    q = p;
    while (q < end && isspace((unsigned char)*q))
      q++;
    if (q >= end || *q++ != '=')
      return NULL;
    while (q < end && isspace((unsigned char)*q))
      q++;
    if (q >= end || (*q != '"' && *q != '\'') || !(close = memchr(q + 1, *q, (size_t)(end - q - 1))))
      return NULL;
    if ((size_t)(p - name) == n && !memcmp(name, attr, n)) {
      *val = q + 1;
      *vlen = (size_t)(close - q - 1);
      return close + 1;
    }
    p = close + 1;
  }
}

/* The root element of an XML buffer: past the BOM, the XML declaration, comments and the
 * DOCTYPE.  On success *root points at its '<' and *gt at the '>' ending its start tag;
 * otherwise a message naming what is wrong (used to explain why hwloc refused a file). */
static int xml_root(const char *buf, size_t len, const char *name, const char **root, const char **gt,
                    struct dpt_err *err)
{
  const char *p = buf, *end = buf + len;
  char tag[64] = "";
  size_t k = 0;
  if (len >= 3 && (unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf)
    p += 3;
  for (;;) {
    while (p < end && isspace((unsigned char)*p))
      p++;
    if (p >= end)
      return dpt_err_set(err, DPT_E_INPUT,
                         "%s: %s; expected an hwloc XML topology (make one with `lstopo --of xml FILE`)",
                         name, len ? "the file holds no XML element" : "the file is empty");
    if (*p != '<')
      return dpt_err_set(err, DPT_E_INPUT,
                         "%s: not XML (first byte 0x%02x at offset %zu is not '<'); expected an hwloc XML "
                         "topology (make one with `lstopo --of xml FILE`)",
                         name, (unsigned char)*p, (size_t)(p - buf));
    const char *close = NULL;
    if (end - p >= 4 && !memcmp(p, "<!--", 4)) {
      close = memmem(p + 4, end - p - 4, "-->", 3);
      if (close)
        close += 2; /* at the '>' */
    } else if (end - p >= 2 && (p[1] == '?' || p[1] == '!')) {
      close = memchr(p, '>', end - p);
    } else {
      break;
    }
    if (!close)
      return dpt_err_set(err, DPT_E_INPUT, "%s: truncated XML: unterminated prologue at offset %zu "
                                           "(the file ends after %zu bytes); re-export it with `lstopo --of xml`",
                         name, (size_t)(p - buf), len);
    p = close + 1;
  }
  *root = p++;
  while (p < end && k + 1 < sizeof tag && (isalnum((unsigned char)*p) || (*p && strchr("_:.-", *p))))
    tag[k++] = *p++;
  tag[k] = 0;
  if (strcmp(tag, "topology"))
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: not an hwloc topology: the root element is <%s>, expected <topology> "
                       "(an hwloc XML export, `lstopo --of xml FILE`)",
                       name, tag);
  if (!(*gt = tag_end(p, end)))
    return dpt_err_set(err, DPT_E_INPUT, "%s: truncated XML: the <topology> start tag is not closed "
                                         "(the file ends after %zu bytes); re-export it with `lstopo --of xml`",
                       name, len);
  return 0;
}

/* The format's major version (the root's version="M.m"; 1 when absent, as hwloc 1.x wrote). */
static long xml_major(const char *root, const char *gt)
{
  const char *v;
  size_t n;
  return tag_attr(root, gt, "version", &v, &n) ? strtol(v, NULL, 10) : 1;
}

/* Why hwloc refused buf, when the file says it plainly (hwloc itself only says "invalid
 * argument"): 0 when none of these explains it. */
static int explain_refusal(const char *buf, size_t len, const char *name, struct dpt_err *err)
{
  const char *root, *gt;
  int rc = xml_root(buf, len, name, &root, &gt, err);
  if (rc)
    return rc;
  if (xml_major(root, gt) > 2) {
    const char *v;
    size_t n;
    tag_attr(root, gt, "version", &v, &n);
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: hwloc XML format version \"%.*s\" is not supported: this dpt is built with hwloc "
                       "2.x (API %u.%u), which reads the 1.x and 2.x formats; re-export the topology in the 2.x format "
                       "(hwloc 3: `lstopo --export-xml-flags v2 FILE.xml`, or lstopo from hwloc 2.x)",
                       name, (int)(n < 16 ? n : 16), v, (hwloc_get_api_version() >> 16) & 0xff,
                       (hwloc_get_api_version() >> 8) & 0xff);
  }
  if (!memmem(gt, buf + len - gt, "</topology>", 11))
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: truncated XML: no closing </topology> tag (the file ends after %zu bytes); "
                       "re-export it with `lstopo --of xml`",
                       name, len);
  return 0;
}

/* The buffer handed to hwloc: a NUL-terminated copy of buf (*out_len bytes with the NUL).
 *
 * The one thing dpt checks before hwloc does, because hwloc 2.9 crashes on it: in a
 * 2.x-format file, an <object> with a cpuset but no complete_cpuset, or a nodeset but no
 * complete_nodeset, makes its XML importer dereference the missing set (lstopo dies with
 * SIGSEGV; a PU, a NUMA node, the Machine).  Where the importer survives (a lone child),
 * hwloc's core completes the object with complete_cpuset = cpuset and complete_nodeset =
 * nodeset; the copy carries exactly those attributes, so dpt reads what hwloc reads and
 * hwloc never sees the crashing form.  1.x-format files are passed as they are: hwloc's
 * 1.x importer checks these sets itself (a Group with some missing is dropped, as hwloc
 * <= 1.7.2 wrote I/O Groups with a cpuset only; any other such object is refused). */
static char *xml_for_hwloc(const char *buf, size_t len, const char *name, size_t *out_len)
{
  static const char *const pairs[][2] = {{"cpuset", "complete_cpuset"}, {"nodeset", "complete_nodeset"}};
  const char *end = buf + len, *root, *gt, *done = buf;
  char *out = NULL;
  size_t n = 0;
  struct dpt_err ignore;
  FILE *m = open_memstream(&out, &n);
  if (!m)
    return NULL;
  if (!xml_root(buf, len, name, &root, &gt, &ignore) && xml_major(root, gt) >= 2)
    for (const char *p = gt, *te; (p = memmem(p, end - p, "<object", 7)); p = te) {
      const char *at[2] = {NULL, NULL}, *v[2], *other;
      size_t vl[2], ol;
      if (!(te = tag_end(p + 7, end)))
        break; /* truncated: hwloc refuses it */
      if (!isspace((unsigned char)p[7]))
        continue;
      for (int i = 0; i < 2; i++)
        if (!tag_attr(p, te, pairs[i][1], &other, &ol))
          at[i] = tag_attr(p, te, pairs[i][0], &v[i], &vl[i]);
      for (int k = 0; k < 2; k++) { /* insert after each value, in the order they come */
        int i = at[0] && (!at[1] || at[0] < at[1]) ? 0 : 1;
        if (!at[i])
          break;
        fwrite(done, 1, (size_t)(at[i] - done), m);
        fprintf(m, " %s=\"%.*s\"", pairs[i][1], (int)vl[i], v[i]);
        done = at[i];
        at[i] = NULL;
      }
    }
  fwrite(done, 1, (size_t)(end - done), m);
  fputc(0, m);
  if (fclose(m)) {
    free(out);
    return NULL;
  }
  *out_len = n;
  return out;
}

static int load_common(struct dpt_node *node, const char *buf, size_t len, const char *name,
                       struct dpt_err *err)
{
  int rc, e;
  char *copy = NULL;
  size_t copy_len = 0;
  if (hwloc_topology_init(&node->topo) < 0) {
    node->topo = NULL;
    return dpt_err_set(err, DPT_E_RUNTIME, "hwloc_topology_init failed: %s", strerror(errno));
  }
  hwloc_topology_set_io_types_filter(node->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (buf) {
    if (len > (size_t)1 << 30)
      return dpt_err_set(err, DPT_E_INPUT, "%s: %zu bytes is too large for an hwloc XML topology", name, len);
    copy = xml_for_hwloc(buf, len, name, &copy_len); /* hwloc wants the size including the NUL */
    if (!copy || copy_len > INT_MAX) {
      free(copy);
      return dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory (%zu bytes)", name, len);
    }
    /* hwloc decides what it reads; our own look at the file only explains a refusal */
    if (hwloc_topology_set_xmlbuffer(node->topo, copy, (int)copy_len) < 0)
      goto refused;
  }
  if (hwloc_topology_load(node->topo) < 0) {
    if (buf)
      goto refused;
    return dpt_err_set(err, DPT_E_RUNTIME, "hwloc could not discover this machine's topology: %s",
                       strerror(errno));
  }
  free(copy);
  if (hwloc_get_nbobjs_by_type(node->topo, HWLOC_OBJ_PU) <= 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s: the topology has no processing unit (PU)", name);
  return build(node, err);
refused:
  e = errno;
  free(copy);
  rc = explain_refusal(buf, len, name, err);
  return rc ? rc
            : dpt_err_set(err, DPT_E_INPUT,
                          "%s: hwloc could not load this XML topology (malformed XML or inconsistent content: %s); "
                          "run `HWLOC_XML_VERBOSE=1 lstopo-no-graphics --input %s` for hwloc's diagnosis",
                          name, strerror(e), name);
}

int dpt_node_load_buffer(struct dpt_node **out, const char *buf, size_t len, const char *name,
                         struct dpt_err *err)
{
  struct dpt_node *node;
  int rc;
  *out = NULL;
  if (!name)
    name = "(buffer)";
  if (!buf)
    return dpt_err_set(err, DPT_E_INPUT, "%s: no XML buffer given", name);
  node = node_alloc(name);
  if (!node)
    return dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory", name);
  rc = load_common(node, buf, len, name, err);
  if (rc) {
    dpt_node_destroy(node);
    return rc;
  }
  *out = node;
  return 0;
}

int dpt_node_load(struct dpt_node **out, const char *xml_path, struct dpt_err *err)
{
  struct dpt_node *node = NULL;
  char *buf = NULL;
  size_t len = 0;
  int rc;
  *out = NULL;
  if (!xml_path || !*xml_path) {
    const char *env = getenv("HWLOC_XMLFILE");
    if (env && *env)
      xml_path = env;
  }
  if (xml_path && *xml_path) {
    rc = dpt_file_read(xml_path, "topology file", "give an hwloc XML file made with `lstopo --of xml FILE`",
                       0, &buf, &len, err);
    if (rc)
      return rc;
  }
  node = node_alloc(xml_path && *xml_path ? xml_path : "live");
  if (!node) {
    free(buf);
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  }
  rc = load_common(node, buf, len, node->source, err);
  free(buf);
  if (rc) {
    dpt_node_destroy(node);
    return rc;
  }
  if (!xml_path && !node->hostname[0] && gethostname(node->hostname, sizeof node->hostname - 1) < 0)
    node->hostname[0] = 0;
  *out = node;
  return 0;
}

int dpt_node_synthetic(struct dpt_node **out, const char *hostname, int n_gpus, struct dpt_err *err)
{
  struct dpt_node *node;
  *out = NULL;
  if (n_gpus < 0 || n_gpus > 4096)
    return dpt_err_set(err, DPT_E_INPUT, "GPUs per node: %d is out of range (0..4096)", n_gpus);
  node = node_alloc("synthetic");
  if (!node)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  copy_str(node->hostname, sizeof node->hostname, hostname);
  node->n_gpus = n_gpus;
  node->gpus = calloc(n_gpus ? n_gpus : 1, sizeof *node->gpus);
  node->hcas = calloc(1, sizeof *node->hcas);
  node->numa = calloc(1, sizeof *node->numa);
  node->gpu_gpu = calloc(n_gpus ? (size_t)n_gpus * n_gpus : 1, sizeof *node->gpu_gpu);
  node->gpu_hca = calloc(1, sizeof *node->gpu_hca);
  node->hca_hca = calloc(1, sizeof *node->hca_hca);
  node->cpuset = hwloc_bitmap_alloc();
  if (!node->gpus || !node->hcas || !node->numa || !node->gpu_gpu || !node->gpu_hca || !node->hca_hca ||
      !node->cpuset)
    goto fail;
  for (int g = 0; g < n_gpus; g++) {
    struct dpt_node_gpu *G = &node->gpus[g];
    G->index = g;
    snprintf(G->model, sizeof G->model, "unknown");
    G->numa = -1;
    G->package = -1;
    G->cpuset = hwloc_bitmap_alloc();
    if (!G->cpuset)
      goto fail;
    for (int b = 0; b < n_gpus; b++) {
      struct dpt_path *p = &node->gpu_gpu[g * n_gpus + b];
      p->cls = p->pcie = g == b ? DPT_PATH_X : DPT_PATH_UNKNOWN;
    }
  }
  *out = node;
  return 0;
fail:
  dpt_node_destroy(node);
  return dpt_err_set(err, DPT_E_NOMEM, "out of memory for a synthetic node of %d GPUs", n_gpus);
}

void dpt_node_destroy(struct dpt_node *node)
{
  if (!node)
    return;
  if (node->gpus)
    for (int i = 0; i < node->n_gpus; i++)
      hwloc_bitmap_free(node->gpus[i].cpuset);
  if (node->hcas)
    for (int i = 0; i < node->n_hcas; i++)
      hwloc_bitmap_free(node->hcas[i].cpuset);
  if (node->numa)
    for (int i = 0; i < node->n_numa; i++)
      hwloc_bitmap_free(node->numa[i].cpuset);
  free(node->gpus);
  free(node->ignored);
  free(node->hcas);
  free(node->numa);
  free(node->gpu_gpu);
  free(node->gpu_hca);
  free(node->hca_hca);
  hwloc_bitmap_free(node->cpuset);
  if (node->topo)
    hwloc_topology_destroy(node->topo);
  free(node);
}

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
