/* dpt_cuda_capture.c — the graph-capture segment plan of one step (see dpt_cuda_capture.h). */
#include "dpt_cuda_capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[DPT_CAP_NKINDS] = {
    "forward", "loss", "backward", "event", "allreduce", "join", "wait_external", "overflow", "update", "stash",
    "input", "scalars", "reduce", "wait_upload", "accumulate", "queue_reduce", "loss_read"};

const char *dpt_cap_kind_name(enum dpt_cap_kind k) { return k >= 0 && k < DPT_CAP_NKINDS ? names[k] : "?"; }

static const char *comm_name(int c)
{
  return c == DPT_CAP_COMM_NCCL ? "nccl" : c == DPT_CAP_COMM_HOST ? "host" : "none";
}

void dpt_cuda_capture_key(const struct dpt_cap_step *s, char *out, size_t len)
{
  if (!s->training) {
    snprintf(out, len, "val b%d", s->batch);
    return;
  }
  snprintf(out, len, "%s b%d comm=%s buckets=%d mixed=%d db=%d", s->micro ? "micro" : "train", s->batch,
           comm_name(s->comm), s->comm == DPT_CAP_COMM_NONE || s->micro ? 0 : s->n_buckets, !!s->mixed,
           !!s->double_buffering);
}

void dpt_cuda_capture_free(struct dpt_cap_plan *p)
{
  if (!p) return;
  free(p->entry);
  free(p->item);
  memset(p, 0, sizeof *p);
}

struct build {
  struct dpt_cap_plan *p;
  int cap_items, cap_entries, open; /* open: the segment being filled, -1 */
  int failed;
};

/* room for one more element of an array of *cap (doubled); 0 or -1 */
static int grow(void **a, int n, int *cap, size_t elem, int first)
{
  if (n < *cap) return 0;
  int nc = *cap ? 2 * *cap : first;
  void *x = realloc(*a, (size_t)nc * elem);
  if (!x) return -1;
  *a = x;
  *cap = nc;
  return 0;
}

static void item(struct build *b, int kind, int index)
{
  struct dpt_cap_plan *p = b->p;
  if (b->failed) return;
  if (grow((void **)&p->item, p->n_items, &b->cap_items, sizeof *p->item, 32) ||
      grow((void **)&p->entry, p->n_entries, &b->cap_entries, sizeof *p->entry, 16)) {
    b->failed = 1;
    return;
  }
  int host = kind >= DPT_HOST_INPUT;
  p->item[p->n_items] = (struct dpt_cap_item){kind, index};
  if (host) {
    b->open = -1;
    p->entry[p->n_entries++] = (struct dpt_cap_entry){-1, p->n_items, 1};
  } else if (b->open >= 0) {
    p->entry[b->open].n++;
  } else {
    b->open = p->n_entries;
    p->entry[p->n_entries++] = (struct dpt_cap_entry){p->n_segments++, p->n_items, 1};
  }
  p->n_items++;
}

int dpt_cuda_capture_plan(const struct dpt_cap_step *s, struct dpt_cap_plan *p, struct dpt_err *err)
{
  memset(p, 0, sizeof *p);
  if (s->batch < 1 || s->n_buckets < 0 || s->comm < DPT_CAP_COMM_NONE || s->comm > DPT_CAP_COMM_HOST)
    return dpt_err_set(err, DPT_E_INPUT, "capture plan: batch %d, %d buckets, communicator %d", s->batch,
                       s->n_buckets, s->comm);
  if (s->micro && !s->training)
    return dpt_err_set(err, DPT_E_INPUT, "capture plan: a validation batch is not a micro-batch");
  if (s->micro && s->double_buffering)
    return dpt_err_set(err, DPT_E_INPUT, "capture plan: double buffering with gradient accumulation");
  struct build b = {p, 0, 0, -1, 0};
  dpt_cuda_capture_key(s, p->key, sizeof p->key);
  item(&b, DPT_HOST_INPUT, -1);
  if (!s->training) {
    item(&b, DPT_CAP_FORWARD, -1);
    item(&b, DPT_CAP_LOSS, -1);
  } else {
    int comm = s->micro ? DPT_CAP_COMM_NONE : s->comm;
    int nb = comm == DPT_CAP_COMM_NONE || s->double_buffering ? 0 : s->n_buckets;
    item(&b, DPT_HOST_SCALARS, -1);
    item(&b, DPT_CAP_FORWARD, -1);
    item(&b, DPT_CAP_LOSS, -1);
    if (comm == DPT_CAP_COMM_NCCL && nb > 0) {
      for (int i = 0; i < nb; i++) {
        item(&b, DPT_CAP_BACKWARD, i);
        item(&b, DPT_CAP_EVENT, i);
        item(&b, DPT_CAP_ALLREDUCE, i);
      }
      item(&b, DPT_CAP_JOIN, -1);
    } else if (comm == DPT_CAP_COMM_HOST && nb > 0) {
      for (int i = 0; i < nb; i++) {
        item(&b, DPT_CAP_BACKWARD, i);
        item(&b, DPT_CAP_EVENT, i);
      }
    } else {
      item(&b, DPT_CAP_BACKWARD, -1);
      if (comm == DPT_CAP_COMM_NCCL && !s->double_buffering) item(&b, DPT_CAP_ALLREDUCE, -1);
      if (comm == DPT_CAP_COMM_HOST) item(&b, DPT_CAP_EVENT, -1);
    }
    if (s->micro) {
      item(&b, DPT_HOST_ACCUMULATE, -1);
    } else {
      if (comm == DPT_CAP_COMM_HOST) { /* the reductions run on the worker thread meanwhile */
        for (int i = 0; i < (nb ? nb : 1); i++) item(&b, DPT_HOST_REDUCE, nb ? i : -1);
        item(&b, DPT_HOST_WAIT_UPLOAD, -1);
      }
      if (s->double_buffering && comm == DPT_CAP_COMM_NCCL) item(&b, DPT_CAP_WAIT_EXTERNAL, -1);
      if (s->mixed) item(&b, DPT_CAP_OVERFLOW, -1);
      item(&b, DPT_CAP_UPDATE, -1);
      if (s->double_buffering && comm != DPT_CAP_COMM_HOST) item(&b, DPT_CAP_STASH, -1); /* host: its mirror */
      if (s->double_buffering && comm == DPT_CAP_COMM_NCCL) item(&b, DPT_HOST_QUEUE_REDUCE, -1);
    }
  }
  if (s->log_step) item(&b, DPT_HOST_LOSS_READ, -1);
  if (b.failed) {
    dpt_cuda_capture_free(p);
    return dpt_err_set(err, DPT_E_NOMEM, "capture plan: out of memory");
  }
  return 0;
}

void dpt_cuda_capture_print(const struct dpt_cap_plan *p, void *file)
{
  FILE *f = file;
  fprintf(f, "key '%s': %d graph segments\n", p->key, p->n_segments);
  for (int e = 0; e < p->n_entries; e++) {
    const struct dpt_cap_entry *en = &p->entry[e];
    if (en->segment >= 0) fprintf(f, "  G%d:", en->segment);
    else fprintf(f, "  host:");
    for (int i = en->first; i < en->first + en->n; i++) {
      fprintf(f, " %s", dpt_cap_kind_name(p->item[i].kind));
      if (p->item[i].index >= 0) fprintf(f, "[%d]", p->item[i].index);
    }
    fputc('\n', f);
  }
}

/* ---- the capture decisions of the cuda backend --------------------------------------------- */

void dpt_cuda_capture_step_of(const struct dpt_cap_run_cfg *c, int what, int log_step, struct dpt_cap_step *s)
{
  memset(s, 0, sizeof *s);
  s->batch = c->batch;
  s->log_step = !!log_step;
  s->comm = c->ranks > 1 ? c->comm : DPT_CAP_COMM_NONE;
  if (what == DPT_CAP_VALIDATION) return;
  s->training = 1;
  s->micro = what == DPT_CAP_MICRO_BATCH;
  s->n_buckets = c->n_buckets;
  s->mixed = !!c->mixed;
  s->double_buffering = !s->micro && c->double_buffering; /* a micro-batch's plan has no all-reduce */
}

const char *dpt_cuda_capture_unsupported(const struct dpt_cap_step *s)
{
  if (!s->training || s->micro) return NULL;
  if (s->double_buffering)
    return "double buffering: its all-reduce overlaps the next step through an external wait that the graph "
           "does not hold yet";
  if (s->comm == DPT_CAP_COMM_NCCL && s->n_buckets == 0)
    return "nccl without gradient buckets (dpt-train plans one bucket for the whole gradient instead)";
  if (s->comm == DPT_CAP_COMM_HOST && s->n_buckets > 0)
    return "a host communicator with gradient buckets (device gradients reach a host communicator after "
           "backward, without buckets)";
  return NULL;
}

int dpt_cuda_capture_call_items(const struct dpt_cap_step *s, int call, struct dpt_cap_item *out, int max)
{
  int n = 0;
#define PUT(k, i)                                                                                                     \
  do {                                                                                                                \
    if (n < max) out[n] = (struct dpt_cap_item){(k), (i)};                                                            \
    n++;                                                                                                              \
  } while (0)
  int comm = !s->training || s->micro ? DPT_CAP_COMM_NONE : s->comm;
  int nb = comm == DPT_CAP_COMM_NONE || s->double_buffering ? 0 : s->n_buckets;
  switch (call) {
  case DPT_CAPC_FORWARD:
    PUT(DPT_HOST_INPUT, -1);
    if (s->training) PUT(DPT_HOST_SCALARS, -1);
    PUT(DPT_CAP_FORWARD, -1);
    break;
  case DPT_CAPC_LOSS: PUT(DPT_CAP_LOSS, -1); break;
  case DPT_CAPC_BACKWARD:
    if (!s->training) break;
    for (int k = 0; k < nb; k++) {
      PUT(DPT_CAP_BACKWARD, k);
      PUT(DPT_CAP_EVENT, k);
      if (comm == DPT_CAP_COMM_NCCL) PUT(DPT_CAP_ALLREDUCE, k);
    }
    if (!nb) {
      PUT(DPT_CAP_BACKWARD, -1);
      if (comm == DPT_CAP_COMM_HOST) PUT(DPT_CAP_EVENT, -1);
    }
    break;
  case DPT_CAPC_JOIN:
    if (s->training && comm == DPT_CAP_COMM_NCCL && nb) PUT(DPT_CAP_JOIN, -1);
    break;
  case DPT_CAPC_OVERFLOW:
    if (s->training && !s->micro && s->mixed) PUT(DPT_CAP_OVERFLOW, -1);
    break;
  case DPT_CAPC_UPDATE:
    if (s->training && !s->micro) PUT(DPT_CAP_UPDATE, -1);
    break;
  default: break;
  }
#undef PUT
  return n;
}

/* The items the backend does itself: every device item, the input upload and the scalars. */
static int backend_item(int kind)
{
  return kind < DPT_HOST_INPUT || kind == DPT_HOST_INPUT || kind == DPT_HOST_SCALARS;
}

void dpt_cuda_capture_state_init(struct dpt_cap_state *st, int warmup)
{
  memset(st, 0, sizeof *st);
  st->warmup = warmup < 0 ? 0 : warmup;
  st->open = -1;
  st->cur = -1;
}

void dpt_cuda_capture_abort(struct dpt_cap_state *st)
{
  if (st->in_step && st->mode == DPT_CAPM_CAPTURE && st->cur >= 0) st->slot[st->cur].captured = 0;
  st->in_step = 0;
  st->open = -1;
  dpt_cuda_capture_free(&st->plan);
}

void dpt_cuda_capture_state_free(struct dpt_cap_state *st)
{
  dpt_cuda_capture_abort(st);
}

int dpt_cuda_capture_begin(struct dpt_cap_state *st, const struct dpt_cap_step *s, int *mode, int *slot, int *evict,
                           struct dpt_err *err)
{
  int rc;
  *mode = DPT_CAPM_EAGER;
  *slot = *evict = -1;
  dpt_cuda_capture_abort(st); /* an unfinished previous step is not kept */
  if (dpt_cuda_capture_unsupported(s)) return 0;
  if ((rc = dpt_cuda_capture_plan(s, &st->plan, err))) return rc;
  int k = -1, lru = 0;
  for (int i = 0; i < DPT_CAP_MAX_KEYS; i++) {
    if (st->slot[i].used && !strcmp(st->slot[i].key, st->plan.key)) k = i;
    if (!st->slot[i].used || (st->slot[lru].used && st->slot[i].last < st->slot[lru].last)) lru = i;
  }
  if (k < 0) { /* a new key: a free slot or the least recently used one (its graphs go) */
    k = lru;
    if (st->slot[k].used) *evict = k;
    memset(&st->slot[k], 0, sizeof st->slot[k]);
    st->slot[k].used = 1;
    snprintf(st->slot[k].key, sizeof st->slot[k].key, "%s", st->plan.key);
  }
  struct dpt_cap_slot *sl = &st->slot[k];
  sl->last = ++st->clock;
  st->mode = sl->captured ? DPT_CAPM_REPLAY : sl->seen >= st->warmup ? DPT_CAPM_CAPTURE : DPT_CAPM_EAGER;
  sl->seen++;
  st->in_step = 1;
  st->cur = k;
  st->next = 0;
  st->open = -1;
  *mode = st->mode;
  *slot = k;
  return 0;
}

int dpt_cuda_capture_item(struct dpt_cap_state *st, int kind, int index, int *act, int *segment, int *seg_begin,
                          int *seg_end, struct dpt_err *err)
{
  struct dpt_cap_plan *p = &st->plan;
  *act = DPT_CAPA_RUN;
  *segment = -1;
  *seg_begin = *seg_end = 0;
  if (!st->in_step) return 0;
  while (st->next < p->n_items && !backend_item(p->item[st->next].kind)) st->next++; /* dpt-train's host points */
  if (st->next >= p->n_items || p->item[st->next].kind != kind || p->item[st->next].index != index) {
    char want[48] = "the end of the step";
    if (st->next < p->n_items)
      snprintf(want, sizeof want, "%s[%d]", dpt_cap_kind_name(p->item[st->next].kind), p->item[st->next].index);
    int rc = dpt_err_set(err, DPT_E_RUNTIME, "CUDA graph step '%s': the backend does %s[%d] where the capture plan "
                         "has %s (the step's calls do not follow dpt_cuda_capture_plan; run with --cuda-graph off)",
                         p->key, dpt_cap_kind_name(kind), index, want);
    dpt_cuda_capture_abort(st);
    return rc;
  }
  int i = st->next++;
  for (int e = 0; e < p->n_entries; e++) {
    const struct dpt_cap_entry *en = &p->entry[e];
    if (i < en->first || i >= en->first + en->n) continue;
    if (en->segment < 0) {
      *act = DPT_CAPA_HOST;
    } else {
      *act = st->mode == DPT_CAPM_CAPTURE ? DPT_CAPA_RECORD : st->mode == DPT_CAPM_REPLAY ? DPT_CAPA_SKIP : DPT_CAPA_RUN;
      *segment = en->segment;
      *seg_begin = i == en->first;
      *seg_end = i == en->first + en->n - 1;
      st->open = *seg_end ? -1 : en->segment;
    }
    break;
  }
  int more = 0;
  for (int j = st->next; j < p->n_items && !more; j++) more = backend_item(p->item[j].kind);
  if (!more) { /* the backend's part of the step is done */
    if (st->mode == DPT_CAPM_CAPTURE) st->slot[st->cur].captured = 1, st->captures++;
    if (st->mode == DPT_CAPM_REPLAY) st->replays++;
    st->in_step = 0;
    dpt_cuda_capture_free(&st->plan);
  }
  return 0;
}
