/* dpt_train_cli.c — dpt-train: the command line: defaults, --help, option parsing and its checks. */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

void dpt_train_defaults(struct opts *o)
{
  memset(o, 0, sizeof *o);
  o->dataset = "fashion-mnist";
  o->schedule = "cosine";
  o->backend = "auto";
  o->comm = getenv("DPT_COMM") ? getenv("DPT_COMM") : "auto"; /* GPU-first: nccl for device gradients */
  o->image_size = 0;   /* dataset's */
  o->num_classes = 0;  /* dataset's */
  o->batch = 32;
  o->epochs = 3;
  o->lr = 0.4;
  o->lr_batch = 256;
  o->warmup_epochs = 0.2;
  o->momentum = 0.9;
  o->weight_decay = 5e-5;
  o->width = 0;       /* auto: 1 (ResNet-50) for imagenet and inputs >= 64 px, 1/8 for 28/32 px */
  o->small_stem = -1;  /* auto: image side <= 64 */
  o->prefetch = 2;
  o->data_device = "auto";
  o->crop_pad = -1;    /* auto: 4 for cifar10 (its usual recipe), 0 otherwise (Fashion-MNIST
                          reaches 90% sooner with flips only: 90.5% vs 89.1% after 2 epochs) */
  o->flip = 1;
  o->no_decay_bn = 1;
  o->gamma = 0.1;
  o->step_epochs = 30;
  o->power = 2.0;
  o->optimizer = "sgd";
  o->bn_eval = "running";
  o->zero_init_residual = 1;
  o->lars_eta = DPT_LARS_ETA_DEFAULT;
  o->lars_eps = 0.0; /* the MLPerf reference's default, which it turns into 1e-7 */
  o->rms_lr = DPT_RMSW_LR;
  o->rms_mu2 = DPT_RMSW_MU2;
  o->rms_eps = DPT_RMSW_EPS;
  o->rms_center = DPT_RMSW_CENTER;
  o->rms_period = DPT_RMSW_PERIOD;
  o->n_synth = 2048;
  o->val = 1;
  o->seed = 1;
  o->log_every = 50;
  o->ckpt_every = 0;
  o->accum = 1;
  o->bucket_mb = 25; /* PyTorch DDP's default bucket */
}

static void usage(FILE *f)
{
  struct opts d;
  dpt_train_defaults(&d);
  fprintf(f,
          "usage: dpt-train [options]\n"
          "Synchronous data-parallel ResNet-50 v1.5 training (one process per rank).\n\n"
          "data:\n"
          "  --dataset NAME        %s (default %s)\n"
          "  --data-dir DIR        dataset folder (default fashion-mnist: " DPT_FASHION_MNIST_DIR ");\n"
          "                        imagenet: DIR/train/<class>/*.JPEG and DIR/val/<class>/*.JPEG,\n"
          "                        labels = index of the class folder name in sorted order\n"
          "  --train-list FILE, --val-list FILE   imagenet: \"path label\" lines instead of folders\n"
          "                        (relative paths from the list's folder)\n"
          "  --image-size N        input side after cropping (default: the dataset's, 28 / 32 / 224 for\n"
          "                        imagenet: shorter side resized to 8/7 of it, random / centre crop)\n"
          "  --num-classes N       classes (default: the dataset's, 10; imagenet: folders or max label+1)\n"
          "  --in-channels N       imagenet: 3 = RGB (default), 1 = decode to grayscale\n"
          "  --data-threads N      loader threads reading/decoding batches (default 4 for imagenet, else 1)\n"
          "  --synthetic-images N  size of the synthetic training set (default %d)\n"
          "  --crop-pad N          random-crop zero padding (default: 4 for cifar10, else 0)\n"
          "  --no-flip             no random horizontal flip\n"
          "  --skip-bad            drop records with bad labels or (imagenet) undecodable JPEGs,\n"
          "                        counted, instead of failing\n"
          "  --prefetch N          batches prepared ahead by the loader thread (default %d)\n"
          "  --data-device D       imagenet: decode + augment JPEGs on cpu (libturbojpeg) or gpu (nvJPEG,\n"
          "                        its hardware decoder where the GPU has one); auto (default) = gpu with\n"
          "                        the cuda backend when this build has nvJPEG and it works, else cpu\n"
          "model:\n"
          "  --width F             width multiplier (default: 1 = ResNet-50 for --dataset imagenet and\n"
          "                        inputs of 64 px and more; 1/8 for the 28/32-px datasets)\n"
          "  --small-stem / --imagenet-stem   3x3/1 stem without max pool (default: images <= 64 px)\n"
          "recipes:\n"
          "  --recipe NAME         a published large-batch ImageNet recipe as options (" DPT_TRAIN_RECIPES "):\n"
          "                        chainermn-90 (ChainerMN v1.3's 90 epochs: 64 then 128 per GPU),\n"
          "                        goyal (1 hour, 8k: warm-up, Nesterov, zero-init residual), akiba (15\n"
          "                        minutes, 32k: RMSprop warm-up, slow start, last-batch BN), mlperf (the\n"
          "                        MLPerf reference: LARS, poly decay).  Sets --dataset imagenet; options\n"
          "                        given after it win (a --schedule or --optimizer of yours drops the\n"
          "                        recipe's parameters for it; --batch-size its batch schedule)\n"
          "  --dry-run             print the resolved options and the per-epoch table (global batch,\n"
          "                        steps, learning rate, optimizer mix, BN statistics) and exit: no data,\n"
          "                        ranks or GPU.  --ranks N (default: the recipe's published GPUs, else\n"
          "                        1), --train-images N (default: the data set's, 1,281,167 for imagenet)\n"
          "optimisation:\n"
          "  --batch-size N        images per rank per micro-batch (default %d)\n"
          "  --batch-schedule E0:B0,E1:B1,..  the per-rank batch raised at epoch boundaries: B0 from epoch\n"
          "                        E0 = 0, B1 from E1, ..  (Smith et al.; ChainerMN's 90 epochs: 0:64,30:128);\n"
          "                        instead of --batch-size.  The learning rate is not rescaled when the batch\n"
          "                        grows: linear scaling applies to the first batch, the schedule's factors\n"
          "                        to the rest.  Steps per epoch follow the batch; a change drains double\n"
          "                        buffering (the waiting gradient is applied first)\n"
          "  --accumulate K        K micro-batches per step, gradients summed (default 1): 1 rank\n"
          "                        with K equals K ranks (BN statistics per micro-batch)\n"
          "  --epochs N            (default %d)   --iterations N: steps instead of epochs\n"
          "  --lr F                learning rate per --lr-batch images (default %g per %d; linear\n"
          "                        scaling: lr x global batch / lr-batch)\n"
          "  --warmup-epochs F     gradual linear warm-up (default %g)\n"
          "  --warmup-start zero|base  warm-up from 0 (default) or from the unscaled rate, --lr per\n"
          "                        --lr-batch images (Goyal et al.: from eta to k eta)\n"
          "  --schedule S          const|step|multistep|poly|cosine|piecewise (default %s)\n"
          "  --lr-steps E0:LR0,E1:LR1,..  piecewise: LR0 from epoch E0 = 0, LR1 from E1, ..  (rates per\n"
          "                        --lr-batch images like --lr, linearly scaled; warm-up ramps to LR0)\n"
          "  --gamma F, --step-epochs F, --milestones E1,E2,..  step / multistep (default %g, %g)\n"
          "  --gammas F1,F2,..     multistep: the factor at each milestone instead of --gamma, applied\n"
          "                        cumulatively (ChainerMN's 90 epochs: --milestones 30,60,80\n"
          "                        --gammas 0.2,0.1,0.1)\n"
          "  --power F             poly exponent (default %g)\n"
          "  --end-lr F            the learning rate poly / cosine decay to after warm-up (default 0;\n"
          "                        MLPerf's ResNet-50: poly, power 2, end 1e-4)\n"
          "  --optimizer O         sgd (momentum SGD, torch.optim.SGD's rule), lars (layer-wise trust\n"
          "                        ratios as the MLPerf ResNet-50 reference: per tensor lr x eta|w| /\n"
          "                        (|g| + wd|w| + eps), momentum on lr-scaled steps; BN and bias\n"
          "                        tensors: plain momentum, no decay) or rmsprop-warmup (Akiba et al.\n"
          "                        2017: RMSprop turning into momentum SGD around --rmsprop-center;\n"
          "                        cuda: without --cuda-graph).  Default %s\n"
          "  --lars-eta F          LARS coefficient (default %g)\n"
          "  --lars-eps F          LARS epsilon (default 0, taken as 1e-7 as the reference does)\n"
          "  --nesterov            Nesterov momentum (Goyal et al.'s 1-hour run; sgd and lars)\n"
          "  --rmsprop-lr F, --rmsprop-mu2 F, --rmsprop-eps F   rmsprop-warmup: the RMSprop term's rate,\n"
          "                        second-moment decay, epsilon (default %g, %g, %g)\n"
          "  --rmsprop-center E, --rmsprop-period E   rmsprop-warmup: the SGD share a(e) = 1/2 exp(2(e-c)/p)\n"
          "                        before c, 1/2 + (e-c)/p after, 1 from c + p/2 (continuous at c: dpt's\n"
          "                        reading of the paper's ELU-shaped mix; default c %g, p %g epochs);\n"
          "                        update d = m d - g (a + (1-a) rms_lr/lr / (sqrt(v) + eps)), w += lr d\n"
          "  --momentum F          (default %g)   --weight-decay F (default %g)\n"
          "  --decay-bn            sgd: apply weight decay to BN and bias too (default: not)\n"
          "  --label-smoothing F   (default 0)\n"
          "  --bn-eval-stats M     BN statistics that evaluation and checkpoints use: running (moving\n"
          "                        averages, momentum 0.1, averaged over ranks before each evaluation,\n"
          "                        as MLPerf; default) or last-batch (no moving averages: the last\n"
          "                        training batch's mean and unbiased variance, averaged over ranks;\n"
          "                        Akiba et al.; with --accumulate K the last micro-batch's)\n"
          "  --zero-init-residual on|off  the last BN gamma of each residual branch starts at 0 (Goyal\n"
          "                        et al.; default on)\n"
          "  --seed N              (default %llu)\n"
          "system:\n"
          "  --backend B           cpu|cuda|auto (default %s; this build has: %s); auto = cuda\n"
          "                        when a CUDA device works on every rank, else cpu (with a notice)\n"
          "  --precision P         fp32|tf32|mixed|bf16 (default fp32): cpu computes fp32 only; cuda:\n"
          "                        fp32 with TF32 off (the oracle), tf32 tensor-core math, mixed (fp16\n"
          "                        activations, fp32 master weights, dynamic loss scaling) or bf16\n"
          "                        (bf16 activations, fp32 master weights, no loss scaling)\n"
          "  --fuse on|off|auto    cuda: the fused step: each convolution with its BN statistics and the\n"
          "                        previous BN's scale/bias/ReLU in one cuDNN graph, the residual add and\n"
          "                        the backward fused likewise; a pattern with no cuDNN engine on this GPU\n"
          "                        stays on the legacy calls (said at start); auto = on at tf32, mixed and\n"
          "                        bf16.  Default off ($DPT_CUDA_FUSE): it becomes auto once\n"
          "                        trainer.gpu.fused_vs_unfused has passed on a GPU\n"
          "  --cuda-graph on|off|auto  cuda: the steady-state step captured in CUDA graphs and replayed\n"
          "                        (each kind of step runs eagerly once, then is captured; nccl's\n"
          "                        all-reduces inside; double buffering runs uncaptured).  Default off\n"
          "                        ($DPT_CUDA_GRAPH): it becomes auto once trainer.gpu.graph has passed\n"
          "  --deterministic       cuda: bitwise the same results run after run (a resumed run the same\n"
          "                        as a straight one) on the same GPU, cuDNN and cuBLAS: convolution\n"
          "                        algorithms in cuDNN's heuristic order, not timed, deterministic ones\n"
          "                        only (PyTorch's cudnn.benchmark off, cudnn.deterministic on); slower;\n"
          "                        --fuse auto becomes off, --fuse on is refused.  The cpu backend is\n"
          "                        deterministic at a fixed --threads\n"
          "  --profile-steps N     record the N steps before the last with CUPTI (rank 0): the per-step\n"
          "                        kernel breakdown (kernels, time per class, idle between kernels) as\n"
          "                        JSON and its records as TSV, next to the report (default name with\n"
          "                        .kernels.json / .kernels.tsv) or --profile-out PATH.json\n"
          "  --threads N           CPU threads per rank (default: OMP_NUM_THREADS / all cores)\n"
          "  --comm NAME           communicator for >1 rank: auto|mpi|ring|hierarchical|nccl\n"
          "                        (default $DPT_COMM or auto; auto = nccl when the backend keeps its\n"
          "                        gradients on a GPU, this build has NCCL and no two ranks share a\n"
          "                        GPU, else the plan's ring)\n"
          "  --fp16-allreduce      fp16 on the wire (fp32 accumulation)\n"
          "  --double-buffering    overlap step t's all-reduce with step t+1 (update lags one step)\n"
          "  --bucket-mb F         all-reduce the gradients in buckets of F MiB, each started as soon\n"
          "                        as backward has produced it (default %g; 0 = one all-reduce after\n"
          "                        backward; not with --double-buffering or --accumulate > 1)\n"
          "  --checkpoint-dir DIR  --checkpoint-every N (steps; default: each epoch when a dir is given)\n"
          "  --resume auto|PATH    continue from the newest good checkpoint in DIR, or PATH\n"
          "  --report PATH         JSON job report dpt.report/1, written by rank 0 on every run\n"
          "                        (default $DPT_REPORT, else dpt-report-<jobid>.<stepid>.json under\n"
          "                        Slurm, else dpt-report-dpt-train-<pid>.json; %%j %%s %%p expand)\n"
          "  --baseline REPORT     a report of a run to compare with (e.g. 1 rank): the report gets\n"
          "                        scaling efficiency e = t / (t0 * n / n0)\n"
          "  --no-report           write no job report\n"
          "  --stop-after N        stop after N steps of this invocation (checkpoint written): resume\n"
          "                        later with --resume auto\n"
          "  --no-val              skip validation   --log-every N (steps, default %d)\n"
          "  --help\n\n"
          "preemption: on SIGUSR1 (srun/sbatch --signal=USR1@<s>) or SIGTERM (scancel) every rank\n"
          "finishes the current step, a checkpoint is written to --checkpoint-dir and dpt-train\n"
          "exits 3; continue with the same --checkpoint-dir and --resume auto.\n"
          "exit: 0 done, 1 runtime failure (or preempted without --checkpoint-dir), 2 bad usage or\n"
          "input, 3 preempted with a checkpoint written.\n",
          DPT_DATASETS, d.dataset, d.n_synth, d.prefetch, d.batch, d.epochs, d.lr, d.lr_batch,
          d.warmup_epochs, d.schedule, d.gamma, d.step_epochs, d.power, d.optimizer, d.lars_eta, d.rms_lr,
          d.rms_mu2, d.rms_eps, d.rms_center, d.rms_period, d.momentum, d.weight_decay,
          (unsigned long long)d.seed, d.backend, dpt_backend_available(), d.bucket_mb, d.log_every);
}

int dpt_train_bad(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("dpt-train: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (see dpt-train --help)\n", stderr);
  va_end(ap);
  return 2;
}

int dpt_train_num(const char *opt, const char *s, double lo, double hi, double *v)
{
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  if (errno || end == s || *end || !(*v >= lo && *v <= hi))
    return dpt_train_bad("%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
  return 0;
}

static int inum(const char *opt, const char *s, long lo, long hi, int *v)
{
  double d;
  if (dpt_train_num(opt, s, (double)lo, (double)hi, &d)) return 2;
  if (d != floor(d)) return dpt_train_bad("%s: '%s' is not an integer", opt, s);
  *v = (int)d;
  return 0;
}

enum { O_TLIST = 1000, O_VLIST, O_DTHR, O_INCH, O_PREC, O_DDEV };
enum {
  O_DATASET = 256, O_DATADIR, O_IMG, O_NCLS, O_BATCH, O_EPOCHS, O_ITERS, O_LR, O_WARM, O_SCHED,
  O_MOM, O_WD, O_BACKEND, O_COMM, O_FP16, O_DBUF, O_THREADS, O_CKDIR, O_CKEVERY, O_RESUME,
  O_REPORT, O_SEED, O_HELP, O_WIDTH, O_SMALL, O_INET, O_SMOOTH, O_GAMMA, O_STEPE, O_MILE, O_POWER,
  O_LRB, O_DECAYBN, O_NOFLIP, O_CROP, O_SKIP, O_PREF, O_NSYN, O_NOVAL, O_LOG, O_STOP, O_ACC,
  O_NOREPORT, O_BASELINE, O_BUCKET, O_FUSE, O_GRAPH, O_DET, O_PROF, O_PROFOUT, O_GAMMAS, O_ENDLR, O_OPTIM,
  O_NEST, O_LETA, O_LEPS, O_RLR, O_RMU2, O_REPS, O_RCEN, O_RPER, O_LRSTEPS, O_BNEVAL, O_ZIR, O_BSCHED, O_RECIPE, O_DRYRUN, O_RANKS, O_TRAINIMG, O_WSTART
};
enum { O_CODES = 1100 }; /* above every code: the size of seen[] */
static const struct option opt_table[] = {
    {"dataset", 1, 0, O_DATASET}, {"data-dir", 1, 0, O_DATADIR}, {"image-size", 1, 0, O_IMG},
    {"num-classes", 1, 0, O_NCLS}, {"batch-size", 1, 0, O_BATCH}, {"epochs", 1, 0, O_EPOCHS},
    {"train-list", 1, 0, O_TLIST}, {"val-list", 1, 0, O_VLIST}, {"data-threads", 1, 0, O_DTHR},
    {"in-channels", 1, 0, O_INCH}, {"precision", 1, 0, O_PREC}, {"data-device", 1, 0, O_DDEV},
    {"iterations", 1, 0, O_ITERS}, {"lr", 1, 0, O_LR}, {"warmup-epochs", 1, 0, O_WARM},
    {"schedule", 1, 0, O_SCHED}, {"momentum", 1, 0, O_MOM}, {"weight-decay", 1, 0, O_WD},
    {"backend", 1, 0, O_BACKEND}, {"comm", 1, 0, O_COMM}, {"fp16-allreduce", 0, 0, O_FP16},
    {"double-buffering", 0, 0, O_DBUF}, {"threads", 1, 0, O_THREADS},
    {"checkpoint-dir", 1, 0, O_CKDIR}, {"checkpoint-every", 1, 0, O_CKEVERY},
    {"resume", 1, 0, O_RESUME}, {"report", 1, 0, O_REPORT}, {"seed", 1, 0, O_SEED},
    {"help", 0, 0, O_HELP}, {"width", 1, 0, O_WIDTH}, {"small-stem", 0, 0, O_SMALL},
    {"imagenet-stem", 0, 0, O_INET}, {"label-smoothing", 1, 0, O_SMOOTH}, {"gamma", 1, 0, O_GAMMA},
    {"step-epochs", 1, 0, O_STEPE}, {"milestones", 1, 0, O_MILE}, {"power", 1, 0, O_POWER},
    {"lr-batch", 1, 0, O_LRB}, {"decay-bn", 0, 0, O_DECAYBN}, {"no-flip", 0, 0, O_NOFLIP},
    {"crop-pad", 1, 0, O_CROP}, {"skip-bad", 0, 0, O_SKIP}, {"prefetch", 1, 0, O_PREF},
    {"synthetic-images", 1, 0, O_NSYN}, {"no-val", 0, 0, O_NOVAL}, {"log-every", 1, 0, O_LOG},
    {"stop-after", 1, 0, O_STOP}, {"accumulate", 1, 0, O_ACC},
    {"no-report", 0, 0, O_NOREPORT}, {"baseline", 1, 0, O_BASELINE}, {"bucket-mb", 1, 0, O_BUCKET},
    {"fuse", 1, 0, O_FUSE}, {"cuda-graph", 1, 0, O_GRAPH}, {"deterministic", 0, 0, O_DET}, {"profile-steps", 1, 0, O_PROF},
    {"profile-out", 1, 0, O_PROFOUT}, {"gammas", 1, 0, O_GAMMAS}, {"end-lr", 1, 0, O_ENDLR},
    {"optimizer", 1, 0, O_OPTIM}, {"nesterov", 0, 0, O_NEST}, {"lars-eta", 1, 0, O_LETA},
    {"lars-eps", 1, 0, O_LEPS}, {"rmsprop-lr", 1, 0, O_RLR}, {"rmsprop-mu2", 1, 0, O_RMU2},
    {"rmsprop-eps", 1, 0, O_REPS}, {"rmsprop-center", 1, 0, O_RCEN}, {"rmsprop-period", 1, 0, O_RPER},
    {"lr-steps", 1, 0, O_LRSTEPS}, {"bn-eval-stats", 1, 0, O_BNEVAL}, {"zero-init-residual", 1, 0, O_ZIR},
    {"batch-schedule", 1, 0, O_BSCHED}, {"recipe", 1, 0, O_RECIPE}, {"dry-run", 0, 0, O_DRYRUN},
    {"ranks", 1, 0, O_RANKS}, {"train-images", 1, 0, O_TRAINIMG}, {"warmup-start", 1, 0, O_WSTART}, {0, 0, 0, 0}};

/* One getopt pass over argv into o; seen[code] = 1 for every option met.  Exits on --help. */
static int parse_pass(int argc, char **argv, struct opts *o, unsigned char *seen)
{
  int c, rc = 0;
  double d;
  opterr = 0;
  optind = 0; /* glibc: a full re-initialisation (this runs twice with a --recipe) */
  while (!rc && (c = getopt_long(argc, argv, "h", opt_table, NULL)) != -1) {
    if (c > 0 && c < O_CODES) seen[c] = 1;
    switch (c) {
    case O_DATASET: o->dataset = optarg; break;
    case O_DATADIR: o->data_dir = optarg; break;
    case O_TLIST: o->train_list = optarg; break;
    case O_VLIST: o->val_list = optarg; break;
    case O_DTHR: rc = inum("--data-threads", optarg, 1, 64, &o->data_threads); break;
    case O_DDEV: o->data_device = optarg; break;
    case O_INCH:
      rc = inum("--in-channels", optarg, 1, 3, &o->in_channels);
      if (!rc && o->in_channels == 2) rc = dpt_train_bad("--in-channels 2: 1 (grayscale) or 3 (RGB)");
      break;
    case O_IMG: rc = inum("--image-size", optarg, 8, 1024, &o->image_size); break;
    case O_NCLS: rc = inum("--num-classes", optarg, 2, 100000, &o->num_classes); break;
    case O_BATCH: rc = inum("--batch-size", optarg, 1, 65536, &o->batch); break;
    case O_BSCHED: o->batch_schedule = optarg; break;
    case O_RECIPE: o->recipe = optarg; break;
    case O_DRYRUN: o->dry_run = 1; break;
    case O_RANKS: rc = inum("--ranks", optarg, 1, 1 << 20, &o->dry_ranks); break;
    case O_TRAINIMG: rc = dpt_train_num("--train-images", optarg, 1, 1e12, &d); o->dry_images = (long)d; break;
    case O_WSTART:
      if (strcmp(optarg, "zero") && strcmp(optarg, "base")) rc = dpt_train_bad("--warmup-start '%s': zero or base", optarg);
      o->warmup_base = !strcmp(optarg, "base");
      break;
    case O_EPOCHS: rc = inum("--epochs", optarg, 1, 100000, &o->epochs); break;
    case O_ITERS: rc = inum("--iterations", optarg, 1, 1000000000, &o->iterations); break;
    case O_LR: rc = dpt_train_num("--lr", optarg, 0, 1000, &o->lr); break;
    case O_WARM: rc = dpt_train_num("--warmup-epochs", optarg, 0, 1000, &o->warmup_epochs); break;
    case O_SCHED: o->schedule = optarg; break;
    case O_MOM: rc = dpt_train_num("--momentum", optarg, 0, 0.9999, &o->momentum); break;
    case O_WD: rc = dpt_train_num("--weight-decay", optarg, 0, 1, &o->weight_decay); break;
    case O_BACKEND: o->backend = optarg; break;
    case O_PREC: o->precision = optarg; break;
    case O_COMM: o->comm = optarg; break;
    case O_FP16: o->fp16 = 1; break;
    case O_DBUF: o->dbuf = 1; break;
    case O_THREADS: rc = inum("--threads", optarg, 1, 4096, &o->threads); break;
    case O_CKDIR: o->ckpt_dir = optarg; break;
    case O_CKEVERY: rc = inum("--checkpoint-every", optarg, 1, 1000000000, &o->ckpt_every); break;
    case O_RESUME: o->resume = optarg; break;
    case O_REPORT: o->report = optarg; break;
    case O_NOREPORT: o->no_report = 1; break;
    case O_BASELINE: o->baseline = optarg; break;
    case O_BUCKET: rc = dpt_train_num("--bucket-mb", optarg, 0, 1e6, &o->bucket_mb); break;
    case O_FUSE: o->fuse = optarg; break;
    case O_GRAPH: o->cuda_graph = optarg; break;
    case O_DET: o->deterministic = 1; break;
    case O_PROF: rc = inum("--profile-steps", optarg, 1, 1000, &o->profile_steps); break;
    case O_PROFOUT: o->profile_out = optarg; break;
    case O_SEED: rc = dpt_train_num("--seed", optarg, 0, 1e15, &d); o->seed = (uint64_t)d; break;
    case O_HELP: case 'h': usage(stdout); exit(0);
    case O_WIDTH: rc = dpt_train_num("--width", optarg, 0.01, 8, &o->width); break;
    case O_SMALL: o->small_stem = 1; break;
    case O_INET: o->small_stem = 0; break;
    case O_SMOOTH: rc = dpt_train_num("--label-smoothing", optarg, 0, 0.999, &o->smoothing); break;
    case O_GAMMA: rc = dpt_train_num("--gamma", optarg, 0, 1, &o->gamma); break;
    case O_STEPE: rc = dpt_train_num("--step-epochs", optarg, 0.001, 1e6, &o->step_epochs); break;
    case O_MILE: snprintf(o->milestones, sizeof o->milestones, "%s", optarg); break;
    case O_POWER: rc = dpt_train_num("--power", optarg, 0, 100, &o->power); break;
    case O_GAMMAS: snprintf(o->gammas, sizeof o->gammas, "%s", optarg); break;
    case O_LRSTEPS: snprintf(o->lr_steps, sizeof o->lr_steps, "%s", optarg); break;
    case O_BNEVAL: o->bn_eval = optarg; break;
    case O_ZIR:
      if (strcmp(optarg, "on") && strcmp(optarg, "off")) rc = dpt_train_bad("--zero-init-residual '%s': on or off", optarg);
      o->zero_init_residual = !strcmp(optarg, "on");
      break;
    case O_ENDLR: rc = dpt_train_num("--end-lr", optarg, 0, 1000, &o->end_lr); break;
    case O_OPTIM: o->optimizer = optarg; break;
    case O_NEST: o->nesterov = 1; break;
    case O_LETA: rc = dpt_train_num("--lars-eta", optarg, 1e-9, 1000, &o->lars_eta); break;
    case O_LEPS: rc = dpt_train_num("--lars-eps", optarg, 0, 1, &o->lars_eps); break;
    case O_RLR: rc = dpt_train_num("--rmsprop-lr", optarg, 1e-12, 1000, &o->rms_lr); break;
    case O_RMU2: rc = dpt_train_num("--rmsprop-mu2", optarg, 0, 0.999999, &o->rms_mu2); break;
    case O_REPS: rc = dpt_train_num("--rmsprop-eps", optarg, 1e-30, 1, &o->rms_eps); break;
    case O_RCEN: rc = dpt_train_num("--rmsprop-center", optarg, 0, 1e6, &o->rms_center); break;
    case O_RPER: rc = dpt_train_num("--rmsprop-period", optarg, 1e-6, 1e6, &o->rms_period); break;
    case O_LRB: rc = inum("--lr-batch", optarg, 1, 1 << 24, &o->lr_batch); break;
    case O_DECAYBN: o->no_decay_bn = 0; break;
    case O_NOFLIP: o->flip = 0; break;
    case O_CROP: rc = inum("--crop-pad", optarg, 0, 64, &o->crop_pad); break;
    case O_SKIP: o->skip_bad = 1; break;
    case O_PREF: rc = inum("--prefetch", optarg, 0, 64, &o->prefetch); break;
    case O_NSYN: rc = inum("--synthetic-images", optarg, 1, 10000000, &o->n_synth); break;
    case O_NOVAL: o->val = 0; break;
    case O_LOG: rc = inum("--log-every", optarg, 1, 1000000000, &o->log_every); break;
    case O_ACC: rc = inum("--accumulate", optarg, 1, 1024, &o->accum); break;
    case O_STOP: {
      int v;
      rc = inum("--stop-after", optarg, 1, 1000000000, &v);
      o->stop_after = v;
      break;
    }
    default:
      if (optopt) return dpt_train_bad("option '-%c' is unknown", optopt);
      return dpt_train_bad("option '%s' is unknown or lacks its value", argv[optind - 1]);
    }
  }
  if (rc) return rc;
  if (optind < argc) return dpt_train_bad("unexpected argument '%s'", argv[optind]);
  return 0;
}

static int code_of(const char *name) /* "--batch-size" -> O_BATCH */
{
  for (int i = 0; opt_table[i].name; i++)
    if (!strcmp(name + 2, opt_table[i].name)) return opt_table[i].val;
  return 0;
}

/* Whether the user's options (seen) replace a recipe's option `code`: the same option; one that
 * excludes it (--batch-size / --batch-schedule, --epochs / --iterations); a schedule kind of
 * their own (the recipe's schedule parameters go, and its --lr before a piecewise table); an
 * optimizer of their own (the recipe's optimizer parameters go). */
static int user_replaces(int code, const unsigned char *seen, const struct opts *user)
{
  if (seen[code]) return 1;
  switch (code) {
  case O_BATCH: return seen[O_BSCHED];
  case O_BSCHED: return seen[O_BATCH];
  case O_EPOCHS: return seen[O_ITERS];
  case O_MILE: case O_GAMMAS: case O_LRSTEPS: case O_POWER: case O_ENDLR: case O_STEPE: case O_GAMMA:
    return seen[O_SCHED];
  case O_LR: return seen[O_SCHED] && !strcmp(user->schedule, "piecewise");
  case O_NEST: case O_LETA: case O_LEPS: case O_RLR: case O_RMU2: case O_REPS: case O_RCEN: case O_RPER:
    return seen[O_OPTIM];
  }
  return 0;
}

/* --recipe NAME: argv with the recipe's options first (those the user's replace left out), the
 * user's after them (getopt: the later one wins).  *out is malloc'd and kept for the run (the
 * options point into it); its strings are argv's and the recipe table's. */
static int recipe_argv(const struct dpt_train_recipe *re, int argc, char **argv, const unsigned char *seen,
                       const struct opts *user, int *out_argc, char ***out)
{
  int n = 0, na = 0;
  while (re->args[na]) na++;
  char **v = malloc(((size_t)argc + (size_t)na + 1) * sizeof *v);
  if (!v) return dpt_train_bad("out of memory");
  v[n++] = argv[0];
  for (int i = 0; i < na; i++) {
    int code = code_of(re->args[i]), has_val = i + 1 < na && re->args[i + 1][0] != '-';
    if (!code) { /* the table names an option dpt-train does not have: a bug in the table */
      free(v);
      return dpt_train_bad("internal: --recipe %s: option '%s' is unknown", re->name, re->args[i]);
    }
    if (!user_replaces(code, seen, user)) {
      v[n++] = (char *)re->args[i];
      if (has_val) v[n++] = (char *)re->args[i + 1];
    }
    i += has_val;
  }
  for (int i = 1; i < argc; i++) v[n++] = argv[i];
  v[n] = NULL;
  *out_argc = n;
  *out = v;
  return 0;
}

int dpt_train_parse(int argc, char **argv, struct opts *o)
{
  unsigned char seen[O_CODES] = {0};
  int rc;
  if ((rc = parse_pass(argc, argv, o, seen))) return rc;
  o->argc = argc, o->argv = argv;
  if (o->recipe) { /* again: the recipe's options, then the user's */
    const struct dpt_train_recipe *re = dpt_train_recipe_find(o->recipe);
    struct opts user = *o;
    if (!re) return dpt_train_bad("--recipe '%s' is unknown; known: %s", o->recipe, DPT_TRAIN_RECIPES);
    if ((rc = recipe_argv(re, argc, argv, seen, &user, &o->argc, &o->argv))) return rc;
    int ac = o->argc;
    char **av = o->argv;
    dpt_train_defaults(o);
    o->argc = ac, o->argv = av;
    memset(seen, 0, sizeof seen);
    if ((rc = parse_pass(ac, av, o, seen))) return rc;
  }
  int have_epochs = seen[O_EPOCHS], have_iters = seen[O_ITERS], have_lr = seen[O_LR], have_batch = seen[O_BATCH];
  int have_lars_opt = seen[O_LETA] || seen[O_LEPS];
  int have_rms_opt = seen[O_RLR] || seen[O_RMU2] || seen[O_REPS] || seen[O_RCEN] || seen[O_RPER];
  if ((o->dry_ranks || o->dry_images) && !o->dry_run)
    return dpt_train_bad("%s only applies to --dry-run (a run has the ranks it was started with and its data set's "
                         "images)", o->dry_ranks ? "--ranks" : "--train-images");
  int inet = !strcmp(o->dataset, "imagenet");
  if (strcmp(o->dataset, "synthetic") && strcmp(o->dataset, "fashion-mnist") && strcmp(o->dataset, "cifar10") &&
      !inet)
    return dpt_train_bad("--dataset '%s' is unknown; known: " DPT_DATASETS, o->dataset);
  if (!inet && (o->train_list || o->val_list || o->in_channels))
    return dpt_train_bad("%s only applies to --dataset imagenet",
                         o->train_list ? "--train-list" : o->val_list ? "--val-list" : "--in-channels");
  if (inet && !o->data_dir && !o->train_list && !o->dry_run)
    return dpt_train_bad("--dataset imagenet needs --data-dir DIR (DIR/train/<class>/*.JPEG, DIR/val/<class>/*.JPEG) "
                         "or --train-list FILE (\"path label\" lines)");
  if (inet && o->val && !o->data_dir && !o->val_list && !o->dry_run)
    return dpt_train_bad("--dataset imagenet with --train-list needs --val-list FILE (or --data-dir DIR with DIR/val, "
                         "or --no-val)");
  if (strcmp(o->data_device, "cpu") && strcmp(o->data_device, "gpu") && strcmp(o->data_device, "auto"))
    return dpt_train_bad("--data-device '%s' is unknown: cpu, gpu or auto", o->data_device);
  if (!strcmp(o->data_device, "gpu") && !inet)
    return dpt_train_bad("--data-device gpu decodes JPEG folders: it needs --dataset imagenet");
  if (!strcmp(o->data_device, "gpu") && !strcmp(o->backend, "cpu"))
    return dpt_train_bad("--data-device gpu needs --backend cuda (the cpu backend takes host batches)");
#ifndef DPT_HAVE_NVJPEG
  if (!strcmp(o->data_device, "gpu")) return dpt_train_bad("--data-device gpu: %s", DPT_DATA_GPU_UNAVAILABLE);
#endif
  if (dpt_schedule_parse_kind(o->schedule) < 0)
    return dpt_train_bad("--schedule '%s' is unknown: const, step, multistep, poly, cosine or piecewise", o->schedule);
  if (o->lr_steps[0] && strcmp(o->schedule, "piecewise"))
    return dpt_train_bad("--lr-steps only applies to --schedule piecewise (got --schedule %s)", o->schedule);
  if (!strcmp(o->schedule, "piecewise") && !o->lr_steps[0])
    return dpt_train_bad("--schedule piecewise needs --lr-steps E0:LR0,E1:LR1,... (E0 = 0)");
  if (!strcmp(o->schedule, "piecewise") && have_lr)
    return dpt_train_bad("--lr with --schedule piecewise: the rates are --lr-steps' (its first is the peak)");
  if (strcmp(o->bn_eval, "running") && strcmp(o->bn_eval, "last-batch"))
    return dpt_train_bad("--bn-eval-stats '%s' is unknown: running or last-batch", o->bn_eval);
  if (strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda") && strcmp(o->backend, "auto"))
    return dpt_train_bad("--backend '%s' is unknown: cpu, cuda or auto", o->backend);
  if (have_epochs && have_iters) return dpt_train_bad("--epochs and --iterations are exclusive: give one");
  if (o->batch_schedule) { /* its first batch is the run's starting --batch-size */
    struct dpt_bsched bs;
    struct dpt_err e = {0};
    if (have_batch)
      return dpt_train_bad("--batch-size with --batch-schedule: the schedule's first entry (0:B) is the batch");
    if (dpt_bsched_parse(o->batch_schedule, &bs, &e)) return dpt_train_bad("%s", e.msg);
    o->batch = bs.batch[0];
  }
  if (o->milestones[0] && strcmp(o->schedule, "multistep"))
    return dpt_train_bad("--milestones only applies to --schedule multistep (got --schedule %s)", o->schedule);
  if (!strcmp(o->schedule, "multistep") && !o->milestones[0])
    return dpt_train_bad("--schedule multistep needs --milestones E1,E2,...");
  if (o->gammas[0] && strcmp(o->schedule, "multistep"))
    return dpt_train_bad("--gammas only applies to --schedule multistep (got --schedule %s)", o->schedule);
  if (o->end_lr > 0 && strcmp(o->schedule, "poly") && strcmp(o->schedule, "cosine"))
    return dpt_train_bad("--end-lr only applies to --schedule poly or cosine (got --schedule %s)", o->schedule);
  if (strcmp(o->optimizer, "sgd") && strcmp(o->optimizer, "lars") && strcmp(o->optimizer, "rmsprop-warmup"))
    return dpt_train_bad("--optimizer '%s' is unknown: sgd, lars or rmsprop-warmup", o->optimizer);
  if (have_rms_opt && strcmp(o->optimizer, "rmsprop-warmup"))
    return dpt_train_bad("--rmsprop-* options need --optimizer rmsprop-warmup (got --optimizer %s)", o->optimizer);
  if (o->nesterov && !strcmp(o->optimizer, "rmsprop-warmup"))
    return dpt_train_bad("--nesterov with --optimizer rmsprop-warmup: its update has no Nesterov form");
  if (have_lars_opt && strcmp(o->optimizer, "lars"))
    return dpt_train_bad("--lars-eta / --lars-eps need --optimizer lars (got --optimizer %s)", o->optimizer);
  if (!strcmp(o->optimizer, "lars") && !o->no_decay_bn)
    return dpt_train_bad("--decay-bn with --optimizer lars: LARS leaves BN and bias tensors out (no trust ratio, "
                         "no weight decay), as the MLPerf reference does");
  if (o->no_report && (o->report || o->baseline))
    return dpt_train_bad("--no-report with %s: give one of them", o->report ? "--report" : "--baseline");
  if (o->ckpt_every && !o->ckpt_dir) return dpt_train_bad("--checkpoint-every needs --checkpoint-dir");
  if (o->stop_after && !o->ckpt_dir) return dpt_train_bad("--stop-after needs --checkpoint-dir (to resume from)");
  if (o->resume && !o->ckpt_dir && !strcmp(o->resume, "auto"))
    return dpt_train_bad("--resume auto needs --checkpoint-dir");
  if (!strcmp(o->comm, "nccl") && !strcmp(o->backend, "cpu"))
    return dpt_train_bad("--comm nccl moves device buffers: it needs --backend cuda");
  if (o->precision && strcmp(o->precision, "fp32") && strcmp(o->precision, "tf32") && strcmp(o->precision, "mixed") &&
      strcmp(o->precision, "bf16"))
    return dpt_train_bad("--precision '%s' is unknown: fp32, tf32, mixed or bf16", o->precision);
  if (o->precision && strcmp(o->precision, "fp32") && !strcmp(o->backend, "cpu"))
    return dpt_train_bad("--precision %s needs --backend cuda: the cpu backend computes in fp32 only", o->precision);
  for (int k = 0; k < 2; k++) { /* --fuse, --cuda-graph: the cuda backend's switches */
    const char *v = k ? o->cuda_graph : o->fuse, *name = k ? "--cuda-graph" : "--fuse";
    if (v && strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto")) return dpt_train_bad("%s '%s' is unknown: on, off or auto", name, v);
    if (v && !strcmp(v, "on") && !strcmp(o->backend, "cpu")) return dpt_train_bad("%s on needs --backend cuda", name);
  }
  if (o->profile_out && !o->profile_steps) return dpt_train_bad("--profile-out needs --profile-steps N");
#ifndef DPT_HAVE_CUPTI
  if (o->profile_steps)
    return dpt_train_bad("--profile-steps: this dpt-train was built without CUPTI (the CUDA toolkit's "
                         "activity API): no kernel recorder");
#endif
  if (o->profile_steps && !strcmp(o->backend, "cpu")) return dpt_train_bad("--profile-steps records GPU kernels: it needs --backend cuda");
#ifdef DPT_TRAIN_HAVE_COMM
  {
    struct dpt_err e = {0};
    if (!dpt_comm_check_name(o->comm, &e)) return dpt_train_bad("--comm: %s", e.msg);
  }
#endif
  if (o->num_classes && strcmp(o->dataset, "synthetic") && !inet && o->num_classes != 10)
    return dpt_train_bad("--num-classes %d does not match %s, which has 10 classes", o->num_classes, o->dataset);
  return 0;
}
