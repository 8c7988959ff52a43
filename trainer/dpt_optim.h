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

enum dpt_sched_kind { DPT_SCHED_CONST, DPT_SCHED_STEP, DPT_SCHED_MULTISTEP, DPT_SCHED_POLY,
                      DPT_SCHED_COSINE };
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
};

/* "const", "step", "multistep", "poly", "cosine" -> kind; -1 when unknown. */
int dpt_schedule_parse_kind(const char *s);
const char *dpt_schedule_kind_name(enum dpt_sched_kind k);
/* Linear scaling rule. */
static inline double dpt_lr_scaled(double lr, int global_batch, int ref_batch)
{
  return lr * (double)global_batch / (double)ref_batch;
}
double dpt_schedule_lr(const struct dpt_schedule *s, double epoch);

#endif /* DPT_OPTIM_H */
