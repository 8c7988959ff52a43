/* dpt_train_recipe.c — dpt-train: the record runs' large-batch recipes as option presets
 * (--recipe NAME: their options first, the user's after them, so explicit options win; the CLI
 * expands them, dpt_train_cli.c), and --dry-run: the resolved options and the per-epoch table
 * (global batch, steps, learning rate, optimizer mix, BN statistics) without data, ranks or GPU.
 *
 * Every value below comes from the source named with it; where a source is silent the value is
 * marked inferred in `notes`, and where the published rule cannot be written in dpt-train's
 * options exactly, `notes` says how far off it is.  tests/trainer/test_recipe.sh checks each
 * dry-run table against values taken from these sources. */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

/* ChainerMN v1.3 post (Suzuki, Chainer blog 2018-05-25, appendix "Setting for training with # of
 * epochs = 90"): 32 P100, "Batch size: 64 per GPU until the 30th epoch, 128 afterwards", "Gradual
 * warmup until the 5th epoch", "0.2 time at the 30th epoch, and 0.1 time at the 60th and 80th",
 * "Momentum SGD (momentum=0.9)", "Weight decay: 0.0001", "based on Goyal et al." */
static const char *const chainermn90[] = {
    "--dataset", "imagenet", "--batch-schedule", "0:64,30:128", "--epochs", "90", "--lr", "0.1", "--lr-batch", "256",
    "--warmup-epochs", "5", "--warmup-start", "base", "--schedule", "multistep", "--milestones", "30,60,80",
    "--gammas", "0.2,0.1,0.1", "--optimizer", "sgd", "--momentum", "0.9", "--weight-decay", "0.0001",
    "--label-smoothing", "0", "--bn-eval-stats", "running", "--zero-init-residual", "on", NULL};

/* Goyal et al. 2017 (arXiv 1706.02677): 256 GPUs x 32 (sec. 5.1, 5.2); eta = 0.1 kn/256 = 3.2;
 * gradual warm-up over 5 epochs "which starts with eta = 0.1" (sec. 2.2, 5.2); /10 at epochs 30, 60
 * and 80 of 90; "Nesterov momentum with m of 0.9"; weight decay 0.0001, not on BN gamma/beta; the
 * last BN gamma of each residual block initialised to 0; BN running averages (sec. 5.1). */
static const char *const goyal[] = {
    "--dataset", "imagenet", "--batch-size", "32", "--epochs", "90", "--lr", "0.1", "--lr-batch", "256",
    "--warmup-epochs", "5", "--warmup-start", "base", "--schedule", "multistep", "--milestones", "30,60,80",
    "--gammas", "0.1,0.1,0.1", "--optimizer", "sgd", "--nesterov", "--momentum", "0.9", "--weight-decay", "0.0001",
    "--label-smoothing", "0", "--bn-eval-stats", "running", "--zero-init-residual", "on", NULL};

/* Akiba, Suzuki, Fukuda 2017 (arXiv 1711.04325): 1,024 P100, 32k, 90 epochs, RMSprop warm-up, BN
 * without moving averages, slow-start schedule (abstract).  The slow-start table (0.5, 0.075, 0.01,
 * 0.001 x eta_base = 0.1 x 32768 / 256 from epochs 0, 40, 70, 85), beta_center 10, beta_period 5 and
 * the last-batch statistics averaged over workers: secondary sources (see notes). */
static const char *const akiba[] = {
    "--dataset", "imagenet", "--batch-size", "32", "--epochs", "90", "--schedule", "piecewise",
    "--lr-steps", "0:0.05,40:0.0075,70:0.001,85:0.0001", "--lr-batch", "256", "--warmup-epochs", "0",
    "--optimizer", "rmsprop-warmup", "--rmsprop-lr", "3e-4", "--rmsprop-mu2", "0.99", "--rmsprop-eps", "1e-8",
    "--rmsprop-center", "10", "--rmsprop-period", "5", "--momentum", "0.9", "--weight-decay", "0.0001",
    "--label-smoothing", "0", "--bn-eval-stats", "last-batch", "--zero-init-residual", "on", NULL};

/* MLPerf ResNet-50 v1.5 reference (mlcommons/training, image_classification/tensorflow2, its
 * TPU-v3-64 command in README.md: 64 replicas, --batch_size=4096 --base_learning_rate=10.0
 * --warmup_epochs=5 --train_epochs=42 --weight_decay=0.0002 --label_smoothing=0.1 --lars_epsilon=0
 * --momentum=0.9; lars_util.py: poly power 2 to end 0.0001; lars_optimizer.py: eeta 0.001, BN and
 * bias skipped; resnet_model.py: BN gamma 1, decay 0.9). */
static const char *const mlperf[] = {
    "--dataset", "imagenet", "--batch-size", "64", "--epochs", "42", "--lr", "10", "--lr-batch", "4096",
    "--warmup-epochs", "5", "--schedule", "poly", "--power", "2", "--end-lr", "0.0001", "--optimizer", "lars",
    "--lars-eta", "0.001", "--lars-eps", "0", "--momentum", "0.9", "--weight-decay", "0.0002",
    "--label-smoothing", "0.1", "--bn-eval-stats", "running", "--zero-init-residual", "off", NULL};

static const struct dpt_train_recipe recipes[] = {
    {"chainermn-90", "ChainerMN v1.3, 90 epochs (S. Suzuki, \"New ChainerMN functions for improved performance in "
     "cloud environments and performance testing results on AWS\", Chainer blog, 2018-05-25)",
     "its appendix \"Setting for training with # of epochs = 90\"; 32 GPUs (4 nodes x 8 P100)",
     "the post gives no learning rate: 0.1 per 256 images and the warm-up from it are inferred from its \"based on "
     "Goyal et al.\"; label smoothing, BN statistics and the zero-initialised residual gamma are not stated (Goyal's)",
     32, chainermn90},
    {"goyal", "Goyal et al. 2017, \"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour\" (arXiv 1706.02677)",
     "sections 2.2, 2.3, 5.1, 5.2; 256 GPUs (32 servers x 8 P100) x 32 images",
     "weight decay is also off on the FC bias (the paper exempts BN gamma and beta only)", 256, goyal},
    {"akiba", "Akiba, Suzuki, Fukuda 2017, \"Extremely Large Minibatch SGD: Training ResNet-50 on ImageNet in 15 "
     "Minutes\" (arXiv 1711.04325)",
     "abstract (1,024 P100, 32k, 90 epochs, the three techniques); the slow-start table, beta_center 10, "
     "beta_period 5 and the update from secondary sources (a reading note copying the paper's formulas; "
     "crest-deep/dlframeworks chainer/examples/imagenet/rmsprop_warmup, \"PFN's large batch training "
     "configuration\"), which agree",
     "the paper's text could not be read: the RMSprop rate 3e-4, mu2 0.99, eps 1e-8 and momentum 0.9 are that "
     "reimplementation's defaults; weight decay 0.0001, no label smoothing and the zero-initialised residual gamma "
     "are Goyal's (unverified); the SGD share's middle piece is dpt's continuous reading (--help)", 1024, akiba},
    {"mlperf", "MLPerf ResNet-50 v1.5 reference (mlcommons/training, image_classification/tensorflow2)",
     "README.md's TPU-v3-64 command (64 replicas x 64 = 4,096), lars_util.py, lars_optimizer.py, "
     "resnet_model.py; training_policies' ResNet hyperparameter table",
     "the reference's poly decay spans one step more (train_steps - warmup_steps + 1); 42 epochs is its cap: the "
     "benchmark stops at 75.9% top-1; it ran on 64 TPU-v3 replicas, here 64 ranks", 64, mlperf},
};

const struct dpt_train_recipe *dpt_train_recipe_find(const char *name)
{
  for (size_t i = 0; i < sizeof recipes / sizeof *recipes; i++)
    if (!strcmp(recipes[i].name, name)) return &recipes[i];
  return NULL;
}

/* Training images of the data set o names, without reading it (the dry run). */
static long nominal_images(const struct opts *o)
{
  if (o->dry_images) return o->dry_images;
  if (!strcmp(o->dataset, "imagenet")) return 1281167; /* ILSVRC-2012's training set */
  if (!strcmp(o->dataset, "cifar10")) return 50000;
  if (!strcmp(o->dataset, "fashion-mnist")) return 60000;
  return o->n_synth;
}

/* The optimizer column at steps s0 and s1 of an epoch. */
static void optimizer_cell(const struct opts *o, double e0, double e1, char *buf, size_t len)
{
  if (!strcmp(o->optimizer, "rmsprop-warmup"))
    snprintf(buf, len, "rmsprop-warmup, SGD share %.4f..%.4f", dpt_rmsw_alpha_sgd(e0, o->rms_center, o->rms_period),
             dpt_rmsw_alpha_sgd(e1, o->rms_center, o->rms_period));
  else if (!strcmp(o->optimizer, "lars"))
    snprintf(buf, len, "lars eta %g, m %g%s", o->lars_eta, o->momentum, o->nesterov ? " nesterov" : "");
  else
    snprintf(buf, len, "sgd m %g%s", o->momentum, o->nesterov ? " nesterov" : "");
}

int dpt_train_dry_run(const struct opts *o)
{
  const struct dpt_train_recipe *re = o->recipe ? dpt_train_recipe_find(o->recipe) : NULL;
  int R = o->dry_ranks ? o->dry_ranks : re ? re->gpus : 1;
  long images = nominal_images(o);
  struct dpt_bsched bs;
  struct dpt_schedule sch;
  struct dpt_err err = {0};
  if (!o->batch_schedule) dpt_bsched_const(&bs, o->batch);
  else if (dpt_bsched_parse(o->batch_schedule, &bs, &err)) return dpt_train_bad("%s", err.msg);
  if (dpt_bsched_plan(&bs, images, R * o->accum, &err)) return dpt_train_bad("--dry-run: %s", err.msg);
  long total = o->iterations ? o->iterations : dpt_bsched_epoch_start(&bs, o->epochs);
  double total_epochs = dpt_bsched_epoch(&bs, total);
  long global = (long)o->batch * o->accum * R;
  if (dpt_train_schedule_make(o, global, total_epochs, &sch, &err)) return dpt_train_bad("%s", err.msg);
  if (re) printf("dpt-train: recipe %s: %s\n  source: %s\n  notes: %s\n", re->name, re->title, re->source, re->notes);
  printf("dpt-train: options:");
  for (int i = 1; i < o->argc; i++) { /* the recipe's options (those kept) and the user's */
    if (!strcmp(o->argv[i], "--recipe") || !strcmp(o->argv[i], "--ranks") || !strcmp(o->argv[i], "--train-images")) i++;
    else if (strcmp(o->argv[i], "--dry-run") && strncmp(o->argv[i], "--recipe=", 9)) printf(" %s", o->argv[i]);
  }
  char bdesc[300];
  if (o->batch_schedule) snprintf(bdesc, sizeof bdesc, "%s (by epoch)", o->batch_schedule);
  else snprintf(bdesc, sizeof bdesc, "%d", o->batch);
  printf("\ndpt-train: dry run: %d rank(s)%s x per-rank batch %s x accumulate %d, %ld training images%s\n", R,
         o->dry_ranks ? "" : re ? " (the published run's; --ranks N)" : "", bdesc, o->accum, images,
         o->dry_images ? "" : !strcmp(o->dataset, "imagenet") ? " (ImageNet-1k's; --train-images N)" : " (the data set's)");
  printf("dpt-train: %ld steps (%.2f epochs), peak lr %.6g (%s, warm-up %g epochs from %s), label smoothing %g, weight "
         "decay %g%s, last BN gamma of residual branches %s\n", total, total_epochs, sch.peak_lr, o->schedule,
         o->warmup_epochs, o->warmup_base ? "the unscaled rate" : "0", o->smoothing, o->weight_decay,
         o->no_decay_bn ? " (not on BN and bias)" : "", o->zero_init_residual ? "0" : "1");
  printf("%5s %12s %6s %12s %12s  %-40s %s\n", "epoch", "global batch", "steps", "lr first", "lr last", "optimizer",
         "BN statistics for evaluation");
  for (int e = 0; dpt_bsched_epoch_start(&bs, e) < total; e++) {
    long s0 = dpt_bsched_epoch_start(&bs, e), s1 = dpt_bsched_epoch_start(&bs, e + 1);
    if (s1 > total) s1 = total;
    double e0 = dpt_bsched_epoch(&bs, s0), e1 = dpt_bsched_epoch(&bs, s1 - 1);
    char opt[96];
    optimizer_cell(o, e0, e1, opt, sizeof opt);
    printf("%5d %12ld %6ld %12.6g %12.6g  %-40s %s\n", e + 1, (long)dpt_bsched_batch(&bs, e) * o->accum * R, s1 - s0,
           dpt_schedule_lr(&sch, e0), dpt_schedule_lr(&sch, e1), opt,
           !strcmp(o->bn_eval, "last-batch") ? "last batch, averaged over ranks" : "running, averaged over ranks");
  }
  return 0;
}
