/* dpt_cudnn_engine.h — inside the cuDNN graph module (callers use dpt_cudnn_graph.h): what
 * dpt_cudnn_graph.c (the graphs) and dpt_cudnn_engine.c (their engine configs, plans and
 * execution) share. */
#ifndef DPT_CUDNN_ENGINE_H
#define DPT_CUDNN_ENGINE_H

#include "dpt_cudnn_graph.h"

/* op's graph is built (op->graph, its slots and tag): give it an execution plan (op->plan,
 * workspace, choice, from_cache, n_timed).  The engine cache's choice for op->key when it still
 * builds; else the configs of heuristics mode A followed by those of mode FALLBACK (as
 * cudnn-frontend's create_execution_plans({A, FALLBACK}) lists them), a config offered by both
 * tried once, filtered (errata, numerical notes, run-time compilation, workspace) and the first
 * ctx->max_candidates timed on ptrs.  Errors as dpt_cg_build's; op is left for the caller to
 * destroy. */
int dpt_cg_engine_choose(struct dpt_cg_ctx *ctx, struct dpt_cg_op *op, void *const *ptrs, struct dpt_err *err);

/* err set to "cudnn graph: CALL failed in layer L (pattern, shape) on device N: WHY: cuDNN's
 * last error"; returns code. */
int dpt_cg_fail(const struct dpt_cg_ctx *ctx, const struct dpt_cg_desc *d, struct dpt_err *err, int code,
                const char *call, const char *why);
int dpt_cg_status_code(cudnnStatus_t s); /* DPT_E_UNSUPPORTED for the NOT_SUPPORTED category, else DPT_E_RUNTIME */
int dpt_cg_is_conv(int pattern);
int dpt_cg_missing_ptr(const struct dpt_cg_op *op, void *const *ptrs); /* the first slot op uses with no pointer, -1 */
void dpt_cg_release(cudnnBackendDescriptor_t d);                        /* destroys d unless NULL */

#endif /* DPT_CUDNN_ENGINE_H */
