/* dpt-train — synchronous data-parallel ResNet-50 training (ChainerMN style).
 *
 * One process per rank (dpt-launch / srun / mpirun start them); parameters are
 * broadcast from rank 0, every step's gradients are averaged with the
 * runtime's communicator (dpt_comm: mpi, ring, hierarchical; fp16 on the wire
 * optional), optionally double-buffered: step t's all-reduce runs on the
 * communicator's worker thread while step t+1 computes, and step t+1 applies
 * step t's averaged gradient.
 *
 * Preemption (Slurm's --signal=USR1@<s>, scancel's SIGTERM, dpt-launch forwards
 * both): the handler only sets a flag; every step the ranks sum their flags in a
 * 2-float all-reduce, so all of them stop after the same step even if only one
 * got the signal, write a checkpoint and exit DPT_TRAIN_EXIT_PREEMPTED.
 *
 * Exit: 0 ok, 2 bad usage/input, 1 runtime failure (also: preempted without
 * --checkpoint-dir), 3 preempted with a checkpoint written (resume with
 * --resume auto). */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dpt_backend.h"
#include "dpt_ckpt.h"
#include "dpt_cpu_impl.h" /* the CPU and ISA the job report names */
#include "dpt_cuda_capture.h" /* the steps announced to the backend (--cuda-graph) */
#ifdef DPT_HAVE_CUDA_BACKEND
#include "dpt_cuda_versions.h" /* the start line's and the report's GPU library versions */
#endif
#include "dpt_data.h"
#include "dpt_model.h"
#include "dpt_optim.h"
#ifdef DPT_HAVE_CUPTI
#include "dpt_cupti.h" /* --profile-steps: the per-step kernel breakdown */
#endif
#include "dpt_kprof.h"
#ifdef DPT_TRAIN_HAVE_COMM
#include <oneapi/dnnl/dnnl.h>

#include "dpt_bind.h"
#include "dpt_comm.h"
#include "dpt_ctx.h"
#include "dpt_report.h"
#include "dpt_watchdog.h"
#endif

/* Exit status after SIGUSR1/SIGTERM when the checkpoint was written: non-zero so that
 * Slurm job scripts (and --requeue logic) can tell "stopped, resumable" from done (0),
 * runtime failure (1) and bad usage (2). */
#define DPT_TRAIN_EXIT_PREEMPTED 3

struct opts {
  const char *dataset, *data_dir, *schedule, *backend, *comm, *ckpt_dir, *resume, *report;
  int image_size, num_classes, batch, epochs, iterations, threads, ckpt_every, fp16, dbuf;
  int small_stem, prefetch, skip_bad, crop_pad, flip, no_decay_bn, lr_batch, n_synth, val;
  int log_every;
  const char *train_list, *val_list; /* imagenet: "path label" list files instead of folders */
  int data_threads;    /* loader worker threads per loader (0: 4 for imagenet, else 1) */
  int in_channels;     /* imagenet: 3 RGB, 1 grayscale (0: 3) */
  const char *data_device; /* --data-device cpu|gpu|auto: where imagenet JPEGs are decoded (issue 16) */
  int accum;           /* micro-batches per step (gradient accumulation) */
  long stop_after;     /* stop (with a checkpoint) after this many steps of this run: tests, preemption */
  double lr, warmup_epochs, momentum, weight_decay, width, smoothing, gamma, step_epochs, power;
  char milestones[128];
  uint64_t seed;
  const char *precision; /* --precision fp32|tf32|mixed (NULL: the backend's default) */
  const char *baseline; /* job report: --baseline REPORT (scaling efficiency) */
  int no_report;        /* job report: --no-report */
  double bucket_mb;     /* --bucket-mb: gradient bucket target in MiB (0: one all-reduce after backward) */
  const char *fuse;     /* --fuse on|off|auto (NULL: the backend's default, $DPT_CUDA_FUSE, else off) */
  const char *cuda_graph; /* --cuda-graph on|off|auto (NULL: $DPT_CUDA_GRAPH, else off) */
  int profile_steps;    /* --profile-steps N: the kernel breakdown of N steps (rank 0, CUPTI) */
  const char *profile_out; /* --profile-out PATH: its JSON (the records: PATH's .json -> .tsv) */
};

static void defaults(struct opts *o)
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
  defaults(&d);
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
          "optimisation:\n"
          "  --batch-size N        images per rank per micro-batch (default %d)\n"
          "  --accumulate K        K micro-batches per step, gradients summed (default 1): 1 rank\n"
          "                        with K equals K ranks (BN statistics per micro-batch)\n"
          "  --epochs N            (default %d)   --iterations N: steps instead of epochs\n"
          "  --lr F                learning rate per --lr-batch images (default %g per %d; linear\n"
          "                        scaling: lr x global batch / lr-batch)\n"
          "  --warmup-epochs F     gradual linear warm-up (default %g)\n"
          "  --schedule S          const|step|multistep|poly|cosine (default %s)\n"
          "  --gamma F, --step-epochs F, --milestones E1,E2,..  step / multistep (default %g, %g)\n"
          "  --power F             poly exponent (default %g)\n"
          "  --momentum F          (default %g)   --weight-decay F (default %g)\n"
          "  --decay-bn            apply weight decay to BN and bias too (default: not)\n"
          "  --label-smoothing F   (default 0)\n"
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
          d.warmup_epochs, d.schedule, d.gamma, d.step_epochs, d.power, d.momentum, d.weight_decay,
          (unsigned long long)d.seed, d.backend, dpt_backend_available(), d.bucket_mb, d.log_every);
}

static int bad(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("dpt-train: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs(" (see dpt-train --help)\n", stderr);
  va_end(ap);
  return 2;
}

static int num(const char *opt, const char *s, double lo, double hi, double *v)
{
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  if (errno || end == s || *end || !(*v >= lo && *v <= hi))
    return bad("%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
  return 0;
}

static int inum(const char *opt, const char *s, long lo, long hi, int *v)
{
  double d;
  if (num(opt, s, (double)lo, (double)hi, &d)) return 2;
  if (d != floor(d)) return bad("%s: '%s' is not an integer", opt, s);
  *v = (int)d;
  return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
  enum { O_TLIST = 1000, O_VLIST, O_DTHR, O_INCH, O_PREC, O_DDEV };
  enum {
    O_DATASET = 256, O_DATADIR, O_IMG, O_NCLS, O_BATCH, O_EPOCHS, O_ITERS, O_LR, O_WARM, O_SCHED,
    O_MOM, O_WD, O_BACKEND, O_COMM, O_FP16, O_DBUF, O_THREADS, O_CKDIR, O_CKEVERY, O_RESUME,
    O_REPORT, O_SEED, O_HELP, O_WIDTH, O_SMALL, O_INET, O_SMOOTH, O_GAMMA, O_STEPE, O_MILE, O_POWER,
    O_LRB, O_DECAYBN, O_NOFLIP, O_CROP, O_SKIP, O_PREF, O_NSYN, O_NOVAL, O_LOG, O_STOP, O_ACC,
    O_NOREPORT, O_BASELINE, O_BUCKET, O_FUSE, O_GRAPH, O_PROF, O_PROFOUT
  };
  static const struct option lo[] = {
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
      {"fuse", 1, 0, O_FUSE}, {"cuda-graph", 1, 0, O_GRAPH}, {"profile-steps", 1, 0, O_PROF},
      {"profile-out", 1, 0, O_PROFOUT},
      {0, 0, 0, 0}};
  int c, rc = 0, have_epochs = 0, have_iters = 0;
  double d;
  opterr = 0;
  while (!rc && (c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
    switch (c) {
    case O_DATASET: o->dataset = optarg; break;
    case O_DATADIR: o->data_dir = optarg; break;
    case O_TLIST: o->train_list = optarg; break;
    case O_VLIST: o->val_list = optarg; break;
    case O_DTHR: rc = inum("--data-threads", optarg, 1, 64, &o->data_threads); break;
    case O_DDEV: o->data_device = optarg; break;
    case O_INCH:
      rc = inum("--in-channels", optarg, 1, 3, &o->in_channels);
      if (!rc && o->in_channels == 2) rc = bad("--in-channels 2: 1 (grayscale) or 3 (RGB)");
      break;
    case O_IMG: rc = inum("--image-size", optarg, 8, 1024, &o->image_size); break;
    case O_NCLS: rc = inum("--num-classes", optarg, 2, 100000, &o->num_classes); break;
    case O_BATCH: rc = inum("--batch-size", optarg, 1, 65536, &o->batch); break;
    case O_EPOCHS: rc = inum("--epochs", optarg, 1, 100000, &o->epochs); have_epochs = 1; break;
    case O_ITERS: rc = inum("--iterations", optarg, 1, 1000000000, &o->iterations); have_iters = 1; break;
    case O_LR: rc = num("--lr", optarg, 0, 1000, &o->lr); break;
    case O_WARM: rc = num("--warmup-epochs", optarg, 0, 1000, &o->warmup_epochs); break;
    case O_SCHED: o->schedule = optarg; break;
    case O_MOM: rc = num("--momentum", optarg, 0, 0.9999, &o->momentum); break;
    case O_WD: rc = num("--weight-decay", optarg, 0, 1, &o->weight_decay); break;
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
    case O_BUCKET: rc = num("--bucket-mb", optarg, 0, 1e6, &o->bucket_mb); break;
    case O_FUSE: o->fuse = optarg; break;
    case O_GRAPH: o->cuda_graph = optarg; break;
    case O_PROF: rc = inum("--profile-steps", optarg, 1, 1000, &o->profile_steps); break;
    case O_PROFOUT: o->profile_out = optarg; break;
    case O_SEED: rc = num("--seed", optarg, 0, 1e15, &d); o->seed = (uint64_t)d; break;
    case O_HELP: case 'h': usage(stdout); exit(0);
    case O_WIDTH: rc = num("--width", optarg, 0.01, 8, &o->width); break;
    case O_SMALL: o->small_stem = 1; break;
    case O_INET: o->small_stem = 0; break;
    case O_SMOOTH: rc = num("--label-smoothing", optarg, 0, 0.999, &o->smoothing); break;
    case O_GAMMA: rc = num("--gamma", optarg, 0, 1, &o->gamma); break;
    case O_STEPE: rc = num("--step-epochs", optarg, 0.001, 1e6, &o->step_epochs); break;
    case O_MILE: snprintf(o->milestones, sizeof o->milestones, "%s", optarg); break;
    case O_POWER: rc = num("--power", optarg, 0, 100, &o->power); break;
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
      if (optopt) return bad("option '-%c' is unknown", optopt);
      return bad("option '%s' is unknown or lacks its value", argv[optind - 1]);
    }
  }
  if (rc) return rc;
  if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);
  int inet = !strcmp(o->dataset, "imagenet");
  if (strcmp(o->dataset, "synthetic") && strcmp(o->dataset, "fashion-mnist") && strcmp(o->dataset, "cifar10") &&
      !inet)
    return bad("--dataset '%s' is unknown; known: " DPT_DATASETS, o->dataset);
  if (!inet && (o->train_list || o->val_list || o->in_channels))
    return bad("%s only applies to --dataset imagenet",
               o->train_list ? "--train-list" : o->val_list ? "--val-list" : "--in-channels");
  if (inet && !o->data_dir && !o->train_list)
    return bad("--dataset imagenet needs --data-dir DIR (DIR/train/<class>/*.JPEG, DIR/val/<class>/*.JPEG) "
               "or --train-list FILE (\"path label\" lines)");
  if (inet && o->val && !o->data_dir && !o->val_list)
    return bad("--dataset imagenet with --train-list needs --val-list FILE (or --data-dir DIR with DIR/val, "
               "or --no-val)");
  if (strcmp(o->data_device, "cpu") && strcmp(o->data_device, "gpu") && strcmp(o->data_device, "auto"))
    return bad("--data-device '%s' is unknown: cpu, gpu or auto", o->data_device);
  if (!strcmp(o->data_device, "gpu") && !inet)
    return bad("--data-device gpu decodes JPEG folders: it needs --dataset imagenet");
  if (!strcmp(o->data_device, "gpu") && !strcmp(o->backend, "cpu"))
    return bad("--data-device gpu needs --backend cuda (the cpu backend takes host batches)");
#ifndef DPT_HAVE_NVJPEG
  if (!strcmp(o->data_device, "gpu")) return bad("--data-device gpu: %s", DPT_DATA_GPU_UNAVAILABLE);
#endif
  if (dpt_schedule_parse_kind(o->schedule) < 0)
    return bad("--schedule '%s' is unknown: const, step, multistep, poly or cosine", o->schedule);
  if (strcmp(o->backend, "cpu") && strcmp(o->backend, "cuda") && strcmp(o->backend, "auto"))
    return bad("--backend '%s' is unknown: cpu, cuda or auto", o->backend);
  if (have_epochs && have_iters) return bad("--epochs and --iterations are exclusive: give one");
  if (o->milestones[0] && strcmp(o->schedule, "multistep"))
    return bad("--milestones only applies to --schedule multistep (got --schedule %s)", o->schedule);
  if (!strcmp(o->schedule, "multistep") && !o->milestones[0])
    return bad("--schedule multistep needs --milestones E1,E2,...");
  if (o->no_report && (o->report || o->baseline))
    return bad("--no-report with %s: give one of them", o->report ? "--report" : "--baseline");
  if (o->ckpt_every && !o->ckpt_dir) return bad("--checkpoint-every needs --checkpoint-dir");
  if (o->stop_after && !o->ckpt_dir) return bad("--stop-after needs --checkpoint-dir (to resume from)");
  if (o->resume && !o->ckpt_dir && !strcmp(o->resume, "auto"))
    return bad("--resume auto needs --checkpoint-dir");
  if (!strcmp(o->comm, "nccl") && !strcmp(o->backend, "cpu"))
    return bad("--comm nccl moves device buffers: it needs --backend cuda");
  if (o->precision && strcmp(o->precision, "fp32") && strcmp(o->precision, "tf32") && strcmp(o->precision, "mixed") &&
      strcmp(o->precision, "bf16"))
    return bad("--precision '%s' is unknown: fp32, tf32, mixed or bf16", o->precision);
  if (o->precision && strcmp(o->precision, "fp32") && !strcmp(o->backend, "cpu"))
    return bad("--precision %s needs --backend cuda: the cpu backend computes in fp32 only", o->precision);
  for (int k = 0; k < 2; k++) { /* --fuse, --cuda-graph: the cuda backend's switches */
    const char *v = k ? o->cuda_graph : o->fuse, *name = k ? "--cuda-graph" : "--fuse";
    if (v && strcmp(v, "on") && strcmp(v, "off") && strcmp(v, "auto")) return bad("%s '%s' is unknown: on, off or auto", name, v);
    if (v && !strcmp(v, "on") && !strcmp(o->backend, "cpu")) return bad("%s on needs --backend cuda", name);
  }
  if (o->profile_out && !o->profile_steps) return bad("--profile-out needs --profile-steps N");
#ifndef DPT_HAVE_CUPTI
  if (o->profile_steps)
    return bad("--profile-steps: this dpt-train was built without CUPTI (the CUDA toolkit's activity API): no "
               "kernel recorder");
#endif
  if (o->profile_steps && !strcmp(o->backend, "cpu")) return bad("--profile-steps records GPU kernels: it needs --backend cuda");
#ifdef DPT_TRAIN_HAVE_COMM
  {
    struct dpt_err e = {0};
    if (!dpt_comm_check_name(o->comm, &e)) return bad("--comm: %s", e.msg);
  }
#endif
  if (o->num_classes && strcmp(o->dataset, "synthetic") && !inet && o->num_classes != 10)
    return bad("--num-classes %d does not match %s, which has 10 classes", o->num_classes, o->dataset);
  return 0;
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- ranks: the runtime's communicator, or one rank ---------------------- */

struct ranks {
  int rank, size;
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_comm *comm;  /* gradients (device memory when it is nccl) */
  struct dpt_comm *host;  /* host buffers: comm itself, or "mpi" next to nccl */
#endif
};

#ifdef DPT_TRAIN_HAVE_COMM
/* The CUDA device the cuda backend drives (dpt_backend_cuda.h): what nccl must use too. */
static int backend_gpu(void)
{
  return getenv("DPT_CUDA_DEVICE") ? atoi(getenv("DPT_CUDA_DEVICE")) : 0;
}
#endif

static int ranks_init(struct ranks *r, int *argc, char ***argv, const struct opts *o, struct dpt_err *err)
{
  r->rank = 0;
  r->size = 1;
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_ctx ctx;
  int rc = dpt_ctx_from_env(&ctx, err);
  if (rc) return rc;
  r->comm = NULL;
  if (ctx.rank >= 0) r->rank = ctx.rank; /* an error before the communicator exists names this rank, not 0 */
  if (ctx.size == 1) return 0;
  if ((rc = dpt_comm_mpi_init(argc, argv, err))) return rc;
  struct dpt_comm_opts co;
  dpt_comm_opts_init(&co);
  co.name = o->comm;
  /* nccl: the device the cuda backend drives (dpt_bind's DPT_CUDA_DEVICE, else 0), not a guess */
  if (!strcmp(o->comm, "nccl")) co.gpu = backend_gpu();
  if ((rc = dpt_comm_create(&r->comm, MPI_COMM_WORLD, &co, err))) return rc;
  r->host = r->comm;
  if (!strcmp(o->comm, "nccl")) { /* flags, statistics, BN state, broadcast: host buffers, same ring order */
    co.name = "mpi";
    co.ring_pos = dpt_comm_rank(r->comm);
    if ((rc = dpt_comm_create(&r->host, MPI_COMM_WORLD, &co, err))) {
      r->host = NULL;
      dpt_err_prefix(err, "the host communicator next to nccl");
      return rc;
    }
  }
  r->rank = dpt_comm_rank(r->comm);
  r->size = dpt_comm_size(r->comm);
  return 0;
#else
  const char *v[] = {"DPT_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", NULL};
  for (int i = 0; v[i]; i++)
    if (getenv(v[i]) && atoi(getenv(v[i])) > 1)
      return dpt_err_set(err, DPT_E_UNSUPPORTED, "%s=%s: this dpt-train was built without the runtime's "
                         "communicators (dpt_runtime), so it runs one rank only", v[i], getenv(v[i]));
  return 0;
#endif
}

/* --comm auto (the default, also srun --dpt's) once the backend is known: gradients
 * in device memory (cuda) go over nccl when this build has it and every rank has a
 * GPU of its own (ranks sharing one: the ring, said once); the communicator made at
 * start-up (the plan's ring) stays for host buffers.  Sets *name to what the
 * gradients use. */
static int ranks_resolve_auto(struct ranks *r, int device_grads, const char **name, struct dpt_err *err)
{
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->size == 1 || strcmp(*name, "auto")) return 0;
  const char *want = dpt_comm_resolve("auto", device_grads);
  char note[512] = "";
  if (!strcmp(want, "nccl") && !(want = dpt_comm_gpu_resolve(r->comm, "auto", backend_gpu(), note, sizeof note, err)))
    return dpt_err_prefix(err, "--comm auto with gradients in device memory");
  if (note[0] && r->rank == 0) fprintf(stderr, "dpt-train: --comm auto: %s\n", note);
  if (strcmp(want, "nccl")) {
    *name = dpt_comm_name(r->comm);
    return 0;
  }
  struct dpt_comm_opts co;
  struct dpt_comm *dc;
  dpt_comm_opts_init(&co);
  co.name = want;
  co.ring_pos = dpt_comm_rank(r->comm);
  co.gpu = backend_gpu();
  int rc = dpt_comm_create(&dc, MPI_COMM_WORLD, &co, err);
  if (rc) return dpt_err_prefix(err, "--comm auto with gradients in device memory: the nccl communicator");
  r->host = r->comm;
  r->comm = dc;
  *name = want;
  return 0;
#else
  (void)r, (void)device_grads, (void)name, (void)err;
  return 0;
#endif
}

/* In-place sum or average over ranks (blocking) of a HOST buffer. */
static int ranks_allreduce(struct ranks *r, float *buf, size_t n, int avg, int fp16, struct dpt_err *err)
{
  if (r->size == 1) return 0;
#ifdef DPT_TRAIN_HAVE_COMM
  return dpt_comm_allreduce(r->host, buf, n, (avg ? DPT_COMM_AVG : 0) | (fp16 ? DPT_COMM_FP16 : 0), err);
#else
  (void)buf, (void)n, (void)avg, (void)fp16;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "all-reduce without the runtime");
#endif
}

static int ranks_bcast(struct ranks *r, float *buf, size_t n, struct dpt_err *err)
{
  if (r->size == 1) return 0;
#ifdef DPT_TRAIN_HAVE_COMM
  /* A sum with zeros elsewhere is rank 0's values exactly (x + 0 == x), and the
   * communicator's all-reduce is under its watchdog: a rank that dies or stalls
   * at start-up is named instead of hanging MPI_Bcast. */
  if (r->rank) memset(buf, 0, n * sizeof *buf);
  return dpt_comm_allreduce(r->host, buf, n, 0, err);
#else
  (void)buf, (void)n;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "broadcast without the runtime");
#endif
}

/* Double buffering: the in-flight gradient all-reduce. */
struct inflight {
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_comm_req *req;
#endif
  int active;
};

/* The gradient average (blocking): buf is device memory for nccl, else host. */
static int grad_allreduce(struct ranks *r, float *buf, size_t n, int fp16, struct dpt_err *err)
{
  if (r->size == 1) return 0;
#ifdef DPT_TRAIN_HAVE_COMM
  return dpt_comm_allreduce(r->comm, buf, n, DPT_COMM_AVG | (fp16 ? DPT_COMM_FP16 : 0), err);
#else
  (void)buf, (void)n, (void)fp16;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "all-reduce without the runtime");
#endif
}

/* ready: an event the communicator waits for before reading buf (nccl), or NULL. */
static int grad_start(struct ranks *r, struct inflight *f, float *buf, size_t n, int fp16, void *ready,
                      struct dpt_err *err)
{
  f->active = 0;
  if (r->size == 1) return 0;
#ifdef DPT_TRAIN_HAVE_COMM
  int rc = dpt_comm_start_after(r->comm, buf, n, DPT_COMM_AVG | (fp16 ? DPT_COMM_FP16 : 0), ready, &f->req, err);
  if (!rc) f->active = 1;
  return rc;
#else
  (void)buf, (void)n, (void)fp16, (void)ready;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "all-reduce without the runtime");
#endif
}

static int grad_wait(struct ranks *r, struct inflight *f, struct dpt_err *err)
{
  if (!f->active) return 0;
  f->active = 0;
#ifdef DPT_TRAIN_HAVE_COMM
  return dpt_comm_wait(r->comm, f->req, err);
#else
  (void)r;
  return 0;
#endif
}

/* Gradient buckets all-reduced during backward (--bucket-mb, dpt_bucket.h):
 * the backend calls bucket_start as soon as backward has produced bucket k
 * (cpu: written; cuda: enqueued, with an event the nccl stream waits for), so
 * its all-reduce runs on the communicator's worker thread / stream while
 * backward goes on with the layers below; the step then waits for them all. */
struct bucket_ar {
  struct ranks *rk;
  struct dpt_backend *be;
  unsigned flags;
  int started;                  /* buckets queued in this backward */
  int enqueue;                  /* graph mode with nccl: enqueued on the device (dpt_comm_enqueue_after) */
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_comm_req **req;    /* [be->n_buckets] */
#endif
};

static int bucket_start(void *ctx, int k, void *ready, struct dpt_err *err)
{
  struct bucket_ar *ba = ctx;
#ifdef DPT_TRAIN_HAVE_COMM
  const struct dpt_bucket *b = &ba->be->buckets[k];
  if (ba->enqueue) /* on the nccl stream behind the bucket's event: captured with the step */
    return dpt_comm_enqueue_after(ba->rk->comm, ba->be->grads + b->off, b->len, ba->flags, ready, err);
  int rc = dpt_comm_start_after(ba->rk->comm, ba->be->grads + b->off, b->len, ba->flags, ready, &ba->req[k], err);
  if (!rc) ba->started = k + 1;
  return rc;
#else
  (void)ba, (void)k, (void)ready;
  return dpt_err_set(err, DPT_E_UNSUPPORTED, "all-reduce without the runtime");
#endif
}

/* Wait for every bucket queued in this backward (the first error is returned). */
static int bucket_wait_all(struct bucket_ar *ba, struct dpt_err *err)
{
  int rc = 0;
#ifdef DPT_TRAIN_HAVE_COMM
  for (int k = 0; k < ba->started; k++) {
    struct dpt_err e = {0};
    int r = dpt_comm_wait(ba->rk->comm, ba->req[k], &e);
    if (r && !rc) {
      rc = r;
      *err = e;
    }
  }
#else
  (void)err;
#endif
  ba->started = 0;
  return rc;
}

static void ranks_fini(struct ranks *r)
{
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->host && r->host != r->comm) dpt_comm_destroy(r->host);
  if (r->comm) {
    dpt_comm_destroy(r->comm);
    MPI_Finalize();
  }
#else
  (void)r;
#endif
}

/* ---- preemption ---------------------------------------------------------- */

static volatile sig_atomic_t g_preempt_sig; /* first of SIGUSR1/SIGTERM received, 0: none */

static void on_preempt(int sig)
{
  if (!g_preempt_sig) g_preempt_sig = sig; /* async-signal-safe: one sig_atomic_t store */
}

static int preempt_install(struct dpt_err *err)
{
  static const int sigs[] = {SIGUSR1, SIGTERM};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_preempt;
  sa.sa_flags = SA_RESTART; /* the loader's reads and checkpoint writes carry on */
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 2; i++)
    if (sigaction(sigs[i], &sa, NULL))
      return dpt_err_set(err, DPT_E_RUNTIME, "sigaction(%s): %s", strsignal(sigs[i]), strerror(errno));
  return 0;
}

/* All ranks agree whether to stop after this step: sum of the per-rank flags
 * (SIGUSR1 wins the name when both were seen).  *sig: the signal, or 0. */
static int preempt_agree(struct ranks *r, int *sig, struct dpt_err *err)
{
  int mine = g_preempt_sig;
  float v[2] = {mine == SIGUSR1 ? 1.0f : 0.0f, mine == SIGTERM ? 1.0f : 0.0f};
  int rc = ranks_allreduce(r, v, 2, 0, 0, err);
  if (rc) return rc;
  *sig = v[0] > 0 ? SIGUSR1 : v[1] > 0 ? SIGTERM : 0;
  return 0;
}

/* Rank 0's string (at most len - 1 bytes) on every rank, one float per byte
 * through the watched all-reduce. */
static int agree_path(struct ranks *r, char *s, size_t len, struct dpt_err *err)
{
  if (r->size == 1) return 0;
  float *v = calloc(len, sizeof *v);
  if (!v) return dpt_err_set(err, DPT_E_NOMEM, "out of memory agreeing on the report path");
  for (size_t i = 0; i + 1 < len && s[i]; i++) v[i] = (float)(unsigned char)s[i];
  int rc = ranks_bcast(r, v, len, err);
  if (!rc) {
    for (size_t i = 0; i < len; i++) s[i] = (char)(unsigned char)v[i];
    s[len - 1] = '\0';
  }
  free(v);
  return rc;
}

/* ---- phases and fault injection (a testing aid) ---------------------------
 * The phase (start-up, train, allreduce, checkpoint, validation, report) is
 * recorded in the runtime's watchdog: its messages and the dpt.error/1 error
 * files (<report>.rank<N>.err) name it, and under dpt-launch the survivors
 * name the phase a dead rank was in.
 * DPT_FAULT=PHASE:RANK:KIND[:STEP] makes rank RANK fail on purpose when it
 * enters PHASE (startup, allreduce, checkpoint, validation) at step >= STEP
 * (default 0): kill (SIGKILL, as the kernel's OOM killer does), segv (a write
 * to address 0), oom (allocations under an address-space limit until one
 * fails: the out-of-memory error path), stop (SIGSTOP: a hung rank).  Unset,
 * it costs one compare per phase. */
static struct {
  int on, rank;
  long step;
  char phase[16], kind[8];
} g_fault;

static int fault_parse(int me, struct dpt_err *err)
{
  const char *v = getenv("DPT_FAULT");
  char ph[16] = "", kd[8] = "";
  int rank = -1, n = 0;
  long step = 0;
  if (!v || !*v) return 0;
  if (sscanf(v, "%15[a-z]:%d:%7[a-z]%n:%ld%n", ph, &rank, kd, &n, &step, &n) < 3 || v[n] ||
      (strcmp(ph, "startup") && strcmp(ph, "allreduce") && strcmp(ph, "checkpoint") && strcmp(ph, "validation")) ||
      (strcmp(kd, "kill") && strcmp(kd, "segv") && strcmp(kd, "oom") && strcmp(kd, "stop")) || rank < 0)
    return dpt_err_set(err, DPT_E_INPUT, "DPT_FAULT=\"%s\": expected PHASE:RANK:KIND[:STEP] with PHASE startup, "
                       "allreduce, checkpoint or validation and KIND kill, segv, oom or stop (a testing aid: "
                       "unset it for real runs)", v);
  if (rank != me) return 0;
  g_fault.on = 1;
  g_fault.rank = rank;
  g_fault.step = step;
  snprintf(g_fault.phase, sizeof g_fault.phase, "%s", ph);
  snprintf(g_fault.kind, sizeof g_fault.kind, "%s", kd);
  return 0;
}

static int fault_oom(const char *phase, long step, struct dpt_err *err)
{
  /* cap the address space a little above what is mapped now, then allocate and
   * touch until an allocation fails: the program's own out-of-memory path */
  long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld", &pages) != 1) pages = 0;
    fclose(f);
  }
  struct rlimit rl;
  getrlimit(RLIMIT_AS, &rl);
  rl.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
  setrlimit(RLIMIT_AS, &rl);
  void *chunks[4096];
  int n = 0;
  while (n < 4096 && (chunks[n] = malloc((size_t)16 << 20))) memset(chunks[n++], 1, (size_t)16 << 20);
  for (int i = 0; i < n; i++) free(chunks[i]);
  return dpt_err_set(err, DPT_E_NOMEM, "out of memory in phase %s (step %ld) after %d MiB more: no allocation "
                     "possible (DPT_FAULT)", phase, step, n * 16);
}

static int enter_phase(const char *phase, long step, struct dpt_err *err)
{
#ifdef DPT_TRAIN_HAVE_COMM
  dpt_watchdog_set_phase(phase, step);
#endif
  if (!g_fault.on || strcmp(g_fault.phase, phase) || (step >= 0 && step < g_fault.step)) return 0;
  g_fault.on = 0;
  char line[200];
  int n = snprintf(line, sizeof line, "dpt-train: DPT_FAULT: rank %d (pid %d) fails on purpose (%s) in phase %s "
                   "(step %ld)\n", g_fault.rank, (int)getpid(), g_fault.kind, phase, step);
  fflush(stdout);
  ssize_t w = write(STDERR_FILENO, line, n > 0 && n < (int)sizeof line ? (size_t)n : 0);
  (void)w;
  if (!strcmp(g_fault.kind, "kill")) raise(SIGKILL);
  if (!strcmp(g_fault.kind, "stop")) raise(SIGSTOP);
  if (!strcmp(g_fault.kind, "segv")) *(volatile int *)(uintptr_t)0 = 1;
  if (!strcmp(g_fault.kind, "oom")) return fault_oom(phase, step, err);
  return 0;
}

#if defined(__SANITIZE_ADDRESS__)
#define DPT_TRAIN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DPT_TRAIN_ASAN 1
#endif
#endif

/* A fatal signal writes the error file (when there is one) and a line, then
 * takes the default action (core dump).  Not under ASan: its report is better. */
#ifndef DPT_TRAIN_ASAN
static void on_fatal(int sig)
{
#ifdef DPT_TRAIN_HAVE_COMM
  dpt_watchdog_write_error_signal(sig);
#endif
  static const char m[] = "dpt-train: fatal signal (SIGSEGV/SIGBUS/SIGFPE/SIGILL): see the error file next to the "
                          "job report\n";
  ssize_t w = write(STDERR_FILENO, m, sizeof m - 1);
  (void)w;
  signal(sig, SIG_DFL);
  raise(sig);
}
#endif

static void faults_install(void)
{
  signal(SIGXFSZ, SIG_IGN); /* a file size limit fails the checkpoint write (EFBIG), it does not kill */
#ifndef DPT_TRAIN_ASAN
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], on_fatal);
#endif
}

/* ---- training ------------------------------------------------------------ */

struct times {
  double data, fwd, bwd, ar_exposed, update, val, total;
  double steps; /* wall time of the training steps: what every img/s divides by (the progress line
                   over its interval, the done line and the report: data wait + forward + backward +
                   exposed all-reduce + update; not validation, checkpoints or start-up) */
};

static void warn_ckpt(const char *msg) { fprintf(stderr, "dpt-train: warning: %s; trying an older one\n", msg); }

static void fmt_eta(double s, char *buf, size_t n)
{
  if (s < 0 || !isfinite(s)) s = 0;
  int h = (int)(s / 3600), m = (int)(fmod(s, 3600) / 60), sec = (int)fmod(s, 60);
  if (h) snprintf(buf, n, "%dh%02dm", h, m);
  else snprintf(buf, n, "%dm%02ds", m, sec);
}

/* ---- resume ----------------------------------------------------------------
 * --resume: rank 0 alone picks the checkpoint (auto: the newest that verifies
 * in --checkpoint-dir, ChainerMN's rule; only rank 0 writes there, and another
 * rank's view of that directory may be older, empty or absent) and reads it.
 * Whether there is one, its step and its arrays then reach every rank through
 * the watched all-reduce (ranks_bcast), so all ranks continue from the same
 * step with the same bits.  *found = 0: nothing to resume (a fresh start).
 * path: rank 0's checkpoint ("" elsewhere). */
static int resume_agreed(struct ranks *r, const char *resume, const char *dir, const struct dpt_ckpt_meta *cm,
                         float *params, float *state, float *velocity, float *pending, long *step, int *found,
                         struct dpt_ckpt_meta *got_meta, char *path, size_t plen, struct dpt_err *err)
{
  /* from rank 0: failed, found, step / 2^20, step % 2^20 (exact in floats), the loss scaler
   * (scale, good steps, skipped / 2^20, skipped % 2^20) */
  float hdr[8] = {0};
  struct dpt_err be = {0};
  int rc = 0;
  *found = 0;
  *step = 0;
  path[0] = '\0';
  if (r->rank == 0) {
    int f = 1;
    if (!strcmp(resume, "auto")) f = dpt_ckpt_find_latest(dir, cm, path, plen, warn_ckpt, err);
    else snprintf(path, plen, "%s", resume);
    if (f < 0) {
      rc = f;
    } else if (f) {
      if (!(rc = dpt_ckpt_load(path, cm, got_meta, params, state, velocity, pending, err))) {
        *found = 1;
        *step = (long)got_meta->global_step;
      }
    }
    hdr[0] = rc ? 1.0f : 0.0f;
    hdr[1] = (float)*found;
    hdr[2] = (float)(*step >> 20);
    hdr[3] = (float)(*step & 0xfffff);
    if (*found) {
      hdr[4] = got_meta->loss_scale;
      hdr[5] = (float)got_meta->scale_good_steps;
      hdr[6] = (float)(got_meta->scale_skipped >> 20);
      hdr[7] = (float)(got_meta->scale_skipped & 0xfffff);
    }
  }
  if (r->size == 1) return rc;
  if (ranks_bcast(r, hdr, 8, &be)) {
    if (!rc) *err = be;
    return rc ? rc : be.code;
  }
  if (rc) return rc;
  if (hdr[0] != 0.0f)
    return dpt_err_set(err, DPT_E_INPUT, "--resume %s: rank 0 could not read the checkpoint it chose (its error "
                       "is above): every rank resumes from rank 0's checkpoint, so fix or remove that one", resume);
  *found = hdr[1] != 0.0f;
  *step = ((long)hdr[2] << 20) + (long)hdr[3];
  if (!*found) return 0;
  got_meta->global_step = (uint64_t)*step;
  got_meta->loss_scale = hdr[4];
  got_meta->scale_good_steps = (int32_t)hdr[5];
  got_meta->scale_skipped = ((int64_t)hdr[6] << 20) + (int64_t)hdr[7];
  if ((rc = ranks_bcast(r, params, cm->n_params, err)) || (rc = ranks_bcast(r, state, cm->n_state, err)) ||
      (rc = ranks_bcast(r, velocity, cm->n_params, err)) ||
      (cm->n_pending && (rc = ranks_bcast(r, pending, cm->n_pending, err))))
    dpt_err_prefix(err, "--resume: sending the checkpoint of step %ld from rank 0 to the other ranks", *step);
  return rc;
}

/* The learning curve (rank 0): the points of the run(s) before a resume and
 * this run's, kept next to the checkpoints after every validation. */
struct curve_log {
  struct dpt_ckpt_point *p;
  size_t n, cap;
};

static void curve_keep(struct curve_log *c, const char *dir, const struct dpt_ckpt_point *pt)
{
  struct dpt_err e = {0};
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    struct dpt_ckpt_point *p = realloc(c->p, cap * sizeof *p);
    if (!p) {
      fprintf(stderr, "dpt-train: warning: out of memory for the learning curve: a resume will lack it\n");
      return;
    }
    c->p = p;
    c->cap = cap;
  }
  c->p[c->n++] = *pt;
  if (dir && dpt_ckpt_curve_save(dir, c->p, c->n, &e))
    fprintf(stderr, "dpt-train: warning: %s (a resume will lack the learning curve so far)\n", e.msg);
}

struct val_result {
  double loss, top1, top5;
  long n;
};

/* ---- backend slabs ----------------------------------------------------------
 * The loop touches the backend's slabs only through these and host mirrors
 * (hp, hs, hg, hv in main): for a host-slab backend (cpu) a mirror IS the slab
 * and copy_slab() returns at once, so nothing is copied; for a device backend
 * (cuda, or the cpu backend's simulated device DPT_CPU_DEVICE_SLABS=1) they are
 * separate host buffers, allocated once. */
static int slab_get(struct dpt_backend *be, enum dpt_slab w, float *host, struct dpt_err *err)
{
  return be->ops->copy_slab(be, w, host, 0, err);
}

static int slab_put(struct dpt_backend *be, enum dpt_slab w, float *host, struct dpt_err *err)
{
  return be->ops->copy_slab(be, w, host, 1, err);
}

/* BN running statistics are per rank during training: average them (host mirror hs). */
static int state_average(struct ranks *rk, struct dpt_backend *be, float *hs, struct dpt_err *err)
{
  int rc;
  if (rk->size == 1) return 0;
  if ((rc = slab_get(be, DPT_SLAB_STATE, hs, err)) || (rc = ranks_allreduce(rk, hs, be->model->n_state, 1, 0, err)))
    return rc;
  return slab_put(be, DPT_SLAB_STATE, hs, err);
}

/* One optimizer step with the averaged gradient: buf = NULL (the gradient slab),
 * be->pending (the backend's pending slab) or a HOST buffer (double buffering
 * through the host).  Mixed precision: the backend looks for an inf/NaN in it
 * (after the all-reduce: every rank decides alike), skips the step and updates
 * its loss scale (dpt_loss_scaler_update) on its side: nothing comes back. */
static int apply_step(struct dpt_backend *be, int mixed, const float *buf, float lr, struct dpt_err *err)
{
  int rc;
  if (mixed) {
    if (buf && buf != be->pending) { /* a host buffer: into the gradient slab, checked there */
      if ((rc = slab_put(be, DPT_SLAB_GRADS, (float *)buf, err))) return rc;
      buf = NULL;
    }
    if ((rc = be->ops->overflow_check(be, buf, err))) return rc;
  }
  return be->ops->sgd_step(be, lr, buf, err);
}

/* ---- one run ---------------------------------------------------------------
 * Everything a run holds: set up once (run_start, run_model, run_backend,
 * run_loaders, run_schedule, run_buffers, run_resume, run_describe), driven by
 * train_loop (train_step, log_progress, checkpoint_save, validate_epoch), ended
 * by run_finish and run_close. */
struct run {
  struct opts o;
  struct ranks rk;
  int R, me, threads;
  struct dpt_dataset train, val;
  struct dpt_model model;
  char model_desc[96];
  int S, K;                        /* image side, classes */
  struct dpt_backend *be;
  size_t np;                       /* parameters */
  int dev_comm;                    /* > 1 rank over nccl: the device gradient slab itself is all-reduced */
  int mixed;                       /* --precision mixed: the backend's dynamic loss scaling */
  struct dpt_loss_scaler scaler;   /* its host copy (resume, checkpoints, the final report) */
  struct dpt_loader *tls[64], *vl; /* training loaders (one per micro-batch), validation */
  int dev_input;                   /* 1: the loaders' batches stay on the GPU in the backend's input
                                      format, read in place by ops->forward_device */
  struct dpt_input_format in_fmt;  /* dev_input: the backend's (ops->input_format) */
  char input_desc[480];            /* the path the input takes, and why (rank 0 prints it) */
  int spe;                         /* steps per epoch */
  long total_steps;
  double total_epochs;
  struct dpt_schedule sch;
  struct inflight fl;              /* double buffering: the all-reduce in flight */
  struct bucket_ar ba;             /* gradient buckets all-reduced during backward */
  struct dpt_bucket *buckets;
  int n_buckets;
  const char *no_buckets;          /* > 1 rank: why the gradients are not all-reduced in buckets */
  float *pending, *gacc;           /* host [np]: double-buffered averaged gradient, micro-batch sum */
  float *mirrors;                  /* device backends: host copies of the slabs (one allocation) */
  float *hp, *hs, *hg, *hv;        /* host params, BN state, gradients, momentum (the slabs on cpu) */
  unsigned char *mask;             /* [np] weight decay */
  struct dpt_ckpt_meta cm;
  int ckpt_every;
  /* the loop */
  long gstep, steps_run, last_log_step;
  int have_pending;                /* double buffering: an averaged gradient waits to be applied */
  int psig;                        /* agreed preemption signal: stop after this step */
  char ckpt_last[4300];            /* rank 0: the last checkpoint written */
  double ep_loss;                  /* the epoch's loss sum, top-1 count and images (this rank) */
  long ep_correct, ep_n;
  long run_n;                      /* images since the last log line */
  long waits_train, n_logs;        /* host waits in the steps and their log lines; log lines */
  struct times tm;
  double t_start, t_train0;
  double steps_last;               /* tm.steps at the last progress line */
  struct val_result vr;
  json_t *curve;
  struct curve_log cl;             /* rank 0: the learning curve, kept next to the checkpoints */
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_report *rep;
#endif
  /* issue 15: steps announced to the backend (--cuda-graph), the kernel breakdown (--profile-steps) */
  struct dpt_cap_run_cfg cap;      /* the run as the capture plans see it */
  int graph_comm;                  /* the backend captures and nccl all-reduces device gradients: enqueued on
                                      the device, joined by the backend (no host wait) */
  long prof_first;                 /* first step recorded (gstep), -1: none */
  void *prof;                      /* struct dpt_cupti * while recording */
  char prof_path[4300];            /* where the breakdown goes */
};

/* Ranks, signals, fault injection, the job report and its error file. */
static int run_start(struct run *r, int *argc, char ***argv, struct dpt_err *err)
{
  int rc;
  if ((rc = ranks_init(&r->rk, argc, argv, &r->o, err))) return rc;
  r->R = r->rk.size;
  r->me = r->rk.rank;
  if ((rc = preempt_install(err))) return rc; /* after MPI_Init: ours is the handler */
  if ((rc = fault_parse(r->me, err))) return rc;
  faults_install();
#ifdef DPT_TRAIN_HAVE_COMM
  /* the job report, through the runtime's one writer (dpt_report), on every run unless
   * --no-report: --report, $DPT_REPORT, else the default name (dpt_report_path) */
  if (!r->o.no_report) {
    char applied[2048];
    if ((rc = dpt_report_create(&r->rep, "dpt-train", *argc, *argv, r->me, r->R, err))) return rc;
    dpt_bind_describe_applied(applied, sizeof applied);
    if (dpt_report_set_binding(r->rep, applied) || (r->o.baseline && dpt_report_set_baseline(r->rep, r->o.baseline)))
      return dpt_err_set(err, DPT_E_NOMEM, "out of memory for the job report");
  }
  if (r->rep) { /* failures (a watchdog, a fatal signal, an error) also go to <report>.rank<N>.err */
    char rp[4096], ep[4200], host[256] = "?";
    struct dpt_err pe = {0};
    const char *node = getenv("DPT_NODE_NAME") ? getenv("DPT_NODE_NAME") : getenv("SLURMD_NODENAME");
    if (!node) node = gethostname(host, sizeof host - 1) ? "?" : host;
    if (dpt_report_path(r->rep, r->o.report, rp, sizeof rp, &pe) <= 0) rp[0] = '\0';
    /* one name for the whole job: rank 0's report path (the default name and %p
     * carry the pid, which differs on every rank) */
    if ((rc = agree_path(&r->rk, rp, sizeof rp, err))) return rc;
    if (rp[0]) {
      snprintf(ep, sizeof ep, "%s.rank%d.err", rp, r->me);
      unlink(ep); /* a previous run's */
      dpt_watchdog_set_error_file(ep, r->me, node);
    }
  }
#endif
  if ((rc = enter_phase("startup", -1, err))) return rc;
  if (r->o.threads > 0) omp_set_num_threads(r->o.threads);
  r->threads = omp_get_max_threads();
  return 0;
}

/* The data sets and the model. */
static int run_model(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  int rc;
  struct dpt_data_opts dop = {.skip_bad = o->skip_bad, .synth_size = o->image_size, .synth_classes = o->num_classes,
                              .train_list = o->train_list, .val_list = o->val_list, .num_classes = o->num_classes,
                              .channels = o->in_channels};
  if ((rc = dpt_data_load(&r->train, o->dataset, o->data_dir, 1, o->n_synth, o->seed, &dop, err))) return rc;
  if (o->val && (rc = dpt_data_load(&r->val, o->dataset, o->data_dir, 0, o->n_synth, o->seed, &dop, err))) return rc;
  if (r->train.skipped && r->me == 0)
    fprintf(stderr, "dpt-train: skipped %d corrupt training records\n", r->train.skipped);
  if (o->val && r->val.num_classes > (o->num_classes ? o->num_classes : r->train.num_classes))
    return dpt_err_set(err, DPT_E_INPUT, "validation labels reach %d but the training set has %d classes: "
                       "give --num-classes %d", r->val.num_classes - 1, r->train.num_classes, r->val.num_classes);
  r->S = o->image_size ? o->image_size : r->train.h;
  if (o->crop_pad < 0) o->crop_pad = !strcmp(r->train.name, "cifar10") ? 4 : 0;
  r->K = o->num_classes ? o->num_classes : r->train.num_classes;
  if (r->K < r->train.num_classes)
    return dpt_err_set(err, DPT_E_INPUT, "--num-classes %d < the %d classes of %s", r->K, r->train.num_classes,
                       r->train.name);

  struct dpt_model_cfg cfg;
  dpt_model_cfg_default(&cfg);
  cfg.in_channels = r->train.c;
  cfg.image_size = r->S;
  cfg.num_classes = r->K;
  cfg.small_stem = o->small_stem >= 0 ? o->small_stem : r->S <= 64;
  if (o->width <= 0) o->width = !strcmp(o->dataset, "imagenet") || r->S >= 64 ? 1.0 : 0.125; /* GPU-first default */
  cfg.width = o->width;
  cfg.seed = o->seed;
  if ((rc = dpt_model_resnet50(&r->model, &cfg, err))) return rc;
  snprintf(r->model_desc, sizeof r->model_desc, "resnet50-v1.5 w%g %s %dx%dx%d k%d", cfg.width,
           cfg.small_stem ? "small-stem" : "imagenet-stem", cfg.in_channels, r->S, r->S, r->K);
  return 0;
}

/* The backend (--backend auto: cuda only when a device works on every rank), the
 * communicator for its gradients, mixed precision's requirements. */
static int run_backend(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  int rc;
  struct dpt_backend_opts bo;
  dpt_backend_opts_default(&bo);
  bo.batch = o->batch;
  bo.threads = o->threads;
  bo.precision = o->precision;
  bo.fuse = o->fuse;
  bo.cuda_graph = o->cuda_graph;
  const char *bname = o->backend;
  if (!strcmp(bname, "auto")) { /* cuda only when a device works, on every rank */
    char why[320] = "";
    float works = !strcmp(dpt_backend_auto(why, sizeof why), "cuda");
    if ((rc = ranks_allreduce(&r->rk, &works, 1, 0, 0, err))) return rc;
    bname = works == (float)r->R ? "cuda" : "cpu";
    if (r->me == 0 && !strcmp(bname, "cpu") && strstr(dpt_backend_available(), "cuda"))
      fprintf(stderr, "dpt-train: no usable GPU (%s): training on CPU\n",
              why[0] ? why : "another rank has no working CUDA device");
  }
  if ((rc = dpt_backend_create(bname, &r->model, &bo, &r->be, err))) return rc;
  struct dpt_backend *be = r->be;
  r->np = r->model.n_params;
  if ((rc = ranks_resolve_auto(&r->rk, !be->host_slabs && be->grads, &o->comm, err))) return rc;
  /* nccl reads the gradient slab in device memory: only the cuda backend has one */
  r->dev_comm = r->R > 1 && !strcmp(o->comm, "nccl");
  if (r->dev_comm && (be->host_slabs || !be->grads))
    return dpt_err_set(err, DPT_E_INPUT, "--comm nccl moves device buffers but backend %s keeps its slabs in host "
                       "memory: use --backend cuda (on GPU nodes) or --comm ring", be->ops->name);
  /* --precision mixed: dynamic loss scaling, kept by the backend (r->scaler: its host copy) */
  r->mixed = !strcmp(be->precision, "mixed");
  dpt_loss_scaler_init(&r->scaler);
  if (r->mixed && (!be->ops->overflow_check || !be->ops->scaler_get || !be->ops->scaler_set))
    return dpt_err_set(err, DPT_E_UNSUPPORTED, "backend %s runs mixed precision without overflow detection",
                       be->ops->name);
  return 0;
}

/* The loaders: micro-batch j of rank r reads the shard of virtual rank r*K + j of R*K
 * (one rank with K micro-batches sees exactly the images K ranks would). */
static int run_loaders(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  int rc, me = r->me, R = r->R;
  if (o->accum > 64) return dpt_err_set(err, DPT_E_INPUT, "--accumulate %d: at most 64", o->accum);
  struct dpt_loader_opts lo = {.batch = o->batch, .rank = me, .size = R, .seed = o->seed, .train = 1,
                               .crop_pad = o->crop_pad, .flip = o->flip, .out_size = r->S, .prefetch = o->prefetch,
                               .workers = o->data_threads ? o->data_threads : r->train.files ? 4 : 1};
  /* --data-device (issue 16): imagenet batches decoded by nvJPEG on the backend's GPU, written in
   * the backend's own input format (the negotiation: dpt_loader_opts_for_format) and handed to
   * ops->forward_device in place; a backend without device input gets them copied to the host */
  struct dpt_backend *be = r->be;
  char hw[400] = "", fd[96];
  if (!r->train.files) {
    snprintf(hw, sizeof hw, "%s is held in host memory (the GPU path decodes JPEG records)", r->train.name);
  } else if (!strcmp(o->data_device, "cpu")) {
    snprintf(hw, sizeof hw, "--data-device cpu (libturbojpeg)");
  } else {
    char why[320] = "";
    int cuda = !strcmp(be->ops->name, "cuda"), dev = getenv("DPT_CUDA_DEVICE") ? atoi(getenv("DPT_CUDA_DEVICE")) : 0;
    int devin = cuda && be->ops->input_format && be->ops->forward_device;
    if (devin && (rc = be->ops->input_format(be, &r->in_fmt, err))) return rc;
    if (devin) dev = r->in_fmt.device;
    int ok = cuda && dpt_data_gpu_available(dev, why, sizeof why);
    if (!ok && !strcmp(o->data_device, "gpu"))
      return dpt_err_set(err, cuda ? DPT_E_RUNTIME : DPT_E_INPUT, "--data-device gpu: %s",
                         cuda ? why : "the backend is cpu: it needs --backend cuda");
    if (!ok && cuda && me == 0) fprintf(stderr, "dpt-train: --data-device auto: decoding on the CPU: %s\n", why);
    if (ok && devin) { /* batches in the backend's input format, on its device */
      if ((rc = dpt_loader_opts_for_format(&lo, &r->train, &r->in_fmt, err))) return rc;
      r->dev_input = 1;
    } else if (ok) {
      lo.device = DPT_DATA_GPU;
      lo.gpu = dev;
      snprintf(hw, sizeof hw, "backend %s has no device input: the GPU-decoded batches are copied to the host",
               be->ops->name);
    } else {
      snprintf(hw, sizeof hw, "%s%s", cuda ? "the GPU input path is unavailable: " : "",
               cuda ? why : "backend cpu takes host batches (libturbojpeg decodes)");
    }
  }
  if (r->dev_input)
    snprintf(r->input_desc, sizeof r->input_desc, "GPU-decoded batches straight into the backend, no host copy: "
             "%s on device %d", dpt_input_format_describe(&r->in_fmt, fd, sizeof fd), r->in_fmt.device);
  else
    snprintf(r->input_desc, sizeof r->input_desc, "host fp32 NCHW batches: %s", hw);
  for (int j = 0; j < o->accum; j++) {
    struct dpt_loader_opts lj = lo;
    lj.rank = me * o->accum + j;
    lj.size = R * o->accum;
    if ((rc = dpt_loader_create(&r->tls[j], &r->train, &lj, err))) return rc;
  }
  if (o->val) {
    struct dpt_loader_opts vo = lo;
    vo.train = 0;
    vo.crop_pad = 0;
    vo.flip = 0;
    vo.prefetch = 1;
    if ((rc = dpt_loader_create(&r->vl, &r->val, &vo, err))) return rc;
  }
  r->spe = dpt_loader_steps(r->tls[0]);
  r->total_steps = o->iterations ? o->iterations : (long)o->epochs * r->spe;
  r->total_epochs = (double)r->total_steps / r->spe;
  return 0;
}

/* The learning-rate schedule (linear scaling rule over the global batch). */
static int run_schedule(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_schedule *sch = &r->sch;
  sch->kind = dpt_schedule_parse_kind(o->schedule);
  sch->peak_lr = dpt_lr_scaled(o->lr, o->batch * o->accum * r->R, o->lr_batch);
  sch->warmup_epochs = o->warmup_epochs;
  sch->warmup_start = 0.0;
  sch->total_epochs = r->total_epochs;
  sch->gamma = o->gamma;
  sch->step_epochs = o->step_epochs;
  sch->power = o->power;
  if (o->milestones[0]) {
    char *s = o->milestones, *end;
    while (*s && sch->n_milestones < DPT_SCHED_MAX_MILESTONES) {
      double v = strtod(s, &end);
      if (end == s || v <= 0 || (sch->n_milestones && v <= sch->milestones[sch->n_milestones - 1]))
        return dpt_err_set(err, DPT_E_INPUT, "--milestones '%s': need increasing positive epochs", o->milestones);
      sch->milestones[sch->n_milestones++] = v;
      s = *end == ',' ? end + 1 : end;
      if (*end && *end != ',')
        return dpt_err_set(err, DPT_E_INPUT, "--milestones '%s': not a comma-separated list", o->milestones);
    }
  }
  return 0;
}

static void profile_paths(struct run *r);

/* The optimizer, the host buffers, double buffering's pending slab, gradient buckets. */
static int run_buffers(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_backend *be = r->be;
  size_t np = r->np;
  int rc;
  r->mask = malloc(np ? np : 1);
  /* the host buffers that cross to the backend every step: the backend's (pinned on cuda) */
  r->pending = o->dbuf ? dpt_backend_host_alloc(be, np * sizeof(float)) : NULL;
  if (r->pending) memset(r->pending, 0, np * sizeof(float));
  r->gacc = o->accum > 1 ? malloc(np * sizeof(float)) : NULL;
  if (!r->mask || (o->dbuf && !r->pending) || (o->accum > 1 && !r->gacc))
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  dpt_model_decay_mask(&r->model, o->no_decay_bn, r->mask);
  if ((rc = be->ops->sgd_init(be, (float)o->momentum, (float)o->weight_decay, 0, r->mask, err))) return rc;
  /* double buffering keeps the averaged gradient in the backend's memory when the
   * communicator can read it there (host slabs, or nccl on device slabs) */
  if (o->dbuf && (be->host_slabs || r->dev_comm || r->R == 1)) { /* one rank: no communicator reads it */
    if (!be->ops->pending_init || !be->ops->stash_grads)
      return dpt_err_set(err, DPT_E_UNSUPPORTED, "--double-buffering: backend %s has no pending gradient slab%s",
                         be->ops->name, r->dev_comm ? " for nccl: use --comm ring" : "");
    if ((rc = be->ops->pending_init(be, err))) return rc;
  }
  if (be->host_slabs) {
    r->hp = be->params, r->hs = be->state, r->hg = be->grads, r->hv = be->velocity;
  } else {
    r->mirrors = dpt_backend_host_alloc(be, (3 * np + r->model.n_state + 1) * sizeof(float));
    if (!r->mirrors) return dpt_err_set(err, DPT_E_NOMEM, "out of memory for the host copies of %zu parameters", np);
    r->hp = r->mirrors, r->hg = r->hp + np, r->hv = r->hg + np, r->hs = r->hv + np;
  }
  /* gradient buckets all-reduced during backward (--bucket-mb); a backend that captures steps in
   * CUDA graphs all-reduces device gradients over nccl in buckets always (one for the whole
   * gradient with --bucket-mb 0): they are enqueued on the device inside the graph */
  r->graph_comm = be->graph && r->dev_comm && !o->dbuf && o->accum == 1;
  if (r->R > 1) {
    r->no_buckets = o->bucket_mb <= 0 && !r->graph_comm ? "--bucket-mb 0"
                    : o->dbuf ? "double buffering overlaps the whole all-reduce with the next step"
                    : o->accum > 1 ? "--accumulate sums the micro-batches on the host first"
                    : !be->host_slabs && !r->dev_comm ? "the device gradients reach this communicator through host memory"
                    : NULL;
    if (!r->no_buckets) {
      size_t target = o->bucket_mb > 0 ? (size_t)(o->bucket_mb * 1048576.0) : np * sizeof(float);
      if ((rc = dpt_bucket_plan(&r->model, target < 4 ? 4 : target, &r->buckets, &r->n_buckets, err))) return rc;
#ifdef DPT_TRAIN_HAVE_COMM
      r->ba.req = calloc((size_t)r->n_buckets, sizeof *r->ba.req);
      if (!r->ba.req) return dpt_err_set(err, DPT_E_NOMEM, "out of memory for %d gradient buckets", r->n_buckets);
      r->ba.flags = DPT_COMM_AVG | (o->fp16 ? DPT_COMM_FP16 : 0);
#endif
      r->ba.be = be;
      if ((rc = dpt_backend_set_buckets(be, r->buckets, r->n_buckets, bucket_start, &r->ba, err))) return rc;
    }
  }
  r->ba.enqueue = r->graph_comm;
  /* --profile-steps: the N steps before the last one */
  r->prof_first = -1;
  if (o->profile_steps) {
    if (strcmp(be->ops->name, "cuda"))
      return dpt_err_set(err, DPT_E_INPUT, "--profile-steps records GPU kernels: backend %s has none (use --backend "
                         "cuda)", be->ops->name);
    if (r->total_steps < o->profile_steps + 2)
      return dpt_err_set(err, DPT_E_INPUT, "--profile-steps %d needs at least %d steps (the first and the last are not "
                         "recorded); this run has %ld", o->profile_steps, o->profile_steps + 2, r->total_steps);
    r->prof_first = r->total_steps - o->profile_steps - 1;
    profile_paths(r);
  }
  r->cap = (struct dpt_cap_run_cfg){r->R, r->dev_comm ? DPT_CAP_COMM_NCCL : DPT_CAP_COMM_HOST, r->n_buckets, r->mixed,
                                    o->dbuf, o->batch};
  return 0;
}

/* The learning curve of the run(s) before this one, up to step gstep (rank 0): into
 * the report and the curve kept next to the checkpoints.  path: the checkpoint's. */
static int curve_carry_over(struct run *r, char *path, struct dpt_err *err)
{
  struct dpt_err ce = {0};
  struct curve_log *cl = &r->cl;
  char *slash = strrchr(path, '/');
  if (slash) *slash = '\0';
  if (dpt_ckpt_curve_load(slash ? path : ".", r->gstep, &cl->p, &cl->n, &ce) < 0)
    fprintf(stderr, "dpt-train: warning: %s\n", ce.msg);
  cl->cap = cl->n;
  for (size_t i = 0; i < cl->n; i++) {
    const struct dpt_ckpt_point *q = &cl->p[i];
    json_array_append_new(r->curve, json_pack("{s:f,s:I,s:f,s:f,s:f,s:f}", "epoch", q->epoch, "step",
                                              (json_int_t)q->step, "top1", q->val_top1, "top5", q->val_top5,
                                              "loss", q->val_loss, "elapsed_s", q->elapsed_s));
#ifdef DPT_TRAIN_HAVE_COMM
    struct dpt_report_epoch re;
    int rc;
    dpt_report_epoch_init(&re);
    re.epoch = q->epoch;
    re.step = q->step;
    re.train_loss = q->train_loss;
    re.train_top1 = q->train_top1;
    re.val_loss = q->val_loss;
    re.val_top1 = q->val_top1;
    re.val_top5 = q->val_top5;
    re.lr = q->lr;
    re.elapsed_s = q->elapsed_s;
    if (r->rep && (rc = dpt_report_add_epoch(r->rep, &re, err))) return rc;
#else
    (void)err;
#endif
  }
  if (cl->n) printf("dpt-train: learning curve: %zu point(s) up to step %ld carried over\n", cl->n, cl->p[cl->n - 1].step);
  return 0;
}

/* The same starting point on every rank: rank 0's parameters, or the checkpoint it
 * picked (--resume), with the loss scaler and the learning curve it had. */
static int run_resume(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_backend *be = r->be;
  struct dpt_ckpt_meta *cm = &r->cm;
  size_t np = r->np;
  int rc;
  if (r->R > 1) {
    if ((rc = slab_get(be, DPT_SLAB_PARAMS, r->hp, err)) || (rc = slab_get(be, DPT_SLAB_STATE, r->hs, err)) ||
        (rc = ranks_bcast(&r->rk, r->hp, np, err)) || (rc = ranks_bcast(&r->rk, r->hs, r->model.n_state, err)) ||
        (rc = slab_put(be, DPT_SLAB_PARAMS, r->hp, err)) || (rc = slab_put(be, DPT_SLAB_STATE, r->hs, err)))
      return rc;
  }
  cm->seed = o->seed;
  cm->world_size = r->R * o->accum; /* virtual ranks: K micro-batches stand for K ranks */
  cm->batch = o->batch;
  cm->n_params = np;
  cm->n_state = r->model.n_state;
  cm->n_pending = o->dbuf ? np : 0;
  snprintf(cm->model, sizeof cm->model, "%s", r->model_desc);
  if (o->resume) {
    char path[4300];
    int found;
    struct dpt_ckpt_meta got = {0};
    if ((rc = resume_agreed(&r->rk, o->resume, o->ckpt_dir, cm, r->hp, r->hs, r->hv, r->pending, &r->gstep, &found,
                            &got, path, sizeof path, err)))
      return rc;
    if (found && r->mixed && got.loss_scale > 0) { /* mixed precision: continue with the scale the run had */
      if ((rc = be->ops->scaler_get(be, &r->scaler, err))) return rc; /* the backend's limits, then the state */
      r->scaler.scale = got.loss_scale;
      r->scaler.good_steps = got.scale_good_steps;
      r->scaler.skipped = got.scale_skipped;
      if ((rc = be->ops->scaler_set(be, &r->scaler, err))) return rc;
    }
    if (found) {
      if ((rc = slab_put(be, DPT_SLAB_PARAMS, r->hp, err)) || (rc = slab_put(be, DPT_SLAB_STATE, r->hs, err)) ||
          (rc = slab_put(be, DPT_SLAB_VELOCITY, r->hv, err)) ||
          (be->pending && (rc = slab_put(be, DPT_SLAB_PENDING, r->pending, err))))
        return rc;
      r->have_pending = o->dbuf && r->gstep > 0;
      if (r->me == 0) {
        printf("dpt-train: resumed from %s at step %ld (epoch %d)\n", path, r->gstep, (int)(r->gstep / r->spe) + 1);
        if ((rc = curve_carry_over(r, path, err))) return rc; /* the learning curve up to that step */
      }
    } else if (r->me == 0) {
      printf("dpt-train: no checkpoint in %s yet, starting fresh\n", o->ckpt_dir);
    }
  }
  if (o->ckpt_dir && r->me == 0) mkdir(o->ckpt_dir, 0777);
  r->ckpt_every = o->ckpt_every ? o->ckpt_every : r->spe;
  return 0;
}

/* The run's configuration: into the job report, and rank 0's banner. */
/* The GPU, driver and libraries a cuda run uses (issue 22): line[] for the start line, and the
 * job report's software.gpu / software.libraries. */
static void cuda_versions(struct run *r, char *line, size_t len)
{
  line[0] = '\0';
#ifdef DPT_HAVE_CUDA_BACKEND
  if (strcmp(r->be->ops->name, "cuda")) return;
  struct dpt_cuda_versions v;
  dpt_cuda_versions_get(getenv("DPT_CUDA_DEVICE") ? atoi(getenv("DPT_CUDA_DEVICE")) : 0, &v); /* the backend's */
  int n = dpt_cuda_versions_str(&v, line, len);
  long nccl = -1;
#ifdef DPT_HAVE_NCCL
  nccl = dpt_comm_nccl_version();
  if (n > 0 && (size_t)n < len)
    snprintf(line + n, len - (size_t)n, nccl > 0 ? ", NCCL %ld.%ld.%ld" : ", NCCL ?", nccl / 10000, nccl / 100 % 100,
             nccl % 100);
#else
  (void)n;
#endif
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    char b[48];
    dpt_report_set_software(r->rep, "gpu", v.device[0] ? v.device : NULL);
    snprintf(b, sizeof b, "%d.%d", v.driver / 1000, v.driver % 1000 / 10);
    dpt_report_set_library(r->rep, "cuda_driver", v.driver ? b : NULL);
    snprintf(b, sizeof b, "%d.%d", v.runtime / 1000, v.runtime % 1000 / 10);
    dpt_report_set_library(r->rep, "cuda_runtime", v.runtime ? b : NULL);
    dpt_cuda_versions_cudnn(v.cudnn, b, sizeof b);
    dpt_report_set_library(r->rep, "cudnn", b);
    dpt_cuda_versions_cudnn(v.cudnn_built, b, sizeof b);
    dpt_report_set_library(r->rep, "cudnn_headers", b);
    snprintf(b, sizeof b, "%d.%d.%d", v.cublas / 10000, v.cublas / 100 % 100, v.cublas % 100);
    dpt_report_set_library(r->rep, "cublas", v.cublas ? b : NULL);
    snprintf(b, sizeof b, "%d.%d", v.nvrtc_major, v.nvrtc_minor);
    dpt_report_set_library(r->rep, "nvrtc", v.nvrtc_major >= 0 ? b : NULL);
    snprintf(b, sizeof b, "%ld.%ld.%ld", nccl / 10000, nccl / 100 % 100, nccl % 100);
    dpt_report_set_library(r->rep, "nccl", nccl > 0 ? b : NULL);
  }
#endif
  (void)nccl;
#else
  (void)r, (void)len;
#endif
}

static void run_describe(struct run *r)
{
  struct opts *o = &r->o;
  struct dpt_backend *be = r->be;
  int R = r->R;
  char gpu_line[512];
  cuda_versions(r, gpu_line, sizeof gpu_line);
#ifdef DPT_TRAIN_HAVE_COMM
  struct dpt_report *rep = r->rep;
  if (rep) {
    const dnnl_version_t *dv = dnnl_version();
    char ver[32];
    snprintf(ver, sizeof ver, "%d.%d.%d", dv->major, dv->minor, dv->patch);
    dpt_report_set_software(rep, "backend", be->ops->name);
    dpt_report_set_software(rep, "comm", R > 1 ? o->comm : "none");
    dpt_report_set_software(rep, "wire", o->fp16 ? "fp16" : "fp32");
    if (!strcmp(be->ops->name, "cpu")) {
      char cpu[320];
      dpt_report_set_library(rep, "onednn", ver);
      dpt_report_set_software(rep, "cpu", dpt_cpu_impl_machine(cpu, sizeof cpu)); /* figures name their machine */
    }
    if (R > 1) dpt_report_set_mpi_version(rep);
    dpt_report_set_config(rep, "model", json_string(r->model_desc));
    dpt_report_set_config(rep, "parameters", json_integer((json_int_t)r->np));
    dpt_report_set_config(rep, "gmac_per_image", json_real(r->model.macs / 1e9));
    dpt_report_set_config(rep, "dataset", json_string(r->train.name));
    dpt_report_set_config(rep, "train_images", json_integer(r->train.n));
    dpt_report_set_config(rep, "val_images", json_integer(r->val.n));
    dpt_report_set_config(rep, "skipped_records", json_integer(r->train.skipped));
    dpt_report_set_config(rep, "batch_per_rank", json_integer((json_int_t)o->batch * o->accum));
    dpt_report_set_config(rep, "accumulate", json_integer(o->accum));
    dpt_report_set_config(rep, "threads_per_rank", json_integer(r->threads));
    dpt_report_set_config(rep, "steps", json_integer(r->total_steps));
    dpt_report_set_config(rep, "epochs", json_real(r->total_epochs));
    dpt_report_set_config(rep, "schedule", json_string(o->schedule));
    dpt_report_set_config(rep, "peak_lr", json_real(r->sch.peak_lr));
    dpt_report_set_config(rep, "warmup_epochs", json_real(o->warmup_epochs));
    dpt_report_set_config(rep, "momentum", json_real(o->momentum));
    dpt_report_set_config(rep, "weight_decay", json_real(o->weight_decay));
    dpt_report_set_config(rep, "double_buffering", json_boolean(o->dbuf));
    dpt_report_set_config(rep, "allreduce_buckets", json_integer(r->n_buckets)); /* 0: after backward */
    dpt_report_set_config(rep, "bucket_mb", json_real(o->bucket_mb));
    dpt_report_set_config(rep, "fp16_allreduce", json_boolean(o->fp16));
    dpt_report_set_config(rep, "precision", json_string(be->precision));
    dpt_report_set_config(rep, "backend_device_slabs", json_boolean(!be->host_slabs));
    dpt_report_set_config(rep, "cuda_fuse", json_string(o->fuse ? o->fuse : getenv("DPT_CUDA_FUSE") ? getenv("DPT_CUDA_FUSE")
                                                                                                 : "default (off)"));
    dpt_report_set_config(rep, "cuda_graph", json_boolean(be->graph));
    dpt_report_set_config(rep, "seed", json_integer((json_int_t)o->seed));
    dpt_report_set_allreduce(rep, (uint64_t)r->np * 4, -1);
    struct dpt_err pe = {0};
    if (dpt_report_plan_from_launch(rep, (uint64_t)r->np * 4, o->fp16, &pe) < 0 && r->me == 0)
      fprintf(stderr, "dpt-train: warning: plan not embedded in the report: %s\n", pe.msg);
  }
#endif
  if (r->me == 0) {
    printf("dpt-train: ResNet-50 v1.5 (%s), %zu parameters, %.3f GMAC/image\n", r->model_desc, r->np,
           r->model.macs / 1e9);
    printf("dpt-train: %s %d train / %d val images, %d rank(s) x batch %d x %d thread(s), backend %s %s%s, "
           "%s%s%s, lr %.4g (%s, warm-up %.2g epochs), %ld steps (%.2f epochs)\n",
           r->train.name, r->train.n, r->val.n, R, o->batch, r->threads, be->ops->name, be->precision,
           be->host_slabs ? "" : " (device slabs)", R > 1 ? "comm " : "single rank",
           R > 1 ? o->comm : "", o->dbuf ? ", double buffering" : "", r->sch.peak_lr, o->schedule,
           o->warmup_epochs, r->total_steps, r->total_epochs);
    printf("dpt-train: input: %s\n", r->input_desc);
    if (gpu_line[0]) printf("dpt-train: cuda: %s\n", gpu_line);
    const char *notes = be->ops->notes ? be->ops->notes(be) : "";
    for (const char *p = notes; p && *p;) { /* what the backend decided at start-up */
      const char *nl = strchr(p, '\n');
      int len = nl ? (int)(nl - p) : (int)strlen(p);
      printf("dpt-train: %.*s\n", len, p);
      p += len + !!nl;
    }
    if (R > 1 && r->n_buckets)
      printf("dpt-train: gradients all-reduced in %d bucket(s) of %g MiB during backward%s\n", r->n_buckets,
             o->bucket_mb > 0 ? o->bucket_mb : (double)r->np * 4 / 1048576.0,
             r->graph_comm ? " (enqueued on the nccl stream behind each bucket's event, inside the captured step)"
             : r->dev_comm ? " (each behind its CUDA event on the nccl stream)" : "");
    else if (R > 1)
      printf("dpt-train: gradients all-reduced after backward (no buckets: %s)\n", r->no_buckets);
    fflush(stdout);
  }
}

/* The next batch of loader L: host fp32 NCHW (dpt_loader_next), or with dev_input the
 * backend's input format in device memory (dpt_loader_next_device: the loader's release
 * event for it is recorded on the backend's stream at the next call, behind the backward
 * that last reads it).  Returns the real images in it, or -1 with err set. */
static int batch_next(struct run *r, struct dpt_loader *L, const void **x, const int **lab, double *wait_s,
                      struct dpt_err *err)
{
  const float *xh = NULL;
  void *xd = NULL;
  int n = r->dev_input ? dpt_loader_next_device(L, &xd, lab, r->in_fmt.stream, wait_s)
                       : dpt_loader_next(L, &xh, lab, wait_s);
  if (n < 0) {
    *err = *dpt_loader_err(L);
    return -1;
  }
  *x = r->dev_input ? (const void *)xd : (const void *)xh;
  return n;
}

/* Forward of a batch from batch_next (output left on the backend for loss()): from the
 * device batch in place, or uploaded from the host. */
static int batch_forward(struct run *r, const void *x, int training, struct dpt_err *err)
{
  return r->dev_input ? r->be->ops->forward_device(r->be, x, NULL, training, NULL, err)
                      : dpt_backend_forward(r->be, x, training, NULL, err);
}

static int announce(struct run *r, int what, struct dpt_err *err);

/* Validation: the loss and its counts on the backend, read once at the end (one host
 * wait per pass); the training totals were read by the log line of the epoch's last
 * step, which comes first. */
static int validate(struct run *r, struct val_result *out, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  struct dpt_loader *vl = r->vl;
  float acc[4] = {0, 0, 0, 0}; /* loss sum, top1, top5, images */
  struct dpt_loss_totals t;
  const void *x;
  const int *lab;
  int n, rc;
  dpt_loader_start(vl, 0, 0);
  for (int st = 0; st < dpt_loader_steps(vl); st++) {
    if ((n = batch_next(r, vl, &x, &lab, NULL, err)) < 0) return err->code;
    if ((rc = announce(r, DPT_CAP_VALIDATION, err)) || (rc = batch_forward(r, x, 0, err)) ||
        (rc = be->ops->loss(be, lab, 0, 0, err)))
      return rc;
    acc[3] += (float)n;
  }
  if ((rc = be->ops->loss_totals(be, &t, err))) return rc;
  acc[0] = (float)t.loss_sum;
  acc[1] = (float)t.top1;
  acc[2] = (float)t.top5;
  if ((rc = ranks_allreduce(&r->rk, acc, 4, 0, 0, err))) return rc;
  out->n = (long)acc[3];
  out->loss = acc[3] > 0 ? acc[0] / acc[3] : 0;
  out->top1 = acc[3] > 0 ? acc[1] / acc[3] : 0;
  out->top5 = acc[3] > 0 ? acc[2] / acc[3] : 0;
  return 0;
}

/* Micro-batch j's forward, loss and backward: all on the backend, no host wait.  With
 * --accumulate K the micro-batches' gradients are summed on the host (backward
 * overwrites the gradient slab). */
static int micro_batch(struct run *r, int j, double *t_bwd_end, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_backend *be = r->be;
  const void *x;
  const int *lab;
  int rc;
  if (batch_next(r, r->tls[j], &x, &lab, &r->tm.data, err) < 0) return err->code; /* a record failed to decode */
  double t1 = now();
  if ((rc = batch_forward(r, x, 1, err)) ||
      (rc = be->ops->loss(be, lab, (float)o->smoothing, 1.0f / (o->batch * o->accum), err)))
    return rc;
  double t2 = now();
  if ((rc = dpt_backend_backward(be, NULL, NULL, err))) return rc;
  *t_bwd_end = now();
  if (o->accum > 1) { /* sum the micro-batches on the host */
    float *g = r->hg;
    size_t np = r->np;
    if ((rc = be->ops->sync(be, err)) || (rc = slab_get(be, DPT_SLAB_GRADS, g, err))) return rc;
    if (j == 0) memcpy(r->gacc, g, np * sizeof(float));
    else
#pragma omp parallel for schedule(static)
      for (size_t i = 0; i < np; i++) r->gacc[i] += g[i];
    if (j == o->accum - 1) {
      memcpy(g, r->gacc, np * sizeof(float));
      if ((rc = slab_put(be, DPT_SLAB_GRADS, g, err))) return rc;
    }
  }
  r->tm.fwd += t2 - t1;
  r->tm.bwd += now() - t2;
  return 0;
}

/* The gradient average and the update, double-buffered: wait for the previous step's
 * all-reduce, apply it (with its learning rate), start this step's. */
static int update_double_buffered(struct run *r, double t3, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  int rc;
  if ((rc = grad_wait(&r->rk, &r->fl, err))) return rc;
  /* nothing in flight here: the flag's all-reduce cannot interleave with the gradient's */
  if ((rc = preempt_agree(&r->rk, &r->psig, err))) return rc;
  double t4 = now();
  r->tm.ar_exposed += t4 - t3;
  float lr_prev = (float)dpt_schedule_lr(&r->sch, (double)(r->gstep - 1) / r->spe);
  if (be->pending) { /* the pending slab is the backend's (cpu: host; cuda with nccl: device) */
    void *ready;
    if (r->have_pending && (rc = apply_step(be, r->mixed, be->pending, lr_prev, err))) return rc;
    /* pending <- this step's gradient, behind the update that read it; nccl waits for the copy */
    if ((rc = be->ops->stash_grads(be, &ready, err)) ||
        (rc = grad_start(&r->rk, &r->fl, be->pending, r->np, r->o.fp16, ready, err)))
      return rc;
  } else { /* device slabs, host communicator: through the host */
    /* this step's gradient to the host first: a device sgd_step(pending) overwrites the slab */
    if ((rc = be->ops->sync(be, err)) || (rc = slab_get(be, DPT_SLAB_GRADS, r->hg, err))) return rc;
    if (r->have_pending && (rc = apply_step(be, r->mixed, r->pending, lr_prev, err))) return rc;
    memcpy(r->pending, r->hg, r->np * sizeof(float));
    if ((rc = grad_start(&r->rk, &r->fl, r->pending, r->np, r->o.fp16, NULL, err))) return rc;
  }
  r->have_pending = 1;
  r->tm.update += now() - t4;
  return 0;
}

/* The gradient average (buckets queued during backward, or one all-reduce now) and the
 * update with this step's learning rate. */
static int update(struct run *r, double t3, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  int rc;
  if ((rc = preempt_agree(&r->rk, &r->psig, err))) return rc;
  if (r->n_buckets && r->graph_comm) { /* enqueued on the device: the update waits there for them */
#ifdef DPT_TRAIN_HAVE_COMM
    void *done;
    if ((rc = dpt_comm_enqueue_join(r->rk.comm, &done, err)) || (rc = be->ops->join(be, done, err))) return rc;
#endif
  } else if (r->n_buckets) { /* queued bucket by bucket during backward */
    if ((rc = bucket_wait_all(&r->ba, err))) return rc;
  } else if (r->R > 1) { /* one all-reduce after backward: its gradients complete first */
    if ((rc = be->ops->sync(be, err))) return rc;
    if (r->dev_comm) { /* nccl: the gradient slab itself */
      if ((rc = grad_allreduce(&r->rk, be->grads, r->np, r->o.fp16, err))) return rc;
    } else if ((rc = slab_get(be, DPT_SLAB_GRADS, r->hg, err)) ||
               (rc = grad_allreduce(&r->rk, r->hg, r->np, r->o.fp16, err)) ||
               (rc = slab_put(be, DPT_SLAB_GRADS, r->hg, err))) {
      return rc;
    }
  } /* one rank: the update follows backward on the backend's own stream, no wait */
  double t4 = now();
  r->tm.ar_exposed += t4 - t3;
  if ((rc = apply_step(be, r->mixed, NULL, (float)dpt_schedule_lr(&r->sch, (double)r->gstep / r->spe), err)))
    return rc;
  r->tm.update += now() - t4;
  return 0;
}

/* Tell the backend what comes (a training step, a micro-batch, a validation batch) and the
 * step's learning rate: a backend with --cuda-graph captures it once and replays it
 * (dpt_cuda_capture.h); the others ignore it. */
static int announce(struct run *r, int what, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  struct dpt_cap_step s;
  if (!be->ops->step_begin || !be->graph) return 0;
  int log_step = what != DPT_CAP_VALIDATION && ((r->gstep + 1) % r->o.log_every == 0 || r->gstep + 1 == r->total_steps ||
                                                (r->gstep + 1) % r->spe == 0);
  dpt_cuda_capture_step_of(&r->cap, what, log_step, &s);
  return be->ops->step_begin(be, &s, (float)dpt_schedule_lr(&r->sch, (double)r->gstep / r->spe), err);
}

/* One training step, llm.c's list: per micro-batch the batch, forward, loss and
 * backward; then the gradient average and the update. */
static int train_step(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct times tm0 = r->tm;
  double t_step0 = now(), t3 = t_step0;
  int rc;
  enter_phase("train", r->gstep, err);
  for (int j = 0; j < o->accum; j++)
    if ((rc = announce(r, o->accum > 1 ? DPT_CAP_MICRO_BATCH : DPT_CAP_TRAIN_STEP, err)) ||
        (rc = micro_batch(r, j, &t3, err)))
      return rc;
  if ((rc = enter_phase("allreduce", r->gstep, err))) return rc;
  if ((rc = o->dbuf ? update_double_buffered(r, t3, err) : update(r, t3, err))) return rc;
  r->gstep++;
  r->steps_run++;
  r->tm.steps += now() - t_step0;
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct times *tm = &r->tm;
    struct dpt_report_step rs = {.data_wait = tm->data - tm0.data, .forward = tm->fwd - tm0.fwd,
                                 .backward = tm->bwd - tm0.bwd, .update = tm->update - tm0.update,
                                 .allreduce_exposed = tm->ar_exposed - tm0.ar_exposed,
                                 .allreduce = tm->ar_exposed - tm0.ar_exposed, .step = tm->steps - tm0.steps,
                                 .images = (long)o->batch * o->accum};
    if (o->dbuf) rs.allreduce = 0; /* overlapped: only the exposed part is measured */
    if ((rc = dpt_report_add_step(r->rep, &rs, err))) return rc;
  }
#else
  (void)tm0;
#endif
  r->ep_n += (long)o->batch * o->accum;
  r->run_n += (long)o->batch * o->accum;
  if (o->dbuf && r->gstep == r->total_steps) { /* the last averaged gradient still has to be applied */
    if ((rc = grad_wait(&r->rk, &r->fl, err)) ||
        (rc = apply_step(r->be, r->mixed, r->be->pending ? r->be->pending : r->pending,
                         (float)dpt_schedule_lr(&r->sch, (double)(r->gstep - 1) / r->spe), err)))
      return rc;
    r->have_pending = 0;
  }
  return 0;
}

/* A log line: every rank reads its loss totals (the one host wait of the interval);
 * rank 0 prints the interval's loss, accuracy and speed. */
static int log_progress(struct run *r, int epoch, int sie, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_loss_totals lt;
  int rc;
  double tw = now();
  if ((rc = r->be->ops->loss_totals(r->be, &lt, err))) return rc;
  r->tm.steps += now() - tw; /* a device backend finishes the interval's steps here: their time */
  r->ep_loss += lt.loss_sum;
  r->ep_correct += lt.top1;
  r->n_logs++;
  if (r->me == 0) {
    double t = now(), ips = (double)(r->gstep - r->last_log_step) * o->batch * o->accum * r->R /
                            (r->tm.steps > r->steps_last ? r->tm.steps - r->steps_last : 1e-9);
    char eta[32];
    fmt_eta((r->total_steps - r->gstep) * (t - r->t_train0) / r->steps_run, eta, sizeof eta);
    printf("epoch %d/%d step %d/%d loss %.4f acc %.2f%% lr %.4g %.0f img/s ETA %s\n", epoch + 1,
           (int)ceil(r->total_epochs), sie + 1, r->spe, lt.loss_sum / r->run_n, 100.0 * lt.top1 / r->run_n,
           dpt_schedule_lr(&r->sch, (double)r->gstep / r->spe), ips, eta);
    fflush(stdout);
    r->steps_last = r->tm.steps;
  }
  r->last_log_step = r->gstep;
  r->run_n = 0;
  return 0;
}

/* A checkpoint (rank 0 writes it): parameters, BN state, momentum, the pending
 * gradient once its all-reduce is complete, the loss scaler. */
static int checkpoint_save(struct run *r, struct dpt_err *err)
{
  struct dpt_backend *be = r->be;
  struct dpt_ckpt_meta *cm = &r->cm;
  char path[4300];
  int rc;
  if ((rc = grad_wait(&r->rk, &r->fl, err))) return rc; /* pending must be complete on disk */
  if (r->me) return 0;
  cm->global_step = (uint64_t)r->gstep;
  cm->epoch = (int)(r->gstep / r->spe);
  cm->step_in_epoch = (int)(r->gstep % r->spe);
  if (r->mixed) { /* mixed precision: the loss scaler resumes where it is */
    if ((rc = be->ops->scaler_get(be, &r->scaler, err))) return rc;
    cm->loss_scale = r->scaler.scale;
    cm->scale_good_steps = r->scaler.good_steps;
    cm->scale_skipped = r->scaler.skipped;
  }
  dpt_ckpt_path(r->o.ckpt_dir, (uint64_t)r->gstep, path, sizeof path);
  if ((rc = slab_get(be, DPT_SLAB_PARAMS, r->hp, err)) || (rc = slab_get(be, DPT_SLAB_STATE, r->hs, err)) ||
      (rc = slab_get(be, DPT_SLAB_VELOCITY, r->hv, err)) ||
      (be->pending && (rc = slab_get(be, DPT_SLAB_PENDING, r->pending, err))) ||
      (rc = dpt_ckpt_save(path, cm, r->hp, r->hs, r->hv, r->pending, err)))
    return rc;
  snprintf(r->ckpt_last, sizeof r->ckpt_last, "%s", path);
  dpt_ckpt_prune(r->o.ckpt_dir, 2);
  return 0;
}

/* The end of an epoch: validation, its line, the learning curve (report, and next to
 * the checkpoints), the epoch's training totals reset. */
static int validate_epoch(struct run *r, int epoch, struct dpt_err *err)
{
  struct val_result *vr = &r->vr;
  double ep_loss = r->ep_n ? r->ep_loss / r->ep_n : NAN, ep_top1 = r->ep_n ? (double)r->ep_correct / r->ep_n : NAN;
  double ep = (double)r->gstep / r->spe, lr = dpt_schedule_lr(&r->sch, ep);
  int rc;
  if ((rc = enter_phase("validation", r->gstep, err))) return rc;
  double tv = now();
  if ((rc = validate(r, vr, err))) return rc;
  r->tm.val += now() - tv;
  if (r->me == 0) {
    printf("epoch %d validation: top-1 %.2f%% top-5 %.2f%% loss %.4f (%ld images); train loss %.4f "
           "top-1 %.2f%% (rank 0) [%.1f s elapsed]\n", epoch + 1, 100 * vr->top1, 100 * vr->top5, vr->loss,
           vr->n, r->ep_n ? ep_loss : 0.0, r->ep_n ? 100.0 * ep_top1 : 0.0, now() - r->t_start);
    fflush(stdout);
    json_array_append_new(r->curve, json_pack("{s:f,s:I,s:f,s:f,s:f,s:f}", "epoch", ep, "step",
                                              (json_int_t)r->gstep, "top1", vr->top1, "top5", vr->top5,
                                              "loss", vr->loss, "elapsed_s", now() - r->t_start));
  }
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct dpt_report_epoch re;
    dpt_report_epoch_init(&re);
    re.epoch = ep;
    re.step = r->gstep;
    re.train_loss = ep_loss;
    re.train_top1 = ep_top1;
    re.val_loss = vr->loss;
    re.val_top1 = vr->top1;
    re.val_top5 = vr->top5;
    re.lr = lr;
    if ((rc = dpt_report_add_epoch(r->rep, &re, err))) return rc;
  }
#endif
  if (r->me == 0) {
    struct dpt_ckpt_point pt = {ep, r->gstep, ep_loss, ep_top1, vr->loss, vr->top1, vr->top5, lr,
                                now() - r->t_start};
    curve_keep(&r->cl, r->o.ckpt_dir, &pt);
  }
  r->ep_loss = 0;
  r->ep_correct = r->ep_n = 0;
  return 0;
}

/* ---- --profile-steps: the kernel breakdown of N steps (rank 0, CUPTI: dpt_cupti.h, dpt_kprof.h) --
 * The N steps before the run's last one (steady state: after the warm-up, the algorithm search and
 * the graphs' capture), each an external correlation id: every kernel, copy and set their calls
 * start, a graph's replay included.  Then the breakdown (kernels per step, time per class, busy /
 * idle between kernels, medians) as JSON and the records as TSV. */
static void profile_paths(struct run *r)
{
  struct opts *o = &r->o;
  if (o->profile_out) {
    snprintf(r->prof_path, sizeof r->prof_path, "%s", o->profile_out);
    return;
  }
  r->prof_path[0] = '\0';
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct dpt_err pe = {0};
    char rp[4096];
    if (dpt_report_path(r->rep, o->report, rp, sizeof rp, &pe) > 0) {
      size_t n = strlen(rp);
      if (n > 5 && !strcmp(rp + n - 5, ".json")) rp[n - 5] = '\0';
      snprintf(r->prof_path, sizeof r->prof_path, "%s.kernels.json", rp);
    }
  }
#endif
  if (!r->prof_path[0]) snprintf(r->prof_path, sizeof r->prof_path, "dpt-kernels-%d.json", (int)getpid());
}

static int profile_begin(struct run *r, struct dpt_err *err)
{
  if (r->prof_first < 0 || r->me || r->gstep < r->prof_first || r->gstep >= r->prof_first + r->o.profile_steps)
    return 0;
#ifdef DPT_HAVE_CUPTI
  int rc;
  if (!r->prof) {
    struct dpt_cupti *rec;
    if ((rc = r->be->ops->sync(r->be, err))) return rc; /* the steps before are not in the first one */
    if ((rc = dpt_cupti_start(&rec, err))) return dpt_err_prefix(err, "--profile-steps");
    r->prof = rec;
  }
  return dpt_cupti_step_begin(r->prof, (int)(r->gstep - r->prof_first), err);
#else
  (void)err;
  return 0;
#endif
}

static int profile_end(struct run *r, struct dpt_err *err)
{
#ifdef DPT_HAVE_CUPTI
  if (!r->prof) return 0;
  int rc, last = r->gstep == r->prof_first + r->o.profile_steps; /* train_step counted it */
  if ((rc = dpt_cupti_step_end(r->prof, err))) return rc;
  if (!last) return 0;
  if ((rc = r->be->ops->sync(r->be, err))) return rc; /* every recorded kernel has run */
  struct dpt_krec *recs = NULL;
  size_t n = 0, dropped = 0;
  struct dpt_kclasses kc;
  struct dpt_kbreakdown b;
  struct dpt_cupti *rec = r->prof;
  r->prof = NULL;
  if ((rc = dpt_cupti_stop(rec, &recs, &n, &dropped, err))) return rc;
  int have_kc = !(rc = dpt_kclasses_builtin(&kc, err));
  if (!rc && !(rc = dpt_kprof_breakdown(&kc, recs, n, &b, err))) {
    char tsv[4400], label[160];
    snprintf(tsv, sizeof tsv, "%s", r->prof_path);
    size_t len = strlen(tsv);
    if (len > 5 && !strcmp(tsv + len - 5, ".json")) tsv[len - 5] = '\0';
    strncat(tsv, ".tsv", sizeof tsv - strlen(tsv) - 1);
    snprintf(label, sizeof label, "dpt-train %s %s batch %d, %s", r->be->ops->name, r->be->precision, r->o.batch,
             r->be->ops->notes && strstr(r->be->ops->notes(r->be), "fused step:") ? "fused" : "unfused");
    if (r->be->graph) strncat(label, ", CUDA graphs", sizeof label - strlen(label) - 1);
    FILE *fj = fopen(r->prof_path, "w"), *ft = fj ? fopen(tsv, "w") : NULL;
    if (!fj || !ft)
      rc = dpt_err_set(err, DPT_E_RUNTIME, "--profile-steps: cannot write %s: %s", !fj ? r->prof_path : tsv,
                       strerror(errno));
    if (!rc) rc = dpt_kprof_write_json(&b, label, fj, err);
    if (!rc && dpt_kprof_write_records(recs, n, ft))
      rc = dpt_err_set(err, DPT_E_RUNTIME, "--profile-steps: writing %s failed: %s", tsv, strerror(errno));
    if (fj && fclose(fj) && !rc) rc = dpt_err_set(err, DPT_E_RUNTIME, "--profile-steps: closing %s: %s", r->prof_path, strerror(errno));
    if (ft && fclose(ft) && !rc) rc = dpt_err_set(err, DPT_E_RUNTIME, "--profile-steps: closing %s: %s", tsv, strerror(errno));
    const struct dpt_kstep *md = &b.median;
    if (!rc)
      printf("dpt-train: kernel breakdown of %d step(s) (median): %.0f kernels per step, %.2f ms on the GPU of which "
             "%.1f%% idle between kernels%s; %s and %s\n", b.n_steps, md->kernels, md->span_ns / 1e6,
             md->span_ns > 0 ? 100.0 * md->idle_ns / md->span_ns : 0.0,
             dropped ? " (CUPTI dropped records: undercounted)" : "", r->prof_path, tsv);
    dpt_kprof_free(&b);
  }
  if (have_kc) dpt_kclasses_free(&kc);
  dpt_cupti_free(rec, recs, n);
  fflush(stdout);
  return rc;
#else
  (void)r, (void)err;
  return 0;
#endif
}

/* The step loop: epochs of steps; a log line every --log-every steps and at an
 * epoch's end; checkpoints; validation at an epoch's end; a stop after
 * --stop-after steps or an agreed preemption signal. */
static int train_loop(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  int rc;
  r->t_train0 = now();
  r->steps_last = r->tm.steps;
  r->last_log_step = r->gstep;
  while (r->gstep < r->total_steps && !(o->stop_after && r->steps_run == o->stop_after) && !r->psig) {
    int epoch = (int)(r->gstep / r->spe), sie = (int)(r->gstep % r->spe);
    for (int j = 0; j < o->accum; j++) dpt_loader_start(r->tls[j], epoch, sie);
    for (; sie < r->spe && r->gstep < r->total_steps; sie++) {
      long waits0 = r->be->ops->host_waits(r->be);
      if ((rc = profile_begin(r, err)) || (rc = train_step(r, err)) || (rc = profile_end(r, err))) return rc;
      int end_epoch = sie == r->spe - 1 || r->gstep == r->total_steps;
      if ((r->gstep % o->log_every == 0 || end_epoch) && (rc = log_progress(r, epoch, sie, err))) return rc;
      r->waits_train += r->be->ops->host_waits(r->be) - waits0;
      int stopping = (o->stop_after && r->steps_run == o->stop_after) || r->psig;
      int do_ckpt = o->ckpt_dir && (r->gstep % r->ckpt_every == 0 || r->gstep == r->total_steps || stopping);
      if (do_ckpt || (end_epoch && o->val)) {
        if ((rc = enter_phase(do_ckpt ? "checkpoint" : "validation", r->gstep, err))) return rc;
        /* BN running statistics are per rank during training: average them */
        if ((rc = state_average(&r->rk, r->be, r->hs, err))) return rc;
      }
      if (do_ckpt && (rc = checkpoint_save(r, err))) return rc;
      if (end_epoch && o->val && (rc = validate_epoch(r, epoch, err))) return rc;
      if (stopping) break;
    }
  }
  r->tm.total = now() - r->t_train0;
  return 0;
}

/* The end: parameter checksum across ranks, the final lines, decoder and skip counts,
 * the preemption verdict (*status: DPT_TRAIN_EXIT_PREEMPTED, or 1 without a checkpoint
 * directory), the report's results. */
static int run_finish(struct run *r, int *status, struct dpt_err *err)
{
  struct opts *o = &r->o;
  struct dpt_backend *be = r->be;
  int rc, R = r->R, me = r->me;
  enter_phase("finish", r->gstep, err);
  { /* parameters must agree across ranks: checksum them */
    double sum = 0;
    if ((rc = slab_get(be, DPT_SLAB_PARAMS, r->hp, err))) return rc;
    for (size_t i = 0; i < r->np; i++) sum += r->hp[i] * (double)((i % 7) + 1);
    float s = (float)sum, smin = s;
    if (R > 1) {
      float v[2] = {s, -s};
      if ((rc = ranks_allreduce(&r->rk, v, 2, 1, 0, err))) return rc;
      smin = v[0];
    }
    /* img/s as the report counts it: every rank's images over the slowest rank's training steps */
    double tsteps = r->tm.steps;
    if (R > 1) {
      float *ts = calloc((size_t)R, sizeof *ts);
      if (!ts) return dpt_err_set(err, DPT_E_NOMEM, "out of memory for %d step times", R);
      ts[me] = (float)r->tm.steps;
      if ((rc = ranks_allreduce(&r->rk, ts, (size_t)R, 0, 0, err))) {
        free(ts);
        return rc;
      }
      for (int q = 0; q < R; q++)
        if (ts[q] > tsteps) tsteps = ts[q];
      free(ts);
    }
    if (me == 0) printf("dpt-train: done: %ld steps in %.1f s (%.1f s of training steps), %.1f img/s total; "
                        "parameter checksum %.6e%s\n", r->steps_run, r->tm.total, tsteps,
                        tsteps > 0 ? r->steps_run * (double)o->batch * o->accum * R / tsteps : 0.0, sum,
                        R > 1 && fabsf(smin - s) > 1e-3f * fabsf(s) ? " (RANKS DISAGREE)" : "");
    if (me == 0 && !be->host_slabs)
      printf("dpt-train: backend %s memory (rank 0): %.1f MB allocated, peak %.1f MB\n", be->ops->name,
             be->ops->memory_bytes(be) / 1e6, be->ops->peak_bytes(be) / 1e6);
    /* what the step loop waited for (tests hold it to one wait per log interval) */
    if (me == 0)
      printf("dpt-train: host waits (rank 0): %ld in %ld training step(s) and their %ld log line(s); %ld in all\n",
             r->waits_train, r->steps_run, r->n_logs, be->ops->host_waits(be));
    if (r->mixed && (rc = be->ops->scaler_get(be, &r->scaler, err))) return rc;
    if (me == 0 && r->mixed)
      printf("dpt-train: mixed precision: %ld step(s) skipped on gradient overflow, loss scale now %g\n",
             r->scaler.skipped, (double)r->scaler.scale);
  }
  if (r->train.files && me == 0) { /* imagenet: which decoders the training loader used (rank 0) */
    struct dpt_loader_stats ls;
    dpt_loader_stats(r->tls[0], &ls);
    printf("dpt-train: training loader (%s): %ld images decoded (prefetched ones included): %ld by nvJPEG's "
           "hardware decoder, %ld by its hybrid decoder, %ld by libturbojpeg (%ld of them refused by nvJPEG); "
           "%ld GPU batch(es) copied back to the host\n", dpt_loader_decoder(r->tls[0]), ls.images, ls.gpu_hw,
           ls.gpu_hybrid, ls.cpu, ls.gpu_refused, ls.host_copies);
  }
  if (r->train.files) { /* imagenet: records that failed to decode and were skipped (--skip-bad), all ranks */
    float sk[2] = {(float)(dpt_data_skipped(&r->train) - r->train.skipped),
                   o->val ? (float)(dpt_data_skipped(&r->val) - r->val.skipped) : 0};
    if ((rc = ranks_allreduce(&r->rk, sk, 2, 0, 0, err))) return rc;
    if (me == 0 && (sk[0] > 0 || sk[1] > 0))
      fprintf(stderr, "dpt-train: skipped %.0f training and %.0f validation images that failed to decode "
              "(--skip-bad; counted once per file and rank)\n", sk[0], sk[1]);
#ifdef DPT_TRAIN_HAVE_COMM
    if (r->rep) {
      dpt_report_set_config(r->rep, "skipped_records", json_integer(r->train.skipped + (json_int_t)sk[0]));
      dpt_report_set_config(r->rep, "skipped_val_images", json_integer((json_int_t)sk[1] + r->val.skipped));
    }
#endif
  }
  if (r->psig && r->gstep == r->total_steps) { /* the signal came during the last step: nothing left to resume */
    if (me == 0) printf("dpt-train: %s received during the last step: training is complete\n",
                        r->psig == SIGUSR1 ? "SIGUSR1" : "SIGTERM");
  } else if (r->psig) {
    const char *sn = r->psig == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
    if (o->ckpt_dir) {
      if (me == 0)
        printf("dpt-train: preempted by %s at step %ld; checkpoint %s; resume with --resume auto\n", sn, r->gstep,
               r->ckpt_last);
      *status = DPT_TRAIN_EXIT_PREEMPTED;
    } else {
      if (me == 0)
        fprintf(stderr, "dpt-train: preempted by %s at step %ld, but no --checkpoint-dir was given, so no "
                "checkpoint was written and this run's %ld steps are lost; give --checkpoint-dir DIR to "
                "make the job resumable\n", sn, r->gstep, r->steps_run);
      *status = 1;
    }
    fflush(stdout);
  }
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double ips = r->steps_run * (double)o->batch * o->accum / (r->tm.steps > 0 ? r->tm.steps : 1); /* over its steps */
    dpt_report_set_result(r->rep, "train", json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:I,s:o}",
        "steps_run", (json_int_t)r->steps_run, "seconds", r->tm.total, "validation_seconds", r->tm.val,
        "images_per_s_rank0", ips, "final_top1", r->vr.top1, "final_top5", r->vr.top5,
        "peak_rss_bytes_rank0", (json_int_t)ru.ru_maxrss * 1024, "accuracy_curve", r->curve));
    r->curve = NULL;
    /* the backend's memory (cuda: device bytes, peak including the algorithm search) */
    json_t *mem = json_pack("{s:s,s:b,s:I,s:I}", "backend", be->ops->name, "device", !be->host_slabs,
                            "allocated_bytes_rank0", (json_int_t)be->ops->memory_bytes(be),
                            "peak_bytes_rank0", (json_int_t)be->ops->peak_bytes(be));
    if (mem && r->mixed)
      json_object_update_new(mem, json_pack("{s:f,s:I}", "final_loss_scale", (double)r->scaler.scale,
                                            "skipped_steps", (json_int_t)r->scaler.skipped));
    dpt_report_set_result(r->rep, "backend_memory", mem);
  }
#endif
  return 0;
}

/* The report written (rank 0 gathers), then everything freed: the communicators
 * first (their worker finishes what is queued: a failed step may leave gradient
 * buckets or the pending all-reduce in flight), the backend's host buffers before
 * the backend.  Returns the exit status. */
static int run_close(struct run *r, int status, const struct dpt_err *err)
{
#ifdef DPT_TRAIN_HAVE_COMM
  if (r->rep) {
    struct dpt_err re = {0};
    MPI_Comm mc = r->rk.comm ? dpt_comm_mpi(r->rk.comm) : MPI_COMM_NULL;
    struct dpt_report_gather g = {dpt_report_gather_mpi, &mc};
    char path[4096];
    if (status && err->code) dpt_report_set_error(r->rep, err);
    dpt_report_set_exit_status(r->rep, status);
    if (dpt_report_finish(r->rep, r->R > 1 ? &g : NULL, r->o.report, path, &re) < 0) {
      fprintf(stderr, "dpt-train: rank %d: report: %s\n", r->rk.rank, re.msg);
      if (!status) status = dpt_err_exit_status(&re);
    } else if (r->me == 0) {
      printf("dpt-train: report %s\n", path);
    }
    dpt_report_destroy(r->rep);
  }
#else
  (void)err;
#endif
#ifdef DPT_HAVE_CUPTI
  if (r->prof) { /* stopped in the middle of the recorded steps: the recorder is given back */
    struct dpt_krec *recs = NULL;
    size_t n = 0, dropped = 0;
    struct dpt_err pe = {0};
    if (!dpt_cupti_stop(r->prof, &recs, &n, &dropped, &pe)) dpt_cupti_free(r->prof, recs, n);
    r->prof = NULL;
  }
#endif
  ranks_fini(&r->rk);
  json_decref(r->curve);
  free(r->cl.p);
#ifdef DPT_TRAIN_HAVE_COMM
  free(r->ba.req);
#endif
  free(r->buckets);
  if (r->dev_input && r->be) { /* the backend reads the loaders' device batches in place: done first */
    struct dpt_err se = {0};
    r->be->ops->sync(r->be, &se);
  }
  for (int j = 0; j < 64; j++) dpt_loader_destroy(r->tls[j]);
  dpt_loader_destroy(r->vl);
  if (r->be) {
    dpt_backend_host_free(r->be, r->mirrors);
    dpt_backend_host_free(r->be, r->pending);
  }
  dpt_backend_destroy(r->be);
  dpt_model_free(&r->model);
  dpt_data_free(&r->train);
  dpt_data_free(&r->val);
  free(r->mask), free(r->gacc);
  return status;
}

int main(int argc, char **argv)
{
  static struct run run; /* zeroed; large (path buffers, 64 loaders): not on the stack */
  struct run *r = &run;
  struct dpt_err err = {0};
  int rc = 0, status = 0;
  r->rk.size = 1;
  r->R = 1;
  r->ba.rk = &r->rk;
  r->t_start = now();
  defaults(&r->o);
  if ((status = parse(argc, argv, &r->o))) return status;
#ifdef DPT_TRAIN_HAVE_COMM
  /* a bad --baseline is refused now, not after the run (rank 0 reads it at the end) */
  if (r->o.baseline && dpt_report_check_baseline(r->o.baseline, &err)) return bad("%s", err.msg);
#endif
  r->curve = json_array();
  if ((rc = run_start(r, &argc, &argv, &err)) || (rc = run_model(r, &err)) || (rc = run_backend(r, &err)) ||
      (rc = run_loaders(r, &err)) || (rc = run_schedule(r, &err)) || (rc = run_buffers(r, &err)) ||
      (rc = run_resume(r, &err)))
    goto fail;
  run_describe(r);
  if ((rc = train_loop(r, &err)) || (rc = run_finish(r, &status, &err))) goto fail;
  return run_close(r, status, &err);
fail:
  fprintf(stderr, "dpt-train: rank %d: %s\n", r->rk.rank, err.msg);
#ifdef DPT_TRAIN_HAVE_COMM
  dpt_watchdog_write_error("error", err.msg, -1, NULL, NULL);
  dpt_watchdog_announce_failure(); /* the other ranks stop now, naming this one */
#endif
  status = dpt_err_exit_status(&err);
  if (!status) status = 1;
  return run_close(r, status, &err);
}
