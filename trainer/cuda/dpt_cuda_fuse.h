/* dpt_cuda_fuse.h — the fused-block plan of the GPU step (issue 15), host-only.
 *
 * Decides, over a struct dpt_model, which cuDNN graph (backend API) operations
 * run one training step, the fusions NVIDIA's MLPerf ResNet-50 uses with
 * cuDNN's fusion engines:
 *
 *   forward
 *     conv + genstats          y = conv(x, w); per-channel sum and sum of squares of y
 *     scale-bias-relu + conv   y = conv(relu(s*x + b), w) + genstats of y ("ConvBNfprop"): the BN
 *       + genstats             that produced x is applied in the convolution's prologue, its
 *                              output is never written
 *     BN finalize              sum, sum of squares -> batch mean / inverse std, the equivalent
 *                              scale s = gamma*istd and bias b = beta - mean*s, running statistics
 *     scale-bias-add-relu      block output y = relu(s3*x3 + b3 + r) (identity shortcut)
 *     dual s-b-add-relu        y = relu(s3*x3 + b3 + sd*xd + bd) (projection shortcut)
 *     scale-bias-relu apply    z = relu(s*x + b) written, for a BN output a non-convolution reads
 *   backward
 *     dBN weight (+ dReLU,     g = relu'(y) * dy (kept when the shortcut needs it: "fork");
 *       fork)                  dgamma, dbeta and the coefficients of dx = cy*g + cx*x + cb
 *     dBN apply                dx = cy*g + cx*x + cb (g recomputed from dy and y when not kept)
 *     dgrad + dReLU + dBN      g = relu'(s*x + b) * dgrad(dy, w) with the BN output recomputed from
 *       weight                 its input x, + the dBN weight reductions ("DgradDreluBNBwdWeight")
 *     scale-bias-relu + wgrad  dw = wgrad(dy, relu(s*x + b)) ("ConvBNwgrad": recomputes the input)
 *     dgrad, wgrad             plain, for convolutions whose input is a written tensor
 *
 * What stays on legacy calls (dpt_backend_cuda.c's cuDNN legacy API / cuBLAS /
 * own kernels), and why:
 *   - max pooling and global average pooling: no fusion engine takes a pooling
 *     (resample) node next to a convolution; their inputs are written tensors;
 *   - the FC layer and the loss: cuBLAS GEMM + the own softmax kernel;
 *   - a convolution whose stored input or output channels are not a multiple of
 *     the tensor-core channel multiple (8 for fp16/bf16, 4 for fp32/tf32): the
 *     runtime-fusion engines need 16-byte aligned channels.  This is the stem
 *     (7x7, RGB) in fp32/tf32 (3 channels, not padded); in fp16/bf16 the input
 *     is padded to 8 channels (dpt_cuda_plan's channel-multiple rule) and the
 *     stem fuses.  A convolution whose output is not read by exactly one BN (no
 *     statistics to generate) stays legacy too, and so does every BN after a
 *     legacy convolution (cudnnBatchNormalizationForwardTraining computes its
 *     statistics itself);
 *   - stand-alone ReLU layers and residual adds with no BN input (not in ResNet).
 * The plan says which: ops of kind DPT_FOP_LEGACY_FWD / _BWD name their layer.
 *
 * The plan is data: ordered op lists (forward, then backward) whose operands
 * name activations, gradients, weights and per-BN vectors; dpt_cuda_fuse_check
 * replays them and proves every operand is written before it is read, every
 * convolution is in exactly one forward op, every BN finalized once, every
 * parameter gradient written once, and every written activation read.  With
 * cfg.fuse = 0 it is today's unfused step (one legacy op per layer and pass),
 * the switch the tests compare against. */
#ifndef DPT_CUDA_FUSE_H
#define DPT_CUDA_FUSE_H

#include <stddef.h>

#include "dpt_bucket.h"
#include "dpt_err.h"
#include "dpt_model.h"

enum dpt_fop_kind {
  /* forward */
  DPT_FOP_CONV_STATS,      /* y = conv(x, w); sum / sum of squares of y */
  DPT_FOP_SBR_CONV_STATS,  /* y = conv(act(s*x + b), w); sum / sum of squares of y */
  DPT_FOP_BN_FINALIZE,     /* stats -> eq scale/bias, saved mean/inv-std, running statistics */
  DPT_FOP_SBR_APPLY,       /* z = act(s*x + b), written */
  DPT_FOP_SBAR,            /* y = act(s*x + b + r) */
  DPT_FOP_DSBAR,           /* y = act(s1*x1 + b1 + s2*x2 + b2) */
  /* backward */
  DPT_FOP_DBN_WEIGHT,      /* g = act'(y) * dy (kept when fork); dgamma, dbeta, dx coefficients */
  DPT_FOP_DBN_APPLY,       /* dx = cy*g + cx*x + cb */
  DPT_FOP_DGRAD_DRELU_DBN, /* g = act'(s*x+b) * dgrad(dy, w), kept; dBN weight of the BN of x */
  DPT_FOP_DGRAD,           /* dx (+)= dgrad(dy, w) */
  DPT_FOP_WGRAD,           /* dw = wgrad(dy, x) */
  DPT_FOP_SBR_WGRAD,       /* dw = wgrad(dy, act(s*x + b)) */
  DPT_FOP_GRAD_ACC,        /* dx += g (own kernel; a shortcut whose gradient another reader wrote first) */
  /* one layer on the legacy calls of dpt_backend_cuda.c */
  DPT_FOP_LEGACY_FWD,
  DPT_FOP_LEGACY_BWD,
  DPT_FOP_NKINDS
};
/* "conv_stats", "sbr_conv_stats", ... ("?" out of range). */
const char *dpt_fop_name(enum dpt_fop_kind k);

/* Operands.  Tensors are the model's tensor ids, the rest are per layer. */
enum dpt_fref_kind {
  DPT_FREF_ACT,       /* activation of tensor id (the network input is tensor 0) */
  DPT_FREF_DIFF,      /* gradient of tensor id; for the output of a BN applied in its consumer's
                         prologue: g, the gradient before the ReLU (that output is never written) */
  DPT_FREF_W,         /* weights of layer id (the copy in the compute type) */
  DPT_FREF_DW,        /* weight (and bias) gradient of conv / FC layer id, in the gradient slab */
  DPT_FREF_BN_PARAM,  /* BN layer id: gamma, beta (slab) and running mean / var (state slab) */
  DPT_FREF_BN_STATS,  /* BN layer id: sum and sum of squares of its input, fp32 [2][C] */
  DPT_FREF_BN_EQ,     /* BN layer id: forward equivalent scale and bias, fp32 [2][C] */
  DPT_FREF_BN_SAVED,  /* BN layer id: batch mean and inverse std, fp32 [2][C] */
  DPT_FREF_BN_DPARAM, /* BN layer id: dgamma, dbeta in the gradient slab */
  DPT_FREF_BN_DEQ,    /* BN layer id: backward coefficients cy, cx, cb, fp32 [3][C] */
  DPT_FREF_NKINDS
};
struct dpt_fref {
  int kind; /* enum dpt_fref_kind */
  int id;   /* tensor or layer index */
};
/* "act", "diff", "w", ... ("?" out of range). */
const char *dpt_fref_name(int kind);

#define DPT_FOP_MAX_IN 8
#define DPT_FOP_MAX_OUT 5

struct dpt_fop {
  int kind;         /* enum dpt_fop_kind */
  int backward;     /* 0: forward pass, 1: backward pass */
  int layer;        /* the layer it is named after (conv, BN, add, or the legacy layer) */
  int conv;         /* convolution layer of a conv / dgrad / wgrad op, else -1 */
  int bn[2];        /* BN layers it applies / finalizes / differentiates, -1 when unused */
  int relu;         /* the ReLU (forward) or ReLU backward in the op */
  int accumulate;   /* DGRAD: adds into a gradient another reader wrote (beta = 1) */
  int fork;         /* DBN_WEIGHT: writes g for a second reader */
  int n_in, n_out;
  struct dpt_fref in[DPT_FOP_MAX_IN];   /* operands read */
  struct dpt_fref out[DPT_FOP_MAX_OUT]; /* operands written */
};

/* How a BN layer runs. */
enum dpt_fbn_mode {
  DPT_FBN_NONE = 0,   /* not a BN */
  DPT_FBN_LEGACY,     /* legacy forward-training / backward calls (its conv is not fused) */
  DPT_FBN_PROLOGUE,   /* output never written: applied in its one consumer convolution's prologue */
  DPT_FBN_ADD,        /* output never written: applied in the residual add it feeds (SBAR / DSBAR) */
  DPT_FBN_APPLY,      /* output written by a scale-bias-relu apply (a non-convolution reads it) */
};

struct dpt_fuse_cfg {
  int fuse;              /* 0: the unfused plan (every layer on its legacy calls) */
  int channel_multiple;  /* fused convolutions need stored C and K multiples of it (8: fp16/bf16, 4: fp32/tf32) */
  int input_c_stored;    /* channels of tensor 0 as stored (the padded stem input), 0 = the model's */
  int need_input_grad;   /* the network input gets a gradient */
  int batch;             /* for the byte counts */
  int elem_bytes;        /* activation element size (2: fp16/bf16, 4: fp32/tf32); FC outputs count 4 */
  const unsigned char *legacy; /* [n_layers] or NULL, read by dpt_cuda_fuse_build only: 1 keeps that
                                  convolution, BN or residual add on the legacy calls (a fused op of it
                                  has no cuDNN engine here: dpt_cuda_fuse_deny says which) */
};
/* fuse 1, channel multiple 8, batch 256, 2-byte activations. */
void dpt_cuda_fuse_cfg_default(struct dpt_fuse_cfg *cfg);

/* Per-step counts implied by a plan (launches: one per cuDNN graph execution, per legacy
 * cuDNN / cuBLAS call and per own kernel, as dpt_backend_cuda.c issues them; the loss,
 * the optimizer and loss scaling are not part of the plan). */
struct dpt_fuse_counts {
  int ops_fwd, ops_bwd;           /* plan ops */
  int graph_fwd, graph_bwd;       /* of which cuDNN graph executions */
  int legacy_fwd, legacy_bwd;     /* of which legacy layer ops */
  int launches_fwd, launches_bwd; /* implied launches (legacy layers: their calls; wgrad: + packing) */
  int act_written;                /* activation tensors written in the forward pass */
  int act_kept;                   /* ... of which the backward pass reads */
  int diff_written;               /* activation gradients written in the backward pass */
  size_t act_written_bytes, act_kept_bytes, diff_written_bytes; /* at cfg.batch */
};

struct dpt_fuse_plan {
  struct dpt_fuse_cfg cfg;
  int n_layers, n_tensors;
  int n_ops, n_fwd;          /* ops[0, n_fwd): forward in order; ops[n_fwd, n_ops): backward */
  struct dpt_fop *ops;
  int *conv_fused;           /* [n_layers] 1: the convolution runs in graph ops */
  int *bn_mode;              /* [n_layers] enum dpt_fbn_mode */
  int *act_written;          /* [n_tensors] 1: the forward pass writes the activation */
  int *act_kept;             /* [n_tensors] 1: ... and the backward pass reads it */
  int *diff_written;         /* [n_tensors] 1: the backward pass writes its gradient */
  int *fwd_first, *fwd_n;    /* [n_layers] the layer's forward ops: ops[fwd_first, +fwd_n) */
  int *bwd_first, *bwd_n;    /* [n_layers] its backward ops (named after it, op->layer): contiguous, and
                                the backward layers come in decreasing order, so running layer i's
                                ops at step i of the backward walk (dpt_backend_backward_walk) is
                                the plan's order */
  int n_legacy_layers;       /* layers cfg.legacy kept on the legacy calls */
  struct dpt_fuse_counts counts;
};

/* Build the plan.  DPT_E_INPUT for an inconsistent model, naming the layer (a tensor id out of
 * range or read before it is written, channel counts that disagree, an add of different
 * shapes, a tensor whose producer / consumer count the layers contradict); DPT_E_NOMEM. */
int dpt_cuda_fuse_build(const struct dpt_model *m, const struct dpt_fuse_cfg *cfg,
                        struct dpt_fuse_plan *plan, struct dpt_err *err);
void dpt_cuda_fuse_free(struct dpt_fuse_plan *plan);

/* Replays the plan (dataflow check): every operand written before it is read, activations
 * written once, a gradient written first without and then only with accumulation, every
 * convolution in exactly one forward op, every BN finalized once (BN finalize or its legacy
 * forward), every parameter gradient written exactly once, every written activation read by
 * some op (or the network output), every kept activation read by the backward pass.
 * DPT_E_INPUT naming the op and operand on the first violation. */
int dpt_cuda_fuse_check(const struct dpt_model *m, const struct dpt_fuse_plan *plan, struct dpt_err *err);

/* A fused op that cannot run here (no cuDNN engine for its pattern and shape): the layer to
 * keep on the legacy calls so that the next dpt_cuda_fuse_build (cfg.legacy) no longer emits
 * it: the convolution of a convolution op, the BN of BN finalize / scale-bias-relu apply /
 * a BN's dBN weight and apply, the residual add of an add op or of its dBN ops.  Sets
 * legacy[layer] = 1 and returns the layer; -1 when op is a legacy op or out of range. */
int dpt_cuda_fuse_deny(const struct dpt_model *m, const struct dpt_fuse_plan *p, int op, unsigned char *legacy);
/* The layer dpt_cuda_fuse_deny would keep legacy for op, without marking it; -1 as there. */
int dpt_cuda_fuse_layer_denied(const struct dpt_model *m, const struct dpt_fuse_plan *p, int op);

/* The backward walk (dpt_backend.c) runs layer i's backward ops at its step i and calls the hook
 * of the gradient bucket whose first_layer is i right after them.  Checks that this is late
 * enough: every op that writes a parameter gradient (DW, BN dgamma/dbeta) of a layer in bucket
 * k runs at or before the step of k's first layer, i.e. op->layer >= first_layer.  DPT_E_INPUT
 * naming the op, the layer and the bucket otherwise. */
int dpt_cuda_fuse_check_buckets(const struct dpt_model *m, const struct dpt_fuse_plan *p, const struct dpt_bucket *b,
                                int n, struct dpt_err *err);

/* A range of the state slab, in floats. */
struct dpt_fuse_range {
  size_t off, n;
};

/* The running statistics the plan's BN finalize ops update: the state-slab ranges of their BNs
 * (running mean and variance, [2][C] at the layer's s_off), ascending, adjacent ones merged,
 * in out[0, return) (room for one per layer); *last is the plan index of the last BN finalize
 * (-1 and 0 ranges when there is none).  The fused step has BN finalize write the update to a
 * mirror of the slab (dpt_cg_aliased: not in place) and copies these ranges back after op
 * *last; a BN on the legacy calls updates its statistics itself, so no range holds one. */
int dpt_cuda_fuse_running_ranges(const struct dpt_model *m, const struct dpt_fuse_plan *p, struct dpt_fuse_range *out,
                                 int *last);

/* One line per op, "fwd  12 sbr_conv_stats layer1.0.conv2 [bn layer1.0.bn1 relu] ...", for logs. */
void dpt_cuda_fuse_print(const struct dpt_model *m, const struct dpt_fuse_plan *plan, void *file /* FILE * */);

#endif /* DPT_CUDA_FUSE_H */
