/* dpt_loss_scale.h — dynamic loss scaling (mixed precision), the usual policy
 * (Micikevicius et al. 2018; NVIDIA Apex/AMP): gradients of loss * scale are
 * checked for inf/NaN after the all-reduce; on overflow the step is skipped and
 * the scale is multiplied by backoff; after growth_interval good steps in a row
 * it is multiplied by growth.
 *
 * One definition for the host and the device: a backend that keeps the scaler
 * in its own memory (cuda: the check, the skip and this update run on the
 * device, no host wait per step) runs the same inline code in a kernel
 * (nvcc sees DPT_LOSS_SCALE_HD = __host__ __device__).  dpt-train reads the
 * state back only for checkpoints and its final report (the backend's
 * scaler_get / scaler_set). */
#ifndef DPT_LOSS_SCALE_H
#define DPT_LOSS_SCALE_H

#ifdef __CUDACC__
#define DPT_LOSS_SCALE_HD __host__ __device__
#else
#define DPT_LOSS_SCALE_HD
#endif

struct dpt_loss_scaler {
  float scale;           /* current scale (initial 65536) */
  float growth;          /* 2 */
  float backoff;         /* 0.5 */
  int growth_interval;   /* 2000 */
  float min_scale, max_scale; /* 1, 2^24 */
  int good_steps;        /* consecutive steps without overflow */
  long skipped;          /* steps skipped so far */
};

static inline DPT_LOSS_SCALE_HD void dpt_loss_scaler_init(struct dpt_loss_scaler *s)
{
  s->scale = 65536.0f;
  s->growth = 2.0f;
  s->backoff = 0.5f;
  s->growth_interval = 2000;
  s->min_scale = 1.0f;
  s->max_scale = 16777216.0f;
  s->good_steps = 0;
  s->skipped = 0;
}

/* Record one step's overflow flag; returns 1 when the optimizer step must be applied. */
static inline DPT_LOSS_SCALE_HD int dpt_loss_scaler_update(struct dpt_loss_scaler *s, int overflow)
{
  if (overflow) {
    s->scale *= s->backoff;
    if (s->scale < s->min_scale) s->scale = s->min_scale;
    s->good_steps = 0;
    s->skipped++;
    return 0;
  }
  if (++s->good_steps >= s->growth_interval) {
    s->scale *= s->growth;
    if (s->scale > s->max_scale) s->scale = s->max_scale;
    s->good_steps = 0;
  }
  return 1;
}

#endif /* DPT_LOSS_SCALE_H */
