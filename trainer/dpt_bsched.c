/* dpt_bsched.c — the batch-size schedule and its step accounting (dpt_bsched.h). */
#include "dpt_bsched.h"

#include <stdio.h>
#include <stdlib.h>

int dpt_bsched_parse(const char *s, struct dpt_bsched *b, struct dpt_err *err)
{
  const char *p = s;
  char *end;
  b->n = 0;
  while (*p) {
    long e = strtol(p, &end, 10), v;
    if (end == p || *end != ':')
      return dpt_err_set(err, DPT_E_INPUT, "--batch-schedule '%s': need EPOCH:BATCH pairs, e.g. 0:64,30:128", s);
    p = end + 1;
    v = strtol(p, &end, 10);
    if (end == p || (*end && *end != ',') || v < 1 || v > 65536)
      return dpt_err_set(err, DPT_E_INPUT, "--batch-schedule '%s': a batch is not an integer in [1, 65536]", s);
    if (b->n == DPT_BSCHED_MAX)
      return dpt_err_set(err, DPT_E_INPUT, "--batch-schedule '%s': more than %d entries", s, DPT_BSCHED_MAX);
    if (b->n ? !(e > b->start[b->n - 1] && e <= 1000000) : e != 0)
      return dpt_err_set(err, DPT_E_INPUT, "--batch-schedule '%s': the epochs must be integers starting at 0 and "
                         "increasing (the batch changes at an epoch's start)", s);
    b->start[b->n] = (int)e;
    b->batch[b->n++] = (int)v;
    p = *end == ',' ? end + 1 : end;
  }
  if (!b->n) return dpt_err_set(err, DPT_E_INPUT, "--batch-schedule '': need EPOCH:BATCH pairs, e.g. 0:64,30:128");
  return 0;
}

void dpt_bsched_const(struct dpt_bsched *b, int batch)
{
  b->n = 1;
  b->start[0] = 0;
  b->batch[0] = batch;
  b->spe[0] = 0;
  b->first_step[0] = 0;
}

int dpt_bsched_plan(struct dpt_bsched *b, long n_train, int vranks, struct dpt_err *err)
{
  for (int i = 0; i < b->n; i++) {
    long global = (long)b->batch[i] * vranks;
    b->spe[i] = (int)(n_train / global);
    if (b->spe[i] < 1)
      return dpt_err_set(err, DPT_E_INPUT, "per-rank batch %d from epoch %d: %d (virtual) ranks make a global batch "
                         "of %ld, more than the %ld training images: lower the batch or use fewer ranks",
                         b->batch[i], b->start[i], vranks, global, n_train);
    b->first_step[i] = i ? b->first_step[i - 1] + (long)(b->start[i] - b->start[i - 1]) * b->spe[i - 1] : 0;
  }
  return 0;
}

int dpt_bsched_phase(const struct dpt_bsched *b, int epoch)
{
  int i = 0;
  while (i + 1 < b->n && epoch >= b->start[i + 1]) i++;
  return i;
}

int dpt_bsched_batch(const struct dpt_bsched *b, int epoch) { return b->batch[dpt_bsched_phase(b, epoch)]; }

int dpt_bsched_spe(const struct dpt_bsched *b, int epoch) { return b->spe[dpt_bsched_phase(b, epoch)]; }

long dpt_bsched_epoch_start(const struct dpt_bsched *b, int epoch)
{
  int i = dpt_bsched_phase(b, epoch);
  return b->first_step[i] + (long)(epoch - b->start[i]) * b->spe[i];
}

void dpt_bsched_locate(const struct dpt_bsched *b, long step, int *epoch, int *step_in_epoch)
{
  int i = 0;
  while (i + 1 < b->n && step >= b->first_step[i + 1]) i++;
  long k = step - b->first_step[i];
  *epoch = b->start[i] + (int)(k / b->spe[i]);
  *step_in_epoch = (int)(k % b->spe[i]);
}

double dpt_bsched_epoch(const struct dpt_bsched *b, long step)
{
  int i = 0;
  while (i + 1 < b->n && step >= b->first_step[i + 1]) i++;
  return b->start[i] + (double)(step - b->first_step[i]) / b->spe[i]; /* one phase: step / spe */
}

void dpt_bsched_str(const struct dpt_bsched *b, char *buf, size_t len)
{
  size_t o = 0;
  buf[0] = '\0';
  if (b->n == 1) {
    snprintf(buf, len, "%d", b->batch[0]);
    return;
  }
  for (int i = 0; i < b->n && o < len; i++) {
    int w = snprintf(buf + o, len - o, "%s%d:%d", i ? "," : "", b->start[i], b->batch[i]);
    if (w < 0) break;
    o += (size_t)w;
  }
}
