/* dpt_cuda_plan.h — host-side planning for the CUDA backend (no device needed).
 *
 * Everything the GPU backend decides before it touches a device lives here so
 * it can be tested on machines without a GPU:
 *   - precision policy: fp32 (TF32 off, the oracle), tf32, mixed (fp16
 *     activations/weights, loss scaling), bf16 (bf16 activations/weights, no
 *     loss scaling); fp32 master weights in the slab for all;
 *   - per-tensor storage: NHWC (fp32 for fp32/tf32, fp16 / bf16 otherwise; the
 *     logits stay fp32), or NCHW for fp32 / tf32 when asked (fp32_nchw below),
 *     stored channel count after the channel-multiple rule, bytes;
 *   - memory by lifetime: one arena for activations, their gradients and the
 *     backward scratch, every buffer placed at an offset by the interval of
 *     steps in which it is live (forward steps 0..L-1, backward steps
 *     L..2L-1), so only what is live is resident (dpt_cuda_arena_place, a
 *     pure function, tested);
 *   - the device allocations themselves: a fixed list of regions (one
 *     cudaMalloc each, whatever the depth), their sum is the planned peak
 *     before the convolution workspace;
 *   - the largest batch that fits a given free memory (dpt_cuda_plan_fit);
 *   - per-convolution shapes (what cuDNN's descriptors get), tensor-core
 *     eligibility, and the table of distinct convolution shapes so an
 *     algorithm is searched once per shape and cached;
 *   - algorithm choice from measured / heuristic candidates under a workspace
 *     limit, and the workspace limit itself from free device memory;
 *   - memory plan (slabs, activations, gradients, scratch) = the peak the
 *     backend will allocate before the workspace;
 *   (gradient buckets for the all-reduce during backward: dpt_bucket.h, shared
 *   with the CPU backend);
 *   - dynamic loss scaling.
 *
 * Channel-multiple rule (NVIDIA's cuDNN developer guide, "Tensor Core
 * requirements" for packed NHWC fp16 convolutions: C and K multiples of 8; the
 * DeepLearningExamples ResNet-50 pads the RGB image the same way): in mixed
 * precision the network input is stored with its channels padded to a
 * multiple of DPT_CUDA_CHANNEL_MULTIPLE (zeros, and the first convolution's
 * fp16 weight copy gets zero input channels to match), so the stem runs on
 * tensor cores.  Inner tensors keep their channel count: ResNet-50's are all
 * multiples of 8; a narrow variant (width multiplier) whose channels are not
 * still runs, on cuDNN's non-tensor-core kernels, and the plan says which
 * convolutions those are.  tf32 stores NHWC too (TF32 tensor cores want channels-last as much
 * as fp16 does), fp32 NCHW by default (fp32_nchw: cuDNN's float NHWC data gradient was slow);
 * neither pads. */
#ifndef DPT_CUDA_PLAN_H
#define DPT_CUDA_PLAN_H

#include <stddef.h>

#include "dpt_err.h"
#include "dpt_loss_scale.h" /* struct dpt_loss_scaler (mixed precision), host and device */
#include "dpt_model.h"

#define DPT_CUDA_CHANNEL_MULTIPLE 8

/* fused step: the fp32 [C] vectors per BN in the BN region (dpt_cuda_fstep.h's DPT_FX_SUM ..
 * DPT_FX_EQ_IO: sum, sum of squares, equivalent scale and bias, cy, cx, cb, and the room for the
 * equivalent scale and bias in the 16-bit I/O type) */
#define DPT_CUDA_BN_FUSED_VECS 8

enum dpt_cuda_precision {
  DPT_CUDA_FP32 = 0,  /* fp32 NCHW, FMA math (TF32 off): bit-level oracle mode */
  DPT_CUDA_TF32 = 1,  /* fp32 NCHW storage, TF32 tensor-core math */
  DPT_CUDA_MIXED = 2, /* fp16 NHWC activations/weights, fp32 master weights + loss scaling */
  DPT_CUDA_BF16 = 3,  /* bf16 NHWC activations/weights, fp32 master weights, no loss scaling */
};
/* "fp32", "tf32", "mixed" (or "fp16"), "bf16" -> precision; -1 when unknown. */
int dpt_cuda_precision_parse(const char *s);
const char *dpt_cuda_precision_name(enum dpt_cuda_precision p);

/* 1 for the 16-bit activation precisions (mixed, bf16). */
int dpt_cuda_precision_half(enum dpt_cuda_precision p);
/* Stored channel count of a tensor: c, or c rounded up to the channel multiple
 * for the network input in the 16-bit precisions. */
int dpt_cuda_stored_channels(int c, int is_network_input, enum dpt_cuda_precision p);

struct dpt_cuda_tensor_plan {
  int n, c, h, w;     /* logical shape [n, c, h, w] */
  int c_stored;       /* channels as stored (>= c; padding channels are zero) */
  int nhwc;           /* 1: NHWC, 0: NCHW (plan.nchw; [n, c, 1, 1] logits are both) */
  int elem_bytes;     /* 4 (fp32) or 2 (fp16 / bf16) */
  size_t bytes;       /* n * c_stored * h * w * elem_bytes */
  int keep;           /* 1: backward reads the activation (it lives to that backward step) */
  int act_lo, act_hi; /* activation live over steps [act_lo, act_hi] */
  int diff_lo, diff_hi; /* gradient live over steps [diff_lo, diff_hi]; diff_lo > diff_hi: none */
  size_t act_off, diff_off; /* offsets in the arena */
};

/* Placement by lifetime: n buffers of bytes[i] live over steps [lo[i], hi[i]]
 * (lo > hi: not placed, offset 0) get offsets (multiples of align) such that two
 * buffers live at a common step never overlap; largest first, lowest offset
 * that fits.  Returns the arena size (the highest end).  A pure function. */
size_t dpt_cuda_arena_place(int n, const size_t *bytes, const int *lo, const int *hi, size_t align,
                            size_t *off);

/* The device allocations of the backend: one cudaMalloc per region. */
enum dpt_cuda_region {
  DPT_CUDA_R_PARAMS, DPT_CUDA_R_GRADS, DPT_CUDA_R_STATE, DPT_CUDA_R_SGD, DPT_CUDA_R_ARENA,
  DPT_CUDA_R_SCRATCH, DPT_CUDA_R_WEIGHTS, DPT_CUDA_R_BN, DPT_CUDA_R_STAGING, DPT_CUDA_R_LOSS,
  DPT_CUDA_NREGIONS
};
const char *dpt_cuda_region_name(enum dpt_cuda_region r);

struct dpt_cuda_conv_plan {
  int layer;          /* index in model->layers */
  int n, c, h, w;     /* input [n, c, h, w]; c = stored channels of the input tensor */
  int c_logical;      /* the model's input channel count (c differs only at the padded stem) */
  int k, r, s;        /* filter [k, c, r, s] */
  int stride, pad;
  int p, q;           /* output [n, k, p, q] (cuDNN's formula, checked against the model) */
  int tensor_core;    /* 1: eligible for tensor-core kernels in this precision */
  int shape_id;       /* index into the distinct-shape table */
};

struct dpt_cuda_plan {
  enum dpt_cuda_precision precision;
  int batch;
  int n_tensors;
  struct dpt_cuda_tensor_plan *t;   /* [n_tensors] */
  int n_conv;
  struct dpt_cuda_conv_plan *conv;  /* [n_conv], forward order */
  int n_shapes;
  int *shape_rep;                   /* [n_shapes] conv index that first has the shape */
  int bn_persistent_train;          /* 1: CUDNN_BATCHNORM_SPATIAL_PERSISTENT for training */
  int nchw;                         /* 1: activations NCHW, conv weights read from the fp32 slab
                                       (dpt_cuda_plan_opts.fp32_nchw); 0: NHWC */
  int n_steps;                      /* 2 * n_layers: forward then backward steps */
  /* Memory plan in bytes (what the backend allocates; workspace comes on top). */
  size_t param_bytes, grad_bytes, state_bytes;  /* fp32 slabs */
  size_t sgd_bytes;        /* momentum [n_params] fp32 + weight-decay mask [n_params] bytes */
  size_t act_bytes;        /* every activation tensor (were each its own buffer) */
  size_t diff_bytes;       /* every activation gradient (were each its own buffer) */
  size_t arena_bytes;      /* the liveness arena holding both */
  size_t scratch_bytes;    /* largest tensor (a bound on every per-step scratch below) */
  size_t *scratch_off;     /* [n_layers] arena offset of the layer's backward scratch (BN+ReLU,
                              add+ReLU: relu'(y) * dy, the output's size), or (size_t)-1 */
  size_t *discard_off;     /* [n_layers] arena offset of a dx nobody reads (a BN on an input
                              without gradient), or (size_t)-1 */
  size_t fc_cast_bytes;    /* 16-bit copy of the logits' gradient for cuBLAS (SCRATCH region) */
  size_t weight_copy_bytes; /* KRSC conv weights in the compute type (every conv) + one
                              weight-gradient buffer (largest conv) + 16-bit FC weights */
  size_t wgrad_off;        /* offset of the shared weight-gradient buffer in that region */
  size_t *wcopy_off;       /* [n_layers] offset of each conv / FC weight copy, or (size_t)-1 */
  size_t half_weight_bytes; /* (compatibility) 16-bit part of weight_copy_bytes */
  size_t bn_saved_bytes;   /* saved mean / inverse std of every BN */
  size_t bn_fused_bytes;   /* fused step: per BN its sum / sum of squares, equivalent scale / bias,
                              backward coefficients cy, cx, cb, and room for the equivalent scale / bias
                              in the I/O type, fp32 [DPT_CUDA_BN_FUSED_VECS][C] (BN region, after the saved
                              statistics: [bn_saved_bytes + those of the BNs in layer order]), then the
                              running-statistics mirror at bn_next_off; else 0 */
  size_t bn_next_off;      /* fused step: BN region offset (256-aligned) of a mirror of the state slab,
                              fp32 [n_state]: BN finalize's updated running statistics, copied to the
                              slab after the forward pass (dpt_cuda_fuse_running_ranges); else 0 */
  struct dpt_fuse_plan *fuse; /* the fused step's op plan (dpt_cuda_fuse.h) that the liveness above
                              follows (dpt_cuda_plan_build_ex, opts fuse), else NULL; owned */
  size_t io_bytes;         /* fp32 staging for input, output, output gradient, input gradient */
  size_t loss_bytes;       /* labels, ranks, per-row losses, overflow flag, loss totals, loss scaler (device) */
  size_t region[DPT_CUDA_NREGIONS]; /* bytes of each allocation */
  size_t total_bytes;      /* sum of region[] */
};

/* Plan the whole model for a batch and precision.  need_input_grad adds the
 * input's gradient.  Errors (DPT_E_INPUT): batch < 1, a conv whose output shape
 * disagrees with cuDNN's formula, a layer whose input tensor is missing. */
int dpt_cuda_plan_build(const struct dpt_model *m, int batch, enum dpt_cuda_precision prec,
                        int need_input_grad, struct dpt_cuda_plan *plan, struct dpt_err *err);
void dpt_cuda_plan_free(struct dpt_cuda_plan *plan);

/* The fused step (issue 15): the same plan, its tensors and their lifetimes those of the fusion
 * plan's ops (dpt_cuda_fuse_build with the precision's channel multiple, 8 for fp16 / bf16 and
 * 4 for fp32 / tf32, and the stored input channels): forward op of layer i at step i, backward op
 * named after layer i at step 2L-1-i, so the tensors the fused ops never write (BN outputs applied
 * in their consumer, ...) take no arena space and the scratch / discard buffers are only those of
 * the layers left on legacy calls.  legacy: dpt_fuse_cfg's layers kept on legacy calls (NULL:
 * none).  fuse = 0: dpt_cuda_plan_build. */
struct dpt_cuda_plan_opts {
  int fuse;
  const unsigned char *legacy; /* [n_layers] or NULL */
  /* 1: the fp32-storage precisions (fp32, tf32) store NCHW, as PyTorch's default fp32 path:
   * convolutions read the fp32 slab's KCRS weights in place (no weight copy) and write their
   * weight gradients straight into the gradient slab.  Not with fuse (the fused patterns are
   * NHWC) nor at mixed / bf16.  The H200 visit: cuDNN's float NHWC data-gradient kernel took
   * 819 ms of a 2 s ResNet-50 step (bench/results/gpu-check-h200.md). */
  int fp32_nchw;
};
/* DPT_CUDA_LAYOUT -> dpt_cuda_plan_opts.fp32_nchw: NULL, "" or "auto": 1 at fp32 (its default
 * NCHW), else 0; "nhwc": 0; "nchw": 1 (the plan keeps mixed / bf16 NHWC); -1: not a layout. */
int dpt_cuda_layout_nchw(const char *layout, enum dpt_cuda_precision p);
struct dpt_fuse_plan;
int dpt_cuda_plan_build_ex(const struct dpt_model *m, int batch, enum dpt_cuda_precision prec, int need_input_grad,
                           const struct dpt_cuda_plan_opts *po, struct dpt_cuda_plan *plan, struct dpt_err *err);
/* Channel multiple the fused convolutions need at precision p (8: fp16 / bf16, 4: fp32 / tf32). */
int dpt_cuda_fuse_channel_multiple(enum dpt_cuda_precision p);

/* The input the plan's network takes (tensor 0), as struct dpt_input_format (dpt_data.h):
 * NHWC or NCHW as the plan stores it, fp32 (fp32 / tf32) / fp16 (mixed) / bf16, the stored (padded) channels, the batch
 * and side; device -1 and stream NULL (the backend fills them).  A pure function: the
 * backend's ops->input_format, and what the GPU loader is asked to deliver. */
struct dpt_input_format;
void dpt_cuda_plan_input_format(const struct dpt_cuda_plan *plan, struct dpt_input_format *f);

/* The largest batch whose plan (total_bytes) plus reserve bytes (workspace, cuDNN /
 * cuBLAS handles) fits free_bytes, at most max_try; *need: the bytes batch
 * `want` needs (plan + reserve).  Returns that batch, 0 when not even batch 1
 * fits, or a negative DPT_E_* (err set) when the model cannot be planned. */
int dpt_cuda_plan_fit(const struct dpt_model *m, enum dpt_cuda_precision prec, int need_input_grad,
                      int want, size_t free_bytes, size_t reserve, size_t *need, struct dpt_err *err);
/* The same for the plan po describes (the fused step's arena). */
int dpt_cuda_plan_fit_ex(const struct dpt_model *m, enum dpt_cuda_precision prec, int need_input_grad,
                         const struct dpt_cuda_plan_opts *po, int want, size_t free_bytes, size_t reserve,
                         size_t *need, struct dpt_err *err);

/* One algorithm candidate as cuDNN reports it (cudnnFind*AlgorithmEx or the
 * Get*_v7 heuristics: perf results in order of preference). */
struct dpt_cuda_algo_cand {
  int algo;          /* cudnnConvolution*Algo_t value */
  int ok;            /* status == CUDNN_STATUS_SUCCESS */
  float time_ms;     /* measured (Find) or < 0 when unknown (heuristics: keep cuDNN's order) */
  size_t memory;     /* workspace bytes */
  int deterministic; /* CUDNN_DETERMINISTIC */
  int transform;     /* FFT or Winograd: outputs not computed as sums of products */
};
/* Whether BN layer li may go through cudnnBatchNormalization*Ex's NHWC semi-persistent kernels, which
 * move the per-channel vectors (gamma, beta, running mean / variance, dgamma / dbeta, saved mean /
 * inverse std) 16 bytes at a time: C a multiple of 4 and every vector on a 16-byte boundary of its
 * slab (the slabs are cudaMalloc'd, 256-byte aligned).  saved_off: the layer's saved mean in floats
 * from the start of the BN region.  The model's packed slab leaves a gamma 8 bytes off wherever an
 * earlier block has an odd count of float pairs (width 1/32: every BN).  A pure function. */
int dpt_cuda_bn_ex_aligned(const struct dpt_model *m, int li, size_t saved_off);

/* Index of the candidate to use: the fastest ok one within ws_limit (cuDNN's order when times
 * are unknown); with oracle, only deterministic sums of products (no transform).  -1 when none
 * fits. */
int dpt_cuda_pick_algo(const struct dpt_cuda_algo_cand *c, int n, size_t ws_limit, int oracle);

/* Workspace limit for the algorithm search: what is left of free device
 * memory after the planned allocations and a reserve (1/16 of the free memory,
 * at least 64 MiB, for cuDNN/cuBLAS/NCCL internals), capped at cap (0 = no
 * cap).  0 when nothing is left (then only zero-workspace algorithms qualify). */
size_t dpt_cuda_workspace_limit(size_t free_bytes, size_t planned_bytes, size_t cap);

/* Where in a region of region_bytes a workspace of need bytes can lie (offset, a multiple of
 * align, a power of two) without touching the n busy ranges [off[i], off[i] + len[i]) (len 0: none;
 * unsorted, may overlap); (size_t)-1 when no gap fits.  The algorithm search's workspace inside the
 * activation arena, apart from the searched convolution's own tensors: no transient allocation on
 * top of the arena (the second visit: +519 MB of peak at mixed, 1.03x PyTorch's).  Pure. */
size_t dpt_cuda_region_gap(size_t region_bytes, const size_t *off, const size_t *len, int n, size_t need, size_t align);

#endif /* DPT_CUDA_PLAN_H */
