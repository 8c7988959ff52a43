/* dpt_cuda_fstep.h — the fused step's executor (issue 15): the cuda backend's --fuse path.
 *
 * Runs the ops of a fusion plan (dpt_cuda_fuse.h, the one dpt_cuda_plan_build_ex made with the
 * arena it lays out) that are not legacy layer ops: each through its cuDNN operation graph
 * (dpt_cudnn_graph.h: built once at start-up, the engine from the engine cache or timed, errata
 * respected), plus the few own kernels around them (the weight-gradient packing KRSC -> the
 * fp32 KCRS gradient slab after a wgrad, the shortcut-gradient accumulation, the eval-mode BN
 * scale/bias of a validation forward).  A dBN weight op whose graph no engine takes runs on an
 * own kernel with the graph's operands and rules (dpt_cuda_dbn.h: cuDNN runs BN_BWD_WEIGHTS only
 * after a dgrad), not on the legacy calls: its layer and every layer next to it stay fused.  The
 * legacy ops stay the backend's (its layer functions).
 *
 * Operands are resolved when an op runs, through the backend's resolver (struct
 * dpt_cuda_fstep_io): activations and their gradients in the arena (the input tensor may be
 * the loader's device batch), weight copies, the shared weight-gradient buffer, parameter /
 * gradient / state slabs, and each BN's vectors [10][C] (saved mean, inverse std, sum, sum of
 * squares, equivalent scale, bias, backward coefficients cy, cx, cb, and the equivalent scale and
 * bias in the I/O type for the prologue ops built to read them so: the BN region).
 *
 * Mixed precision: like the legacy calls, activation gradients carry the loss scale and the
 * parameter gradients come out scaled (the backend unscales them by slab ranges). */
#ifndef DPT_CUDA_FSTEP_H
#define DPT_CUDA_FSTEP_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "dpt_cuda_fuse.h"
#include "dpt_cuda_plan.h"
#include "dpt_cudnn_graph.h"
#include "dpt_err.h"
#include "dpt_model.h"

/* Indices into a BN layer's [10][C] vectors, C floats of room each; from DPT_FX_SUM on, the plan's
 * DPT_CUDA_BN_FUSED_VECS vectors in the BN region.  DPT_FX_EQ_IO's room holds the equivalent scale
 * then bias (EQ_SCALE, EQ_BIAS: adjacent) as 2C values of the 16-bit I/O type, cast in one launch;
 * DPT_FX_EQ_BIAS_IO (no room of its own) names the bias there, 2C bytes in. */
enum { DPT_FX_MEAN, DPT_FX_ISTD, DPT_FX_SUM, DPT_FX_SQSUM, DPT_FX_EQ_SCALE, DPT_FX_EQ_BIAS, DPT_FX_C_DY, DPT_FX_C_X,
       DPT_FX_C_B, DPT_FX_EQ_IO, DPT_FX_NVEC, DPT_FX_EQ_BIAS_IO = DPT_FX_NVEC };

enum dpt_fx_ref_kind {
  DPT_FXR_NONE = 0,
  DPT_FXR_ACT,    /* activation of tensor id */
  DPT_FXR_DIFF,   /* its gradient */
  DPT_FXR_W,      /* weight copy (KRSC, compute type) of conv layer id */
  DPT_FXR_WGRAD,  /* the shared KRSC weight-gradient buffer */
  DPT_FXR_PARAM,  /* parameter slab + off */
  DPT_FXR_GRAD,   /* gradient slab + off */
  DPT_FXR_STATE,  /* state slab + off */
  DPT_FXR_STATE_NEXT, /* the state slab's mirror + off (BN finalize's updated running statistics) */
  DPT_FXR_BNVEC,  /* BN layer id's vector off (DPT_FX_*) */
};
struct dpt_fx_ref {
  int kind, id;
  size_t off;
};

/* The backend's operands: resolve(ctx, ref) is the device pointer (NULL: none). */
struct dpt_cuda_fstep_io {
  void *(*resolve)(void *ctx, const struct dpt_fx_ref *r);
  void *ctx;
};

struct dpt_cuda_fstep_op {
  int fop;                             /* index in the fusion plan */
  int graph;                           /* 1: a cuDNN graph (cg), 0: an own kernel (grad_acc; dbn_weight
                                          without an engine: cg.d is its description, nothing built) */
  struct dpt_cg_op cg;
  struct dpt_fx_ref ref[DPT_CG_NSLOTS]; /* the graph's slot operands */
  int pack;                            /* wgrad: pack into the gradient slab afterwards */
  int sb_io;                           /* prologue op: scale / bias read in the I/O type */
};

struct dpt_cuda_fstep {
  const struct dpt_model *m;
  const struct dpt_cuda_plan *plan;    /* plan->fuse is the op list */
  struct dpt_cuda_fstep_io io;
  struct dpt_cg_ctx ctx;               /* its dnn handle's stream is the backend's */
  cudaStream_t stream;
  int io_type;                         /* DPT_CG_F32 / F16 / BF16 (= DPT_DT_*) */
  int tf32;
  double eps, momentum;
  int n;                               /* ops in op[] */
  int n_graph;                         /* of them run as cuDNN graphs (the rest: own kernels) */
  int n_own_dbn;                       /* dbn_weight ops on the own kernel (no engine for their graph) */
  char own_dbn_why[320];               /* cuDNN's reason for the first of them */
  struct dpt_cuda_fstep_op *op;        /* [n] the plan's non-legacy ops, plan order */
  int *index;                          /* [plan->fuse->n_ops] position in op[], -1 for legacy ops */
  size_t workspace;                    /* the largest workspace an op's plan (or own dBN kernel) needs */
  int from_cache, timed;               /* engines taken from the cache / chosen by timing */
  int probed;                          /* ops not built under ctx.probe: their key known to build */
  int n_prologue, n_sb_io;             /* prologue ops (sbr_conv_stats, sbr_wgrad) built; of them with
                                          their scale / bias in the I/O type */
  unsigned char *eq_io;                /* [m->n_layers] 1: a BN whose finalize also writes its scale /
                                          bias in the I/O type (DPT_FX_EQ_*_IO), for those ops */
  int run_last;                        /* plan index of the last BN finalize, -1: none */
  int n_run;
  struct dpt_fuse_range *run;          /* [n_run] the state ranges it updates: copied from the mirror
                                          to the slab after op run_last of a training forward */
};

/* Build every non-legacy op of plan->fuse (ctx: handle, device, cuDNN version, cache, errata,
 * tuning workspace; io: the operands, which must exist and hold finite values: the engines
 * are timed on them).  A dbn_weight op no engine takes is not a failure: it runs on the own
 * kernel (counted in n_own_dbn, cuDNN's reason in own_dbn_why; its partial sums in the shared
 * workspace, sized into fx->workspace).  DPT_E_UNSUPPORTED when no engine takes some other
 * ops: all of them are tried, failed[0, *n_failed) (room for plan->fuse->n_ops) are their plan
 * indices and err says the first one's reason (a prologue op is tried with its scale / bias in
 * the I/O type, then fp32); dpt_cuda_fuse_deny names the layers to keep on the legacy calls,
 * the caller plans again.  Other errors as dpt_cg_build's.  Everything built is destroyed
 * unless the result is 0. */
int dpt_cuda_fstep_build(struct dpt_cuda_fstep *fx, const struct dpt_model *m, const struct dpt_cuda_plan *plan,
                         const struct dpt_cg_ctx *ctx, cudaStream_t stream, const struct dpt_cuda_fstep_io *io,
                         double bn_eps, double bn_momentum, int *failed, int *n_failed, struct dpt_err *err);
/* Run plan op i (not a legacy op) on the stream.  training = 0 (validation): BN finalize is the
 * eval-mode scale/bias from the running statistics instead.  Training, after the last BN
 * finalize: the running statistics' update, written to the mirror (DPT_FXR_STATE_NEXT), copied
 * to the state slab (fx->run: one copy per range, usually one).  A BN finalize (either mode) of a BN
 * in eq_io also casts its scale / bias to the I/O type. */
int dpt_cuda_fstep_run(struct dpt_cuda_fstep *fx, int i, int training, struct dpt_err *err);
void dpt_cuda_fstep_destroy(struct dpt_cuda_fstep *fx);

#endif /* DPT_CUDA_FSTEP_H */
