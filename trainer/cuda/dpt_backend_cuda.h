/* dpt_backend_cuda.h — the CUDA backend: cuDNN 9 (legacy convolution / batch
 * norm / activation / pooling API, and its graph API for the fused step), cuBLAS for
 * the FC layer, our kernels for loss, the fused optimizer, casts and gradient packing.
 * Implements struct dpt_backend_ops
 * (dpt_backend.h) with host_slabs = 0: params / grads / state are DEVICE
 * pointers (one cudaMalloc each: the all-reduce moves one buffer), reached
 * from the host with copy_slab().
 *
 * One rank drives one GPU: the device is opts.device, else DPT_CUDA_DEVICE
 * (set by dpt_bind next to CUDA_VISIBLE_DEVICES), else 0.  Without a usable
 * device, creation fails at once with DPT_E_UNSUPPORTED and a message naming
 * cudaGetDeviceCount's error.
 *
 * Streams and synchronisation: all work runs on the backend's stream, the
 * input uploads on a second one.  A training step waits for nothing:
 * forward(out = NULL) uploads pinned images (dpt_backend_host_alloc) in place
 * and copies pageable ones into one of NSTAGE pinned staging slots
 * (cudaHostAlloc at the first pageable batch; the slot's upload of two steps
 * ago is done by then, a wait there that blocks is counted in
 * dpt_backend_cuda_stage_waits), then enqueues the DMA behind the previous
 * step's input cast; ops->pinned_bytes counts the page-locked memory; loss() does the
 * same with the labels and keeps the loss totals on the device; backward()
 * only ENQUEUES (unless dx is asked for), so gradient buckets can be
 * all-reduced while the GPU is still computing: with dpt_backend_set_buckets,
 * backward records an event right after each bucket's lowest layer and hands
 * it to the hook, which queues the bucket's all-reduce behind it
 * (dpt_comm_start_after: the NCCL stream waits for the event, the host does
 * not); sgd_step and the mixed-precision overflow check and loss-scale update
 * are kernels.  The host waits in loss_totals() (once per log interval),
 * forward(out) / backward(dx), copy_slab(), sync() and the helpers below;
 * every such wait is counted (dpt_backend_cuda_host_syncs).  With
 * DPT_CUDA_SYNC_DEBUG=1 every layer is synchronised so an asynchronous fault
 * names its layer.
 *
 * Device input (ops->input_format / ops->forward_device, dpt_backend.h): the input
 * tensor's format is the plan's (dpt_cuda_plan_input_format: NHWC in the compute
 * type, the stem's channels padded to 8 in fp16 / bf16) on this device, and its
 * stream.  The GPU loader writes batches in exactly that format
 * (dpt_loader_opts_for_format), so forward_device makes no copy: the stream waits
 * for the batch's ready event (if any) and the layers read the loader's buffer in
 * place as tensor 0, up to the first convolution's weight gradient in backward; the
 * loader's release event, recorded on this stream at its next dpt_loader_next_device,
 * is the "consumed" point its refill waits for.  The buffer therefore changes from
 * step to step (the loader's ring); forward() from the host puts tensor 0 back in the
 * arena.
 *
 * Layout: NHWC, convolutions on KRSC weight copies in the compute type (fp32, fp16 or
 * bf16), written by the fused optimizer (dpt_cuda_optim: one launch per step does the fp32
 * update and the copies; a copy-only launch after the host puts parameters in the slab).
 * fp32 runs NCHW by default (DPT_CUDA_LAYOUT=auto|nhwc|nchw; nchw: tf32 too), on the
 * slabs' own KCRS weights and gradients, with no copy: cuDNN's float NHWC kernels were
 * slow on the first GPU visit (bench/results/gpu-check-h200.md).
 * bf16 (--precision bf16): bf16 activations and weights, no loss scaling.
 * Mixed precision: activations and conv/FC weights in fp16 NHWC (the fused
 * optimizer's copies), tensor-core math, the FC output
 * (logits) and every parameter gradient in fp32; activation gradients carry
 * the loss scale, read on the device (struct dpt_loss_scaler in device
 * memory, dpt_loss_scale.h), and the parameter gradients are unscaled by slab
 * ranges during backward (each bucket before its event).  The caller runs
 * the overflow check (ops->overflow_check = dpt_backend_cuda_check_overflow)
 * AFTER the all-reduce, so every rank sees the same answer: the skip and the
 * scaler's update happen on the device.
 *
 * Issue 15 (docs/gpu-fusion.md), behind switches (struct dpt_cuda_opts, off by default): the
 * fused step (fuse: the fusion plan's ops through cuDNN graphs, dpt_cuda_fstep) and CUDA-graph
 * capture of the steps announced with ops->step_begin (graph: dpt_cuda_capture, dpt_cuda_graph). */
#ifndef DPT_BACKEND_CUDA_H
#define DPT_BACKEND_CUDA_H

#include <stddef.h>

#include "dpt_backend.h"
#include "dpt_cuda_plan.h"

/* --fuse / --cuda-graph: off, on, auto. */
enum dpt_cuda_switch { DPT_CUDA_OFF = 0, DPT_CUDA_ON = 1, DPT_CUDA_AUTO = 2 };
/* "off", "on", "auto" -> the switch; -1 when unknown. */
int dpt_cuda_switch_parse(const char *s);
/* DPT_CUDA_CONV: each convolution shape's directions on cudnnFind's algorithm or on a timed cuDNN
 * graph engine (dpt_cuda_convg.c). */
enum dpt_cuda_conv { DPT_CUDA_CONV_AUTO = 0, DPT_CUDA_CONV_LEGACY = 1, DPT_CUDA_CONV_GRAPH = 2 };
/* "auto", "legacy", "graph" -> the choice; -1 when unknown. */
int dpt_cuda_conv_parse(const char *s);

struct dpt_cuda_opts {
  enum dpt_cuda_precision precision; /* default fp32 (DPT_CUDA_PRECISION=fp32|tf32|mixed|bf16) */
  int fuse;              /* enum dpt_cuda_switch (default off; DPT_CUDA_FUSE): the fused step (issue 15):
                            the fusion plan's ops through cuDNN graphs (dpt_cuda_fstep.h), each pattern
                            without an engine here back on the legacy calls (said in the notes); auto:
                            on at tf32 / mixed / bf16, off at fp32 (the FMA-only oracle); off: the
                            unfused step, one legacy call sequence per layer (the oracle of the tests).
                            Off by default until trainer.gpu.fused_vs_unfused has passed on a GPU. */
  int graph;             /* enum dpt_cuda_switch (default off; DPT_CUDA_GRAPH): steps announced with
                            ops->step_begin captured in CUDA graphs once per key (dpt_cuda_capture.h)
                            after one eager run, then replayed; auto: where the step can be captured
                            (else as it comes, said once); on: also, but DPT_CUDA_SYNC_DEBUG refuses.
                            Off by default until trainer.gpu.graph has passed on a GPU. */
  const char *engine_cache_dir; /* NULL: the engine cache's default location (dpt_engine_cache.h) */
  int device;            /* -1: DPT_CUDA_DEVICE or 0 */
  size_t workspace_cap;  /* bytes, cap on the shared conv workspace (default 512 MiB; 0 = none) */
  int algo_search;       /* 1: cudnnFind*AlgorithmEx (measured, default); 0: Get*_v7 heuristics */
  int deterministic;     /* 1: the oracle tests' algorithms: deterministic sums of products (no FFT, Winograd);
                            with algo_search 0, dpt-train --deterministic (bitwise reproducible runs) */
  int conv;              /* enum dpt_cuda_conv (DPT_CUDA_CONV, default auto): per convolution shape and
                            direction, after cudnnFind's choice, the FPROP / DGRAD / WGRAD cuDNN graph timed
                            against it on the same buffers and the faster kept; legacy: cudnnFind's only;
                            graph: the graph wherever one builds.  Deterministic options: auto is legacy,
                            graph takes the heuristics' first deterministic sum-of-products config. */
  float loss_scale;      /* mixed: initial loss scale (default 65536) */
};
void dpt_cuda_opts_default(struct dpt_cuda_opts *o);

/* 1 when cudaGetDeviceCount succeeds with at least one device; otherwise 0 and
 * why[] says what CUDA answered. */
int dpt_cuda_device_usable(char *why, size_t why_len);
/* Stronger (what --backend auto asks): the device the backend would use
 * (DPT_CUDA_DEVICE, else 0) takes cudaSetDevice and a 256-byte
 * cudaMalloc/cudaFree (a context is created: a broken driver or an
 * exclusive-mode device taken by another process fail here).  1 when it works; otherwise 0 and why[] names the failing call. */
int dpt_cuda_device_works(char *why, size_t why_len);

/* dpt_backend_create("cuda") calls this with dpt_cuda_opts_default(). */
int dpt_backend_cuda_create(const struct dpt_model *model, const struct dpt_backend_opts *opts,
                            struct dpt_backend **out, struct dpt_err *err);
int dpt_backend_cuda_create_ex(const struct dpt_model *model, const struct dpt_backend_opts *opts,
                               const struct dpt_cuda_opts *copts, struct dpt_backend **out,
                               struct dpt_err *err);

/* The fused step's counts (0 when it is off): fused ops run through cuDNN graphs, their engines
 * taken from the engine cache / chosen by timing at creation, fused ops on own kernels (the
 * shortcut-gradient accumulation, a dBN weight no engine takes), layers kept on legacy calls
 * because a pattern had no engine.  Graph capture: graphs instantiated and launched so far. */
struct dpt_cuda_fusion_info {
  int fused, graph_ops, from_cache, timed, own_ops, legacy_layers;
  int graph;
  long graphs_captured, graphs_launched;
};
void dpt_backend_cuda_fusion_info(const struct dpt_backend *be, struct dpt_cuda_fusion_info *info);

/* The plan the backend runs (shapes, layouts, memory). */
const struct dpt_cuda_plan *dpt_backend_cuda_plan(const struct dpt_backend *be);
/* Chosen algorithms of convolution shape s (cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t)
 * and their workspace bytes. */
int dpt_backend_cuda_algos(const struct dpt_backend *be, int shape, int algo[3], size_t ws[3]);
/* Which directions of convolution shape s run on a cuDNN graph engine instead (DPT_CUDA_CONV;
 * forward, data gradient written, accumulated, weight gradient: on[] 1 / 0) and the medians both
 * were timed at (ms; -1 where not timed).  Returns how many run on graphs, or DPT_E_INPUT (< 0). */
int dpt_backend_cuda_conv_graphs(const struct dpt_backend *be, int shape, int on[4], float ms_legacy[4],
                                 float ms_graph[4]);
/* Peak of the bytes this backend had allocated (including the algorithm
 * search's temporary workspace) and the shared workspace size. */
size_t dpt_backend_cuda_peak_bytes(const struct dpt_backend *be);
size_t dpt_backend_cuda_workspace_bytes(const struct dpt_backend *be);

/* Softmax cross-entropy on the device over the last forward's logits
 * (dpt_softmax_xent semantics; labels host [batch]).  Writes the output
 * gradient on the device: then call dpt_backend_backward(be, NULL, ...).
 * Returns the SUM of the per-image losses in *loss_sum; top1/top5 optional.
 * Waits for them (tests); the training loop's ops->loss does not, and keeps
 * the totals on the device until ops->loss_totals. */
int dpt_backend_cuda_loss(struct dpt_backend *be, const int *labels, float smoothing,
                          float grad_scale, double *loss_sum, int *top1, int *top5,
                          struct dpt_err *err);

/* Momentum SGD on the device slabs (dpt_sgd_step semantics).  mask: host
 * [n_params] weight-decay mask or NULL (uploaded on the first call).  The
 * velocity lives on the device, zero at first; copy it with
 * dpt_backend_cuda_copy_velocity (checkpoints). */
int dpt_backend_cuda_sgd_step(struct dpt_backend *be, float lr, float momentum,
                              float weight_decay, int nesterov, const unsigned char *mask,
                              struct dpt_err *err);
int dpt_backend_cuda_copy_velocity(struct dpt_backend *be, float *host /* [n_params] */,
                                   int to_backend, struct dpt_err *err);

/* Host waits for the work just enqueued (cudaStreamSynchronize) so far: the tests count
 * them per step (ops->host_waits). */
long dpt_backend_cuda_host_syncs(const struct dpt_backend *be);
/* Waits for a pinned staging slot whose upload of NSTAGE (2) steps ago was not done yet:
 * the host running ahead of the GPU, throttled (the GPU still has the steps in between). */
long dpt_backend_cuda_stage_waits(const struct dpt_backend *be);

/* Bytes kept free next to the plan (dpt_cuda_plan_fit's reserve): the workspace
 * cap and 256 MiB for the cuDNN / cuBLAS handles. */
size_t dpt_cuda_memory_reserve(size_t workspace_cap);

/* Mixed precision (the scaler: ops->scaler_get / scaler_set). */
/* *finite = 1 when every element of buf (device [n_params]; NULL: the gradient slab) is finite
 * (waits; tests). */
int dpt_backend_cuda_grads_finite(struct dpt_backend *be, const float *buf, int *finite, struct dpt_err *err);
/* ops->overflow_check: the same check with no host wait: sets the device overflow flag,
 * updates the device loss scaler with it (dpt_loss_scaler_update), and the next sgd_step
 * is skipped on the device when it is set.  DPT_E_INPUT outside mixed precision. */
int dpt_backend_cuda_check_overflow(struct dpt_backend *be, const float *buf, struct dpt_err *err);

#endif /* DPT_BACKEND_CUDA_H */
