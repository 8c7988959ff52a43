/* dpt_optim_layout.h — the fused optimizer's layout and its host reference (issue 15),
 * host-only (no CUDA headers; the kernel, dpt_cuda_optim.cu, reads the same tables).
 *
 * One kernel per step does momentum SGD on the fp32 master slab (torch.optim.SGD,
 * weight-decay mask, Nesterov: dpt_sgd_step's arithmetic) and writes, in the same pass,
 * the weight copies the convolutions and the FC layer read: conv weights KCRS in the slab
 * -> KRSC in the compute type (fp32, fp16 or bf16) at the plan's wcopy_off, with zero
 * padding channels where the stored input channels exceed the model's (the padded stem);
 * FC weights [K, C] cast as they are (16-bit precisions only: fp32/tf32 read the slab).
 * No per-layer cast kernels are left in the forward pass.  Mixed precision: the update
 * (and the copy) is skipped on the device when the overflow flag is set.
 *
 * The slab is cut into segments (one per parameter block, adjacent blocks without a copy
 * merged), each a contiguous slab range with its copy rule; the segments are cut into
 * chunks of at most `chunk` elements that never cross a segment, one CUDA block per chunk,
 * so the kernel finds its rule without searching.  Both tables are plain data, uploaded
 * once. */
#ifndef DPT_OPTIM_LAYOUT_H
#define DPT_OPTIM_LAYOUT_H

#include <stddef.h>

#include "dpt_err.h"
#include "dpt_model.h"

#ifdef __CUDACC__
#define DPT_OPTIM_HD __host__ __device__ /* the mapping below runs in the kernel too */
#else
#define DPT_OPTIM_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum { DPT_OPT_F32 = 0, DPT_OPT_F16 = 1, DPT_OPT_BF16 = 2 }; /* copy element type (= dpt_cuda_kernels' DPT_DT_*) */
enum { DPT_OSEG_NONE = 0, DPT_OSEG_KRSC = 1, DPT_OSEG_FLAT = 2 };

struct dpt_optim_seg {
  unsigned long long src;   /* first slab element */
  unsigned long long len;   /* elements */
  unsigned long long dst;   /* first copy element (in copy-type elements from the region's start) */
  int kind;                 /* DPT_OSEG_*: none, conv KCRS -> KRSC, flat cast */
  int layer;                /* model layer, -1 for merged copy-less blocks */
  int k, c, rs, c_stored;   /* KRSC: [k, c, rs] -> [k, rs, c_stored] */
};

struct dpt_optim_chunk {
  unsigned long long start; /* first slab element */
  unsigned int len;         /* elements, <= the layout's chunk size */
  int seg;                  /* its segment */
};

struct dpt_optim_layout {
  size_t n_params;
  int dtype;                     /* DPT_OPT_* of the copies */
  int n_seg, n_chunk;
  struct dpt_optim_seg *seg;     /* [n_seg], by src */
  struct dpt_optim_chunk *chunk; /* [n_chunk], by start */
  size_t copy_elems;             /* end of the highest copy (elements): the copies lie in [0, copy_elems) */
  size_t copied;                 /* parameter elements that have a copy */
};

/* Build the layout.  wcopy_off[l]: byte offset of layer l's copy in the weight-copy region
 * ((size_t)-1: none; dpt_cuda_plan's wcopy_off); c_stored[l]: stored input channels of
 * conv l (NULL: the model's); chunk: elements per chunk (0: 4096).  DPT_E_INPUT, naming the
 * layer, when the parameter blocks do not tile the slab, a copy offset is not a multiple of
 * the element size, two copies overlap, or a copy is given for a layer that is neither conv
 * nor FC; DPT_E_NOMEM. */
int dpt_optim_layout_build(const struct dpt_model *m, const size_t *wcopy_off, const int *c_stored, int dtype,
                           size_t chunk, struct dpt_optim_layout *lay, struct dpt_err *err);
void dpt_optim_layout_free(struct dpt_optim_layout *lay);

/* Copy element of slab element i of segment s (s->kind != NONE), the kernel's mapping. */
DPT_OPTIM_HD static inline unsigned long long dpt_optim_dst(const struct dpt_optim_seg *s, unsigned long long i)
{
  unsigned long long j = i - s->src;
  if (s->kind != DPT_OSEG_KRSC) return s->dst + j;
  unsigned long long crs = (unsigned long long)s->c * (unsigned long long)s->rs;
  unsigned long long kk = j / crs, rem = j % crs, cc = rem / (unsigned long long)s->rs, r = rem % (unsigned long long)s->rs;
  return s->dst + (kk * (unsigned long long)s->rs + r) * (unsigned long long)s->c_stored + cc;
}

/* Bytes of one copy element. */
DPT_OPTIM_HD static inline size_t dpt_optim_elem_bytes(int dtype) { return dtype == DPT_OPT_F32 ? 4 : 2; }

/* Host reference of the kernel: the same arithmetic as dpt_sgd_step (no fused multiply-add:
 * this file is compiled with -ffp-contract=off, the kernel uses __fmul_rn / __fadd_rn), and
 * the copies written to copy (the region; its padding elements are left alone: zero from
 * the start).  lr_dev (NULL: lr) is the learning rate read from memory, as a captured CUDA
 * graph's kernel reads it; skip (NULL: never) non-zero leaves everything unchanged. */
void dpt_optim_ref_step(const struct dpt_optim_layout *lay, float lr, const float *lr_dev, float momentum,
                        float weight_decay, int nesterov, const unsigned char *mask /* [n_params] or NULL */,
                        float *w, float *v, const float *g, void *copy, const int *skip);

/* The copies of w alone (the kernel's copy_only launch: the parameters the host put in the slab). */
void dpt_optim_ref_copies(const struct dpt_optim_layout *lay, const float *w, void *copy);

/* LARS on the device (issue 23, dpt_cuda_lars_step): the parameter tensors (dpt_model_param_segs)
 * cut into chunks of at most `chunk` elements that never cross a tensor, each chunk with the layout
 * segment that holds it (a tensor lies inside one segment: segments are unions of whole blocks),
 * so the update writes the weight copies by the layout's rule.  A tensor's chunks are
 * consecutive: its norms are the sum of their partial sums in chunk order (deterministic). */
struct dpt_optim_lars_tensor {
  unsigned long long off, len; /* slab range */
  int skip;                    /* BN parameter or bias: trust ratio 1, no weight decay */
  int first_chunk, n_chunk;
};
struct dpt_optim_lars_chunk {
  unsigned long long start;    /* first slab element */
  unsigned int len;            /* elements */
  int tensor, seg;             /* its tensor and its layout segment */
};
struct dpt_optim_lars {
  int n_tensor, n_chunk;
  struct dpt_optim_lars_tensor *tensor; /* [n_tensor], by off */
  struct dpt_optim_lars_chunk *chunk;   /* [n_chunk], by start */
};
/* DPT_E_INPUT when the tensors do not tile the layout's slab; DPT_E_NOMEM.  chunk 0: 4096. */
int dpt_optim_lars_build(const struct dpt_optim_layout *lay, const struct dpt_param_seg *seg, int n_seg, size_t chunk,
                         struct dpt_optim_lars *out, struct dpt_err *err);
void dpt_optim_lars_free(struct dpt_optim_lars *l);

/* float -> bf16 bits, round to nearest even (NaN -> 0x7fff, as CUDA's __float2bfloat16_rn). */
unsigned short dpt_optim_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif /* DPT_OPTIM_LAYOUT_H */
