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
