/* dpt_bsched.h — the batch-size schedule (--batch-schedule E0:B0,E1:B1,..): the per-rank batch
 * raised at chosen epochs (Smith et al. 2017, "Don't decay the learning rate, increase the batch
 * size"; ChainerMN's 90-epoch ResNet-50: 64 per GPU to epoch 30, 128 after), and the step
 * accounting that follows from it.
 *
 * Phase i runs epochs [start[i], start[i+1]) at micro-batch batch[i] per rank.  An epoch of phase
 * i has spe[i] = floor(n_train / (batch[i] * virtual_ranks)) steps (the training loader's count:
 * every rank the same, the remainder of the permutation dropped), so the global step where epoch
 * e begins is the sum of the spe of the epochs before it, and a global step maps to exactly one
 * (epoch, step in epoch).  The fractional epoch of step s, epoch + step_in_epoch / spe, is what
 * the learning-rate schedule, warm-up and RMSprop warm-up's mix read.  A constant batch is the
 * one-phase schedule: then epoch = s / spe, as before.
 *
 * The learning rate is NOT rescaled when the batch grows: the linear scaling rule is applied
 * once, to the global batch of the first phase (--lr per --lr-batch images), and the schedule's
 * factors do the rest.  This is what Smith et al. propose (a larger batch instead of a lower
 * rate) and what ChainerMN's recipe writes: its x0.2 at epoch 30, where the batch doubles, is the
 * x0.1 of the usual step schedule times the 2 the batch gained. */
#ifndef DPT_BSCHED_H
#define DPT_BSCHED_H

#include "dpt_err.h"

#define DPT_BSCHED_MAX 16

struct dpt_bsched {
  int n;                            /* phases, >= 1 */
  int start[DPT_BSCHED_MAX];        /* first epoch of phase i (start[0] = 0, increasing) */
  int batch[DPT_BSCHED_MAX];        /* per-rank micro-batch of phase i */
  /* filled by dpt_bsched_plan: */
  int spe[DPT_BSCHED_MAX];          /* steps per epoch in phase i */
  long first_step[DPT_BSCHED_MAX];  /* global step where phase i begins */
};

/* "E0:B0,E1:B1,.." (E0 = 0, epochs increasing integers, batches in [1, 65536], at most
 * DPT_BSCHED_MAX entries).  DPT_E_INPUT with the reason otherwise. */
int dpt_bsched_parse(const char *s, struct dpt_bsched *b, struct dpt_err *err);
/* The one-phase schedule of a constant batch. */
void dpt_bsched_const(struct dpt_bsched *b, int batch);
/* Steps per epoch of every phase for n_train images over vranks virtual ranks (ranks x
 * --accumulate).  DPT_E_INPUT when a phase's global batch exceeds the data set (no step). */
int dpt_bsched_plan(struct dpt_bsched *b, long n_train, int vranks, struct dpt_err *err);
/* The phase epoch e belongs to. */
int dpt_bsched_phase(const struct dpt_bsched *b, int epoch);
/* Per-rank micro-batch and steps per epoch of epoch e. */
int dpt_bsched_batch(const struct dpt_bsched *b, int epoch);
int dpt_bsched_spe(const struct dpt_bsched *b, int epoch);
/* The global step where epoch e begins (e = epochs: the steps of the whole run). */
long dpt_bsched_epoch_start(const struct dpt_bsched *b, int epoch);
/* The epoch a global step is in, and its step within it. */
void dpt_bsched_locate(const struct dpt_bsched *b, long step, int *epoch, int *step_in_epoch);
/* The fractional epoch of a global step: its phase's first epoch + (steps into the phase) / spe
 * (= epoch + step_in_epoch / spe; one phase: step / spe). */
double dpt_bsched_epoch(const struct dpt_bsched *b, long step);
/* "0:64,30:128" (a constant batch: "64"). */
void dpt_bsched_str(const struct dpt_bsched *b, char *buf, size_t len);

#endif /* DPT_BSCHED_H */
