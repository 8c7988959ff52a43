/* dpt_cudnn_graph.h — the fused step's cuDNN operation graphs through the backend (graph)
 * API, C only (cudnnBackend* of cudnn_graph.h, cuDNN 9), issue 15.
 *
 * Each pattern of the fusion plan (dpt_cuda_fuse.h) becomes one operation graph over NHWC
 * tensors: activations and weights in the storage type (fp16 / bf16, or fp32 with TF32 tensor
 * cores allowed unless tf32 = 0, the FMA-only oracle), per-channel vectors and every virtual
 * intermediate in fp32, convolutions computing in fp32:
 *
 *   CONV_STATS        Y = conv(X, W); SUM, SQSUM of Y                    ConvFwd + GenStats
 *   SBR_CONV_STATS    Y = conv(relu?(X*S + B), W); SUM, SQSUM of Y       (ConvBNfprop)
 *   BN_FINALIZE       SUM, SQSUM, GAMMA, BETA, RMEAN/RVAR (in place) -> EQ_SCALE, EQ_BIAS,
 *                     SAVED_MEAN, SAVED_ISTD (eps, momentum, count: by value)  BN finalize
 *   SBR_APPLY         Y = relu?(X*S + B)
 *   SBAR              Y = relu?(X*S + B + R)
 *   DSBAR             Y = relu?(X*S + B + X2*S2 + B2)
 *   DBN_WEIGHT        G = relu'(Y) * DY (written when fork), DGAMMA, DBETA, C_DY, C_X, C_B of
 *                     BN backward on (G, X, SAVED_MEAN, SAVED_ISTD, GAMMA)  (DReluForkDBn)
 *   DBN_APPLY         DX = C_DY*G + C_X*X + C_B, G recomputed as relu'(Y)*DY when relu
 *   DGRAD_DRELU_DBN   G = relu'((X - MEAN)*ISTD*GAMMA + BETA) * dgrad(DY, W), written; dBN
 *                     weight of (G, X)                                   (DgradDreluBNBwdWeight)
 *   DGRAD             DX = dgrad(DY, W) (+ DX when accumulate: beta 1)
 *   WGRAD             DW = wgrad(DY, X)
 *   SBR_WGRAD         DW = wgrad(DY, relu?(X*S + B))                     (ConvBNwgrad)
 *   FPROP             Y = conv(X, W)                     (the default path's plain convolutions)
 *
 * FPROP, DGRAD and WGRAD may also be NCHW (nchw = 1: activations NCHW, filters KCRS), for the
 * default path's fp32 layout (dpt_cuda_convg.c); the other patterns are NHWC only.  With
 * deterministic = 1 a config whose notes say nondeterministic, FFT or Winograd is refused and
 * the heuristics' first config that builds is taken, untimed (the oracle tests' rule: every
 * output a sum of products, the same bits every run); the key says "det".
 *
 * dpt_cg_build: the graph, then its engine config: the engine cache's choice for its key when
 * there is one (rebuilt and checked: a stale entry is timed again), else the heuristics'
 * candidates (CUDNN_HEUR_MODE_A's list followed by FALLBACK's, merged as cudnn-frontend's
 * create_execution_plans({A, FALLBACK}) does, a config both offer tried once; engine choice
 * in dpt_cudnn_engine.c), minus the errata's blocked ones, minus
 * those above the workspace limit (and, for the fp32 oracle, those with tensor-core or
 * down-converting numerical notes), the first max_candidates of them timed on the caller's
 * buffers (a warm-up run, then the median of 3 runs with CUDA events), the fastest kept and
 * stored in the cache.  No supporting engine: DPT_E_UNSUPPORTED saying why, so the caller
 * runs the pattern's layers on the legacy calls instead.  Every cuDNN status is checked;
 * messages name the call, the layer, the pattern, the shape, the type and the device.
 * dpt_cg_execute runs a built op with a variant pack of the caller's pointers. */
#ifndef DPT_CUDNN_GRAPH_H
#define DPT_CUDNN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <cudnn_graph.h> /* the backend (graph) API only: nothing of the legacy API */

#include "dpt_cudnn_errata.h"
#include "dpt_engine_cache.h"
#include "dpt_err.h"

enum dpt_cg_pattern {
  DPT_CG_CONV_STATS, DPT_CG_SBR_CONV_STATS, DPT_CG_BN_FINALIZE, DPT_CG_SBR_APPLY, DPT_CG_SBAR, DPT_CG_DSBAR,
  DPT_CG_DBN_WEIGHT, DPT_CG_DBN_APPLY, DPT_CG_DGRAD_DRELU_DBN, DPT_CG_DGRAD, DPT_CG_WGRAD, DPT_CG_SBR_WGRAD,
  DPT_CG_FPROP, DPT_CG_NPATTERNS
};
const char *dpt_cg_pattern_name(int pattern);

enum { DPT_CG_F32 = 0, DPT_CG_F16 = 1, DPT_CG_BF16 = 2 }; /* = DPT_DT_* / DPT_OPT_* */

/* The tensors of the patterns: the caller's pointers come in this order (NULL for unused). */
enum dpt_cg_slot {
  DPT_CG_X, DPT_CG_W, DPT_CG_Y, DPT_CG_S, DPT_CG_B, DPT_CG_R, DPT_CG_X2, DPT_CG_S2, DPT_CG_B2,
  DPT_CG_SUM, DPT_CG_SQSUM, DPT_CG_GAMMA, DPT_CG_BETA, DPT_CG_RMEAN, DPT_CG_RVAR,
  DPT_CG_RMEAN_NEXT, DPT_CG_RVAR_NEXT, /* BN finalize's updated running statistics: not RMEAN / RVAR's memory */
  DPT_CG_EQ_SCALE, DPT_CG_EQ_BIAS, DPT_CG_MEAN, DPT_CG_ISTD,
  DPT_CG_DY, DPT_CG_G, DPT_CG_DX, DPT_CG_DW, DPT_CG_DGAMMA, DPT_CG_DBETA, DPT_CG_C_DY, DPT_CG_C_X, DPT_CG_C_B,
  DPT_CG_NSLOTS
};
const char *dpt_cg_slot_name(int slot);

struct dpt_cg_desc {
  int pattern;          /* enum dpt_cg_pattern */
  int n, c, h, w;       /* X (conv input; the tensor of pointwise / BN patterns), NHWC in memory (or nchw) */
  int k, r, stride, pad;/* convolution: K filters r x r (square), stride, symmetric padding */
  int io;               /* DPT_CG_*: activations, weights, gradients */
  int sb;               /* DPT_CG_*: S, B (and S2, B2), BN_FINALIZE's EQ_SCALE / EQ_BIAS; usually F32 */
  int relu;             /* the ReLU / ReLU backward of the pattern */
  int fork;             /* DBN_WEIGHT: write G */
  int accumulate;       /* DGRAD: DX += (beta 1) */
  int tf32;             /* io F32: allow TF32 tensor cores (0: FMA engines only) */
  double eps, momentum; /* BN_FINALIZE (momentum as PyTorch's: running = (1 - m) running + m batch) */
  int nchw;             /* FPROP / DGRAD / WGRAD: activations NCHW, filters KCRS (0: NHWC, KRSC) */
  int deterministic;    /* sums of products only, same bits every run: the heuristics' first such config */
  const char *layer;    /* for messages */
};

struct dpt_cg_ctx {
  cudnnHandle_t dnn;            /* its stream is the one timed and executed on */
  int device;
  long cudnn_version;           /* cudnnGetVersion() */
  struct dpt_engine_cache *cache;           /* NULL: no cache */
  const struct dpt_cudnn_errata *errata;    /* NULL: nothing blocked */
  void *workspace;              /* device buffer for tuning and execution */
  size_t workspace_limit;       /* its bytes: configs needing more are skipped */
  int max_candidates;           /* configs timed per graph (0: 8) */
  int max_tries;                /* execution plans finalized per graph, timed or not (0: 16) */
  int no_runtime_compilation;   /* 1: configs whose engine compiles its kernels at run time (NVRTC; seconds
                                   per plan) are not tried: the default path's plain convolutions */
  struct dpt_cg_stats *stats;   /* NULL: not counted */
  int probe;                    /* dpt_cuda_fstep_build: ops whose key the cache knows to build are not
                                   built (the rounds after a denial search only unknown keys; then one
                                   round builds all; the first round builds all as it goes) */
};

/* What the engine search cost (summed over dpt_cg_build calls). */
struct dpt_cg_stats {
  int builds, from_cache, timed, no_engine, no_engine_known, capped;
  int fallback;                 /* of the timed choices, those from FALLBACK's list (A did not offer them) */
  int unaligned;                /* builds refused: an operand not DPT_CG_ALIGN-aligned */
  long plans;                   /* execution plans finalized (cudnnBackendFinalize: the costly call) */
};

#define DPT_CG_MAX_DESC 96
/* Bytes: every tensor of a graph promises it (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), so engines may
 * use 16-byte vector loads; an operand that breaks it would fault (a sticky "misaligned
 * address") instead of failing.  The arena and the 16-bit weight copies are 256-aligned; a
 * parameter, gradient or running statistic in the fp32 slabs sits at the model's offset, a
 * multiple of 16 bytes only while the channel counts before it are multiples of 4. */
#define DPT_CG_ALIGN 16

/* A variant pack kept for the next execution with the same pointers and workspace (no descriptor
 * work per step).  An op has one; a caller running one op on several operand sets (the default
 * path's convolutions: one op per shape, many layers) keeps one per set. */
struct dpt_cg_vp {
  void *vp;                      /* cudnnBackendDescriptor_t, NULL */
  void *ptr[DPT_CG_NSLOTS], *ws;
};
void dpt_cg_vp_free(struct dpt_cg_vp *v);

struct dpt_cg_op {
  struct dpt_cg_desc d;
  char key[DPT_ENGINE_KEY_MAX];  /* engine-cache key: pattern, shapes, types, layout */
  char tag[160];                 /* errata operation tag, e.g. "Mul_Add_ReluFwd_ConvFwd_GenStats" */
  void *graph, *plan;            /* cudnnBackendDescriptor_t */
  void *keep[DPT_CG_MAX_DESC];   /* tensors, operations, sub-descriptors the graph refers to */
  int n_keep;
  int n_uids;
  int64_t uid[DPT_CG_NSLOTS];    /* variant-pack uids of the slots the graph uses */
  int slot[DPT_CG_NSLOTS];       /* ... and which slot each is */
  int n_byvalue;                 /* BN_FINALIZE: eps, momentum, count */
  int64_t byvalue_uid[3];
  double eps, momentum;
  int64_t count;
  size_t workspace;              /* bytes the plan needs */
  struct dpt_engine_choice choice;
  int from_cache;                /* 1: the engine came from the cache */
  int n_timed;                   /* candidates timed (0 from the cache) */
  struct dpt_cg_vp vp;           /* the last execution's variant pack (dpt_cg_execute) */
};

/* The engine-cache key of a description (no device needed). */
void dpt_cg_key(const struct dpt_cg_desc *d, char *out, size_t len);
/* BN finalize reads the running statistics (RMEAN, RVAR: [C] fp32 each) and writes their update
 * to RMEAN_NEXT, RVAR_NEXT: cuDNN's graph API gives them two tensors and documents nothing of
 * one memory being both (issue 22: not in place unless shown allowed), so the caller keeps two
 * and copies the update back.  The first NEXT slot whose [C] overlaps RMEAN's or RVAR's, -1 when none or
 * not BN finalize (no device needed); dpt_cg_build and dpt_cg_execute refuse such operands
 * (DPT_E_INPUT). */
int dpt_cg_aliased(const struct dpt_cg_desc *d, void *const *ptrs);
/* The first slot op's graph uses whose pointer in ptrs is not DPT_CG_ALIGN-aligned, -1 when
 * none (no device needed).  dpt_cg_build refuses such operands (DPT_E_UNSUPPORTED: the caller
 * runs the layer on the legacy calls; nothing stored in the cache, another layer of the key
 * may be aligned), dpt_cg_execute too (DPT_E_INPUT), before cuDNN sees them. */
int dpt_cg_misaligned(const struct dpt_cg_op *op, void *const *ptrs);

/* Build, choose the engine (timing on ptrs[DPT_CG_NSLOTS], device buffers of every slot the
 * pattern uses, contents arbitrary but finite) and plan.  DPT_E_UNSUPPORTED: no engine
 * supports the pattern here (the reason in err; the caller falls back to legacy calls);
 * DPT_E_INPUT: a description that makes no sense; DPT_E_RUNTIME: a cuDNN / CUDA failure. */
int dpt_cg_build(struct dpt_cg_ctx *ctx, const struct dpt_cg_desc *d, void *const *ptrs, struct dpt_cg_op *op,
                 struct dpt_err *err);
/* Run on the handle's stream with ptrs (as for build) and ctx->workspace. */
int dpt_cg_execute(const struct dpt_cg_ctx *ctx, struct dpt_cg_op *op, void *const *ptrs, struct dpt_err *err);
/* The same with the caller's variant-pack cache vc (its uids are the pattern's: any op of that
 * pattern and description may use it). */
int dpt_cg_execute_vp(const struct dpt_cg_ctx *ctx, struct dpt_cg_op *op, void *const *ptrs, struct dpt_cg_vp *vc,
                      struct dpt_err *err);
void dpt_cg_destroy(struct dpt_cg_op *op);

#endif /* DPT_CUDNN_GRAPH_H */
