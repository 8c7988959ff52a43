/* dpt_train_setup.c — dpt-train: setting up a run: ranks and signals, model, backend, loaders,
 * schedule, buffers, the banner and the configuration in the job report. */
#define _GNU_SOURCE
#include "dpt_train_priv.h"

/* Ranks, signals, fault injection, the job report and its error file. */
int dpt_train_run_start(struct run *r, int *argc, char ***argv, struct dpt_err *err)
{
  int rc;
  if ((rc = dpt_train_ranks_init(&r->rk, argc, argv, &r->o, err))) return rc;
  r->R = r->rk.size;
  r->me = r->rk.rank;
  if ((rc = dpt_train_preempt_install(err))) return rc; /* after MPI_Init: ours is the handler */
  if ((rc = dpt_train_fault_parse(r->me, err))) return rc;
  dpt_train_faults_install();
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
  if (r->o.no_report && r->me == 0) { /* a dpt launcher writes no report for us either */
    struct dpt_err ae = {0};
    dpt_report_announce(NULL, &ae);
  }
  if (r->rep) { /* failures (a watchdog, a fatal signal, an error) also go to <report>.rank<N>.err */
    char rp[4096], ep[4200], host[256] = "?";
    struct dpt_err pe = {0};
    const char *node = getenv("DPT_NODE_NAME") ? getenv("DPT_NODE_NAME") : getenv("SLURMD_NODENAME");
    if (!node) node = gethostname(host, sizeof host - 1) ? "?" : host;
    if (dpt_report_path(r->rep, r->o.report, rp, sizeof rp, &pe) <= 0) rp[0] = '\0';
    /* one name for the whole job: rank 0's report path (the default name and %p
     * carry the pid, which differs on every rank) */
    if ((rc = dpt_train_agree_path(&r->rk, rp, sizeof rp, err))) return rc;
    if (rp[0]) {
      snprintf(ep, sizeof ep, "%s.rank%d.err", rp, r->me);
      unlink(ep); /* a previous run's */
      dpt_watchdog_set_error_file(ep, r->me, node);
    }
  }
#endif
  if ((rc = dpt_train_enter_phase("startup", -1, err))) return rc;
  if (r->o.threads > 0) omp_set_num_threads(r->o.threads);
  r->threads = omp_get_max_threads();
  return 0;
}

/* The data sets and the model. */
int dpt_train_run_model(struct run *r, struct dpt_err *err)
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
  cfg.zero_init_residual = o->zero_init_residual;
  if ((rc = dpt_model_resnet50(&r->model, &cfg, err))) return rc;
  snprintf(r->model_desc, sizeof r->model_desc, "resnet50-v1.5 w%g %s %dx%dx%d k%d", cfg.width,
           cfg.small_stem ? "small-stem" : "imagenet-stem", cfg.in_channels, r->S, r->S, r->K);
  return 0;
}

/* The backend (--backend auto: cuda only when a device works on every rank), the
 * communicator for its gradients, mixed precision's requirements. */
int dpt_train_run_backend(struct run *r, struct dpt_err *err)
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
  bo.deterministic = o->deterministic;
  if (!strcmp(o->bn_eval, "last-batch")) bo.bn_momentum = 1.0f; /* running stats = the last batch's */
  const char *bname = o->backend;
  if (!strcmp(bname, "auto")) { /* cuda only when a device works, on every rank */
    char why[320] = "";
    float works = !strcmp(dpt_backend_auto(why, sizeof why), "cuda");
    if ((rc = dpt_train_ranks_allreduce(&r->rk, &works, 1, 0, 0, err))) return rc;
    bname = works == (float)r->R ? "cuda" : "cpu";
    if (r->me == 0 && !strcmp(bname, "cpu") && strstr(dpt_backend_available(), "cuda"))
      fprintf(stderr, "dpt-train: no usable GPU (%s): training on CPU\n",
              why[0] ? why : "another rank has no working CUDA device");
  }
  if ((rc = dpt_backend_create(bname, &r->model, &bo, &r->be, err))) return rc;
  struct dpt_backend *be = r->be;
  r->np = r->model.n_params;
  if ((rc = dpt_train_ranks_resolve_auto(&r->rk, !be->host_slabs && be->grads, &o->comm, err))) return rc;
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

/* the loaders' slot memory: the backend's host memory (cuda: pinned) */
static void *loader_host_alloc(void *be, size_t bytes) { return dpt_backend_host_alloc(be, bytes); }
static void loader_host_free(void *be, void *p) { dpt_backend_host_free(be, p); }

/* The loaders: micro-batch j of rank r reads the shard of virtual rank r*K + j of R*K
 * (one rank with K micro-batches sees exactly the images K ranks would). */

int dpt_train_run_loaders(struct run *r, struct dpt_err *err)
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
    snprintf(r->input_desc, sizeof r->input_desc, "host fp32 NCHW batches: %s%s", hw,
             be->ops->host_alloc ? "; in pinned memory, uploaded from the loader's slots" : "");
  if (!r->dev_input && be->ops->host_alloc) { /* cuda: the slots pinned, no staging copy per step */
    lo.host_alloc = loader_host_alloc;
    lo.host_free = loader_host_free;
    lo.host_ctx = be;
  }
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
  return 0;
}

/* The learning-rate schedule (linear scaling rule over the global batch). */
int dpt_train_run_schedule(struct run *r, struct dpt_err *err)
{
  struct opts *o = &r->o;
  int rc;
  /* the steps: per epoch, the batch's (--batch-schedule: each phase's), in all */
  if (o->batch_schedule) {
    if ((rc = dpt_bsched_parse(o->batch_schedule, &r->bs, err))) return rc;
  } else {
    dpt_bsched_const(&r->bs, o->batch);
  }
  if ((rc = dpt_bsched_plan(&r->bs, r->train.n, r->R * o->accum, err))) return rc;
  if (dpt_loader_steps(r->tls[0]) != r->bs.spe[0])
    return dpt_err_set(err, DPT_E_RUNTIME, "internal: the loader has %d steps per epoch, the batch schedule %d",
                       dpt_loader_steps(r->tls[0]), r->bs.spe[0]);
  r->total_steps = o->iterations ? o->iterations : dpt_bsched_epoch_start(&r->bs, o->epochs);
  r->total_epochs = dpt_bsched_epoch(&r->bs, r->total_steps);
  return dpt_train_schedule_make(o, (long)o->batch * o->accum * r->R, r->total_epochs, &r->sch, err);
}

/* The learning-rate schedule of o for the global batch of the first phase over total_epochs
 * (the linear scaling rule: rates per --lr-batch images). */
int dpt_train_schedule_make(const struct opts *o, long global_batch, double total_epochs, struct dpt_schedule *sch,
                            struct dpt_err *err)
{
  memset(sch, 0, sizeof *sch);
  sch->kind = dpt_schedule_parse_kind(o->schedule);
  sch->peak_lr = dpt_lr_scaled(o->lr, (int)global_batch, o->lr_batch);
  sch->warmup_epochs = o->warmup_epochs;
  /* --warmup-start base: from the unscaled rate, peak x lr-batch / global (Goyal et al.: eta to k eta) */
  sch->warmup_start = o->warmup_base && global_batch > o->lr_batch ? (double)o->lr_batch / global_batch
                      : o->warmup_base ? 1.0 : 0.0;
  sch->total_epochs = total_epochs;
  sch->gamma = o->gamma;
  sch->step_epochs = o->step_epochs;
  sch->power = o->power;
  if (o->milestones[0]) {
    const char *s = o->milestones;
    char *end;
    while (*s && sch->n_milestones < DPT_SCHED_MAX_MILESTONES) {
      double v = strtod(s, &end);
      if (end == s || v <= 0 || (sch->n_milestones && v <= sch->milestones[sch->n_milestones - 1]))
        return dpt_err_set(err, DPT_E_INPUT, "--milestones '%s': need increasing positive epochs", o->milestones);
      sch->milestones[sch->n_milestones++] = v;
      s = *end == ',' ? end + 1 : end;
      if (*end && *end != ',')
        return dpt_err_set(err, DPT_E_INPUT, "--milestones '%s': not a comma-separated list", o->milestones);
    }
    if (*s)
      return dpt_err_set(err, DPT_E_INPUT, "--milestones '%s': more than %d milestones", o->milestones,
                         DPT_SCHED_MAX_MILESTONES);
  }
  if (o->gammas[0]) {
    const char *s = o->gammas;
    char *end;
    while (*s) {
      double v = strtod(s, &end);
      if (end == s || (*end && *end != ',') || !(v > 0 && v <= 1000))
        return dpt_err_set(err, DPT_E_INPUT, "--gammas '%s': need a comma-separated list of factors > 0", o->gammas);
      if (sch->n_gammas == DPT_SCHED_MAX_MILESTONES)
        return dpt_err_set(err, DPT_E_INPUT, "--gammas '%s': more than %d factors", o->gammas, DPT_SCHED_MAX_MILESTONES);
      sch->gammas[sch->n_gammas++] = v;
      s = *end == ',' ? end + 1 : end;
    }
    if (sch->n_gammas != sch->n_milestones)
      return dpt_err_set(err, DPT_E_INPUT, "--gammas '%s' gives %d factors for %d milestones ('%s'): give one per "
                         "milestone", o->gammas, sch->n_gammas, sch->n_milestones, o->milestones);
  }
  sch->min_lr = o->end_lr;
  if (o->lr_steps[0]) { /* E:LR pairs, E ascending from 0; rates per --lr-batch, linearly scaled */
    const char *p = o->lr_steps;
    char *end;
    while (*p) {
      double e = strtod(p, &end), v;
      if (end == p || *end != ':')
        return dpt_err_set(err, DPT_E_INPUT, "--lr-steps '%s': need E:LR pairs, e.g. 0:0.1,30:0.01", o->lr_steps);
      p = end + 1;
      v = strtod(p, &end);
      if (end == p || (*end && *end != ',') || !(v >= 0 && v <= 1000))
        return dpt_err_set(err, DPT_E_INPUT, "--lr-steps '%s': a rate is not a number in [0, 1000]", o->lr_steps);
      if (sch->n_levels == DPT_SCHED_MAX_MILESTONES)
        return dpt_err_set(err, DPT_E_INPUT, "--lr-steps '%s': more than %d entries", o->lr_steps,
                           DPT_SCHED_MAX_MILESTONES);
      if (sch->n_levels ? !(e > sch->starts[sch->n_levels - 1]) : e != 0)
        return dpt_err_set(err, DPT_E_INPUT, "--lr-steps '%s': the epochs must start at 0 and increase", o->lr_steps);
      sch->starts[sch->n_levels] = e;
      sch->levels[sch->n_levels++] = dpt_lr_scaled(v, (int)global_batch, o->lr_batch);
      p = *end == ',' ? end + 1 : end;
    }
    sch->peak_lr = sch->levels[0];
  }
  return 0;
}

/* The optimizer, the host buffers, double buffering's pending slab, gradient buckets. */
int dpt_train_run_buffers(struct run *r, struct dpt_err *err)
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
  if ((rc = be->ops->sgd_init(be, (float)o->momentum, (float)o->weight_decay, o->nesterov, r->mask, err))) return rc;
  if (!strcmp(o->optimizer, "rmsprop-warmup")) {
    if (!be->ops->rmsw_init)
      return dpt_err_set(err, DPT_E_UNSUPPORTED, "--optimizer rmsprop-warmup: the %s backend has no RMSprop warm-up "
                         "update: use --backend cpu or cuda", be->ops->name);
    if ((rc = be->ops->rmsw_init(be, (float)o->rms_lr, (float)o->rms_mu2, (float)o->rms_eps, o->rms_center,
                                 o->rms_period, err)))
      return rc;
  }
  if (!strcmp(o->optimizer, "lars")) {
    if (!be->ops->lars_init)
      return dpt_err_set(err, DPT_E_UNSUPPORTED, "--optimizer lars: the %s backend has no LARS update: "
                         "use --backend cpu or cuda", be->ops->name);
    int ns = dpt_model_param_segs(&r->model, NULL, 0);
    struct dpt_param_seg *seg = malloc((ns ? ns : 1) * sizeof *seg);
    if (!seg) return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    dpt_model_param_segs(&r->model, seg, ns);
    rc = be->ops->lars_init(be, seg, ns, (float)o->lars_eta,
                            (float)(o->lars_eps > 0 ? o->lars_eps : DPT_LARS_EPS_ZERO), err);
    free(seg);
    if (rc) return rc;
  }
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
    /* the optimizer state: the momentum, and rmsprop-warmup's second moment after it */
    size_t nv = strcmp(o->optimizer, "rmsprop-warmup") ? np : 2 * np;
    r->mirrors = dpt_backend_host_alloc(be, (2 * np + nv + r->model.n_state + 1) * sizeof(float));
    if (!r->mirrors) return dpt_err_set(err, DPT_E_NOMEM, "out of memory for the host copies of %zu parameters", np);
    r->hp = r->mirrors, r->hg = r->hp + np, r->hv = r->hg + np, r->hs = r->hv + nv;
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
      if ((rc = dpt_backend_set_buckets(be, r->buckets, r->n_buckets, dpt_train_bucket_start, &r->ba, err))) return rc;
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
    dpt_train_profile_paths(r);
  }
  r->cap = (struct dpt_cap_run_cfg){r->R, r->dev_comm ? DPT_CAP_COMM_NCCL : DPT_CAP_COMM_HOST, r->n_buckets, r->mixed,
                                    o->dbuf, o->batch};
  return 0;
}

/* What run_backend, run_loaders and run_buffers made, freed: the loaders whose device batches
 * the backend reads (after it is done with them) and the backend's host buffers before the
 * backend. */
void dpt_train_run_release(struct run *r)
{
#ifdef DPT_TRAIN_HAVE_COMM
  free(r->ba.req);
  r->ba.req = NULL;
#endif
  free(r->buckets);
  r->buckets = NULL;
  r->n_buckets = 0;
  if (r->dev_input && r->be) { /* the backend reads the loaders' device batches in place: done first */
    struct dpt_err se = {0};
    r->be->ops->sync(r->be, &se);
  }
  for (int j = 0; j < 64; j++) dpt_loader_destroy(r->tls[j]), r->tls[j] = NULL;
  dpt_loader_destroy(r->vl);
  r->vl = NULL;
  r->dev_input = 0;
  if (r->be) {
    dpt_backend_host_free(r->be, r->mirrors);
    dpt_backend_host_free(r->be, r->pending);
  }
  r->mirrors = r->pending = NULL;
  dpt_backend_destroy(r->be);
  r->be = r->ba.be = NULL;
  free(r->mask), free(r->gacc);
  r->mask = NULL, r->gacc = NULL;
  r->hp = r->hs = r->hg = r->hv = NULL;
}

/* --batch-schedule: the epoch the run is at has another per-rank batch than the backend's.  The
 * parameters, BN state, optimizer state, loss scale and double buffering's waiting gradient go to
 * the host, the backend, the loaders (batch, steps per epoch) and the buffers are made again for
 * the new batch, and the state comes back: the next step runs at the new batch from the same
 * bits.  (At the change itself the loop has applied the waiting gradient first; a run resumed
 * after the change has one to carry.) */
int dpt_train_run_rebatch(struct run *r, int epoch, struct dpt_err *err)
{
  struct opts *o = &r->o;
  size_t np = r->np, ns = r->model.n_state, nv = strcmp(o->optimizer, "rmsprop-warmup") ? np : 2 * np;
  size_t npend = r->have_pending ? np : 0;
  int ob = o->batch, nb = dpt_bsched_batch(&r->bs, epoch), rc;
  struct dpt_loss_scaler sc = r->scaler;
  float *keep = malloc((np + ns + nv + npend) * sizeof(float)), *pend = keep + np + ns + nv;
  if (!keep) return dpt_err_set(err, DPT_E_NOMEM, "out of memory for the host copy of %zu parameters (batch change)", np);
  if ((rc = dpt_train_slab_get(r->be, DPT_SLAB_PARAMS, r->hp, err)) ||
      (rc = dpt_train_slab_get(r->be, DPT_SLAB_STATE, r->hs, err)) ||
      (rc = dpt_train_slab_get(r->be, DPT_SLAB_VELOCITY, r->hv, err)) ||
      (r->mixed && (rc = r->be->ops->scaler_get(r->be, &sc, err))) ||
      (npend && r->be->pending && (rc = dpt_train_slab_get(r->be, DPT_SLAB_PENDING, r->pending, err))))
    goto fail;
  if (npend) memcpy(pend, r->pending, np * sizeof(float)); /* the backend's pending slab, or the host one */
  memcpy(keep, r->hp, np * sizeof(float));
  memcpy(keep + np, r->hs, ns * sizeof(float));
  memcpy(keep + np + ns, r->hv, nv * sizeof(float));
  o->backend = r->be->ops->name; /* as chosen at the start (auto is not asked again) */
  dpt_train_run_release(r);
  o->batch = nb;
  if ((rc = dpt_train_run_backend(r, err)) || (rc = dpt_train_run_loaders(r, err)) ||
      (rc = dpt_train_run_buffers(r, err)))
    goto fail;
  if (dpt_loader_steps(r->tls[0]) != dpt_bsched_spe(&r->bs, epoch)) {
    rc = dpt_err_set(err, DPT_E_RUNTIME, "internal: the loader has %d steps per epoch at batch %d, the batch "
                     "schedule %d", dpt_loader_steps(r->tls[0]), nb, dpt_bsched_spe(&r->bs, epoch));
    goto fail;
  }
  memcpy(r->hp, keep, np * sizeof(float));
  memcpy(r->hs, keep + np, ns * sizeof(float));
  memcpy(r->hv, keep + np + ns, nv * sizeof(float));
  if ((rc = dpt_train_slab_put(r->be, DPT_SLAB_PARAMS, r->hp, err)) ||
      (rc = dpt_train_slab_put(r->be, DPT_SLAB_STATE, r->hs, err)) ||
      (rc = dpt_train_slab_put(r->be, DPT_SLAB_VELOCITY, r->hv, err)))
    goto fail;
  if (npend) memcpy(r->pending, pend, np * sizeof(float));
  if (npend && r->be->pending && (rc = dpt_train_slab_put(r->be, DPT_SLAB_PENDING, r->pending, err))) goto fail;
  r->scaler = sc;
  if (r->mixed && (rc = r->be->ops->scaler_set(r->be, &r->scaler, err))) goto fail;
  if (r->me == 0) {
    printf("dpt-train: epoch %d: per-rank batch %d -> %d (global %ld -> %ld), %d steps per epoch\n", epoch + 1, ob,
           nb, (long)ob * o->accum * r->R, (long)nb * o->accum * r->R, dpt_bsched_spe(&r->bs, epoch));
    fflush(stdout);
  }
fail:
  if (rc) dpt_err_prefix(err, "--batch-schedule: changing the per-rank batch to %d at epoch %d", nb, epoch + 1);
  free(keep);
  return rc;
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

void dpt_train_run_describe(struct run *r)
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
    if (o->batch_schedule) { /* each phase: from which epoch, the batch per rank and in all, steps per epoch */
      json_t *a = json_array();
      for (int i = 0; i < r->bs.n; i++)
        json_array_append_new(a, json_pack("{s:i,s:i,s:I,s:i}", "from_epoch", r->bs.start[i], "batch_per_rank",
                                           r->bs.batch[i] * o->accum, "global_batch",
                                           (json_int_t)r->bs.batch[i] * o->accum * R, "steps_per_epoch", r->bs.spe[i]));
      dpt_report_set_config(rep, "batch_schedule", a);
    }
    dpt_report_set_config(rep, "threads_per_rank", json_integer(r->threads));
    dpt_report_set_config(rep, "steps", json_integer(r->total_steps));
    dpt_report_set_config(rep, "epochs", json_real(r->total_epochs));
    dpt_report_set_config(rep, "schedule", json_string(o->schedule));
    dpt_report_set_config(rep, "peak_lr", json_real(r->sch.peak_lr));
    dpt_report_set_config(rep, "warmup_epochs", json_real(o->warmup_epochs));
    dpt_report_set_config(rep, "end_lr", json_real(o->end_lr));
    dpt_report_set_config(rep, "bn_eval_stats", json_string(o->bn_eval));
    dpt_report_set_config(rep, "zero_init_residual", json_boolean(o->zero_init_residual));
    dpt_report_set_config(rep, "recipe", o->recipe ? json_string(o->recipe) : json_null());
    dpt_report_set_config(rep, "warmup_start", json_string(o->warmup_base ? "base" : "zero"));
    dpt_report_set_config(rep, "optimizer", json_string(o->optimizer));
    dpt_report_set_config(rep, "nesterov", json_boolean(o->nesterov));
    if (!strcmp(o->optimizer, "rmsprop-warmup")) {
      dpt_report_set_config(rep, "rmsprop_lr", json_real(o->rms_lr));
      dpt_report_set_config(rep, "rmsprop_mu2", json_real(o->rms_mu2));
      dpt_report_set_config(rep, "rmsprop_eps", json_real(o->rms_eps));
      dpt_report_set_config(rep, "rmsprop_center_epochs", json_real(o->rms_center));
      dpt_report_set_config(rep, "rmsprop_period_epochs", json_real(o->rms_period));
    }
    if (!strcmp(o->optimizer, "lars")) {
      dpt_report_set_config(rep, "lars_eta", json_real(o->lars_eta));
      dpt_report_set_config(rep, "lars_eps", json_real(o->lars_eps > 0 ? o->lars_eps : DPT_LARS_EPS_ZERO));
    }
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
    dpt_report_set_config(rep, "deterministic", json_boolean(o->deterministic));
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
    if (o->recipe) {
      const struct dpt_train_recipe *re = dpt_train_recipe_find(o->recipe);
      printf("dpt-train: recipe %s: %s (published on %d GPUs; --dry-run shows its options and table)\n", re->name,
             re->title, re->gpus);
    }
    if (o->batch_schedule) {
      printf("dpt-train: batch schedule (per rank):");
      for (int i = 0; i < r->bs.n; i++)
        printf("%s %d from epoch %d (global %ld, %d steps per epoch)", i ? "," : "", r->bs.batch[i],
               r->bs.start[i] + 1, (long)r->bs.batch[i] * o->accum * R, r->bs.spe[i]);
      printf("; the learning rate is not rescaled when it grows\n");
    }
    if (!strcmp(o->optimizer, "rmsprop-warmup"))
      printf("dpt-train: optimizer: RMSprop warm-up (rms lr %g, mu2 %g, eps %g; SGD share 1/2 at epoch %g, 1 from "
             "epoch %g), momentum %g, weight decay %g%s\n", o->rms_lr, o->rms_mu2, o->rms_eps, o->rms_center,
             o->rms_center + o->rms_period / 2, o->momentum, o->weight_decay,
             o->no_decay_bn ? " (not on BN and bias)" : "");
    else if (!strcmp(o->optimizer, "lars"))
      printf("dpt-train: optimizer: LARS (eta %g, eps %g; BN and bias: plain momentum, no decay), momentum %g%s, "
             "weight decay %g\n", o->lars_eta, o->lars_eps > 0 ? o->lars_eps : DPT_LARS_EPS_ZERO, o->momentum,
             o->nesterov ? " (nesterov)" : "", o->weight_decay);
    else
      printf("dpt-train: optimizer: momentum SGD %g%s, weight decay %g%s\n", o->momentum,
             o->nesterov ? " (nesterov)" : "", o->weight_decay, o->no_decay_bn ? " (not on BN and bias)" : "");
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
