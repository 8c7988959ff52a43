/* test_node.c — facts dpt_node must reproduce on real GPU servers.
 *
 * usage: test_node HWLOC_FIXTURE_DIR MN1_XML
 * (MN1_XML's folder, tests/topology/fixtures, also holds the hwloc 1.x fixtures of issue 18,
 * made by make-hwloc1x-fixtures.py from hwloc's own test XMLs in ../hwloc-xml.)
 * The DGX-2 facts are NVIDIA's published `nvidia-smi topo -mp` matrix (GPU0-GPU1
 * PIX, GPU0-GPU2 PXB, GPU0-GPU4 NODE, GPU0-GPU8 SYS) and NV6 between any two
 * GPUs through the NVSwitches. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_file.h"
#include "dpt_node.h"

#include "dpt_check.h"

static const char *dir;

static struct dpt_node *load_from(const char *folder, const char *file)
{
  char path[4096];
  struct dpt_err err;
  struct dpt_node *n = NULL;
  snprintf(path, sizeof path, "%s/%s", folder, file);
  if (dpt_node_load(&n, path, &err) < 0) {
    fprintf(stderr, "cannot load %s: %s\n", path, err.msg);
    exit(1);
  }
  return n;
}

static struct dpt_node *load(const char *file)
{
  return load_from(dir, file);
}

/* The bytes of fixture file (in dir), NUL-terminated. */
static char *slurp(const char *file, size_t *len)
{
  char path[4096], *b;
  struct dpt_err err;
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (dpt_file_read(path, "fixture", NULL, 0, &b, len, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    exit(1);
  }
  return b;
}

static const char *pstr(struct dpt_path p)
{
  static char buf[8][16];
  static int k;
  k = (k + 1) % 8;
  return dpt_path_str(p, buf[k], sizeof buf[k]);
}

static void check_symmetric(const struct dpt_node *n, const char *what)
{
  for (int a = 0; a < n->n_gpus; a++)
    for (int b = 0; b < n->n_gpus; b++) {
      struct dpt_path x = dpt_node_gpu_path(n, a, b), y = dpt_node_gpu_path(n, b, a);
      CHECK(x.cls == y.cls && x.nvlinks == y.nvlinks && x.pcie == y.pcie, "%s: GPU%d-GPU%d %s vs %s", what, a,
            b, pstr(x), pstr(y));
      CHECK((a == b) == (x.cls == DPT_PATH_X), "%s: diagonal GPU%d-GPU%d is %s", what, a, b, pstr(x));
      CHECK(x.pcie != DPT_PATH_NV, "%s: pcie field never NV", what);
    }
  for (int g = 1; g < n->n_gpus; g++)
    CHECK(strcmp(n->gpus[g - 1].busid, n->gpus[g].busid) < 0, "%s: GPUs in PCI bus id order", what);
}

static void test_dgx2(void)
{
  struct dpt_node *n = load("nvidia-dgx2-16v100.xml");
  CHECK(n->n_gpus == 16, "DGX-2 has 16 GPUs, got %d", n->n_gpus);
  CHECK(n->n_hcas == 0, "no HCA in the dump, got %d", n->n_hcas);
  CHECK(n->n_packages == 2 && n->n_numa == 2, "2 sockets, 2 NUMA nodes");
  if (n->n_gpus != 16)
    goto out;
  CHECK(!strcmp(n->gpus[0].busid, "0000:34:00.0"), "GPU0 bus id %s", n->gpus[0].busid);
  CHECK(!strcmp(n->gpus[0].osdev, "nvml0"), "GPU0 is nvml0, got %s", n->gpus[0].osdev);
  CHECK(!strcmp(n->gpus[0].model, "Tesla V100-SXM3-32GB-H"), "model %s", n->gpus[0].model);
  /* NVIDIA's published PCIe matrix */
  CHECK(dpt_node_gpu_path(n, 0, 1).pcie == DPT_PATH_PIX, "GPU0-GPU1 PIX, got %d", dpt_node_gpu_path(n, 0, 1).pcie);
  CHECK(dpt_node_gpu_path(n, 0, 2).pcie == DPT_PATH_PXB, "GPU0-GPU2 PXB, got %d", dpt_node_gpu_path(n, 0, 2).pcie);
  CHECK(dpt_node_gpu_path(n, 0, 4).pcie == DPT_PATH_NODE, "GPU0-GPU4 NODE, got %d", dpt_node_gpu_path(n, 0, 4).pcie);
  CHECK(dpt_node_gpu_path(n, 0, 8).pcie == DPT_PATH_SYS, "GPU0-GPU8 SYS, got %d", dpt_node_gpu_path(n, 0, 8).pcie);
  /* NV6 between any two GPUs, through the NVSwitches */
  CHECK(n->nvlink_bw_per_link == 25000, "V100 NVLink2: 25000 per link, got %d", n->nvlink_bw_per_link);
  for (int a = 0; a < 16; a++)
    for (int b = 0; b < 16; b++)
      if (a != b) {
        struct dpt_path p = dpt_node_gpu_path(n, a, b);
        CHECK(p.cls == DPT_PATH_NV && p.nvlinks == 6 && !strcmp(pstr(p), "NV6"), "GPU%d-GPU%d: %s", a, b, pstr(p));
      }
  for (int g = 0; g < 16; g++) {
    CHECK(n->gpus[g].numa == (g < 8 ? 0 : 1), "GPU%d on NUMA %d", g, n->gpus[g].numa);
    CHECK(n->gpus[g].package == (g < 8 ? 0 : 1), "GPU%d in package %d", g, n->gpus[g].package);
    CHECK(n->gpus[g].local_cores == 2, "GPU%d local cores %d", g, n->gpus[g].local_cores);
  }
  check_symmetric(n, "dgx2");
out:
  dpt_node_destroy(n);
}

/* The same DGX-2 dump with its NVML OS devices renamed: GPUs must come from the
 * PCI class fallback (3D controller, NVIDIA) with the same PCIe matrix, and
 * without NVLink counts (the matrix then names objects that are not GPUs). */
static void test_pci_fallback(void)
{
  size_t len;
  struct dpt_err err;
  struct dpt_node *n = NULL, *ref = load("nvidia-dgx2-16v100.xml");
  char *buf = slurp("nvidia-dgx2-16v100.xml", &len);
  int renamed = 0;
  for (char *p = buf; (p = strstr(p, "name=\"nvml")); p += 10, renamed++)
    memcpy(p + 6, "zzzz", 4);
  CHECK(renamed == 16, "renamed %d nvml devices", renamed);
  CHECK(dpt_node_load_buffer(&n, buf, len, "dgx2-no-osdev", &err) == 0, "load: %s", err.msg);
  if (n) {
    CHECK(n->n_gpus == 16, "fallback finds 16 GPUs, got %d", n->n_gpus);
    for (int g = 0; g < n->n_gpus && g < 16; g++) {
      CHECK(n->gpus[g].osdev[0] == 0, "GPU%d has no OS device name (%s)", g, n->gpus[g].osdev);
      CHECK(!strcmp(n->gpus[g].model, "PCI 10de:1db8"), "GPU%d model %s", g, n->gpus[g].model);
      for (int h = 0; h < 16; h++)
        CHECK(dpt_node_gpu_path(n, g, h).pcie == dpt_node_gpu_path(ref, g, h).pcie, "GPU%d-GPU%d pcie", g, h);
    }
    check_symmetric(n, "dgx2-fallback");
  }
  dpt_node_destroy(n);
  dpt_node_destroy(ref);
  free(buf);
}

static void test_power8(void)
{
  struct dpt_node *n = load("power8-4p100-nvlink.xml");
  CHECK(n->n_gpus == 4, "4 P100, got %d", n->n_gpus);
  if (n->n_gpus == 4) {
    CHECK(n->nvlink_bw_per_link == 20000, "P100 NVLink1: 20000 per link, got %d", n->nvlink_bw_per_link);
    CHECK(!strcmp(pstr(dpt_node_gpu_path(n, 0, 1)), "NV2"), "GPU0-GPU1 NV2, got %s", pstr(dpt_node_gpu_path(n, 0, 1)));
    CHECK(!strcmp(pstr(dpt_node_gpu_path(n, 2, 3)), "NV2"), "GPU2-GPU3 NV2");
    CHECK(dpt_node_gpu_path(n, 0, 1).pcie == DPT_PATH_NODE, "GPU0-GPU1 PCIe NODE (two host bridges, one socket)");
    CHECK(dpt_node_gpu_path(n, 0, 2).cls == DPT_PATH_SYS, "GPU0-GPU2 SYS, no NVLink");
    CHECK(!strcmp(n->gpus[0].osdev, "cuda0"), "cuda preferred over nvml/opencl: %s", n->gpus[0].osdev);
    check_symmetric(n, "power8");
  }
  dpt_node_destroy(n);
}

static void test_mn1(const char *xml)
{
  struct dpt_err err;
  struct dpt_node *n = NULL;
  if (dpt_node_load(&n, xml, &err) < 0) {
    CHECK(0, "load %s: %s", xml, err.msg);
    return;
  }
  CHECK(n->n_gpus == 8 && n->n_hcas == 4, "8 GPUs 4 HCAs, got %d %d", n->n_gpus, n->n_hcas);
  if (n->n_gpus == 8 && n->n_hcas == 4) {
    for (int a = 0; a < 8; a++) {
      for (int b = 0; b < 8; b++) {
        enum dpt_path_class want = a == b ? DPT_PATH_X
                                   : a / 2 == b / 2 ? DPT_PATH_PIX
                                   : a / 4 == b / 4 ? DPT_PATH_NODE
                                                    : DPT_PATH_SYS;
        CHECK(dpt_node_gpu_path(n, a, b).cls == want, "GPU%d-GPU%d %s", a, b, pstr(dpt_node_gpu_path(n, a, b)));
      }
      int near[4], nn = dpt_node_nearest_hcas(n, a, near, 4);
      CHECK(nn == 1 && near[0] == a / 2, "GPU%d nearest HCA mlx5_%d (got %d HCAs, first %d)", a, a / 2, nn, near[0]);
      CHECK(dpt_node_hca_path(n, a, a / 2).cls == DPT_PATH_PIX, "GPU%d-HCA PIX", a);
      CHECK(n->gpus[a].numa == a / 4 && n->gpus[a].package == a / 4, "GPU%d NUMA %d", a, n->gpus[a].numa);
      CHECK(n->gpus[a].local_cores == 8 && hwloc_bitmap_weight(n->gpus[a].cpuset) == 16, "GPU%d 8 cores 16 PUs", a);
    }
    for (int h = 0; h < 4; h++) {
      char name[16], nd[16];
      snprintf(name, sizeof name, "mlx5_%d", h);
      snprintf(nd, sizeof nd, "ib%d", h);
      CHECK(!strcmp(n->hcas[h].name, name), "HCA%d name %s", h, n->hcas[h].name);
      CHECK(!strcmp(n->hcas[h].kind, "InfiniBand"), "HCA%d kind %s", h, n->hcas[h].kind);
      CHECK(!strcmp(n->hcas[h].netdev, nd), "HCA%d netdev %s", h, n->hcas[h].netdev);
      CHECK(!strcmp(n->hcas[h].port_state, "ACTIVE"), "HCA%d state %s", h, n->hcas[h].port_state);
      CHECK(n->hcas[h].port_lid == 0x100 + h, "HCA%d LID %d", h, n->hcas[h].port_lid);
      CHECK(n->hcas[h].numa == h / 2, "HCA%d NUMA %d", h, n->hcas[h].numa);
    }
    char w[8][256];
    CHECK(dpt_node_warnings(n, w, 8) == 0, "no warnings on a well-wired node (%s)", w[0]);
    check_symmetric(n, "mn1");
  }
  dpt_node_destroy(n);
}

static void test_lassen_aws_pascal_k40(void)
{
  struct dpt_node *n = load("lassen-power9-4v100-4mlx5.xml");
  CHECK(n->n_gpus == 4 && n->n_hcas == 4, "Lassen 4 GPUs 4 HCAs: %d %d", n->n_gpus, n->n_hcas);
  if (n->n_gpus == 4 && n->n_hcas == 4) {
    int near[4], nn = dpt_node_nearest_hcas(n, 0, near, 4);
    CHECK(nn == 2 && near[0] == 0 && near[1] == 1, "GPU0 nearest mlx5_0, mlx5_1");
    CHECK(dpt_node_hca_path(n, 0, 0).cls == DPT_PATH_NODE, "GPU0-mlx5_0 NODE");
    CHECK(dpt_node_gpu_path(n, 0, 1).cls == DPT_PATH_PIX, "GPU0-GPU1 PIX (one PLX switch)");
    CHECK(n->gpus[2].numa == 8, "GPU2 on NUMA node 8, got %d", n->gpus[2].numa);
    CHECK(!strcmp(n->hcas[1].busid, "0003:01:00.1") && !strcmp(n->hcas[1].netdev, "hsi1"), "mlx5_1 %s %s",
          n->hcas[1].busid, n->hcas[1].netdev);
    CHECK(!strcmp(n->hcas[0].port_guid, "506b:4b03:003c:eee8"), "port guid %s", n->hcas[0].port_guid);
    CHECK(!strcmp(n->hcas[0].node_guid, "506b:4b03:003c:eee8"), "node guid %s", n->hcas[0].node_guid);
  }
  dpt_node_destroy(n);

  n = load("aws-g4dn-metal-8t4.xml");
  CHECK(n->n_gpus == 8 && n->n_hcas == 1, "g4dn 8 GPUs 1 EFA: %d %d", n->n_gpus, n->n_hcas);
  if (n->n_gpus == 8 && n->n_hcas == 1) {
    char w[16][256];
    int nw = dpt_node_warnings(n, w, 16), found = 0;
    CHECK(!strcmp(n->hcas[0].kind, "EFA") && !strcmp(n->hcas[0].name, "rdmap197s0"), "EFA %s %s", n->hcas[0].kind,
          n->hcas[0].name);
    CHECK(dpt_node_gpu_path(n, 0, 1).cls == DPT_PATH_PHB, "GPU0-GPU1 PHB (two root ports, one host bridge)");
    CHECK(dpt_node_gpu_path(n, 0, 2).cls == DPT_PATH_NODE, "GPU0-GPU2 NODE");
    CHECK(dpt_node_hca_path(n, 3, 0).cls == DPT_PATH_SYS && dpt_node_hca_path(n, 4, 0).cls == DPT_PATH_NODE,
          "EFA on socket 1");
    for (int i = 0; i < nw; i++)
      found += !strcmp(w[i], "GPU3 has no HCA closer than SYS");
    CHECK(found == 1, "warning for GPU3");
  }
  dpt_node_destroy(n);

  n = load("llnl-pascal-2p100-mlx5.xml");
  CHECK(n->n_gpus == 2 && n->n_hcas == 1, "pascal 2 GPUs 1 HCA");
  if (n->n_gpus == 2 && n->n_hcas == 1) {
    CHECK(dpt_node_gpu_path(n, 0, 1).cls == DPT_PATH_PIX && dpt_node_hca_path(n, 1, 0).cls == DPT_PATH_PIX,
          "one PLX switch for both GPUs and the HCA");
    CHECK(n->nvlink_bw_per_link == 0, "no NVLink matrix");
  }
  dpt_node_destroy(n);

  n = load("x86-2socket-k40-mlx5.xml");
  CHECK(n->n_gpus == 1 && !strcmp(n->gpus[0].osdev, "cuda0") && !strcmp(n->gpus[0].model, "Tesla K40m"),
        "K40: one CUDA GPU (the OpenCL-only AMD board and bare M2075 PCI devices are not counted)");
  CHECK(n->n_hcas == 1 && !strcmp(n->hcas[0].netdev, "ib0"), "mlx5_0 with ib0");
  CHECK(n->n_gpus == 1 && n->gpus[0].numa == 1, "K40 on NUMA 1");
  dpt_node_destroy(n);
}

static const char *fixtures; /* tests/topology/fixtures */

static int has_warning(const struct dpt_node *n, const char *text)
{
  char w[32][256];
  int nw = dpt_node_warnings(n, w, 32), found = 0;
  for (int i = 0; i < nw; i++)
    found += strstr(w[i], text) != NULL;
  return found;
}

/* Issue 18: only NVIDIA devices are GPUs.  The SL390s (hwloc's 24em64t-2n6c2t-pci.xml, no
 * CUDA/NVML OS device): 3 Tesla M2070 in bus order, its ATI ES1000 VGA at 0000:01:03.0 (the
 * lowest bus id) ignored and named in a warning. */
static void test_nvidia_only(void)
{
  struct dpt_node *n = load_from(fixtures, "sl390s-3m2070-es1000.xml");
  static const char *const bus[] = {"0000:06:00.0", "0000:11:00.0", "0000:14:00.0"};
  CHECK(n->n_gpus == 3, "3 Tesla M2070, the ES1000 is not a GPU: got %d GPUs", n->n_gpus);
  for (int g = 0; g < n->n_gpus && g < 3; g++) {
    CHECK(!strcmp(n->gpus[g].busid, bus[g]), "GPU%d at %s (PCI bus order), got %s", g, bus[g], n->gpus[g].busid);
    CHECK(!strcmp(n->gpus[g].model, "PCI 10de:06d2") && !n->gpus[g].osdev[0], "GPU%d from the PCI class: %s", g,
          n->gpus[g].model);
  }
  CHECK(n->n_gpus == 3 && n->gpus[0].numa == 0 && n->gpus[1].numa == 1 && n->gpus[2].numa == 1, "GPU NUMA 0,1,1");
  CHECK(n->n_ignored == 1, "one ignored display controller, got %d", n->n_ignored);
  if (n->n_ignored == 1) {
    const struct dpt_node_ignored *I = &n->ignored[0];
    CHECK(I->vendor_id == 0x1002 && I->device_id == 0x515e && I->class_id == 0x0300 &&
              !strcmp(I->busid, "0000:01:03.0") && I->why == DPT_IGNORED_VENDOR,
          "ES1000 1002:515e class 0300 at 0000:01:03.0: %04x:%04x %04x %s", I->vendor_id, I->device_id,
          I->class_id, I->busid);
    CHECK(!strcmp(I->name, "ATI Technologies Inc ES1000"), "name %s", I->name);
  }
  CHECK(has_warning(n, "ignored display controller 1002:515e (ATI Technologies Inc ES1000) at 0000:01:03.0: "
                       "not an NVIDIA device") == 1,
        "the warning names the ES1000");
  CHECK(!has_warning(n, "no GPU found"), "GPUs found");
  CHECK(n->n_hcas == 1 && !strcmp(n->hcas[0].kind, "InfiniBand") && !strcmp(n->hcas[0].netdev, "ib0"),
        "mlx4_0 (PCI class 0c06) is InfiniBand with ib0: %s %s", n->n_hcas ? n->hcas[0].kind : "-",
        n->n_hcas ? n->hcas[0].netdev : "-");
  dpt_node_destroy(n);

  /* a server whose only display controller is its BMC's VGA: no GPU, CPU ranks */
  char path[4096];
  struct dpt_err err;
  n = NULL;
  snprintf(path, sizeof path, "%s/../hwloc-xml/hwloc-2.9.0/tests/hwloc/xml/96em64t-4n4d3ca2co-pci.xml", fixtures);
  CHECK(dpt_node_load(&n, path, &err) == 0, "load %s: %s", path, err.msg);
  if (n) {
    CHECK(n->n_gpus == 0 && n->n_ignored == 1 && n->ignored[0].vendor_id == 0x1002, "ES1000 only: 0 GPUs");
    CHECK(has_warning(n, "no GPU found") == 1 && has_warning(n, "1002:515e") == 1, "both warnings");
  }
  dpt_node_destroy(n);

  /* a CUDA OS device under a non-NVIDIA PCI device is not a GPU either: the K40 dump with the
   * AMD Tahiti's OpenCL device renamed cuda1 */
  size_t len;
  char *buf = slurp("x86-2socket-k40-mlx5.xml", &len), *p = strstr(buf, "name=\"opencl0d1\" subtype=\"OpenCL\"");
  CHECK(p != NULL, "the Tahiti's OpenCL device is in the dump");
  if (p) {
    memcpy(p, "name=\"cuda1\"     subtype=\"CUDA\"  ", strlen("name=\"opencl0d1\" subtype=\"OpenCL\""));
    n = NULL;
    CHECK(dpt_node_load_buffer(&n, buf, len, "k40-amd-cuda", &err) == 0, "load: %s", err.msg);
    if (n) {
      CHECK(n->n_gpus == 1 && !strcmp(n->gpus[0].busid, "0000:84:00.0"), "still the K40 only: %d GPUs", n->n_gpus);
      CHECK(has_warning(n, "1002:6798") == 1 && has_warning(n, "not an NVIDIA device") == 2,
            "the AMD board and the Matrox VGA are named");
      CHECK(has_warning(n, "10de:1094") == 2, "the two M2075 without a CUDA device are named");
    }
    dpt_node_destroy(n);
  }
  free(buf);
}

/* Issue 18: what hwloc 2.9 loads, dpt reads.  A 1.x export whose Groups carry a cpuset only
 * (as hwloc <= 1.7.2 wrote them): hwloc drops the Groups and loads the rest. */
static void test_hwloc1x_group_cpuset_only(void)
{
  struct dpt_node *n = load_from(fixtures, "r910-1x-group-cpuset-only.xml");
  CHECK(n->n_packages == 4 && n->n_numa == 4 && n->n_cores == 40 && n->n_pus == 40,
        "R910: 4 packages, 4 NUMA nodes, 40 cores, 40 PUs: %d %d %d %d", n->n_packages, n->n_numa, n->n_cores,
        n->n_pus);
  CHECK(n->n_gpus == 0 && n->n_hcas == 1 && !strcmp(n->hcas[0].name, "qib0"), "no GPU, qib0");
  dpt_node_destroy(n);
}

/* Remove attribute attr (with its value) from every <object> start tag of what (NULL: all). */
static int strip_attr(char *buf, const char *what, const char *attr)
{
  char key[64];
  int n = 0;
  snprintf(key, sizeof key, " %s=\"", attr);
  for (char *o = buf; (o = strstr(o, "<object ")); o++) {
    char *end = strchr(o, '>'), *a;
    if (!end || (what && strncmp(o + 8, what, strlen(what))))
      continue;
    *end = 0;
    a = strstr(o, key);
    *end = '>';
    if (!a)
      continue;
    char *close = strchr(a + strlen(key), '"') + 1;
    memmove(a, close, strlen(close) + 1);
    n++;
  }
  return n;
}

/* hwloc 2.9 segfaults on a 2.x file where an object has cpuset without complete_cpuset, or
 * nodeset without complete_nodeset (a PU, a NUMA node, the Machine); dpt hands hwloc the
 * sets hwloc's core would complete, and reads the same node as from the intact file. */
static void test_v2_missing_complete_sets(void)
{
  size_t len;
  struct dpt_err err;
  struct dpt_node *n = NULL, *ref = load("x86-2socket-k40-mlx5.xml");
  char *buf = slurp("x86-2socket-k40-mlx5.xml", &len);
  int pus = strip_attr(buf, "type=\"PU\"", "complete_cpuset");
  int numa = strip_attr(buf, "type=\"NUMANode\"", "complete_nodeset");
  int mach = strip_attr(buf, "type=\"Machine\"", "complete_cpuset");
  int pu0 = strip_attr(buf, "type=\"PU\" os_index=\"0\"", "complete_nodeset");
  CHECK(pus == 32 && numa == 2 && mach == 1 && pu0 == 1, "stripped %d PUs, %d NUMA nodes, %d Machine, %d PU 0",
        pus, numa, mach, pu0);
  /* PU 0 with both sets missing and nodeset before cpuset: each completed set goes after
   * its own, in the order they come */
  char *pu = strstr(buf, "<object type=\"PU\" os_index=\"0\" cpuset=\"0x00000001\" nodeset=\"0x00000001\"");
  CHECK(pu != NULL, "PU 0 as expected");
  if (pu) {
    static const char swapped[] = "nodeset=\"0x00000001\" cpuset=\"0x00000001\"";
    char *sets = strstr(pu, "cpuset=");
    memcpy(sets, swapped, strlen(swapped)); /* same length as the pair it replaces */
  }
  len = strlen(buf);
  CHECK(dpt_node_load_buffer(&n, buf, len, "x86-no-complete-sets", &err) == 0, "load: %s", err.msg);
  if (n) {
    CHECK(n->n_pus == ref->n_pus && n->n_cores == ref->n_cores && n->n_numa == ref->n_numa &&
              n->n_packages == ref->n_packages && n->n_gpus == ref->n_gpus && n->n_hcas == ref->n_hcas,
          "same node as the intact dump");
    CHECK(hwloc_bitmap_isequal(n->cpuset, ref->cpuset) && n->n_numa == 2 &&
              hwloc_bitmap_isequal(n->numa[1].cpuset, ref->numa[1].cpuset),
          "same cpusets");
    hwloc_obj_t p0 = hwloc_get_pu_obj_by_os_index(n->topo, 0);
    CHECK(p0 && p0->complete_cpuset && hwloc_bitmap_isequal(p0->complete_cpuset, p0->cpuset) &&
              p0->complete_nodeset && hwloc_bitmap_isequal(p0->complete_nodeset, p0->nodeset),
          "PU 0's complete sets are its sets, as hwloc's core completes them");
  }
  dpt_node_destroy(n);
  dpt_node_destroy(ref);
  free(buf);
}

/* The completion reads a start tag attribute by attribute: an attribute's name written
 * inside another attribute's value is not that attribute (PU 1's name below would have
 * hidden its missing complete_cpuset, and hwloc would have crashed on it), and a tag whose
 * quotes never close ends the walk, with hwloc refusing the file (a fuzzer found a
 * misquoted export that sent the old scan backwards over the buffer). */
static void test_v2_attr_walk(void)
{
  static const char pu1[] = "<object type=\"PU\" os_index=\"1\"";
  static const char named[] = " name=' complete_cpuset=\"0x00000002\"'";
  size_t len;
  struct dpt_err err;
  struct dpt_node *n = NULL;
  char *buf = slurp("x86-2socket-k40-mlx5.xml", &len);
  int pus = strip_attr(buf, "type=\"PU\" os_index=\"1\"", "complete_cpuset");
  char *at = strstr(buf, pu1), *big = malloc(strlen(buf) + sizeof named);
  CHECK(pus == 1 && at && big, "PU 1 stripped of complete_cpuset");
  if (pus == 1 && at && big) {
    size_t head = (size_t)(at - buf) + sizeof pu1 - 1;
    memcpy(big, buf, head);
    strcpy(big + head, named);
    strcat(big, buf + head);
    CHECK(dpt_node_load_buffer(&n, big, strlen(big), "x86-pu1-named", &err) == 0, "load: %s", err.msg);
    hwloc_obj_t p1 = n ? hwloc_get_pu_obj_by_os_index(n->topo, 1) : NULL;
    CHECK(p1 && p1->name && !strcmp(p1->name, " complete_cpuset=\"0x00000002\"") && p1->complete_cpuset &&
              hwloc_bitmap_isequal(p1->complete_cpuset, p1->cpuset),
          "PU 1 keeps its name and gets its complete_cpuset");
    dpt_node_destroy(n);
    n = NULL;
    /* an unclosed quote in the Machine's tag: refused, nothing read past the buffer */
    char *q = strstr(big, "<object type=\"Machine\"");
    CHECK(q != NULL, "Machine tag");
    if (q) {
      q[strlen("<object type=\"Machine")] = ' ';
      len = strlen(big);
      CHECK(dpt_node_load_buffer(&n, big, len, "x86-misquoted", &err) != 0 && n == NULL && err.msg[0],
            "misquoted tag refused: %s", err.msg);
      dpt_node_destroy(n);
    }
  }
  free(big);
  free(buf);
}

static void test_synthetic(void)
{
  struct dpt_err err;
  struct dpt_node *n = NULL;
  CHECK(dpt_node_synthetic(&n, "node7", 4, &err) == 0, "synthetic: %s", err.msg);
  if (n) {
    CHECK(n->topo == NULL && n->n_gpus == 4 && n->n_hcas == 0, "plain synthetic node");
    CHECK(!strcmp(n->hostname, "node7"), "hostname");
    for (int a = 0; a < 4; a++) {
      CHECK(n->gpus[a].cpuset && hwloc_bitmap_iszero(n->gpus[a].cpuset), "empty but valid cpuset");
      CHECK(n->gpus[a].index == a && n->gpus[a].numa == -1, "index/numa");
      CHECK(dpt_node_nearest_hcas(n, a, NULL, 0) == 0, "no HCA");
      for (int b = 0; b < 4; b++)
        CHECK(dpt_node_gpu_path(n, a, b).cls == (a == b ? DPT_PATH_X : DPT_PATH_UNKNOWN), "unknown paths");
    }
    char buf[8];
    CHECK(!strcmp(dpt_path_str(dpt_node_gpu_path(n, 0, 1), buf, sizeof buf), "?"), "unknown prints ?");
    json_t *j = dpt_node_to_json(n);
    CHECK(j && json_array_size(json_object_get(j, "gpus")) == 4, "synthetic JSON");
    json_decref(j);
    FILE *f = fopen("/dev/null", "w");
    if (f) {
      dpt_node_print(f, n);
      fclose(f);
    }
  }
  dpt_node_destroy(n);
  n = NULL;
  CHECK(dpt_node_synthetic(&n, "x", -1, &err) == DPT_E_INPUT && !n, "negative GPU count rejected");
  CHECK(dpt_node_gpu_path(NULL, 0, 0).cls == DPT_PATH_UNKNOWN, "NULL node");
}

static void test_live(void)
{
  struct dpt_err err;
  struct dpt_node *n = NULL;
  unsetenv("HWLOC_XMLFILE");
  CHECK(dpt_node_load(&n, NULL, &err) == 0, "live load: %s", err.msg);
  if (n) {
    char w[16][256];
    int nw = dpt_node_warnings(n, w, 16), said = 0;
    CHECK(!strcmp(n->source, "live") && n->topo && n->n_pus > 0, "live node with PUs");
    CHECK(n->hostname[0] != 0, "live hostname from gethostname()");
    for (int i = 0; i < nw; i++)
      said += !strncmp(w[i], "no GPU found", 12);
    CHECK((n->n_gpus == 0) == (said == 1), "0 GPUs <=> 'no GPU found' warning (%d GPUs)", n->n_gpus);
  }
  dpt_node_destroy(n);
}

static void test_env(void)
{
  struct dpt_err err;
  struct dpt_node *n = NULL;
  char path[4096];
  snprintf(path, sizeof path, "%s/power8-4p100-nvlink.xml", dir);
  setenv("HWLOC_XMLFILE", path, 1);
  CHECK(dpt_node_load(&n, NULL, &err) == 0, "HWLOC_XMLFILE load: %s", err.msg);
  CHECK(n && !strcmp(n->source, path) && n->n_gpus == 4, "HWLOC_XMLFILE is honoured");
  dpt_node_destroy(n);
  n = NULL;
  snprintf(path, sizeof path, "%s/llnl-pascal-2p100-mlx5.xml", dir);
  CHECK(dpt_node_load(&n, path, &err) == 0 && n->n_gpus == 2, "an explicit path wins over HWLOC_XMLFILE");
  dpt_node_destroy(n);
  unsetenv("HWLOC_XMLFILE");
}

static void test_bad_buffers(void)
{
  static const struct {
    const char *buf, *want;
  } cases[] = {
      {"", "empty"},
      {"   \n\t ", "no XML element"},
      {"hello", "not XML"},
      {"<?xml version=\"1.0\"?><svg xmlns=\"http://www.w3.org/2000/svg\"/>", "root element is <svg>"},
      {"<topology version=\"3.0\"><object type=\"Machine\"/></topology>", "version \"3.0\" is not supported"},
      {"<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\"", "truncated"},
      {"<!-- never closed", "truncated"},
      {"<topology version=\"2.0\"><object type=\"Bogus\"/></topology>", "hwloc"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct dpt_err err;
    struct dpt_node *n = (struct dpt_node *)1;
    int rc = dpt_node_load_buffer(&n, cases[i].buf, strlen(cases[i].buf), "case.xml", &err);
    CHECK(rc == DPT_E_INPUT && n == NULL, "case %zu rejected (rc %d)", i, rc);
    CHECK(strstr(err.msg, "case.xml") && strstr(err.msg, cases[i].want), "case %zu message: %s", i, err.msg);
  }
  struct dpt_err err;
  struct dpt_node *n = NULL;
  CHECK(dpt_node_load(&n, "/nonexistent/dir/node.xml", &err) == DPT_E_INPUT &&
            strstr(err.msg, "/nonexistent/dir/node.xml") && strstr(err.msg, "No such file"),
        "missing file: %s", err.msg);
}

int main(int argc, char **argv)
{
  if (argc == 2 && !strcmp(argv[1], "--live")) {
    test_live();
  } else if (argc == 3) {
    char *slash;
    static char fx[4096];
    dir = argv[1];
    snprintf(fx, sizeof fx, "%s", argv[2]);
    slash = strrchr(fx, '/');
    if (slash)
      *slash = 0;
    else
      snprintf(fx, sizeof fx, ".");
    fixtures = fx;
    test_nvidia_only();
    test_hwloc1x_group_cpuset_only();
    test_v2_missing_complete_sets();
    test_v2_attr_walk();
    test_dgx2();
    test_pci_fallback();
    test_power8();
    test_mn1(argv[2]);
    test_lassen_aws_pascal_k40();
    test_synthetic();
    test_env();
    test_bad_buffers();
  } else {
    fprintf(stderr, "usage: test_node HWLOC_FIXTURE_DIR MN1_XML | test_node --live\n");
    return 2;
  }
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_node: all checks passed\n");
  return 0;
}
