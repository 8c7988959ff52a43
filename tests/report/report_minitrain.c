/* report_minitrain — a small but real data-parallel training run that writes
 * its job report through runtime/dpt_report.h exactly as dpt-train does:
 * softmax regression (D features, K classes) on a seeded synthetic data set,
 * each rank a disjoint shard, gradients averaged with a dpt_comm communicator
 * every step, momentum-free SGD, validation per epoch (counts all-reduced).
 * Used by the report tests to get reports of real 1- and 2-rank runs
 * (dpt-launch -n 1 / -n 2) quickly, and as an example of the report API.
 *
 *   report_minitrain [--epochs N] [--batch B] [--comm NAME] [--fp16] [--report PATH]
 *                    [--baseline REPORT] [--fail-rank R]
 * --fail-rank R: rank R records an error after the first epoch and the run
 * exits 1 (the report's errors name it). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpt_comm.h"
#include "dpt_ctx.h"
#include "dpt_report.h"

enum { D = 1024, K = 16, N_TRAIN = 8192, N_VAL = 2048 };

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static unsigned long long rng = 88172645463325252ULL;
static double urand(void)
{
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static double nrand(void)
{
  double u = urand() + 1e-12, v = urand();
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

int main(int argc, char **argv)
{
  int epochs = 3, batch = 64, fp16 = 0, fail_rank = -1, rc = 1;
  const char *comm_name = "ring", *report = NULL, *baseline = NULL;
  struct dpt_err err = {0};
  struct dpt_comm *comm = NULL;
  struct dpt_report *rep = NULL;
  float *x = NULL, *w = NULL, *g = NULL; /* x: [N_TRAIN + N_VAL, D]; w, g: [K, D + 1] */
  int *y = NULL;                          /* [N_TRAIN + N_VAL] */

  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && !strcmp(argv[i], "--epochs")) epochs = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--batch")) batch = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--comm")) comm_name = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--report")) report = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--baseline")) baseline = argv[++i];
    else if (i + 1 < argc && !strcmp(argv[i], "--fail-rank")) fail_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fp16")) fp16 = 1;
    else {
      fprintf(stderr, "report_minitrain: bad argument %s\n", argv[i]);
      return 2;
    }
  }
  if (epochs < 1 || batch < 1)
    return 2;
  if (dpt_comm_mpi_init(&argc, &argv, &err))
    goto fail0;
  struct dpt_comm_opts co;
  dpt_comm_opts_init(&co);
  co.name = comm_name;
  if (dpt_comm_create(&comm, MPI_COMM_WORLD, &co, &err))
    goto fail0;
  int me = dpt_comm_rank(comm), p = dpt_comm_size(comm);
  MPI_Comm mc = dpt_comm_mpi(comm);
  if (dpt_report_create(&rep, "report_minitrain", argc, argv, me, p, &err))
    goto fail0;
  dpt_report_set_mpi_version(rep);
  dpt_report_set_software(rep, "backend", "cpu");
  dpt_report_set_software(rep, "comm", comm_name);
  dpt_report_set_software(rep, "wire", fp16 ? "fp16" : "fp32");
  dpt_report_set_config(rep, "model", json_string("softmax regression 1024x16"));
  dpt_report_set_config(rep, "batch_per_rank", json_integer(batch));
  dpt_report_set_config(rep, "epochs", json_integer(epochs));
  dpt_report_set_config(rep, "double_buffering", json_false());
  dpt_report_set_allreduce(rep, (uint64_t)K * (D + 1) * sizeof(float), -1);
  if (dpt_report_plan_from_launch(rep, (uint64_t)K * (D + 1) * sizeof(float), fp16, &err) < 0)
    goto fail;
  if (baseline)
    dpt_report_set_baseline(rep, baseline);

  /* data: K Gaussian clusters, the same on every rank (seeded) */
  x = malloc(sizeof *x * (N_TRAIN + N_VAL) * D);
  y = malloc(sizeof *y * (N_TRAIN + N_VAL));
  w = calloc(K * (D + 1), sizeof *w);
  g = malloc(sizeof *g * K * (D + 1));
  static float mu[K][D];
  if (!x || !y || !w || !g)
    goto fail;
  for (int k = 0; k < K; k++)
    for (int d = 0; d < D; d++)
      mu[k][d] = (float)(0.06 * nrand());
  for (int i = 0; i < N_TRAIN + N_VAL; i++) {
    y[i] = (int)(urand() * K) % K;
    for (int d = 0; d < D; d++)
      x[i * D + d] = mu[y[i]][d] + (float)nrand();
  }
  int shard = N_TRAIN / p, steps = shard / batch;
  double t_start = now();
  for (int ep = 0; ep < epochs; ep++) {
    double loss_sum = 0, correct = 0, seen = 0;
    for (int s = 0; s < steps; s++) {
      struct dpt_report_step st = {0};
      double t0 = now();
      const float *xb = x + (size_t)(me * shard + s * batch) * D;
      const int *yb = y + me * shard + s * batch;
      double t1 = now();
      static float logits[4096][K];
      int B = batch > 4096 ? 4096 : batch;
      for (int b = 0; b < B; b++)
        for (int k = 0; k < K; k++) {
          float z = w[k * (D + 1) + D];
          for (int d = 0; d < D; d++)
            z += w[k * (D + 1) + d] * xb[b * D + d];
          logits[b][k] = z;
        }
      double t2 = now();
      memset(g, 0, sizeof *g * K * (D + 1));
      for (int b = 0; b < B; b++) {
        float mx = logits[b][0], sum = 0, pr[K];
        int arg = 0;
        for (int k = 1; k < K; k++)
          if (logits[b][k] > mx) mx = logits[b][k], arg = k;
        for (int k = 0; k < K; k++)
          sum += pr[k] = expf(logits[b][k] - mx);
        loss_sum -= log(pr[yb[b]] / sum);
        correct += arg == yb[b];
        seen++;
        for (int k = 0; k < K; k++) {
          float dz = (pr[k] / sum - (k == yb[b])) / B;
          for (int d = 0; d < D; d++)
            g[k * (D + 1) + d] += dz * xb[b * D + d];
          g[k * (D + 1) + D] += dz;
        }
      }
      double t3 = now();
      if (dpt_comm_allreduce(comm, g, K * (D + 1), DPT_COMM_AVG | (fp16 ? DPT_COMM_FP16 : 0), &err))
        goto fail;
      double t4 = now();
      for (int j = 0; j < K * (D + 1); j++)
        w[j] -= 0.5f * g[j];
      double t5 = now();
      st.data_wait = t1 - t0;
      st.forward = t2 - t1;
      st.backward = t3 - t2;
      st.allreduce = st.allreduce_exposed = t4 - t3;
      st.update = t5 - t4;
      st.step = t5 - t0;
      st.images = B;
      if (dpt_report_add_step(rep, &st, &err))
        goto fail;
    }
    /* validation: disjoint shards of the held-out set, counts summed */
    float acc[4] = {0, 0, (float)loss_sum, (float)correct};
    int vs = N_VAL / p;
    for (int i = N_TRAIN + me * vs; i < N_TRAIN + (me + 1) * vs; i++) {
      float best = -1e30f, z[K], mx, sum = 0;
      int arg = 0;
      for (int k = 0; k < K; k++) {
        z[k] = w[k * (D + 1) + D];
        for (int d = 0; d < D; d++)
          z[k] += w[k * (D + 1) + d] * x[i * D + d];
        if (z[k] > best) best = z[k], arg = k;
      }
      mx = best;
      for (int k = 0; k < K; k++)
        sum += expf(z[k] - mx);
      acc[0] += arg == y[i];
      acc[1] -= z[y[i]] - mx - logf(sum);
    }
    if (dpt_comm_allreduce(comm, acc, 4, DPT_COMM_SUM, &err))
      goto fail;
    struct dpt_report_epoch e;
    dpt_report_epoch_init(&e);
    e.epoch = ep + 1;
    e.step = (long)(ep + 1) * steps;
    e.val_top1 = acc[0] / (vs * p);
    e.val_loss = acc[1] / (vs * p);
    e.train_loss = acc[2] / (seen * p);
    e.train_top1 = acc[3] / (seen * p);
    e.lr = 0.5;
    e.elapsed_s = now() - t_start;
    if (dpt_report_add_epoch(rep, &e, &err))
      goto fail;
    if (me == 0)
      printf("epoch %d: train loss %.4f top-1 %.2f%%, val top-1 %.2f%%\n", ep + 1, e.train_loss, 100 * e.train_top1,
             100 * e.val_top1);
    if (me == fail_rank && ep == 0) {
      dpt_err_set(&err, DPT_E_RUNTIME, "injected failure on rank %d after epoch 1 (--fail-rank)", me);
      dpt_report_set_error(rep, &err);
      fprintf(stderr, "report_minitrain: %s\n", err.msg);
    }
  }
  rc = fail_rank >= 0 ? 1 : 0;
  goto done;
fail:
  fprintf(stderr, "report_minitrain: rank %d: %s\n", rep ? dpt_report_rank(rep) : -1, err.msg);
  if (rep)
    dpt_report_set_error(rep, &err);
  rc = dpt_err_exit_status(&err);
done:
  if (rep) {
    struct dpt_report_gather gh = {dpt_report_gather_mpi, &mc};
    char path[4096];
    dpt_report_set_exit_status(rep, rc);
    if (dpt_report_finish(rep, &gh, report, path, &err)) {
      fprintf(stderr, "report_minitrain: %s\n", err.msg);
      rc = rc ? rc : dpt_err_exit_status(&err);
    } else if (dpt_report_rank(rep) == 0) {
      printf("report: %s\n", path);
    }
    dpt_report_destroy(rep);
  }
  free(x), free(y), free(w), free(g);
  dpt_comm_destroy(comm);
  MPI_Finalize();
  return rc;
fail0:
  fprintf(stderr, "report_minitrain: %s\n", err.msg);
  return dpt_err_exit_status(&err) ? dpt_err_exit_status(&err) : 1;
}
