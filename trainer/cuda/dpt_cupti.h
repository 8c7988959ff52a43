/* dpt_cupti.h — the CUPTI activity recorder of the per-step kernel breakdown (issue 15, item 4).
 *
 * Records the GPU's kernel, memcpy and memset activity (name, start, end, stream) of the steps
 * chosen by the caller and hands it to dpt_kprof_breakdown (dpt_kprof.h):
 *
 *   dpt_cupti_start(&rec);                       before the first profiled step
 *   for each profiled step: dpt_cupti_step_begin(rec, step) ... dpt_cupti_step_end(rec)
 *   dpt_cupti_stop(rec, &records, &n);           flushes, joins, turns CUPTI off
 *   dpt_kprof_breakdown(classes, records, n, &b) / dpt_kprof_write_records(...)
 *   dpt_cupti_free(rec, records, n);
 *
 * A step is an external correlation id (CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) pushed on the
 * host thread that launches the step's work: every runtime / driver call made between begin
 * and end — kernel launches, copies, a CUDA graph's launch — carries it, and every kernel they
 * start inherits it through its correlation id, however late the GPU runs it.  Work of other
 * host threads (a communicator's worker) is outside the steps (step -1).  CUPTI's activity API
 * is per process: one recorder at a time.  Optional at build time (the CUDA toolkit's CUPTI,
 * CMake's CUDA::cupti); DPT_E_UNSUPPORTED when CUPTI refuses (another profiler attached). */
#ifndef DPT_CUPTI_H
#define DPT_CUPTI_H

#include <stddef.h>

#include "dpt_err.h"
#include "dpt_kprof.h"

struct dpt_cupti;

int dpt_cupti_start(struct dpt_cupti **rec, struct dpt_err *err);
int dpt_cupti_step_begin(struct dpt_cupti *rec, int step, struct dpt_err *err);
int dpt_cupti_step_end(struct dpt_cupti *rec, struct dpt_err *err);
/* records[n] (names owned by the recorder until dpt_cupti_free); *dropped: records CUPTI had
 * no buffer for (0 normally; the breakdown then undercounts and says so). */
int dpt_cupti_stop(struct dpt_cupti *rec, struct dpt_krec **records, size_t *n, size_t *dropped, struct dpt_err *err);
void dpt_cupti_free(struct dpt_cupti *rec, struct dpt_krec *records, size_t n);

#endif /* DPT_CUPTI_H */
