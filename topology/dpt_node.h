/* dpt_node.h — one node's topology, discovered with hwloc.
 *
 * Loads the live machine or an hwloc XML file (HWLOC_XMLFILE convention too) and
 * reduces it to what dpt needs: GPUs (NVIDIA devices only, in PCI bus order; other display
 * controllers are listed as ignored), network devices for collectives (HCAs),
 * NUMA nodes/packages/cores/PUs, and the pairwise path class of every GPU/GPU
 * and GPU/HCA pair in the words of `nvidia-smi topo -m` (X, NV<n>, PIX, PXB,
 * PHB, NODE, SYS).  Everything here is plain data once loaded; the hwloc
 * topology is kept only so that runtime/ can bind with it. */
#ifndef DPT_NODE_H
#define DPT_NODE_H

#include <stdint.h>
#include <stdio.h>

#include <hwloc.h>
#include <jansson.h>

#include "dpt_err.h"

/* Path classes, ordered from closest to farthest (compare with <). */
enum dpt_path_class {
  DPT_PATH_X = 0,  /* the device itself */
  DPT_PATH_NV,     /* NVLink: nvlinks > 0 (direct or through NVSwitch) */
  DPT_PATH_PIX,    /* at most one PCIe switch/bridge between the two */
  DPT_PATH_PXB,    /* several PCIe bridges, no host bridge */
  DPT_PATH_PHB,    /* through a PCIe host bridge (same host bridge) */
  DPT_PATH_NODE,   /* across host bridges inside one NUMA node */
  DPT_PATH_SYS,    /* across the socket interconnect (QPI/UPI/X-Bus) */
  DPT_PATH_UNKNOWN /* no information (e.g. a node described only by a GPU count) */
};

struct dpt_path {
  enum dpt_path_class cls;   /* what `nvidia-smi topo -m` shows: NV when nvlinks > 0, else == pcie */
  int nvlinks; /* number of NVLinks when cls == DPT_PATH_NV, else 0 */
  enum dpt_path_class pcie;  /* the PCIe/system path alone (`nvidia-smi topo -mp`): X, PIX..SYS,
                              * UNKNOWN; never DPT_PATH_NV */
};

struct dpt_node_gpu {
  int index;           /* 0..n_gpus-1, in PCI bus id order (CUDA_DEVICE_ORDER=PCI_BUS_ID) */
  char osdev[32];      /* "cuda0", "nvml3", or "" when found from the PCI class only */
  char busid[32];      /* "0000:34:00.0" */
  char model[128];     /* e.g. "Tesla V100-SXM3-32GB"; PCI vendor/device name otherwise */
  char uuid[64];       /* NVIDIAUUID info ("GPU-d397..."), "" when the dump has none */
  int local_cores;     /* cores whose PUs are all in cpuset (0 when unknown) */
  int numa;            /* OS index of the nearest NUMA node, -1 if unknown */
  int package;         /* OS index of the enclosing package, -1 if unknown */
  hwloc_bitmap_t cpuset;  /* PUs local to the GPU (OS indexes); never NULL */
};

struct dpt_node_hca {
  int index;           /* 0..n_hcas-1, in PCI bus id order */
  char name[32];       /* OpenFabrics OS device name: "mlx5_0", "hfi1_0", "rdmap197s0" */
  char kind[16];       /* "InfiniBand", "RoCE", "iWARP", "EFA", "OmniPath", "RDMA" */
  char busid[32];      /* "0000:08:00.0", "" if not under a PCI device */
  char netdev[32];     /* companion network interface ("ib0", "hsi0", "eth0") or "" */
  char port_state[16]; /* "ACTIVE", "DOWN", ... or "" when the dump does not say */
  char port_guid[32];  /* first port GUID (interface id of Port1GID0), or "" */
  char node_guid[32];  /* NodeGUID info, or "" */
  int port_lid;        /* Port1LID, -1 when the dump does not say */
  int numa;            /* OS index of the nearest NUMA node, -1 if unknown */
  hwloc_bitmap_t cpuset;  /* PUs local to the device; never NULL */
};

/* A PCI display/3D controller (class 0x03xx) that is not one of the node's GPUs: dpt
 * drives CUDA only, so only NVIDIA (vendor 0x10de) devices can be ranks' GPUs. */
enum dpt_node_ignored_why {
  DPT_IGNORED_VENDOR,   /* not NVIDIA: a server's BMC VGA (ASPEED, Matrox, ATI ES1000), an AMD board */
  DPT_IGNORED_NO_OSDEV, /* NVIDIA, but the dump names other GPUs through CUDA/NVML OS devices and
                         * not this one (hidden from CUDA when the dump was taken) */
};

struct dpt_node_ignored {
  char busid[32];      /* "0000:01:03.0" */
  unsigned vendor_id, device_id, class_id; /* 0x1002, 0x515e, 0x0300 */
  char name[128];      /* PCI vendor and device names as the dump has them, or "" */
  enum dpt_node_ignored_why why;
};

struct dpt_node_numa {
  int os_index;        /* NUMA node OS index (what numactl calls it) */
  int package;         /* OS index of the enclosing package, -1 if unknown */
  uint64_t memory;     /* local memory in bytes, 0 if unknown */
  hwloc_bitmap_t cpuset;  /* PUs of this NUMA node */
};

struct dpt_node {
  char hostname[256];  /* from the XML's HostName info or gethostname(); "" if unknown */
  char source[4096];   /* XML path, or "live" */
  int n_packages;
  int n_cores;
  int n_pus;
  int n_numa;
  struct dpt_node_numa *numa;   /* [n_numa], by OS index */
  int n_gpus;
  struct dpt_node_gpu *gpus;    /* [n_gpus] */
  int n_hcas;
  struct dpt_node_hca *hcas;    /* [n_hcas] */
  int n_ignored;
  struct dpt_node_ignored *ignored; /* [n_ignored] display controllers that are not GPUs, in PCI
                                     * bus id order; each gets a warning */
  struct dpt_path *gpu_gpu;     /* [n_gpus * n_gpus], row-major; diagonal is X */
  struct dpt_path *gpu_hca;     /* [n_gpus * n_hcas], row-major (PCIe only: nvlinks 0) */
  struct dpt_path *hca_hca;     /* [n_hcas * n_hcas], row-major; diagonal is X */
  int nvlink_bw_per_link;       /* MB/s per NVLink used to count links (20000 NVLink1, 25000
                                 * NVLink2+, as hwloc's NVML backend reports), 0 without NVLink */
  hwloc_bitmap_t cpuset;        /* all PUs of the machine */
  hwloc_topology_t topo;        /* the loaded hwloc topology (owned), NULL for synthetic nodes */
};

/* Load a topology.  xml_path NULL: the HWLOC_XMLFILE environment variable if
 * set, else the live machine.  Errors: DPT_E_INPUT naming the file and the
 * problem (missing, empty, not hwloc XML, unsupported version...). */
int dpt_node_load(struct dpt_node **out, const char *xml_path, struct dpt_err *err);

/* Load from an in-memory XML buffer (fuzzing, tests); name is used in messages. */
int dpt_node_load_buffer(struct dpt_node **out, const char *buf, size_t len,
                         const char *name, struct dpt_err *err);

/* A node known only by its GPU count (no paths, no cpusets beyond "unknown"):
 * what the planner uses for `--gpus-per-node N` without an XML. */
int dpt_node_synthetic(struct dpt_node **out, const char *hostname, int n_gpus,
                       struct dpt_err *err);

void dpt_node_destroy(struct dpt_node *node);

/* Path between GPU a and GPU b / between GPU g and HCA h. */
struct dpt_path dpt_node_gpu_path(const struct dpt_node *node, int a, int b);
struct dpt_path dpt_node_hca_path(const struct dpt_node *node, int g, int h);

/* "X", "NV6", "PIX", "PXB", "PHB", "NODE", "SYS", "?" into buf (>= 8 bytes). */
const char *dpt_path_str(struct dpt_path p, char *buf, size_t len);

/* Indices of the HCAs closest to GPU g (all HCAs at the minimal path class),
 * written to out[] (capacity cap); returns how many, 0 when the node has none. */
int dpt_node_nearest_hcas(const struct dpt_node *node, int g, int *out, int cap);

/* JSON document "dpt.node/1" (schema in docs/schema-node.md). New reference, NULL on
 * allocation failure. */
json_t *dpt_node_to_json(const struct dpt_node *node);

/* Warnings about the node ("GPU3 has no HCA closer than SYS", "no GPU found", HCA ports
 * not ACTIVE, "ignored display controller 1002:515e ... at 0000:01:03.0: not an NVIDIA
 * device"...): number written to out[] (capacity cap, each buffer 256 bytes). */
int dpt_node_warnings(const struct dpt_node *node, char (*out)[256], int cap);

/* The warning about ignored display controller i (0 <= i < n_ignored) into buf. */
void dpt_node_ignored_warning(const struct dpt_node *node, int i, char *buf, size_t len);

/* The human view: matrix like `nvidia-smi topo -m`, legend, summary, warnings. */
void dpt_node_print(FILE *f, const struct dpt_node *node);

/* Flags for dpt_node_print_flags(). */
#define DPT_NODE_PRINT_PCIE 0x1u /* matrix of PCIe paths only, like `nvidia-smi topo -mp` */
void dpt_node_print_flags(FILE *f, const struct dpt_node *node, unsigned flags);

#endif /* DPT_NODE_H */
