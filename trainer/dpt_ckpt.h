/* dpt_ckpt.h — checkpoints: atomic, checksummed, bit-exact resume.
 *
 * File layout (little-endian): "DPTCKPT3", a fixed header (struct dpt_ckpt_meta
 * fields, array lengths; "DPTCKPT1" files, whose header stops before the loss
 * scaler, and "DPTCKPT2" files, whose header stops before the optimizer, are
 * still read), the arrays params [n_params], state [n_state],
 * velocity [n_opt_state] (the optimizer's state), pending [n_params] (double buffering's averaged
 * gradient waiting to be applied; n_pending = 0 without it), then a CRC-32 of
 * everything before it.  Written to "<path>.tmp.<pid>", fsync'd, renamed over
 * <path>, and the directory fsync'd: a crash leaves the old file or the new
 * one, never half of one.  A file that fails any check is refused with a
 * message naming it and the check; dpt_ckpt_find_latest() then falls back to
 * the previous good checkpoint.  A failed write (full disk, ENOSPC; file size
 * limit, EFBIG — the caller must ignore SIGXFSZ to get the error instead of
 * the signal) removes its temporary file and says so; the previous checkpoint
 * stays the newest. */
#ifndef DPT_CKPT_H
#define DPT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "dpt_err.h"

struct dpt_ckpt_meta {
  uint64_t global_step;   /* optimizer steps done */
  int32_t epoch;          /* epoch to continue in */
  int32_t step_in_epoch;  /* next step within that epoch */
  uint64_t seed;          /* run seed (data order, augmentation) */
  int32_t world_size;     /* ranks that wrote it (resume needs the same) */
  int32_t batch;          /* per-rank batch of the epoch to continue in; expected 0: any (the
                             caller checks it against its batch schedule) */
  uint64_t n_params, n_state, n_pending;
  char model[96];         /* model description, must match on resume */
  /* version 2: mixed precision's dynamic loss scaler (dpt_loss_scaler), so a
   * resumed run continues with the scale it had (0 / 0 / 0: none, fp32) */
  float loss_scale;
  int32_t scale_good_steps; /* consecutive good steps at that scale */
  int64_t scale_skipped;    /* steps skipped on overflow so far */
  /* version 3: the optimizer whose momentum buffer "velocity" is ("sgd": torch.optim.SGD's
   * unscaled velocity; "lars": learning-rate-scaled steps), which a resume must match;
   * version 1 and 2 files were all written by "sgd" */
  char optimizer[16];
  /* version 3: length of the "velocity" array, the optimizer's state: n_params for sgd and lars
   * (the momentum buffer), 2 n_params for rmsprop-warmup (the momentum buffer, then the second
   * moment); 0 is read as n_params (version 1 and 2 files, and callers that leave it unset) */
  uint64_t n_opt_state;
};

int dpt_ckpt_save(const char *path, const struct dpt_ckpt_meta *m, const float *params /* [n_params] */,
                  const float *state /* [n_state] */, const float *velocity /* [n_params] */,
                  const float *pending /* [n_pending] or NULL */, struct dpt_err *err);
/* Reads and verifies; arrays must have the sizes in *expect (model, n_params,
 * n_state must match; pending may be NULL when n_pending is 0). */
int dpt_ckpt_load(const char *path, const struct dpt_ckpt_meta *expect, struct dpt_ckpt_meta *got,
                  float *params, float *state, float *velocity, float *pending, struct dpt_err *err);
/* Newest "ckpt-<step>.dpt" in dir that verifies (corrupt ones are reported via
 * warn() and skipped).  Returns 1 and fills path, 0 when none, < 0 on error. */
int dpt_ckpt_find_latest(const char *dir, const struct dpt_ckpt_meta *expect, char *path, size_t len,
                         void (*warn)(const char *msg), struct dpt_err *err);
/* Path of the checkpoint for a step: "<dir>/ckpt-<step, 10 digits>.dpt". */
void dpt_ckpt_path(const char *dir, uint64_t step, char *path, size_t len);
/* One point of the learning curve (NAN: unknown). */
struct dpt_ckpt_point {
  double epoch;     /* epochs done */
  long step;        /* global step of the point */
  double train_loss, train_top1, val_loss, val_top1, val_top5, lr, elapsed_s;
};
/* The learning curve kept next to the checkpoints, "<dir>/curve.txt" (text:
 * a "dpt-curve 1" line, then one line per point), so that a resumed run's
 * report holds the epochs before the stop.  Written atomically (temporary
 * file, fsync, rename) by the one writer of dir. */
int dpt_ckpt_curve_save(const char *dir, const struct dpt_ckpt_point *p, size_t n, struct dpt_err *err);
/* The points of "<dir>/curve.txt" with step <= max_step, in order (the run
 * resumes after max_step, so later points belong to a run that is being
 * redone); *out is malloc'd (free it), NULL when none.  0 and *n = 0 when the
 * file does not exist (checkpoints of an older dpt-train); < 0 when it cannot
 * be read or a line is malformed (the error names the file and line). */
int dpt_ckpt_curve_load(const char *dir, long max_step, struct dpt_ckpt_point **out, size_t *n,
                        struct dpt_err *err);

/* Keep the newest `keep` checkpoints in dir, delete older ones, and the
 * temporary files of writers that were killed mid-write (other pids: a
 * checkpoint directory belongs to one job). */
void dpt_ckpt_prune(const char *dir, int keep);

#endif /* DPT_CKPT_H */
