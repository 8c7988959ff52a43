/* dpt_cudnn_engine.c — the engine config of a built cuDNN graph (dpt_cudnn_engine.h): the
 * engine cache's choice, or the heuristics' configs (modes A and FALLBACK, merged) filtered and
 * timed; its execution plan; variant packs and execution. */
#include "dpt_cudnn_engine.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cand {
  cudnnBackendDescriptor_t cfg, plan;
  struct dpt_engine_choice ch;
  size_t ws;
};

void dpt_cg_release(cudnnBackendDescriptor_t d)
{
  if (d) cudnnBackendDestroyDescriptor(d);
}

/* Engine index, knobs and numerical notes of an engine config. */
static cudnnStatus_t cfg_info(cudnnBackendDescriptor_t cfg, struct dpt_engine_choice *ch, int *tensor_core, int *reduced,
                             int *not_sum_of_products, int *runtime_compiled)
{
  cudnnBackendDescriptor_t eng = NULL, knobs[CUDNN_KNOB_TYPE_COUNTS] = {0};
  cudnnStatus_t s;
  int64_t cnt = 0, idx = -1, nk = 0;
  memset(ch, 0, sizeof *ch);
  *tensor_core = *reduced = *not_sum_of_products = *runtime_compiled = 0;
  if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng))) return s;
  if ((s = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt, &eng)) ||
      (s = cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &idx)))
    goto done;
  ch->engine = idx;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (!cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &cnt, notes))
    for (int64_t i = 0; i < cnt && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
      *tensor_core |= notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE || notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
      *reduced |= notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
      *not_sum_of_products |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC || notes[i] == CUDNN_NUMERICAL_NOTE_FFT ||
                              notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD || notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 ||
                              notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 ||
                              notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13;
    }
  cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (!cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &cnt, beh))
    for (int64_t i = 0; i < cnt && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
      *runtime_compiled |= beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++)
    if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]))) goto done;
  if ((s = cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                    CUDNN_KNOB_TYPE_COUNTS, &nk, knobs)))
    goto done;
  for (int64_t i = 0; i < nk && i < CUDNN_KNOB_TYPE_COUNTS && ch->n_knobs < DPT_ENGINE_MAX_KNOBS; i++) {
    cudnnBackendKnobType_t type;
    int64_t value = 0;
    if ((s = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &cnt, &type)) ||
        (s = cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &cnt, &value)))
      goto done;
    ch->knob_type[ch->n_knobs] = type;
    ch->knob_value[ch->n_knobs++] = value;
  }
done:
  dpt_cg_release(eng);
  for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++) dpt_cg_release(knobs[i]);
  return s;
}

/* An engine config rebuilt from a cached choice; its descriptors go to keep[] (*n_keep). */
static cudnnStatus_t cfg_from_choice(cudnnBackendDescriptor_t graph, const struct dpt_engine_choice *ch,
                                     cudnnBackendDescriptor_t *keepv, int *n_keep, int cap, cudnnBackendDescriptor_t *cfg)
{
  cudnnStatus_t s;
  cudnnBackendDescriptor_t eng = NULL, knobs[DPT_ENGINE_MAX_KNOBS] = {0}, c = NULL;
  int64_t idx = ch->engine;
  *cfg = NULL;
  if (*n_keep + ch->n_knobs + 2 > cap) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
  if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng))) return s;
  keepv[(*n_keep)++] = eng;
  if ((s = cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph)) ||
      (s = cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &idx)) ||
      (s = cudnnBackendFinalize(eng)))
    return s;
  for (int i = 0; i < ch->n_knobs; i++) {
    cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)ch->knob_type[i];
    int64_t value = ch->knob_value[i];
    if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]))) return s;
    keepv[(*n_keep)++] = knobs[i];
    if ((s = cudnnBackendSetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &type)) ||
        (s = cudnnBackendSetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &value)) ||
        (s = cudnnBackendFinalize(knobs[i])))
      return s;
  }
  if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c))) return s;
  keepv[(*n_keep)++] = c;
  if ((s = cudnnBackendSetAttribute(c, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng)) ||
      (ch->n_knobs &&
       (s = cudnnBackendSetAttribute(c, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, ch->n_knobs,
                                     knobs))) ||
      (s = cudnnBackendFinalize(c)))
    return s;
  *cfg = c;
  return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t make_plan(cudnnHandle_t dnn, cudnnBackendDescriptor_t cfg, cudnnBackendDescriptor_t *plan, size_t *ws)
{
  cudnnBackendDescriptor_t p = NULL;
  cudnnStatus_t s;
  int64_t bytes = 0, cnt = 0;
  *plan = NULL;
  if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p))) return s;
  if ((s = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn)) ||
      (s = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg)) ||
      (s = cudnnBackendFinalize(p)) ||
      (s = cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, &bytes))) {
    dpt_cg_release(p);
    return s;
  }
  *plan = p;
  *ws = bytes > 0 ? (size_t)bytes : 0;
  return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t variant_pack(const struct dpt_cg_op *op, void *const *ptrs, void *ws, cudnnBackendDescriptor_t *vp)
{
  int64_t ids[DPT_CG_NSLOTS + 3];
  void *data[DPT_CG_NSLOTS + 3];
  int n = 0;
  cudnnStatus_t s;
  for (int i = 0; i < op->n_uids; i++) ids[n] = op->uid[i], data[n++] = ptrs[op->slot[i]];
  void *const byval[3] = {(void *)&op->eps, (void *)&op->momentum, (void *)&op->count};
  for (int i = 0; i < op->n_byvalue; i++) ids[n] = op->byvalue_uid[i], data[n++] = byval[i];
  if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, vp))) return s;
  if ((s = cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, ids)) ||
      (s = cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, data)) ||
      (s = cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws)) ||
      (s = cudnnBackendFinalize(*vp))) {
    dpt_cg_release(*vp);
    *vp = NULL;
  }
  return s;
}

int dpt_cg_missing_ptr(const struct dpt_cg_op *op, void *const *ptrs)
{
  for (int i = 0; i < op->n_uids; i++)
    if (!ptrs[op->slot[i]]) return op->slot[i];
  return -1;
}

int dpt_cg_misaligned(const struct dpt_cg_op *op, void *const *ptrs)
{
  for (int i = 0; i < op->n_uids; i++)
    if ((uintptr_t)ptrs[op->slot[i]] % DPT_CG_ALIGN) return op->slot[i];
  return -1;
}

/* A warm-up run, then the median of 3 timed runs (ms); a cuDNN status (the candidate is
 * skipped) or a CUDA error (*cuda_err, which ends the tuning). */
static cudnnStatus_t time_plan(const struct dpt_cg_ctx *ctx, const struct dpt_cg_op *op, cudnnBackendDescriptor_t plan,
                               void *const *ptrs, float *ms, cudaError_t *cuda_err)
{
  cudnnBackendDescriptor_t vp = NULL;
  cudaStream_t stream = NULL;
  cudaEvent_t ev[2] = {NULL, NULL};
  float t[3] = {0, 0, 0};
  cudnnStatus_t s;
  *cuda_err = cudaSuccess;
  if ((s = variant_pack(op, ptrs, ctx->workspace, &vp))) return s;
  if ((s = cudnnGetStream(ctx->dnn, &stream))) goto done;
  if ((*cuda_err = cudaEventCreate(&ev[0])) || (*cuda_err = cudaEventCreate(&ev[1]))) goto done;
  if ((s = cudnnBackendExecute(ctx->dnn, plan, vp))) goto done;
  for (int i = 0; i < 3; i++) {
    if ((*cuda_err = cudaEventRecord(ev[0], stream))) goto done;
    if ((s = cudnnBackendExecute(ctx->dnn, plan, vp))) goto done;
    if ((*cuda_err = cudaEventRecord(ev[1], stream)) || (*cuda_err = cudaEventSynchronize(ev[1])) ||
        (*cuda_err = cudaEventElapsedTime(&t[i], ev[0], ev[1])))
      goto done;
  }
  for (int a = 0; a < 3; a++)
    for (int b = a + 1; b < 3; b++)
      if (t[b] < t[a]) {
        float x = t[a];
        t[a] = t[b];
        t[b] = x;
      }
  *ms = t[1];
done:
  if (ev[0]) cudaEventDestroy(ev[0]);
  if (ev[1]) cudaEventDestroy(ev[1]);
  dpt_cg_release(vp);
  return s;
}

/* The engine cache's choice for op->key, planned, when it is not blocked, still builds and fits
 * the workspace: 1 (op->plan set), else 0 (stale: another cuDNN build behind the same version,
 * a new erratum; timed again). */
static int from_cache(const struct dpt_cg_ctx *ctx, struct dpt_cg_op *op, const long long *xs, const long long *ws4)
{
  const struct dpt_engine_choice *cached = ctx->cache ? dpt_engine_cache_get(ctx->cache, op->key) : NULL;
  cudnnBackendDescriptor_t cfg = NULL, plan = NULL;
  size_t ws = 0;
  char ptag[256];
  if (!cached) return 0;
  dpt_cudnn_errata_tag(ptag, sizeof ptag, op->tag, cached->engine, cached->knob_type, cached->knob_value,
                       cached->n_knobs);
  if (ctx->errata && dpt_cudnn_errata_blocked(ctx->errata, ptag, ctx->cudnn_version, xs, ws4)) return 0;
  if (cfg_from_choice((cudnnBackendDescriptor_t)op->graph, cached, op->keep, &op->n_keep, DPT_CG_MAX_DESC, &cfg) ||
      make_plan(ctx->dnn, cfg, &plan, &ws) || ws > ctx->workspace_limit) {
    dpt_cg_release(plan);
    return 0;
  }
  if (ctx->stats) ctx->stats->plans++, ctx->stats->from_cache++;
  op->plan = plan;
  op->workspace = ws;
  op->choice = *cached;
  op->from_cache = 1;
  return 1;
}

/* Appends the configs heuristics mode `mode` offers for graph (at most cap) to cfgs[*n], their
 * descriptor *heur kept for the caller to destroy.  A mode that cannot be queried adds nothing
 * (its status in *last); the return is a status only when a descriptor cannot be created. */
static cudnnStatus_t heur_mode(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode, cudnnBackendDescriptor_t *heur,
                               cudnnBackendDescriptor_t *cfgs, int64_t cap, int64_t *n, cudnnStatus_t *last)
{
  cudnnStatus_t s;
  int64_t avail = 0, got = 0;
  if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, heur))) return s;
  if ((s = cudnnBackendSetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                    &graph)) ||
      (s = cudnnBackendSetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)) ||
      (s = cudnnBackendFinalize(*heur)) ||
      (s = cudnnBackendGetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &avail,
                                    NULL))) {
    *last = s;
    return CUDNN_STATUS_SUCCESS;
  }
  if (avail > cap - *n) avail = cap - *n;
  for (int64_t i = 0; i < avail; i++)
    if ((s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[*n + i]))) return s;
  if (avail && (s = cudnnBackendGetAttribute(*heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, avail,
                                             &got, cfgs + *n))) {
    *last = s;
    got = 0;
  }
  for (int64_t i = got; i < avail; i++) dpt_cg_release(cfgs[*n + i]), cfgs[*n + i] = NULL;
  *n += got;
  return CUDNN_STATUS_SUCCESS;
}

#define DPT_CG_MAX_CFGS 64 /* per heuristics mode */

/* One search: the heuristics' configs (mode A's first, n_a of them) and what became of each. */
struct search {
  cudnnBackendDescriptor_t heur[2], cfgs[2 * DPT_CG_MAX_CFGS];
  struct dpt_engine_choice seen[2 * DPT_CG_MAX_CFGS]; /* cfgs[i]'s engine and knobs, once read */
  int64_t n_cfg, n_a, next;                           /* next: the first config not looked at */
  int timed, blocked, notes, rtc, ws, build, run, dup, tries;
  char blocked_ids[200];
  cudnnStatus_t last;
  struct cand best;
  int64_t best_at;
};

/* 1 when cfgs[i] is a config an earlier entry already named (both modes offered it) */
static int seen_before(const struct search *s, int64_t i)
{
  for (int64_t j = 0; j < i; j++)
    if (s->seen[j].engine >= 0 && dpt_engine_choice_same(&s->seen[j], &s->seen[i])) return 1;
  return 0;
}

static cudaError_t skip(int *counter) /* a config not timed, counted under its reason */
{
  (*counter)++;
  return cudaSuccess;
}

/* Looks at cfgs[i]: skipped (counted why), or planned and timed, the fastest so far kept in
 * s->best.  Returns a CUDA error, which ends the search. */
static cudaError_t try_config(const struct dpt_cg_ctx *ctx, const struct dpt_cg_op *op, void *const *ptrs,
                              struct search *s, int64_t i, const long long *xs, const long long *ws4)
{
  const struct dpt_cg_desc *d = &op->d;
  struct cand c = {s->cfgs[i], NULL, {0}, 0};
  int tc = 0, reduced = 0, nsp = 0, rtc = 0;
  char ptag[256];
  cudnnStatus_t st = cfg_info(c.cfg, &c.ch, &tc, &reduced, &nsp, &rtc);
  s->seen[i] = c.ch;
  if (st) {
    s->seen[i].engine = -1; /* unread: matches nothing */
    s->last = st;
    return skip(&s->build);
  }
  if (seen_before(s, i)) return skip(&s->dup);
  dpt_cudnn_errata_tag(ptag, sizeof ptag, op->tag, c.ch.engine, c.ch.knob_type, c.ch.knob_value, c.ch.n_knobs);
  const struct dpt_errata_rule *rule =
      ctx->errata ? dpt_cudnn_errata_blocked(ctx->errata, ptag, ctx->cudnn_version, xs, ws4) : NULL;
  if (rule) {
    size_t bl = strlen(s->blocked_ids);
    snprintf(s->blocked_ids + bl, sizeof s->blocked_ids - bl, "%s%s", bl ? ", " : "", rule->rule_id);
    return skip(&s->blocked);
  }
  if (ctx->no_runtime_compilation && rtc) return skip(&s->rtc); /* its plan would compile kernels (NVRTC) */
  /* fp32 accumulation; FMA-only oracle; deterministic: sums of products */
  if (reduced || (d->io == DPT_CG_F32 && !d->tf32 && tc) || (d->deterministic && nsp)) return skip(&s->notes);
  s->tries++;
  if (ctx->stats) ctx->stats->plans++;
  if ((st = make_plan(ctx->dnn, c.cfg, &c.plan, &c.ws))) {
    s->last = st;
    return skip(&s->build);
  }
  if (c.ws > ctx->workspace_limit) {
    dpt_cg_release(c.plan);
    return skip(&s->ws);
  }
  float ms = 0;
  cudaError_t ce;
  st = time_plan(ctx, op, c.plan, ptrs, &ms, &ce);
  if (ce != cudaSuccess || st) {
    dpt_cg_release(c.plan);
    if (st) {
      s->last = st;
      s->run++;
    }
    return ce;
  }
  s->timed++;
  c.ch.time_ms = ms;
  c.ch.workspace = c.ws;
  if (s->best.plan && ms >= s->best.ch.time_ms) {
    dpt_cg_release(c.plan);
    return cudaSuccess;
  }
  dpt_cg_release(s->best.plan);
  s->best = c;
  s->best_at = i;
  return cudaSuccess;
}

/* Why no config of s runs: the counts, for the error and the cache's "no engine" entry. */
static void why_none(const struct dpt_cg_ctx *ctx, const struct dpt_cg_desc *d, const struct search *s, int max_tries,
                     char *why, size_t len)
{
  snprintf(why, len,
           "no engine runs this graph here: heuristics offered %lld configs (mode A %lld, fallback %lld, %d of them "
           "offered twice); %d blocked by errata%s%s%s, %d refused by their numerical notes (tensor cores at fp32, "
           "reduced-precision reduction%s), %d compiled at run time (not tried here), %d over the %zu-byte workspace "
           "limit, %d failed to build, %d failed to run (last status: %s), %lld not tried (%d plans at most); run "
           "these layers on the legacy calls",
           (long long)s->n_cfg, (long long)s->n_a, (long long)(s->n_cfg - s->n_a), s->dup, s->blocked,
           s->blocked ? " (" : "", s->blocked_ids, s->blocked ? ")" : "", s->notes,
           d->deterministic ? ", not a deterministic sum of products" : "", s->rtc, s->ws, ctx->workspace_limit,
           s->build, s->run, cudnnGetErrorString(s->last), (long long)(s->n_cfg - s->next), max_tries);
}

/* The chosen config: kept with the op (its plan refers to it), the search's other descriptors freed. */
static void keep_best(struct dpt_cg_ctx *ctx, struct dpt_cg_op *op, struct search *s)
{
  s->cfgs[s->best_at] = NULL;
  if (op->n_keep < DPT_CG_MAX_DESC) op->keep[op->n_keep++] = s->best.cfg;
  else dpt_cg_release(s->best.cfg); /* (cannot happen: build_ops leaves room) */
  op->plan = s->best.plan;
  op->workspace = s->best.ws;
  op->choice = s->best.ch;
  op->n_timed = s->timed;
  s->best.plan = NULL;
  if (ctx->stats) ctx->stats->timed++, ctx->stats->fallback += s->best_at >= s->n_a;
  if (ctx->cache) (void)dpt_engine_cache_put(ctx->cache, op->key, &op->choice, NULL); /* stored by the caller */
}

int dpt_cg_engine_choose(struct dpt_cg_ctx *ctx, struct dpt_cg_op *op, void *const *ptrs, struct dpt_err *err)
{
  const struct dpt_cg_desc *d = &op->d;
  long long xs4[4] = {d->n, d->c, d->h, d->w}, ws44[4] = {d->k, d->c, d->r, d->r};
  const long long *xs = dpt_cg_is_conv(d->pattern) ? xs4 : NULL, *ws4 = dpt_cg_is_conv(d->pattern) ? ws44 : NULL;
  int max = ctx->max_candidates > 0 ? ctx->max_candidates : 8, max_tries = ctx->max_tries > 0 ? ctx->max_tries : 16;
  int rc = 0;
  cudnnStatus_t st;
  cudaError_t ce = cudaSuccess;
  if (from_cache(ctx, op, xs, ws4)) return 0;
  struct search *s = calloc(1, sizeof *s);
  if (!s) return dpt_cg_fail(ctx, d, err, DPT_E_NOMEM, "choosing an engine", "out of host memory for the search");
  s->last = CUDNN_STATUS_SUCCESS;
  /* the heuristics' lists, mode A's first (its ranking), FALLBACK's after (cudnn-frontend's order) */
  cudnnBackendDescriptor_t graph = (cudnnBackendDescriptor_t)op->graph;
  st = heur_mode(graph, CUDNN_HEUR_MODE_A, &s->heur[0], s->cfgs, DPT_CG_MAX_CFGS, &s->n_cfg, &s->last);
  s->n_a = s->n_cfg;
  if (!st) st = heur_mode(graph, CUDNN_HEUR_MODE_FALLBACK, &s->heur[1], s->cfgs, 2 * DPT_CG_MAX_CFGS, &s->n_cfg, &s->last);
  if (st) {
    rc = dpt_cg_fail(ctx, d, err, DPT_E_RUNTIME, "cudnnBackendCreateDescriptor(heuristics, engine config)",
                     cudnnGetErrorString(st));
    goto done;
  }
  for (; s->next < s->n_cfg && s->timed < max && s->tries < max_tries; s->next++) {
    if ((ce = try_config(ctx, op, ptrs, s, s->next, xs, ws4)) != cudaSuccess) break;
    if (d->deterministic && s->best.plan) break; /* the heuristics' first that runs: the same choice every run */
  }
  if (ce != cudaSuccess) {
    rc = dpt_cg_fail(ctx, d, err, DPT_E_RUNTIME, "timing an engine config (CUDA)", cudaGetErrorString(ce));
    goto done;
  }
  if (!s->best.plan) {
    char why[800];
    why_none(ctx, d, s, max_tries, why, sizeof why);
    if (ctx->stats) ctx->stats->no_engine++, ctx->stats->capped += s->next < s->n_cfg;
    /* remembered for this key (and stored with the cache) unless more workspace, or a caller that lets
     * kernels compile at run time, could change the answer */
    if (ctx->cache && !s->ws && !s->rtc) (void)dpt_engine_cache_put_none(ctx->cache, op->key, why, NULL);
    rc = dpt_cg_fail(ctx, d, err, DPT_E_UNSUPPORTED, "choosing an engine", why);
    goto done;
  }
  keep_best(ctx, op, s);
done:
  dpt_cg_release(s->best.plan);
  for (int64_t i = 0; i < 2 * DPT_CG_MAX_CFGS; i++) dpt_cg_release(s->cfgs[i]);
  dpt_cg_release(s->heur[0]);
  dpt_cg_release(s->heur[1]);
  free(s);
  return rc;
}

void dpt_cg_vp_free(struct dpt_cg_vp *v)
{
  dpt_cg_release((cudnnBackendDescriptor_t)v->vp);
  v->vp = NULL;
}

int dpt_cg_execute(const struct dpt_cg_ctx *ctx, struct dpt_cg_op *op, void *const *ptrs, struct dpt_err *err)
{
  return dpt_cg_execute_vp(ctx, op, ptrs, &op->vp, err);
}

int dpt_cg_execute_vp(const struct dpt_cg_ctx *ctx, struct dpt_cg_op *op, void *const *ptrs, struct dpt_cg_vp *vc,
                      struct dpt_err *err)
{
  cudnnBackendDescriptor_t vp = NULL;
  cudnnStatus_t s;
  int miss = dpt_cg_missing_ptr(op, ptrs);
  if (miss >= 0) {
    char why[64];
    snprintf(why, sizeof why, "no pointer for %s", dpt_cg_slot_name(miss));
    return dpt_cg_fail(ctx, &op->d, err, DPT_E_INPUT, "dpt_cg_execute", why);
  }
  if (op->workspace > ctx->workspace_limit || (op->workspace && !ctx->workspace))
    return dpt_cg_fail(ctx, &op->d, err, DPT_E_INPUT, "dpt_cg_execute", "the workspace is smaller than the plan needs");
  int same = vc->vp && vc->ws == ctx->workspace;
  for (int i = 0; same && i < op->n_uids; i++) same = vc->ptr[op->slot[i]] == ptrs[op->slot[i]];
  if (!same) { /* a new variant pack, kept for the next execution with the same pointers */
    int bad = dpt_cg_aliased(&op->d, ptrs);
    if (bad >= 0) {
      char why[160];
      snprintf(why, sizeof why, "%s at %p shares memory with the running statistics BN finalize reads",
               dpt_cg_slot_name(bad), ptrs[bad]);
      return dpt_cg_fail(ctx, &op->d, err, DPT_E_INPUT, "dpt_cg_execute", why);
    }
    bad = dpt_cg_misaligned(op, ptrs);
    if (bad >= 0) {
      char why[160];
      snprintf(why, sizeof why, "operand %s at %p is not %d-byte aligned, as the graph's tensors promise",
               dpt_cg_slot_name(bad), ptrs[bad], DPT_CG_ALIGN);
      return dpt_cg_fail(ctx, &op->d, err, DPT_E_INPUT, "dpt_cg_execute", why);
    }
    dpt_cg_vp_free(vc);
    if ((s = variant_pack(op, ptrs, ctx->workspace, &vp)))
      return dpt_cg_fail(ctx, &op->d, err, dpt_cg_status_code(s), "building the variant pack", cudnnGetErrorString(s));
    vc->vp = vp;
    vc->ws = ctx->workspace;
    for (int i = 0; i < op->n_uids; i++) vc->ptr[op->slot[i]] = ptrs[op->slot[i]];
  }
  s = cudnnBackendExecute(ctx->dnn, (cudnnBackendDescriptor_t)op->plan, (cudnnBackendDescriptor_t)vc->vp);
  if (s) return dpt_cg_fail(ctx, &op->d, err, DPT_E_RUNTIME, "cudnnBackendExecute", cudnnGetErrorString(s));
  return 0;
}
