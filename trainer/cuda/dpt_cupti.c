/* dpt_cupti.c — the CUPTI activity recorder (see dpt_cupti.h). */
#include "dpt_cupti.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#define BUF_BYTES ((size_t)8 << 20)
#define BUF_ALIGN 8

struct act {       /* a kernel / memcpy / memset as CUPTI gave it */
  char *name;
  int kind;        /* DPT_KREC_* */
  uint32_t stream, corr;
  uint64_t start, end;
};

struct dpt_cupti {
  pthread_mutex_t mu;
  struct act *a;
  size_t n, cap;
  uint32_t *corr_step; /* pairs (correlation id, external id = step + 1) */
  size_t n_corr, cap_corr;
  int oom;
  size_t dropped;
  int step_open;
};

static struct dpt_cupti *live; /* CUPTI's callbacks take no user pointer: one recorder per process */

static int cupti_fail(struct dpt_err *err, const char *call, CUptiResult r)
{
  const char *s = NULL;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s) s = "unknown CUPTI error";
  return dpt_err_set(err, r == CUPTI_ERROR_NOT_INITIALIZED || r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ||
                              r == CUPTI_ERROR_NOT_SUPPORTED || r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
                              ? DPT_E_UNSUPPORTED
                              : DPT_E_RUNTIME,
                     "kernel profile: %s failed: %s (another profiler attached, or profiling not permitted: "
                     "NVreg_RestrictProfilingToAdminUsers)", call, s);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
  *buffer = aligned_alloc(BUF_ALIGN, BUF_BYTES);
  *size = *buffer ? BUF_BYTES : 0;
  *max_records = 0;
}

static int push(struct dpt_cupti *r, const char *name, int kind, uint32_t stream, uint32_t corr, uint64_t start,
                uint64_t end)
{
  if (r->n == r->cap) {
    size_t nc = r->cap ? 2 * r->cap : 4096;
    struct act *a = realloc(r->a, nc * sizeof *a);
    if (!a) return -1;
    r->a = a;
    r->cap = nc;
  }
  char *nm = strdup(name ? name : "?");
  if (!nm) return -1;
  r->a[r->n++] = (struct act){nm, kind, stream, corr, start, end};
  return 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
  struct dpt_cupti *r = live;
  CUpti_Activity *rec = NULL;
  size_t dropped = 0;
  (void)size;
  if (r && cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
  if (r) pthread_mutex_lock(&r->mu);
  while (r && valid && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    int bad = 0;
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
      bad = push(r, k->name, DPT_KREC_KERNEL, k->streamId, k->correlationId, k->start, k->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
      bad = push(r, "memcpy", DPT_KREC_MEMCPY, m->streamId, m->correlationId, m->start, m->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
      bad = push(r, "memset", DPT_KREC_MEMSET, m->streamId, m->correlationId, m->start, m->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const CUpti_ActivityExternalCorrelation *x = (const CUpti_ActivityExternalCorrelation *)rec;
      if (x->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) break;
      if (r->n_corr + 2 > r->cap_corr) {
        size_t nc = r->cap_corr ? 2 * r->cap_corr : 8192;
        uint32_t *c = realloc(r->corr_step, nc * sizeof *c);
        if (!c) {
          bad = 1;
          break;
        }
        r->corr_step = c;
        r->cap_corr = nc;
      }
      r->corr_step[r->n_corr++] = x->correlationId;
      r->corr_step[r->n_corr++] = (uint32_t)x->externalId;
      break;
    }
    default: /* runtime / driver API records: only their external correlations matter */
      break;
    }
    r->oom |= bad;
  }
  if (r) {
    r->dropped += dropped;
    pthread_mutex_unlock(&r->mu);
  }
  free(buffer);
}

static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                           CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                           CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER};

int dpt_cupti_start(struct dpt_cupti **rec, struct dpt_err *err)
{
  CUptiResult r;
  *rec = NULL;
  if (live) return dpt_err_set(err, DPT_E_INPUT, "kernel profile: a recorder is already running in this process");
  struct dpt_cupti *c = calloc(1, sizeof *c);
  if (!c) return dpt_err_set(err, DPT_E_NOMEM, "kernel profile: out of memory");
  pthread_mutex_init(&c->mu, NULL);
  live = c;
  if ((r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) != CUPTI_SUCCESS) {
    int rc = cupti_fail(err, "cuptiActivityRegisterCallbacks", r);
    live = NULL;
    pthread_mutex_destroy(&c->mu);
    free(c);
    return rc;
  }
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
    if ((r = cuptiActivityEnable(kinds[i])) != CUPTI_SUCCESS) {
      int rc = cupti_fail(err, "cuptiActivityEnable", r);
      for (size_t j = 0; j < i; j++) cuptiActivityDisable(kinds[j]);
      live = NULL;
      pthread_mutex_destroy(&c->mu);
      free(c);
      return rc;
    }
  *rec = c;
  return 0;
}

int dpt_cupti_step_begin(struct dpt_cupti *rec, int step, struct dpt_err *err)
{
  CUptiResult r;
  if (step < 0 || rec->step_open)
    return dpt_err_set(err, DPT_E_INPUT, "kernel profile: step %d begins %s", step,
                       rec->step_open ? "inside another" : "(steps are >= 0)");
  if ((r = cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, (uint64_t)step + 1)) !=
      CUPTI_SUCCESS)
    return cupti_fail(err, "cuptiActivityPushExternalCorrelationId", r);
  rec->step_open = 1;
  return 0;
}

int dpt_cupti_step_end(struct dpt_cupti *rec, struct dpt_err *err)
{
  uint64_t id = 0;
  CUptiResult r;
  if (!rec->step_open) return dpt_err_set(err, DPT_E_INPUT, "kernel profile: step end without a begin");
  if ((r = cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id)) != CUPTI_SUCCESS)
    return cupti_fail(err, "cuptiActivityPopExternalCorrelationId", r);
  rec->step_open = 0;
  return 0;
}

static int by_corr(const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

int dpt_cupti_stop(struct dpt_cupti *rec, struct dpt_krec **records, size_t *n, size_t *dropped, struct dpt_err *err)
{
  CUptiResult r;
  int rc = 0;
  *records = NULL;
  *n = 0;
  *dropped = 0;
  if (rec->step_open) (void)dpt_cupti_step_end(rec, err);
  if ((r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)) != CUPTI_SUCCESS)
    rc = cupti_fail(err, "cuptiActivityFlushAll", r);
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) cuptiActivityDisable(kinds[i]);
  pthread_mutex_lock(&rec->mu);
  live = NULL;
  if (!rc && rec->oom) rc = dpt_err_set(err, DPT_E_NOMEM, "kernel profile: out of memory for the activity records");
  /* correlation id -> step, by binary search over the sorted pairs */
  qsort(rec->corr_step, rec->n_corr / 2, 2 * sizeof *rec->corr_step, by_corr);
  struct dpt_krec *out = rc ? NULL : calloc(rec->n ? rec->n : 1, sizeof *out);
  if (!rc && !out) rc = dpt_err_set(err, DPT_E_NOMEM, "kernel profile: out of memory for %zu records", rec->n);
  for (size_t i = 0; !rc && i < rec->n; i++) {
    const struct act *a = &rec->a[i];
    const uint32_t *hit = bsearch(&a->corr, rec->corr_step, rec->n_corr / 2, 2 * sizeof *rec->corr_step, by_corr);
    out[i] = (struct dpt_krec){a->name, a->kind, hit ? (int)hit[1] - 1 : -1, a->stream, a->start, a->end};
  }
  *dropped = rec->dropped;
  pthread_mutex_unlock(&rec->mu);
  if (rc) {
    free(out);
    return rc;
  }
  *records = out;
  *n = rec->n;
  return 0;
}

void dpt_cupti_free(struct dpt_cupti *rec, struct dpt_krec *records, size_t n)
{
  (void)n;
  free(records);
  if (!rec) return;
  if (live == rec) live = NULL;
  for (size_t i = 0; i < rec->n; i++) free(rec->a[i].name);
  free(rec->a);
  free(rec->corr_step);
  pthread_mutex_destroy(&rec->mu);
  free(rec);
}
