/* dpt_cuda_graph.h — the captured CUDA graphs of the cuda backend's steps (issue 15, item 2).
 *
 * One executable graph per (key slot, segment) of dpt_cuda_capture's plans: captured from the
 * backend's stream (cudaStreamCaptureModeRelaxed: host points inside a segment and the loader's
 * and the communicator's threads keep using CUDA meanwhile), instantiated, launched; replayed on later steps with the
 * same key; dropped when its slot goes to another key.  The decisions (which step, which
 * segment, when) are dpt_cuda_capture's; this only holds the graphs. */
#ifndef DPT_CUDA_GRAPH_H
#define DPT_CUDA_GRAPH_H

#include <cuda_runtime.h>

#include "dpt_cuda_capture.h"
#include "dpt_err.h"

#define DPT_CUDA_GRAPH_SEGMENTS 4

struct dpt_cuda_graphs {
  cudaGraphExec_t exec[DPT_CAP_MAX_KEYS][DPT_CUDA_GRAPH_SEGMENTS];
  int capturing;           /* 1 between begin and end */
  int slot, segment;       /* of the capture in progress */
  long captured, launched; /* graphs instantiated / launches so far */
};

/* Start capturing segment `segment` of key slot `slot` on stream s. */
int dpt_cuda_graphs_begin(struct dpt_cuda_graphs *g, cudaStream_t s, int slot, int segment, struct dpt_err *err);
/* End the capture, instantiate it as the slot's segment (replacing an older one). */
int dpt_cuda_graphs_end(struct dpt_cuda_graphs *g, cudaStream_t s, struct dpt_err *err);
/* Launch the slot's segment on s.  DPT_E_RUNTIME when there is none (a bug: the plan says it was captured). */
int dpt_cuda_graphs_launch(struct dpt_cuda_graphs *g, cudaStream_t s, int slot, int segment, struct dpt_err *err);
/* A capture in progress ended and thrown away (an error in the middle of a segment). */
void dpt_cuda_graphs_abort(struct dpt_cuda_graphs *g, cudaStream_t s);
/* Destroy the graphs of a slot (slot < 0: all). */
void dpt_cuda_graphs_drop(struct dpt_cuda_graphs *g, int slot);

#endif /* DPT_CUDA_GRAPH_H */
