/* dpt_optim.h — loss, momentum SGD and learning-rate schedules (plain C + OpenMP).
 * These run on host slabs; a device backend brings its own kernels with the same
 * semantics (and is checked against these). */
#ifndef DPT_OPTIM_H
#define DPT_OPTIM_H

#include <stddef.h>

#include "dpt_err.h"

/* Softmax cross-entropy, PyTorch semantics (label smoothing eps: target =
 * (1 - eps) * onehot + eps / K).  Returns the SUM of per-image losses.
 * dlogits (optional) receives grad_scale * (softmax - target), e.g.
 * grad_scale = 1 / global_batch for a mean loss.  top1/top5 (optional) count
 * images whose label is among the 1 / 5 highest logits.  Labels outside
 * [0, k) (-1: validation padding) contribute nothing (zero gradient row). */
double dpt_softmax_xent(const float *logits /* [n, k] */, const int *labels /* [n] */, int n, int k,
                        float smoothing, float grad_scale, float *dlogits /* [n, k] or NULL */,
                        int *top1, int *top5);

/* Momentum SGD as torch.optim.SGD(momentum=m, weight_decay=wd, dampening=0):
 *   g = grad + wd * w (where mask[i]),  v = m * v + g,  w -= lr * v        */
struct dpt_sgd {
  size_t n;                 /* parameter count */
  float momentum;
  float weight_decay;
  int nesterov;             /* 1: w -= lr * (g + m * v) */
  unsigned char *decay_mask; /* [n] 1 = apply weight decay (owned) */
  float *velocity;          /* [n] momentum buffer (owned), starts at 0 */
};
int dpt_sgd_init(struct dpt_sgd *o, size_t n, float momentum, float weight_decay,
                 const unsigned char *decay_mask /* [n] or NULL = everywhere */,
                 struct dpt_err *err);
void dpt_sgd_step(struct dpt_sgd *o, float lr, float *params /* [n] */, const float *grads /* [n] */);
void dpt_sgd_free(struct dpt_sgd *o);

/* One parameter tensor of the slab (a layer's weight, BN gamma, BN beta or bias), for the
 * optimizers that work per tensor (LARS). */
struct dpt_param_seg {
  size_t off, len; /* slab offset and element count */
  int skip;        /* 1: a BN parameter or a bias: LARS leaves it out (no trust ratio, no decay) */
};

/* LARS (You, Gitman, Ginsburg 2017) as the MLPerf ResNet-50 reference defines it
 * (mlcommons/training, image_classification/tensorflow2/lars_optimizer.py), per tensor:
 *   not skipped:  r = eta |w| / (|g| + wd |w| + eps) where |w| > 0 and |g| > 0, else 1;
 *                 lr_t = lr r,  g' = g + wd w
 *   skipped:      lr_t = lr,    g' = g            (BN and bias: plain momentum, no decay)
 *   v = m v - lr_t g',  w += v          nesterov:  w += m v - lr_t g'
 * with |.| the L2 norm of the tensor (|g| of the gradient before the decay term).  The
 * momentum buffer holds learning-rate-scaled steps (TensorFlow's and MXNet's convention),
 * not torch.optim.SGD's unscaled velocity: a checkpoint says which optimizer wrote it.
 * eps = 0 is taken as 1e-7, as the reference does (its `epsilon or backend_config.epsilon()`).
 * momentum, weight_decay and nesterov come from struct dpt_sgd (its decay mask is not used:
 * the skip flags decide); velocity is its momentum buffer. */
#define DPT_LARS_ETA_DEFAULT 0.001
#define DPT_LARS_EPS_ZERO 1e-7 /* what eps = 0 becomes (Keras' backend epsilon) */
struct dpt_lars {
  float eta, eps;
  int n_seg;
  struct dpt_param_seg *seg; /* [n_seg] covering [0, n) without overlap (owned) */
  float *ratio;              /* [n_seg] the last step's trust ratios (owned; 1 for skipped) */
};
/* Checks that the tensors tile the slab of n parameters. */
int dpt_lars_init(struct dpt_lars *l, size_t n, const struct dpt_param_seg *seg, int n_seg, float eta,
                  float eps, struct dpt_err *err);
void dpt_lars_step(struct dpt_lars *l, struct dpt_sgd *o, float lr, float *params /* [n] */,
                   const float *grads /* [n] */);
void dpt_lars_free(struct dpt_lars *l);

/* RMSprop warm-up (Akiba, Suzuki, Fukuda 2017, "Extremely Large Minibatch SGD: Training
 * ResNet-50 on ImageNet in 15 Minutes", arXiv 1711.04325, section 2.1): an update that starts
 * as RMSprop and becomes momentum SGD over the first epochs.  Per element, at epoch e (fractional)
 * with the scheduled learning rate lr (momentum SGD's):
 *   g' = g + wd w (where the decay mask says)
 *   m  = mu2 m + (1 - mu2) g'^2
 *   d  = mu1 d - g' (a_sgd(e) + a_rms(e) / (sqrt(m) + eps)),  a_rms = (1 - a_sgd) lr_rms / lr
 *   w += lr d
 * with mu1 the momentum and d its buffer (sgd's velocity slab), m a second-moment buffer.
 * The mix a_sgd(e) rises from ~0 to 1 around beta_center over beta_period epochs; dpt takes it
 * continuous with a continuous slope (1/2 + 1/2 ELU(2 (e - c) / p), clipped at 1):
 *   e < c:            1/2 exp(2 (e - c) / p)
 *   c <= e < c + p/2: 1/2 + (e - c) / p
 *   e >= c + p/2:     1
 * (Implementations in circulation write exp(2 (e - c) / p) without the 1/2, or 1/2 + 2 (e - c) / p:
 * both jump at e = c; this reading is the one whose pieces meet.)  Defaults as those
 * implementations: lr_rms 3e-4, mu2 0.99, eps 1e-8, beta_center 10, beta_period 5 epochs. */
#define DPT_RMSW_LR 3e-4
#define DPT_RMSW_MU2 0.99
#define DPT_RMSW_EPS 1e-8
#define DPT_RMSW_CENTER 10.0
#define DPT_RMSW_PERIOD 5.0
struct dpt_rmsw {
  size_t n;
  float lr_rms, mu2, eps;
  double center, period; /* epochs */
  float *m;              /* [n] second moment, the caller's buffer (zero at the start) */
};
double dpt_rmsw_alpha_sgd(double epoch, double center, double period);
/* m: the caller's [n] buffer (zeroed for a fresh start; a checkpoint's for a resume). */
int dpt_rmsw_init(struct dpt_rmsw *r, size_t n, float *m, float lr_rms, float mu2, float eps, double center,
                  double period, struct dpt_err *err);
/* One step at epoch `epoch` with the scheduled rate lr (lr = 0 leaves w unchanged and only moves
 * the buffers); momentum, weight decay and its mask from o (nesterov is refused at set-up). */
void dpt_rmsw_step(const struct dpt_rmsw *r, struct dpt_sgd *o, float lr, double epoch, float *params /* [n] */,
                   const float *grads /* [n] */);

enum dpt_sched_kind { DPT_SCHED_CONST, DPT_SCHED_STEP, DPT_SCHED_MULTISTEP, DPT_SCHED_POLY,
                      DPT_SCHED_COSINE, DPT_SCHED_PIECEWISE };
#define DPT_SCHED_MAX_MILESTONES 16

/* A learning-rate schedule in units of epochs (fractional). */
struct dpt_schedule {
  enum dpt_sched_kind kind;
  double peak_lr;        /* after the linear scaling rule: lr * global_batch / ref_batch */
  double warmup_epochs;  /* linear ramp from peak_lr * warmup_start to peak_lr */
  double warmup_start;   /* fraction of peak at epoch 0 (Goyal et al.: 1 / k) */
  double total_epochs;   /* for poly / cosine */
  double gamma;          /* step / multistep factor (0.1) */
  double step_epochs;    /* step: every this many epochs */
  int n_milestones;
  double milestones[DPT_SCHED_MAX_MILESTONES]; /* multistep, epochs ascending */
  int n_gammas;          /* multistep: 0 = gamma at every milestone, else n_milestones factors */
  double gammas[DPT_SCHED_MAX_MILESTONES]; /* multistep: the factor applied at each milestone
                                              (cumulative: lr = peak x gammas[0] x ... x gammas[k-1]) */
  double power;          /* poly exponent (2 in ChainerMN's ImageNet runs is common; default 1) */
  double min_lr;         /* poly / cosine: the learning rate they decay to (--end-lr) */
  int n_levels;          /* piecewise: levels[k] from epoch starts[k] on (starts[0] = 0, ascending);
                            peak_lr is levels[0] (warm-up ramps to it) */
  double starts[DPT_SCHED_MAX_MILESTONES], levels[DPT_SCHED_MAX_MILESTONES];
};

/* "const", "step", "multistep", "poly", "cosine", "piecewise" -> kind; -1 when unknown. */
int dpt_schedule_parse_kind(const char *s);
const char *dpt_schedule_kind_name(enum dpt_sched_kind k);
/* Linear scaling rule. */
static inline double dpt_lr_scaled(double lr, int global_batch, int ref_batch)
{
  return lr * (double)global_batch / (double)ref_batch;
}
double dpt_schedule_lr(const struct dpt_schedule *s, double epoch);

#endif /* DPT_OPTIM_H */
