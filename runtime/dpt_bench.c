/* dpt-bench — communicator benchmarks, in the style of nccl-tests.
 *
 *   dpt-bench allreduce [--comm NAME[,NAME...]] [--min-bytes N] [--max-bytes N]
 *                       [--iters N] [--warmup N] [--fp16] [--json] [--no-resnet]
 *                       [--report PATH] [--baseline REPORT] [--images-per-step N]
 *
 * Sizes double from --min-bytes (4) to --max-bytes (128 MiB), plus ResNet-50's
 * gradient (102,228,128 B) when it is in range.  Per size and communicator:
 * time per all-reduce (max over ranks of the mean over --iters), algbw =
 * bytes / time, busbw = algbw * 2(p-1)/p (what each rank's link carries in a
 * ring; nccl-tests' definition), and the max error of one extra all-reduce of
 * integer-valued data against the exact sum.  The timed loop sums in place
 * (fp32) or averages (--fp16, so values stay in fp16 range).  Several
 * communicators in one run (--comm ring,mpi) are measured on the same ranks,
 * interleaved per size.  Runs under dpt-launch (ring order from the plan),
 * mpirun or srun.  Every run writes a job report (dpt.report/1, runtime/dpt_report.h)
 * holding this benchmark's dpt.bench.allreduce/1 document under results.bench,
 * the per-iteration times of the largest size (ResNet-50's gradient when
 * measured) as all-reduce "steps", and the plan's predicted time for that size.
 * With --images-per-step N each of those steps stands for a training step of N
 * images per rank whose compute is free (throughput = an upper bound of a
 * training run's images/s); --baseline REPORT (another such run, e.g. 2 ranks)
 * then puts the scaling efficiency e = t / (t0 * n / n0) in the report, which
 * for these steps is the all-reduce's weak-scaling efficiency t_ar0 / t_ar.
 * The binding applied to each rank is recorded (dpt_bind_describe_applied).
 * Exit: 0, 2 on bad usage, 1 on runtime failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "dpt_comm.h"
#include "dpt_bind.h"
#include "dpt_ctx.h"
#include "dpt_plan.h"
#include "dpt_report.h"

#define MAX_COMMS 8

static void usage(FILE *f)
{
  fprintf(f, "usage: dpt-bench allreduce [--comm NAME[,NAME...]] [--min-bytes N] [--max-bytes N]\n"
             "                           [--iters N] [--warmup N] [--fp16] [--json] [--no-resnet]\n"
             "                           [--report PATH] [--baseline REPORT] [--images-per-step N]\n"
             "  --comm   auto, mpi, ring, hierarchical, nccl (default: DPT_COMM, else ring,hierarchical,mpi)\n"
             "  sizes double from --min-bytes (4) to --max-bytes (134217728), plus ResNet-50's\n"
             "  gradient (102228128 bytes) unless --no-resnet\n"
             "  --report PATH  job report (dpt.report/1; default DPT_REPORT, else\n"
             "                 dpt-report-<jobid>.<stepid>.json or dpt-report-dpt-bench-<pid>.json)\n"
             "  --images-per-step N  each timed all-reduce of the reported size counts as a training\n"
             "                 step of N images per rank (compute free) in the report (default 0: none;\n"
             "                 1 with --baseline)\n"
             "  --baseline REPORT  a report of another dpt-bench run with images (e.g. 2 ranks): the\n"
             "                 report gets scaling efficiency e = t / (t0 * n / n0), here the all-reduce\n"
             "                 time of the baseline over this run's\n");
}

static int parse_size(const char *s, unsigned long long *out)
{
  char *end;
  unsigned long long v;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno || end == s || s[0] == '-')
    return -1;
  if (*end == 'K' || *end == 'k')
    v <<= 10, end++;
  else if (*end == 'M' || *end == 'm')
    v <<= 20, end++;
  else if (*end == 'G' || *end == 'g')
    v <<= 30, end++;
  if (*end)
    return -1;
  *out = v;
  return 0;
}

static float ival(int rank, size_t j)
{
  return (float)((int)((j * 2654435761u + (size_t)rank * 40503u) % 17) - 8);
}

int main(int argc, char **argv)
{
  struct dpt_err err = {0};
  struct dpt_ctx ctx;
  const char *comm_list = getenv("DPT_COMM");
  char *names_buf = NULL, *names[MAX_COMMS];
  int n_comms = 0, json = 0, fp16 = 0, resnet = 1, iters = 20, warmup = 5;
  unsigned long long minb = 4, maxb = 128ull << 20;
  struct dpt_comm *comms[MAX_COMMS] = {0};
  int wrank = 0, p = 1, rc = 1, usage_err = 0;
  unsigned long long *sizes = NULL;
  int n_sizes = 0;
  float *buf = NULL;
  json_t *doc = NULL, *results = NULL;
  char host[256] = "?";
  const char *report_path = NULL, *baseline = NULL;
  long images_per_step = -1; /* -1: 0, or 1 with --baseline */
  struct dpt_report *rep = NULL;
  double *iter_t = NULL; /* [iters] per-iteration times of the reported size */
  int rep_size = -1;     /* index of the size whose iterations are reported */

  if (argc < 2 || strcmp(argv[1], "allreduce")) {
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
      usage(stdout);
      return 0;
    }
    fprintf(stderr, "dpt-bench: %s%s%s\n", argc < 2 ? "missing benchmark" : "unknown benchmark \"",
            argc < 2 ? "" : argv[1], argc < 2 ? " (allreduce)" : "\" (known: allreduce)");
    usage(stderr);
    return 2;
  }
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    int need = !strcmp(a, "--comm") || !strcmp(a, "--min-bytes") || !strcmp(a, "--max-bytes") ||
               !strcmp(a, "--iters") || !strcmp(a, "--warmup") || !strcmp(a, "--report") ||
               !strcmp(a, "--baseline") || !strcmp(a, "--images-per-step");
    if (need && i + 1 >= argc) {
      fprintf(stderr, "dpt-bench: %s needs a value\n", a);
      return 2;
    }
    if (!strcmp(a, "--comm")) {
      comm_list = argv[++i];
    } else if (!strcmp(a, "--report")) {
      report_path = argv[++i];
    } else if (!strcmp(a, "--baseline")) {
      baseline = argv[++i];
    } else if (!strcmp(a, "--images-per-step")) {
      char *end;
      images_per_step = strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end || images_per_step < 0 || images_per_step > 1000000) {
        fprintf(stderr, "dpt-bench: --images-per-step %s: expected a count 0..1000000\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(a, "--min-bytes") || !strcmp(a, "--max-bytes")) {
      unsigned long long v;
      if (parse_size(argv[++i], &v) < 0) {
        fprintf(stderr, "dpt-bench: %s %s: expected bytes (e.g. 4, 64M)\n", a, argv[i]);
        return 2;
      }
      *(!strcmp(a, "--min-bytes") ? &minb : &maxb) = v;
    } else if (!strcmp(a, "--iters") || !strcmp(a, "--warmup")) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (end == argv[i] || *end || v < (!strcmp(a, "--iters") ? 1 : 0) || v > 1000000) {
        fprintf(stderr, "dpt-bench: %s %s: expected a count\n", a, argv[i]);
        return 2;
      }
      *(!strcmp(a, "--iters") ? &iters : &warmup) = (int)v;
    } else if (!strcmp(a, "--fp16")) {
      fp16 = 1;
    } else if (!strcmp(a, "--json")) {
      json = 1;
    } else if (!strcmp(a, "--no-resnet")) {
      resnet = 0;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "dpt-bench: unknown option %s\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (images_per_step < 0)
    images_per_step = baseline ? 1 : 0;
  if (baseline) {
    if (!images_per_step) {
      fprintf(stderr, "dpt-bench: --baseline with --images-per-step 0: this run would have no images/s to "
                      "compare (leave --images-per-step out, or give N > 0)\n");
      return 2;
    }
    if (dpt_report_check_baseline(baseline, &err)) {
      fprintf(stderr, "dpt-bench: %s%s\n", err.msg,
              strstr(err.msg, "images_per_s") ? " (a dpt-bench baseline needs --images-per-step or --baseline)" : "");
      return 2;
    }
  }
  if (minb < 4)
    minb = 4;
  if (maxb < minb) {
    fprintf(stderr, "dpt-bench: --max-bytes %llu is below --min-bytes %llu\n", maxb, minb);
    return 2;
  }
  names_buf = strdup(comm_list && *comm_list ? comm_list : "ring,hierarchical,mpi");
  if (!names_buf)
    return 1;
  for (char *save = NULL, *t = strtok_r(names_buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (n_comms == MAX_COMMS) {
      fprintf(stderr, "dpt-bench: at most %d communicators\n", MAX_COMMS);
      free(names_buf);
      return 2;
    }
    if (!dpt_comm_check_name(t, &err)) {
      fprintf(stderr, "dpt-bench: --comm: %s\n", err.msg);
      free(names_buf);
      return dpt_err_exit_status(&err);
    }
    names[n_comms++] = t;
  }
  {
    int k = 0;
    unsigned long long *s = malloc(sizeof *s * 80);
    if (!s)
      goto out;
    for (unsigned long long b = minb; b <= maxb; b *= 2) {
      if (resnet && b > DPT_RESNET50_GRAD_BYTES && (k == 0 || s[k - 1] < DPT_RESNET50_GRAD_BYTES) &&
          DPT_RESNET50_GRAD_BYTES >= minb)
        s[k++] = DPT_RESNET50_GRAD_BYTES;
      s[k++] = b;
      if (b > maxb / 2)
        break;
    }
    if (resnet && DPT_RESNET50_GRAD_BYTES <= maxb && DPT_RESNET50_GRAD_BYTES >= minb &&
        (k == 0 || s[k - 1] < DPT_RESNET50_GRAD_BYTES))
      s[k++] = DPT_RESNET50_GRAD_BYTES;
    sizes = s;
    n_sizes = k;
  }

  if (dpt_comm_mpi_init(&argc, &argv, &err) < 0) {
    fprintf(stderr, "dpt-bench: %s\n", err.msg);
    goto out;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  gethostname(host, sizeof host - 1);
  if (dpt_report_create(&rep, "dpt-bench", argc, argv, wrank, p, &err) < 0) {
    fprintf(stderr, "dpt-bench: rank %d: %s\n", wrank, err.msg);
    goto out;
  }
  dpt_report_set_mpi_version(rep);
  {
    char applied[2048];
    dpt_bind_describe_applied(applied, sizeof applied);
    if (dpt_report_set_binding(rep, applied) || (baseline && dpt_report_set_baseline(rep, baseline))) {
      fprintf(stderr, "dpt-bench: rank %d: out of memory for the job report\n", wrank);
      goto out;
    }
  }
  dpt_report_set_config(rep, "images_per_step", json_integer(images_per_step));
  dpt_report_set_software(rep, "comm", comm_list && *comm_list ? comm_list : "ring,hierarchical,mpi");
  dpt_report_set_software(rep, "wire", fp16 ? "fp16" : "fp32");
  dpt_report_set_config(rep, "iters", json_integer(iters));
  dpt_report_set_config(rep, "warmup", json_integer(warmup));
  dpt_report_set_config(rep, "min_bytes", json_integer((json_int_t)minb));
  dpt_report_set_config(rep, "max_bytes", json_integer((json_int_t)maxb));
  /* the reported size: ResNet-50's gradient when measured, else the largest */
  rep_size = n_sizes - 1;
  for (int s = 0; s < n_sizes; s++)
    if (sizes[s] == DPT_RESNET50_GRAD_BYTES)
      rep_size = s;
  if (dpt_report_plan_from_launch(rep, sizes[rep_size], fp16, &err) < 0 && wrank == 0)
    fprintf(stderr, "dpt-bench: warning: no plan in the report: %s\n", err.msg);
  iter_t = calloc((size_t)iters, sizeof *iter_t);
  if (!iter_t)
    goto out;
  if (dpt_ctx_from_env(&ctx, &err) < 0) {
    fprintf(stderr, "dpt-bench: rank %d: %s\n", wrank, err.msg);
    usage_err = 1;
    goto out;
  }
  for (int c = 0; c < n_comms; c++) {
    struct dpt_comm_opts o;
    dpt_comm_opts_init(&o);
    o.name = names[c];
    o.ring_pos = !strcmp(ctx.source, "dpt-launch") ? ctx.rank : -1;
    if (dpt_comm_create(&comms[c], MPI_COMM_WORLD, &o, &err) < 0) {
      if (wrank == 0)
        fprintf(stderr, "dpt-bench: %s\n", err.msg);
      usage_err = err.code == DPT_E_INPUT;
      goto out;
    }
  }
  buf = malloc(sizes[n_sizes - 1] + 64);
  if (!buf) {
    fprintf(stderr, "dpt-bench: out of memory for %llu bytes\n", sizes[n_sizes - 1]);
    goto out;
  }
  {
    doc = json_pack("{s:s, s:s, s:i, s:s, s:s, s:i, s:i}", "schema", "dpt.bench.allreduce/1",
                    "host", host, "ranks", p, "wire", fp16 ? "fp16" : "fp32", "launcher",
                    ctx.launcher, "iters", iters, "warmup", warmup);
    results = json_array();
    json_object_set_new(doc, "results", results);
  }
  if (!json && wrank == 0) {
    printf("# dpt-bench allreduce: %d ranks (%s, via %s), %s on the wire, %d iters, %d warmup\n",
           p, host, ctx.launcher, fp16 ? "fp16" : "fp32", iters, warmup);
    printf("# %-13s %14s %12s %6s %12s %11s %11s %9s\n", "comm", "size(B)", "count", "type",
           "time(us)", "algbw(GB/s)", "busbw(GB/s)", "maxerr");
  }
  for (int s = 0; s < n_sizes; s++) {
    size_t n = (size_t)(sizes[s] / 4);
    for (int c = 0; c < n_comms; c++) {
      unsigned flags = fp16 ? (DPT_COMM_FP16 | DPT_COMM_AVG) : DPT_COMM_SUM;
      double t0 = 0.0, t1, dt, maxdt, err_local = 0.0, maxerr = 0.0;
      for (size_t j = 0; j < n; j++)
        buf[j] = ival(wrank, j) * 0.125f;
      for (int it = 0; it < warmup + iters; it++) {
        if (it == warmup) {
          MPI_Barrier(MPI_COMM_WORLD);
          t0 = MPI_Wtime();
        }
        double ti = MPI_Wtime();
        if (dpt_comm_allreduce(comms[c], buf, n, flags, &err) < 0) {
          fprintf(stderr, "dpt-bench: rank %d: %s\n", wrank, err.msg);
          goto out;
        }
        if (it >= warmup)
          iter_t[it - warmup] = MPI_Wtime() - ti;
      }
      t1 = MPI_Wtime();
      dt = (t1 - t0) / iters;
      MPI_Allreduce(&dt, &maxdt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (s == rep_size && c == 0) {
        /* the first communicator at the reported size: its iterations are the report's steps */
        for (int it = 0; it < iters; it++) {
          struct dpt_report_step st = {0};
          st.allreduce = st.allreduce_exposed = st.step = iter_t[it];
          st.images = images_per_step;
          if (dpt_report_add_step(rep, &st, &err) < 0)
            goto out;
        }
        dpt_report_set_allreduce(rep, sizes[s], maxdt);
      }
      /* Correctness: one sum of integer-valued data against the exact sum. */
      for (size_t j = 0; j < n; j++)
        buf[j] = ival(wrank, j);
      if (dpt_comm_allreduce(comms[c], buf, n, fp16 ? DPT_COMM_FP16 : 0, &err) < 0) {
        fprintf(stderr, "dpt-bench: rank %d: %s\n", wrank, err.msg);
        goto out;
      }
      for (size_t j = 0; j < n; j++) {
        double want = 0;
        for (int q = 0; q < p; q++)
          want += ival(q, j);
        if (fabs(buf[j] - want) > err_local)
          err_local = fabs(buf[j] - want);
      }
      MPI_Allreduce(&err_local, &maxerr, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (wrank == 0) {
        double algbw = maxdt > 0 ? (double)sizes[s] / maxdt / 1e9 : 0.0;
        double busbw = algbw * (p > 1 ? 2.0 * (p - 1) / p : 0.0);
        json_array_append_new(results,
                                json_pack("{s:s, s:I, s:I, s:s, s:f, s:f, s:f, s:f}", "comm",
                                          dpt_comm_name(comms[c]), "bytes", (json_int_t)sizes[s], "count",
                                          (json_int_t)n, "type", "float", "time_us", maxdt * 1e6,
                                          "algbw_gbs", algbw, "busbw_gbs", busbw, "max_error",
                                          maxerr));
        if (!json)
          printf("  %-13s %14llu %12zu %6s %12.1f %11.3f %11.3f %9.2g\n", dpt_comm_name(comms[c]), sizes[s], n,
                 "float", maxdt * 1e6, algbw, busbw, maxerr);
        fflush(stdout);
      }
    }
  }
  if (json && wrank == 0) {
    char *txt = json_dumps(doc, JSON_INDENT(2));
    if (txt)
      printf("%s\n", txt);
    free(txt);
  }
  rc = 0;
out:
  if (rep) {
    /* every rank reaches here together on success; after a failure ranks write their own parts */
    struct dpt_report_gather g = {dpt_report_gather_mpi, &(MPI_Comm){MPI_COMM_WORLD}};
    char path[4096];
    if (doc)
      dpt_report_set_result(rep, "bench", json_incref(doc));
    if (rc) {
      if (err.code)
        dpt_report_set_error(rep, &err);
      dpt_report_set_exit_status(rep, usage_err ? 2 : 1);
    } else {
      dpt_report_set_exit_status(rep, 0);
    }
    if (dpt_report_finish(rep, rc ? NULL : &g, report_path, path, &err) < 0) {
      fprintf(stderr, "dpt-bench: rank %d: %s\n", wrank, err.msg);
      if (!rc)
        rc = 1;
    } else if (wrank == 0 && !json) {
      printf("# report: %s\n", path);
    }
    dpt_report_destroy(rep);
  }
  free(iter_t);
  for (int c = 0; c < n_comms; c++)
    dpt_comm_destroy(comms[c]);
  json_decref(doc);
  free(buf);
  free(sizes);
  free(names_buf);
  {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) {
      if (rc)
        MPI_Abort(MPI_COMM_WORLD, usage_err ? 2 : 1);
      MPI_Finalize();
    }
  }
  return rc ? (usage_err ? 2 : 1) : 0;
}
