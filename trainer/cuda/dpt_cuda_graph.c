/* dpt_cuda_graph.c — the captured CUDA graphs of the cuda backend's steps (see dpt_cuda_graph.h). */
#include "dpt_cuda_graph.h"

static int cuda_fail(struct dpt_err *err, const char *call, cudaError_t e, int slot, int segment)
{
  return dpt_err_set(err, DPT_E_RUNTIME, "CUDA graph: %s failed for segment G%d of key slot %d: %s (%s); run with "
                     "--cuda-graph off", call, segment, slot, cudaGetErrorString(e), cudaGetErrorName(e));
}

static int in_range(int slot, int segment)
{
  return slot >= 0 && slot < DPT_CAP_MAX_KEYS && segment >= 0 && segment < DPT_CUDA_GRAPH_SEGMENTS;
}

int dpt_cuda_graphs_begin(struct dpt_cuda_graphs *g, cudaStream_t s, int slot, int segment, struct dpt_err *err)
{
  cudaError_t e;
  if (!in_range(slot, segment) || g->capturing)
    return dpt_err_set(err, DPT_E_INPUT, "CUDA graph: capture of G%d (slot %d) asked %s", segment, slot,
                       g->capturing ? "while another capture is open" : "out of range");
  /* relaxed: the host points in the middle of a segment (the labels' staging waits for its slot's
   * event, the host communicator's calls, MPI's pointer queries) and the loader's and the
   * communicator's threads keep using CUDA; the segment's own work is all stream-ordered */
  if ((e = cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed)) != cudaSuccess)
    return cuda_fail(err, "cudaStreamBeginCapture", e, slot, segment);
  g->capturing = 1;
  g->slot = slot;
  g->segment = segment;
  return 0;
}

int dpt_cuda_graphs_end(struct dpt_cuda_graphs *g, cudaStream_t s, struct dpt_err *err)
{
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaError_t e;
  int slot = g->slot, segment = g->segment;
  if (!g->capturing) return dpt_err_set(err, DPT_E_INPUT, "CUDA graph: end of a capture that was not begun");
  g->capturing = 0;
  if ((e = cudaStreamEndCapture(s, &graph)) != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    return cuda_fail(err, "cudaStreamEndCapture (a call in the segment cannot be captured, or a stream forked "
                          "from it was not joined)", e, slot, segment);
  }
  e = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) return cuda_fail(err, "cudaGraphInstantiateWithFlags", e, slot, segment);
  if (g->exec[slot][segment]) cudaGraphExecDestroy(g->exec[slot][segment]);
  g->exec[slot][segment] = exec;
  g->captured++;
  return 0;
}

int dpt_cuda_graphs_launch(struct dpt_cuda_graphs *g, cudaStream_t s, int slot, int segment, struct dpt_err *err)
{
  cudaError_t e;
  if (!in_range(slot, segment) || !g->exec[slot][segment])
    return dpt_err_set(err, DPT_E_RUNTIME, "CUDA graph: no graph for segment G%d of key slot %d to replay", segment,
                       slot);
  if ((e = cudaGraphLaunch(g->exec[slot][segment], s)) != cudaSuccess)
    return cuda_fail(err, "cudaGraphLaunch", e, slot, segment);
  g->launched++;
  return 0;
}

void dpt_cuda_graphs_abort(struct dpt_cuda_graphs *g, cudaStream_t s)
{
  cudaGraph_t graph = NULL;
  if (!g->capturing) return;
  g->capturing = 0;
  if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  cudaGetLastError(); /* an invalidated capture leaves its error: the caller reports the first one */
}

void dpt_cuda_graphs_drop(struct dpt_cuda_graphs *g, int slot)
{
  for (int k = 0; k < DPT_CAP_MAX_KEYS; k++)
    for (int s = 0; s < DPT_CUDA_GRAPH_SEGMENTS; s++)
      if ((slot < 0 || k == slot) && g->exec[k][s]) {
        cudaGraphExecDestroy(g->exec[k][s]);
        g->exec[k][s] = NULL;
      }
}
