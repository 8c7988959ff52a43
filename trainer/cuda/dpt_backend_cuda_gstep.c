/* dpt_backend_cuda_gstep.c — the cuda backend's side of CUDA-graph steps (--cuda-graph): each
 * call's items against the announced step's capture plan, segments begun, ended and launched,
 * ops->step_begin and ops->join.  The graphs themselves are dpt_cuda_graph.c's, the plan
 * dpt_cuda_capture.c's. */
#include "dpt_backend_cuda_priv.h"

/* ---- CUDA-graph steps (--cuda-graph; the decisions are dpt_cuda_capture's) ---------------- *
 * A step announced with ops->step_begin goes through its capture plan item by item
 * (dpt_cuda_gstep_item): eager the first time its key is seen (every call does its work), captured the
 * second (the segment's work is recorded from its first item to its last, then instantiated and
 * launched), replayed after that (the calls do their host points only and launch the graphs).
 * The host points stay outside the graphs: the uploads of the batch and the labels go on the
 * upload stream and the compute stream waits for them right before it launches a segment (an
 * eager step: before the work); the learning rate is written to lr_dev before the first
 * segment; the events the uploads wait for (in_free, lab_free) are recorded inside the graph as
 * external events. */

static int pre_wait_flush(struct cu_backend *cb, struct dpt_err *err)
{
  int rc = 0;
  for (int i = 0; i < cb->n_pre_wait; i++)
    CUDA_CK(cudaStreamWaitEvent, (cb->stream, cb->pre_wait[i], 0), -1, "upload of the step's batch");
  cb->n_pre_wait = 0;
  return 0;
fail:
  return rc;
}

void dpt_cuda_gstep_wait(struct cu_backend *cb, cudaEvent_t ev)
{
  if (cb->n_pre_wait < (int)(sizeof cb->pre_wait / sizeof *cb->pre_wait)) cb->pre_wait[cb->n_pre_wait++] = ev;
}

/* Item (kind, index) of the announced step is next: *act, what to do with its work.  A
 * captured segment begins before its first item; its last item leaves it to dpt_cuda_gstep_end. */
int dpt_cuda_gstep_item(struct cu_backend *cb, int kind, int index, int *act, struct dpt_err *err)
{
  int seg, first, last, rc;
  *act = DPT_CAPA_RUN;
  if (!cb->gstep) return 0;
  if ((rc = dpt_cuda_capture_item(&cb->cap, kind, index, act, &seg, &first, &last, err))) return rc;
  if (*act == DPT_CAPA_RECORD && first && (rc = dpt_cuda_graphs_begin(&cb->graphs, cb->stream, cb->gslot, seg, err)))
    return rc;
  if ((*act == DPT_CAPA_RECORD || *act == DPT_CAPA_SKIP) && last) cb->launch_seg = seg;
  if (*act == DPT_CAPA_RUN && kind < DPT_HOST_INPUT) return pre_wait_flush(cb, err); /* eager: wait now */
  return 0;
}

/* The end of a backend call in a graph step (rc: its status so far): a segment whose last item
 * it did ends (capture: instantiated) and is launched after the uploads; when the backend's
 * part of the step is done, graph mode ends.  An error drops the step and its capture. */
int dpt_cuda_gstep_end(struct cu_backend *cb, int rc, struct dpt_err *err)
{
  int seg = cb->launch_seg;
  cb->launch_seg = -1;
  if (!rc && seg >= 0) {
    if (cb->gmode == DPT_CAPM_CAPTURE) rc = dpt_cuda_graphs_end(&cb->graphs, cb->stream, err);
    if (!rc) rc = pre_wait_flush(cb, err);
    if (!rc) rc = dpt_cuda_graphs_launch(&cb->graphs, cb->stream, cb->gslot, seg, err);
  }
  if (rc) {
    dpt_cuda_graphs_abort(&cb->graphs, cb->stream);
    dpt_cuda_capture_abort(&cb->cap);
    if (cb->gslot >= 0 && cb->gmode == DPT_CAPM_CAPTURE) { /* not kept: eager, then captured again */
      cb->cap.slot[cb->gslot].captured = 0;
      cb->cap.slot[cb->gslot].seen = 0;
      dpt_cuda_graphs_drop(&cb->graphs, cb->gslot);
    }
    cb->gstep = 0;
    cb->n_pre_wait = 0;
    return rc;
  }
  if (!cb->cap.in_step) cb->gstep = 0;
  return 0;
}

/* ops->join: the update waits for a device communicator's all-reduces (no host wait). */
int dpt_cuda_gstep_join(struct dpt_backend *be, void *event, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int rc = 0, act;
  CUDA_CK(cudaSetDevice, (cb->dev), -1, "join");
  if ((rc = dpt_cuda_gstep_item(cb, DPT_CAP_JOIN, -1, &act, err))) goto fail;
  if (act != DPT_CAPA_SKIP && event)
    CUDA_CK(cudaStreamWaitEvent, (cb->stream, (cudaEvent_t)event, 0), -1, "the communicator's all-reduces");
fail:
  return cb->gstep ? dpt_cuda_gstep_end(cb, rc, err) : rc;
}

/* ops->step_begin: what the next calls are (dpt_cuda_capture.h) when --cuda-graph is on. */
int dpt_cuda_gstep_begin(struct dpt_backend *be, const struct dpt_cap_step *s, float lr, struct dpt_err *err)
{
  struct cu_backend *cb = CB(be);
  int mode, slot, evict, rc;
  if (!be->graph) return 0;
  if (cb->graphs.capturing) dpt_cuda_graphs_abort(&cb->graphs, cb->stream); /* an unfinished step */
  cb->gstep = 0;
  cb->launch_seg = -1;
  cb->n_pre_wait = 0;
  if ((rc = dpt_cuda_capture_begin(&cb->cap, s, &mode, &slot, &evict, err))) return rc;
  if (evict >= 0) dpt_cuda_graphs_drop(&cb->graphs, evict);
  if (!cb->cap.in_step) { /* a step the backend cannot capture: as it comes, said once */
    if (!cb->said_uncaptured) {
      fprintf(stderr, "dpt-train: cuda backend: --cuda-graph: steps run uncaptured: %s\n",
              dpt_cuda_capture_unsupported(s));
      cb->said_uncaptured = 1;
    }
    return 0;
  }
  cb->gstep = 1;
  cb->gmode = mode;
  cb->gslot = slot;
  cb->step = *s;
  cb->step_lr = lr;
  return 0;
}
