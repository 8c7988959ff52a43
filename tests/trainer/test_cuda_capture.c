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
 *  - bad steps refused.
 * The cuda backend's capture decisions (dpt_cuda_capture_begin / _item, the calls' items of
 * dpt_cuda_capture_call_items), for every run configuration dpt-train can produce (one rank;
 * nccl with 1 or 7 buckets, which graph mode always has; a host communicator without buckets;
 * mixed or not; double buffering or not; --accumulate 1 or 3) and every step it announces
 * (training step, micro-batch, validation batch; log step or not), fed in dpt_train.c's call
 * order: the first step of a key runs eagerly, the second is captured and the third replayed;
 * in both, every item's action is the plan's (host points at the plan's host entries, device
 * work recorded / skipped in the plan's segment), each segment begins at its first item and ends
 * at its last, the trainer's own host points are passed over, and the step is complete after
 * its last call; a step the backend cannot capture (double buffering) runs eagerly and says
 * why; keys: validation and training keep their own graphs, the fifth key evicts the least
 * recently used; a call out of the plan's order is refused and drops the capture. */
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

/* ---- the backend's capture decisions ------------------------------------------------------- */

/* dpt_train.c's backend calls for what it announced (train_step -> micro_batch / update /
 * apply_step, validate): forward, loss, backward; a training step then the join of a device
 * communicator's all-reduces (nccl with buckets), the overflow check (mixed), the update. */
static int trainer_calls(const struct dpt_cap_step *s, int *calls)
{
  int n = 0;
  calls[n++] = DPT_CAPC_FORWARD;
  calls[n++] = DPT_CAPC_LOSS;
  if (!s->training) return n;
  calls[n++] = DPT_CAPC_BACKWARD;
  if (s->micro) return n;
  if (s->comm == DPT_CAP_COMM_NCCL && s->n_buckets > 0) calls[n++] = DPT_CAPC_JOIN;
  if (s->mixed) calls[n++] = DPT_CAPC_OVERFLOW;
  calls[n++] = DPT_CAPC_UPDATE;
  return n;
}

struct fed {
  int kind, index, act, segment, first, last;
};

/* Feed one step; returns the mode; fed[] / *n_fed: what the backend was told. */
static int run_step(struct dpt_cap_state *st, const struct dpt_cap_step *s, struct fed *fed, int *n_fed, int *slot,
                    const char *what)
{
  struct dpt_err err;
  int mode, evict, calls[8], nc = trainer_calls(s, calls);
  *n_fed = 0;
  int rc = dpt_cuda_capture_begin(st, s, &mode, slot, &evict, &err);
  CHECK(rc == 0, "%s: begin: %s", what, rc ? err.msg : "");
  for (int c = 0; c < nc && !rc; c++) {
    struct dpt_cap_item it[64];
    int ni = dpt_cuda_capture_call_items(s, calls[c], it, 64);
    for (int i = 0; i < ni && !rc; i++) {
      struct fed *f = &fed[(*n_fed)++];
      f->kind = it[i].kind, f->index = it[i].index;
      rc = dpt_cuda_capture_item(st, it[i].kind, it[i].index, &f->act, &f->segment, &f->first, &f->last, &err);
      CHECK(rc == 0, "%s: item %s[%d]: %s", what, dpt_cap_kind_name(it[i].kind), it[i].index, rc ? err.msg : "");
    }
  }
  CHECK(!st->in_step || dpt_cuda_capture_unsupported(s), "%s: the step is not over after its last call", what);
  return mode;
}

/* The actions of a captured / replayed step against the plan. */
static void against_plan(const struct dpt_cap_step *s, const struct fed *fed, int n_fed, int mode, const char *what)
{
  struct dpt_cap_plan p;
  struct dpt_err err;
  if (dpt_cuda_capture_plan(s, &p, &err)) {
    CHECK(0, "%s: plan: %s", what, err.msg);
    return;
  }
  int want_dev = mode == DPT_CAPM_CAPTURE ? DPT_CAPA_RECORD : DPT_CAPA_SKIP, k = 0;
  for (int e = 0; e < p.n_entries; e++) {
    const struct dpt_cap_entry *en = &p.entry[e];
    for (int i = en->first; i < en->first + en->n; i++) {
      int kind = p.item[i].kind;
      int backend = kind < DPT_HOST_INPUT || kind == DPT_HOST_INPUT || kind == DPT_HOST_SCALARS;
      if (!backend) continue; /* dpt-train's own host point */
      if (k >= n_fed) {
        CHECK(0, "%s: plan item %s[%d] never fed", what, dpt_cap_kind_name(kind), p.item[i].index);
        continue;
      }
      const struct fed *f = &fed[k++];
      CHECK(f->kind == kind && f->index == p.item[i].index, "%s: fed %s[%d] where the plan has %s[%d]", what,
            dpt_cap_kind_name(f->kind), f->index, dpt_cap_kind_name(kind), p.item[i].index);
      if (en->segment < 0) {
        CHECK(f->act == DPT_CAPA_HOST && f->segment == -1, "%s: host point %s: action %d", what, dpt_cap_kind_name(kind),
              f->act);
      } else {
        CHECK(f->act == want_dev && f->segment == en->segment && f->first == (i == en->first) &&
                  f->last == (i == en->first + en->n - 1),
              "%s: %s[%d] in G%d: action %d segment %d first %d last %d", what, dpt_cap_kind_name(kind),
              p.item[i].index, en->segment, f->act, f->segment, f->first, f->last);
      }
    }
  }
  CHECK(k == n_fed, "%s: %d items fed, the plan has %d of the backend's", what, n_fed, k);
  dpt_cuda_capture_free(&p);
}

static void decisions(void)
{
  static const int buckets_nccl[] = {1, 7};
  int n_cfg = 0, n_steps = 0;
  for (int ranks = 1; ranks <= 2; ranks++)
    for (int comm = DPT_CAP_COMM_NCCL; comm <= (ranks > 1 ? DPT_CAP_COMM_HOST : DPT_CAP_COMM_NCCL); comm++)
      for (int bi = 0; bi < (ranks > 1 && comm == DPT_CAP_COMM_NCCL ? 2 : 1); bi++)
        for (int mixed = 0; mixed < 2; mixed++)
          for (int db = 0; db < 2; db++)
            for (int accum = 1; accum <= 3; accum += 2) {
              /* what dpt-train's run_buffers gives: nccl in graph mode always buckets, a host
               * communicator on device gradients none */
              struct dpt_cap_run_cfg c = {ranks, comm, ranks > 1 && comm == DPT_CAP_COMM_NCCL ? buckets_nccl[bi] : 0,
                                          mixed, db, 256};
              n_cfg++;
              for (int what = 0; what < 3; what++) {
                if (what == DPT_CAP_TRAIN_STEP && accum > 1) continue; /* micro-batches then an update */
                if (what == DPT_CAP_MICRO_BATCH && accum == 1) continue;
                struct dpt_cap_state st;
                struct fed fed[128];
                int n_fed, slot, slot0 = -1;
                char name[160];
                snprintf(name, sizeof name, "ranks %d comm %d buckets %d mixed %d db %d accum %d %s", ranks, comm,
                         c.n_buckets, mixed, db, accum,
                         what == DPT_CAP_TRAIN_STEP ? "step" : what == DPT_CAP_MICRO_BATCH ? "micro" : "val");
                dpt_cuda_capture_state_init(&st, 1);
                for (int t = 0; t < 4; t++) {
                  struct dpt_cap_step s;
                  dpt_cuda_capture_step_of(&c, what, t == 3, &s); /* the 4th a log step: same key */
                  int mode = run_step(&st, &s, fed, &n_fed, &slot, name);
                  n_steps++;
                  if (dpt_cuda_capture_unsupported(&s)) {
                    CHECK(mode == DPT_CAPM_EAGER && what == DPT_CAP_TRAIN_STEP && db, "%s: uncaptured: %s", name,
                          dpt_cuda_capture_unsupported(&s));
                    continue;
                  }
                  int want = t == 0 ? DPT_CAPM_EAGER : t == 1 ? DPT_CAPM_CAPTURE : DPT_CAPM_REPLAY;
                  CHECK(mode == want, "%s: step %d mode %d (want %d)", name, t, mode, want);
                  if (t == 0) slot0 = slot;
                  CHECK(slot == slot0, "%s: the key moved from slot %d to %d", name, slot0, slot);
                  for (int i = 0; i < n_fed && mode == DPT_CAPM_EAGER; i++)
                    CHECK(fed[i].act == DPT_CAPA_RUN || fed[i].act == DPT_CAPA_HOST, "%s: eager step item %d action %d",
                          name, i, fed[i].act);
                  if (mode != DPT_CAPM_EAGER) against_plan(&s, fed, n_fed, mode, name);
                }
                dpt_cuda_capture_state_free(&st);
              }
            }
  printf("capture decisions: %d run configurations, %d steps fed in dpt-train's call order\n", n_cfg, n_steps);
}

static void decision_keys(void)
{
  struct dpt_cap_run_cfg c = {2, DPT_CAP_COMM_NCCL, 7, 1, 0, 256};
  struct dpt_cap_state st;
  struct fed fed[128];
  int n, slot, ts = -1, vs = -1;
  struct dpt_cap_step train, val;
  dpt_cuda_capture_step_of(&c, DPT_CAP_TRAIN_STEP, 0, &train);
  dpt_cuda_capture_step_of(&c, DPT_CAP_VALIDATION, 0, &val);
  dpt_cuda_capture_state_init(&st, 1);
  /* an epoch: training steps, then validation batches, then training again */
  int modes[8];
  struct dpt_cap_step seq[8] = {train, train, train, val, val, val, train, val};
  for (int i = 0; i < 8; i++) {
    modes[i] = run_step(&st, &seq[i], fed, &n, &slot, "epoch");
    if (seq[i].training) {
      CHECK(ts < 0 || slot == ts, "training changed slot");
      ts = slot;
    } else {
      CHECK(vs < 0 || slot == vs, "validation changed slot");
      vs = slot;
    }
  }
  CHECK(ts != vs, "training and validation share a slot");
  static const int want[8] = {DPT_CAPM_EAGER, DPT_CAPM_CAPTURE, DPT_CAPM_REPLAY, DPT_CAPM_EAGER, DPT_CAPM_CAPTURE,
                              DPT_CAPM_REPLAY, DPT_CAPM_REPLAY, DPT_CAPM_REPLAY};
  for (int i = 0; i < 8; i++) CHECK(modes[i] == want[i], "epoch step %d: mode %d (want %d)", i, modes[i], want[i]);
  CHECK(st.captures == 2 && st.replays == 4, "captures %d replays %d", st.captures, st.replays);
  /* five keys: the fifth evicts the least recently used (training, used before validation last) */
  struct dpt_err err;
  int mode, evict, evicted = -1;
  for (int b = 1; b <= 3; b++) {
    struct dpt_cap_run_cfg cb = c;
    cb.batch = 256 + b; /* other batch shapes: new keys */
    struct dpt_cap_step s;
    dpt_cuda_capture_step_of(&cb, DPT_CAP_TRAIN_STEP, 0, &s);
    dpt_cuda_capture_begin(&st, &s, &mode, &slot, &evict, &err);
    if (evict >= 0) evicted = evict;
    dpt_cuda_capture_abort(&st);
  }
  CHECK(evicted == ts, "the fifth key evicted slot %d, the least recently used is %d (training)", evicted, ts);
  run_step(&st, &train, fed, &n, &slot, "after eviction");
  CHECK(st.slot[slot].captured == 0 && st.slot[slot].seen == 1, "an evicted key is not eager again");
  /* a call out of order: refused, the capture dropped */
  run_step(&st, &train, fed, &n, &slot, "capture again"); /* captured */
  dpt_cuda_capture_state_free(&st);
  dpt_cuda_capture_state_init(&st, 1);
  run_step(&st, &train, fed, &n, &slot, "warm-up");
  dpt_cuda_capture_begin(&st, &train, &mode, &slot, &evict, &err);
  CHECK(mode == DPT_CAPM_CAPTURE, "second step not captured");
  int act, seg, first, last;
  int rc = dpt_cuda_capture_item(&st, DPT_HOST_INPUT, -1, &act, &seg, &first, &last, &err);
  if (!rc) rc = dpt_cuda_capture_item(&st, DPT_CAP_LOSS, -1, &act, &seg, &first, &last, &err); /* skips scalars, forward */
  CHECK(rc == DPT_E_RUNTIME && strstr(err.msg, "loss") && strstr(err.msg, "--cuda-graph off"),
        "an item out of order accepted: %s", rc ? err.msg : "");
  if (rc) printf("refused: %s\n", err.msg);
  CHECK(!st.in_step && !st.slot[slot].captured, "the dropped capture is kept");
  dpt_cuda_capture_begin(&st, &train, &mode, &slot, &evict, &err);
  CHECK(mode == DPT_CAPM_CAPTURE, "after a dropped capture: mode %d (want capture again)", mode);
  dpt_cuda_capture_state_free(&st);
}

int main(void)
{
  decisions();
  decision_keys();
  all_combinations();
  keys();
  bad_steps();
  if (!failures) printf("test_cuda_capture: all checks passed\n");
  return failures != 0;
}
