/* test_cuda_capture: the graph-capture segment plan of one step (trainer/cuda/dpt_cuda_capture.h).
 *
 * Every combination of training / validation / micro-batch, communicator (one rank, NCCL, host),
 * buckets (0, 1, 7), mixed precision, double buffering and log step is planned and checked
 * against the rules the header states:
 *  - device work only in graph segments, host points only between them; segments never empty;
 *  - NCCL or one rank: one segment holding forward .. update, every bucket's all-reduce inside
 *    it, after its backward part and event, joined before the update; no host reduction;
 *  - host communicator: two segments, the backward with one event per bucket in the first,
 *    the update in the second, one host reduction per bucket (in bucket order) and the wait +
 *    upload between them;
 *  - double buffering: NCCL waits for the previous all-reduce inside the graph, stashes, and
 *    queues the next all-reduce after the replay; host: hands the gradient over, waits for the
 *    previous one; one rank: stash only;
 *  - mixed precision: the overflow check right before the update; validation: forward and loss
 *    only; a micro-batch: no all-reduce, no update, the host accumulates;
 *  - the input upload first, the learning-rate scalars before the first training segment, the
 *    loss read-back last exactly on log steps;
 *  - re-capture keys: equal when only the log step differs, different for another batch
 *    (the last partial batch), validation, micro-batch, communicator, bucket count, precision,
 *    double buffering; the same inputs give the same plan;
 *  - bad steps refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_cuda_capture.h"

#include "dpt_check.h"

static int count(const struct dpt_cap_plan *p, int kind)
{
  int n = 0;
  for (int i = 0; i < p->n_items; i++) n += p->item[i].kind == kind;
  return n;
}

/* position of the first item of kind (and index, when >= -1 given as idx), -1 if none */
static int pos(const struct dpt_cap_plan *p, int kind, int idx)
{
  for (int i = 0; i < p->n_items; i++)
    if (p->item[i].kind == kind && (idx == -2 || p->item[i].index == idx)) return i;
  return -1;
}

static int segment_of(const struct dpt_cap_plan *p, int item)
{
  for (int e = 0; e < p->n_entries; e++)
    if (item >= p->entry[e].first && item < p->entry[e].first + p->entry[e].n) return p->entry[e].segment;
  return -3;
}

static void check_step(const struct dpt_cap_step *s)
{
  struct dpt_cap_plan p;
  struct dpt_err err;
  char what[200];
  snprintf(what, sizeof what, "%s train %d comm %d buckets %d mixed %d micro %d db %d log %d", "step", s->training,
           s->comm, s->n_buckets, s->mixed, s->micro, s->double_buffering, s->log_step);
  int rc = dpt_cuda_capture_plan(s, &p, &err);
  if (s->micro && s->double_buffering) {
    CHECK(rc == DPT_E_INPUT, "%s: accepted", what);
    if (!rc) dpt_cuda_capture_free(&p);
    return;
  }
  CHECK(rc == 0, "%s: %s", what, err.msg);
  if (rc) return;
  /* entries: segments hold device items only, host entries one host item; segments numbered in order */
  int seg = 0, covered = 0;
  for (int e = 0; e < p.n_entries; e++) {
    const struct dpt_cap_entry *en = &p.entry[e];
    CHECK(en->first == covered && en->n >= 1, "%s: entry %d [%d, +%d)", what, e, en->first, en->n);
    covered += en->n;
    if (en->segment >= 0) {
      CHECK(en->segment == seg++, "%s: segment %d out of order", what, en->segment);
      for (int i = en->first; i < en->first + en->n; i++)
        CHECK(p.item[i].kind < DPT_HOST_INPUT, "%s: host item %s inside G%d", what, dpt_cap_kind_name(p.item[i].kind),
              en->segment);
    } else {
      CHECK(en->n == 1 && p.item[en->first].kind >= DPT_HOST_INPUT, "%s: device item %s at a host point", what,
            dpt_cap_kind_name(p.item[en->first].kind));
    }
  }
  CHECK(covered == p.n_items && seg == p.n_segments, "%s: entries cover %d of %d items, %d segments", what, covered,
        p.n_items, p.n_segments);
  CHECK(p.item[0].kind == DPT_HOST_INPUT, "%s: the input upload is not first", what);
  CHECK((count(&p, DPT_HOST_LOSS_READ) == 1) == !!s->log_step &&
            (!s->log_step || p.item[p.n_items - 1].kind == DPT_HOST_LOSS_READ), "%s: loss read-back", what);
  int fwd = pos(&p, DPT_CAP_FORWARD, -2), loss = pos(&p, DPT_CAP_LOSS, -2);
  CHECK(fwd > 0 && loss == fwd + 1 && segment_of(&p, fwd) == 0, "%s: forward %d loss %d", what, fwd, loss);
  if (!s->training) {
    CHECK(p.n_segments == 1 && count(&p, DPT_CAP_BACKWARD) == 0 && count(&p, DPT_CAP_UPDATE) == 0 &&
              count(&p, DPT_HOST_SCALARS) == 0, "%s: validation does more than forward + loss", what);
    dpt_cuda_capture_free(&p);
    return;
  }
  CHECK(count(&p, DPT_HOST_SCALARS) == 1 && pos(&p, DPT_HOST_SCALARS, -2) < fwd, "%s: scalars not before forward", what);
  int comm = s->micro ? DPT_CAP_COMM_NONE : s->comm;
  int nb = comm == DPT_CAP_COMM_NONE || s->double_buffering ? 0 : s->n_buckets;
  int upd = pos(&p, DPT_CAP_UPDATE, -2);
  if (s->micro) {
    CHECK(p.n_segments == 1 && upd < 0 && count(&p, DPT_CAP_ALLREDUCE) == 0 && count(&p, DPT_HOST_ACCUMULATE) == 1,
          "%s: micro-batch", what);
    dpt_cuda_capture_free(&p);
    return;
  }
  CHECK(upd > 0, "%s: no update", what);
  /* backward parts: one per bucket in order, or one */
  CHECK(count(&p, DPT_CAP_BACKWARD) == (nb ? nb : 1), "%s: %d backward parts", what, count(&p, DPT_CAP_BACKWARD));
  for (int i = 0; i < nb; i++) {
    int bw = pos(&p, DPT_CAP_BACKWARD, i), ev = pos(&p, DPT_CAP_EVENT, i);
    CHECK(bw > loss && ev == bw + 1 && segment_of(&p, ev) == 0, "%s: bucket %d backward %d event %d", what, i, bw, ev);
    if (i) CHECK(bw > pos(&p, DPT_CAP_BACKWARD, i - 1), "%s: bucket %d before %d", what, i, i - 1);
  }
  if (comm == DPT_CAP_COMM_NCCL || comm == DPT_CAP_COMM_NONE) {
    CHECK(p.n_segments == 1 && segment_of(&p, upd) == 0, "%s: %d segments (NCCL / one rank: 1)", what, p.n_segments);
    CHECK(count(&p, DPT_HOST_REDUCE) == 0 && count(&p, DPT_HOST_WAIT_UPLOAD) == 0, "%s: host reduction", what);
  }
  if (comm == DPT_CAP_COMM_NCCL && !s->double_buffering) {
    CHECK(count(&p, DPT_CAP_ALLREDUCE) == (nb ? nb : 1), "%s: %d all-reduces", what, count(&p, DPT_CAP_ALLREDUCE));
    for (int i = 0; i < nb; i++)
      CHECK(pos(&p, DPT_CAP_ALLREDUCE, i) == pos(&p, DPT_CAP_EVENT, i) + 1, "%s: bucket %d all-reduce", what, i);
    if (nb) CHECK(pos(&p, DPT_CAP_JOIN, -2) > pos(&p, DPT_CAP_ALLREDUCE, nb - 1) && pos(&p, DPT_CAP_JOIN, -2) < upd,
                  "%s: join", what);
    else CHECK(pos(&p, DPT_CAP_ALLREDUCE, -1) < upd && count(&p, DPT_CAP_JOIN) == 0, "%s: one all-reduce", what);
  }
  if (comm == DPT_CAP_COMM_NONE) CHECK(count(&p, DPT_CAP_ALLREDUCE) == 0, "%s: all-reduce with one rank", what);
  if (comm == DPT_CAP_COMM_HOST) {
    CHECK(p.n_segments == 2 && segment_of(&p, upd) == 1 && count(&p, DPT_CAP_ALLREDUCE) == 0,
          "%s: host communicator: %d segments", what, p.n_segments);
    int r0 = pos(&p, DPT_HOST_REDUCE, -2), w = pos(&p, DPT_HOST_WAIT_UPLOAD, -2);
    CHECK(count(&p, DPT_HOST_REDUCE) == (nb ? nb : 1) && segment_of(&p, r0 - 1) == 0 && w > r0 &&
              segment_of(&p, w + 1) == 1, "%s: host reductions between the segments", what);
    for (int i = 0; i < nb; i++) CHECK(p.item[r0 + i].kind == DPT_HOST_REDUCE && p.item[r0 + i].index == i,
                                       "%s: host reduction %d out of order", what, i);
  }
  /* double buffering */
  int stash = pos(&p, DPT_CAP_STASH, -2);
  if (s->double_buffering) {
    CHECK(comm == DPT_CAP_COMM_HOST ? stash < 0 : stash == upd + 1, "%s: stash %d update %d (host: none, its mirror holds it)",
          what, stash, upd);
    CHECK((count(&p, DPT_CAP_WAIT_EXTERNAL) == 1) == (comm == DPT_CAP_COMM_NCCL) &&
              (count(&p, DPT_HOST_QUEUE_REDUCE) == 1) == (comm == DPT_CAP_COMM_NCCL), "%s: NCCL double buffering", what);
    if (comm == DPT_CAP_COMM_NCCL)
      CHECK(pos(&p, DPT_CAP_WAIT_EXTERNAL, -2) < upd && pos(&p, DPT_HOST_QUEUE_REDUCE, -2) > stash, "%s: db order", what);
  } else {
    CHECK(stash < 0 && count(&p, DPT_CAP_WAIT_EXTERNAL) == 0 && count(&p, DPT_HOST_QUEUE_REDUCE) == 0,
          "%s: double-buffering items", what);
  }
  /* mixed: the overflow check right before the update */
  CHECK(s->mixed ? pos(&p, DPT_CAP_OVERFLOW, -2) == upd - 1 : count(&p, DPT_CAP_OVERFLOW) == 0, "%s: overflow", what);
  dpt_cuda_capture_free(&p);
}

static void all_combinations(void)
{
  static const int buckets[] = {0, 1, 7};
  int n = 0;
  for (int training = 0; training < 2; training++)
    for (int comm = 0; comm < 3; comm++)
      for (int bi = 0; bi < 3; bi++)
        for (int mixed = 0; mixed < 2; mixed++)
          for (int micro = 0; micro < 1 + training; micro++)
            for (int db = 0; db < 2; db++)
              for (int log = 0; log < 2; log++) {
                struct dpt_cap_step s = {training, 256, comm, buckets[bi], mixed, micro, db, log};
                check_step(&s);
                n++;
              }
  printf("%d step configurations planned and checked\n", n);
}

static void keys(void)
{
  struct dpt_cap_step base = {1, 256, DPT_CAP_COMM_NCCL, 7, 1, 0, 0, 0};
  char k0[DPT_CAP_KEY], k[DPT_CAP_KEY];
  dpt_cuda_capture_key(&base, k0, sizeof k0);
  struct dpt_cap_step s = base;
  s.log_step = 1;
  dpt_cuda_capture_key(&s, k, sizeof k);
  CHECK(!strcmp(k, k0), "the log step changes the key: %s vs %s", k, k0);
  struct {
    const char *what;
    struct dpt_cap_step s;
  } other[] = {
      {"last partial batch", {1, 97, DPT_CAP_COMM_NCCL, 7, 1, 0, 0, 0}},
      {"validation", {0, 256, DPT_CAP_COMM_NCCL, 7, 1, 0, 0, 0}},
      {"micro-batch", {1, 256, DPT_CAP_COMM_NCCL, 7, 1, 1, 0, 0}},
      {"host communicator", {1, 256, DPT_CAP_COMM_HOST, 7, 1, 0, 0, 0}},
      {"bucket count", {1, 256, DPT_CAP_COMM_NCCL, 6, 1, 0, 0, 0}},
      {"precision", {1, 256, DPT_CAP_COMM_NCCL, 7, 0, 0, 0, 0}},
      {"double buffering", {1, 256, DPT_CAP_COMM_NCCL, 7, 1, 0, 1, 0}},
  };
  for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
    dpt_cuda_capture_key(&other[i].s, k, sizeof k);
    CHECK(strcmp(k, k0), "%s: same key '%s'", other[i].what, k);
    for (size_t j = 0; j < i; j++) {
      char kj[DPT_CAP_KEY];
      dpt_cuda_capture_key(&other[j].s, kj, sizeof kj);
      CHECK(strcmp(k, kj), "%s and %s: same key '%s'", other[i].what, other[j].what, k);
    }
  }
  /* validation keys ignore the training-only fields; one rank ignores buckets */
  struct dpt_cap_step v1 = {0, 64, DPT_CAP_COMM_NCCL, 7, 1, 0, 1, 0}, v2 = {0, 64, DPT_CAP_COMM_HOST, 0, 0, 0, 0, 1};
  char a[DPT_CAP_KEY], b[DPT_CAP_KEY];
  dpt_cuda_capture_key(&v1, a, sizeof a);
  dpt_cuda_capture_key(&v2, b, sizeof b);
  CHECK(!strcmp(a, b), "validation keys differ: %s vs %s", a, b);
  struct dpt_cap_step o1 = {1, 64, DPT_CAP_COMM_NONE, 7, 0, 0, 0, 0}, o2 = {1, 64, DPT_CAP_COMM_NONE, 0, 0, 0, 0, 0};
  dpt_cuda_capture_key(&o1, a, sizeof a);
  dpt_cuda_capture_key(&o2, b, sizeof b);
  CHECK(!strcmp(a, b), "one rank: bucket count in the key: %s vs %s", a, b);
  /* same inputs, same plan */
  struct dpt_cap_plan p, q;
  struct dpt_err err;
  if (!dpt_cuda_capture_plan(&base, &p, &err) && !dpt_cuda_capture_plan(&base, &q, &err)) {
    CHECK(p.n_items == q.n_items && p.n_entries == q.n_entries &&
              !memcmp(p.item, q.item, (size_t)p.n_items * sizeof *p.item) &&
              !memcmp(p.entry, q.entry, (size_t)p.n_entries * sizeof *p.entry) && !strcmp(p.key, q.key),
          "two plans of one step differ");
    dpt_cuda_capture_print(&p, stdout);
    dpt_cuda_capture_free(&p);
    dpt_cuda_capture_free(&q);
  }
  struct dpt_cap_step h = {1, 256, DPT_CAP_COMM_HOST, 3, 0, 0, 0, 1};
  if (!dpt_cuda_capture_plan(&h, &p, &err)) {
    dpt_cuda_capture_print(&p, stdout);
    dpt_cuda_capture_free(&p);
  }
}

static void bad_steps(void)
{
  struct dpt_cap_plan p;
  struct dpt_err err;
  struct dpt_cap_step bad[] = {
      {1, 0, DPT_CAP_COMM_NCCL, 1, 0, 0, 0, 0},
      {1, 8, DPT_CAP_COMM_NCCL, -1, 0, 0, 0, 0},
      {1, 8, 7, 1, 0, 0, 0, 0},
      {0, 8, DPT_CAP_COMM_NCCL, 1, 0, 1, 0, 0},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    int rc = dpt_cuda_capture_plan(&bad[i], &p, &err);
    CHECK(rc == DPT_E_INPUT, "bad step %zu accepted", i);
    if (!rc) dpt_cuda_capture_free(&p);
  }
}

int main(void)
{
  all_combinations();
  keys();
  bad_steps();
  if (!failures) printf("test_cuda_capture: all checks passed\n");
  return failures != 0;
}
