/* dpt_topo_plan.c — `dpt-topo plan`: the plan dpt would use for a job.
 *
 *   dpt-topo plan [--topology-conf FILE | --ibnetdiscover FILE | --addr-list FILE]
 *                 --nodes HOSTLIST [--gpus-per-node N | --node-xml FILE | --node-xml-dir DIR]
 *                 [--ranks-per-node N [--oversubscribe]] [--threads-per-rank N]
 *                 [--size BYTES] [--fp16] [--seed N] [--host-gbps X] [--uplink-gbps X]
 *                 [--intra-gbps X] [--alpha-us X] [--json] [--output FILE.json]
 *                 [--slurm-hostfile FILE] [--report PATH]
 *
 * The job (hosts, tree source, node topologies, ranks, oversubscription,
 * threads) goes to dpt_job_plan() (topology/dpt_job.h), like every other
 * caller of the planner; without a tree source every host hangs off one
 * switch.  The plan is computed completely before anything is written:
 * invalid input gives exit 2 and a message naming the node, file or line,
 * never a partial document.  Text goes to stdout (JSON instead with --json);
 * nothing is written to a file unless asked: --output writes the JSON document
 * (through a temporary file + rename), --slurm-hostfile the host of every rank
 * in plan order, one per line (SLURM_HOSTFILE for srun --distribution=arbitrary:
 * SLURM_PROCID, and so the MPI rank of programs that take theirs from
 * MPI_COMM_WORLD, then equals the plan rank), --report a job report (dpt.report/1 with
 * the plan embedded and its predicted all-reduce time; runtime/dpt_report.h).
 * Oversubscription that was asked for is said on stderr. */
#define _GNU_SOURCE /* asprintf */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_job.h"
#include "dpt_plan.h"
#include "dpt_report.h"
#include "dpt_topo_cli.h"

static void usage(FILE *f)
{
  fprintf(f,
          "usage: dpt-topo plan [--topology-conf FILE | --ibnetdiscover FILE | --addr-list FILE]\n"
          "                     --nodes HOSTLIST [--gpus-per-node N | --node-xml FILE | --node-xml-dir DIR]\n"
          "                     [--ranks-per-node N [--oversubscribe]] [--threads-per-rank N]\n"
          "                     [--size BYTES] [--fp16] [--seed N] [--host-gbps X] [--uplink-gbps X]\n"
          "                     [--intra-gbps X] [--alpha-us X] [--json] [--output FILE.json]\n"
          "                     [--slurm-hostfile FILE] [--report PATH]\n"
          "\n"
          "The topology-aware ring for a job on these nodes: ring order, rank -> node/GPU/cpuset/HCAs,\n"
          "and the predicted all-reduce cost of the plan next to Slurm's order, a random order,\n"
          "hierarchical and 2d all-reduce.\n"
          "\n"
          "  --topology-conf FILE   Slurm topology.conf (topology/tree)\n"
          "  --ibnetdiscover FILE   `ibnetdiscover -p` dump of the fabric\n"
          "  --addr-list FILE       one \"SLURM_TOPOLOGY_ADDR [PATTERN]\" per line\n"
          "                         (none of the three: every node under one switch)\n"
          "  --nodes HOSTLIST       the job's nodes in Slurm's order, e.g. \"n[001-016],m3\"\n"
          "  --gpus-per-node N      nodes known only by their GPU count\n"
          "  --node-xml FILE        hwloc XML of the nodes (one for all)\n"
          "  --node-xml-dir DIR     one hwloc XML per node: DIR/<host>.xml (what\n"
          "                         etc/mn1/sbatch/topo-survey.sbatch collects)\n"
          "  --ranks-per-node N     default: one rank per GPU\n"
          "  --oversubscribe        allow more ranks than GPUs, or than cores on nodes without\n"
          "                         GPUs (ranks share them; said on stderr)\n"
          "  --threads-per-rank N   default: the cores of the rank's cpuset slice\n"
          "  --size BYTES           all-reduce message (K/M/G suffixes: 1024-based);\n"
          "                         default 102228128 (ResNet-50 gradients in fp32)\n"
          "  --fp16                 half the bytes on the wire\n"
          "  --seed N               seed of the random order (default 0)\n"
          "  --host-gbps X          host link Gbit/s where the tree has no LinkSpeed (100)\n"
          "  --uplink-gbps X        switch uplink Gbit/s where the tree says nothing (host's)\n"
          "  --intra-gbps X         GPU to GPU inside a node, Gbit/s (128)\n"
          "  --alpha-us X           latency per ring step, microseconds (5)\n"
          "  --json                 print the JSON document (dpt.plan/1) instead of text\n"
          "  --output FILE.json     also write the JSON document to FILE.json\n"
          "  --slurm-hostfile FILE  also write each rank's host, in plan order, one per line: with\n"
          "                         SLURM_HOSTFILE=FILE srun --distribution=arbitrary, SLURM_PROCID\n"
          "                         (and MPI_COMM_WORLD's rank) is the plan rank\n"
          "  --report PATH          also write a job report (dpt.report/1) to PATH (%%j job id,\n"
          "                         %%s step id, %%p pid); without it nothing is written to a file\n");
}

enum {
  OPT_CONF = 256, OPT_IB, OPT_ADDR, OPT_NODES, OPT_GPUS, OPT_XML, OPT_RPN, OPT_OVER, OPT_TPR,
  OPT_SIZE, OPT_FP16, OPT_SEED, OPT_HOST, OPT_UP, OPT_INTRA, OPT_ALPHA, OPT_JSON, OPT_OUTPUT,
  OPT_HELP, OPT_REPORT, OPT_NO_REPORT, OPT_XML_DIR, OPT_HOSTFILE
};

static int parse_u64(const char *opt, const char *s, int suffixes, uint64_t *out, struct dpt_err *err)
{
  char *end = NULL;
  unsigned long long v;
  uint64_t mul = 1;

  errno = 0;
  if (!s || !*s || *s == '-' || *s == '+')
    return dpt_err_set(err, DPT_E_INPUT, "%s '%s': expected a non-negative integer", opt, s ? s : "");
  v = strtoull(s, &end, 10);
  if (suffixes && end && *end && !end[1]) {
    switch (*end) {
    case 'K': case 'k': mul = 1ULL << 10; end++; break;
    case 'M': case 'm': mul = 1ULL << 20; end++; break;
    case 'G': case 'g': mul = 1ULL << 30; end++; break;
    default: break;
    }
  }
  if (errno || end == s || *end || (mul > 1 && v > UINT64_MAX / mul))
    return dpt_err_set(err, DPT_E_INPUT, "%s '%s': expected a non-negative integer%s", opt, s,
                       suffixes ? " (optionally with K, M or G)" : "");
  *out = (uint64_t)v * mul;
  return 0;
}

static int parse_int(const char *opt, const char *s, int min, int *out, struct dpt_err *err)
{
  uint64_t v = 0;
  if (parse_u64(opt, s, 0, &v, err))
    return err->code;
  if (v < (uint64_t)min || v > 1000000)
    return dpt_err_set(err, DPT_E_INPUT, "%s %s: expected an integer from %d to 1000000", opt, s, min);
  *out = (int)v;
  return 0;
}

static int parse_pos(const char *opt, const char *s, double *out, struct dpt_err *err)
{
  char *end = NULL;
  double v;
  errno = 0;
  v = s ? strtod(s, &end) : 0;
  if (!s || errno || end == s || *end || !isfinite(v) || v <= 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s '%s': expected a positive number", opt, s ? s : "");
  *out = v;
  return 0;
}

static int write_file(const char *opt, const char *path, const char *text, struct dpt_err *err)
{
  char tmp[4200];
  FILE *f;
  int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);

  if (n < 0 || (size_t)n >= sizeof tmp)
    return dpt_err_set(err, DPT_E_INPUT, "%s '%s': path too long", opt, path);
  f = fopen(tmp, "w");
  if (!f)
    return dpt_err_set(err, DPT_E_INPUT, "%s '%s': cannot create %s: %s", opt, path, tmp, strerror(errno));
  if (fputs(text, f) < 0 || fputc('\n', f) < 0) {
    fclose(f);
    remove(tmp);
    return dpt_err_set(err, DPT_E_RUNTIME, "%s '%s': write failed: %s", opt, path, strerror(errno));
  }
  if (fclose(f)) {
    remove(tmp);
    return dpt_err_set(err, DPT_E_RUNTIME, "%s '%s': write failed: %s", opt, path, strerror(errno));
  }
  if (rename(tmp, path)) {
    int e = errno;
    remove(tmp);
    return dpt_err_set(err, DPT_E_RUNTIME, "%s '%s': cannot rename %s: %s", opt, path, tmp, strerror(e));
  }
  return 0;
}

int dpt_topo_plan_main(int argc, char **argv, const char *program)
{
  static const struct option longopts[] = {
    {"topology-conf", required_argument, NULL, OPT_CONF},
    {"ibnetdiscover", required_argument, NULL, OPT_IB},
    {"addr-list", required_argument, NULL, OPT_ADDR},
    {"nodes", required_argument, NULL, OPT_NODES},
    {"gpus-per-node", required_argument, NULL, OPT_GPUS},
    {"node-xml", required_argument, NULL, OPT_XML},
    {"node-xml-dir", required_argument, NULL, OPT_XML_DIR},
    {"ranks-per-node", required_argument, NULL, OPT_RPN},
    {"oversubscribe", no_argument, NULL, OPT_OVER},
    {"threads-per-rank", required_argument, NULL, OPT_TPR},
    {"size", required_argument, NULL, OPT_SIZE},
    {"fp16", no_argument, NULL, OPT_FP16},
    {"seed", required_argument, NULL, OPT_SEED},
    {"host-gbps", required_argument, NULL, OPT_HOST},
    {"uplink-gbps", required_argument, NULL, OPT_UP},
    {"intra-gbps", required_argument, NULL, OPT_INTRA},
    {"alpha-us", required_argument, NULL, OPT_ALPHA},
    {"json", no_argument, NULL, OPT_JSON},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"slurm-hostfile", required_argument, NULL, OPT_HOSTFILE},
    {"help", no_argument, NULL, OPT_HELP},
    {"report", required_argument, NULL, OPT_REPORT},
    {"no-report", no_argument, NULL, OPT_NO_REPORT},
    {NULL, 0, NULL, 0},
  };
  const char *tree_opt = NULL, *tree_file = NULL, *nodes = NULL, *xml = NULL, *output = NULL;
  const char *report_path = NULL, *xml_dir = NULL, *hostfile = NULL;
  int gpus = -1, json = 0, c, status = 0, no_report = 0;
  struct dpt_report *rep = NULL;
  struct dpt_plan_opts o;
  struct dpt_job job;
  struct dpt_err err;
  struct dpt_plan *plan = NULL;
  char *doc = NULL, *text = NULL, **cmd = NULL;
  char hosts_what[600], tree_what[4200], node_what[4200], note[600];
  size_t text_len = 0;
  json_t *j = NULL;

  dpt_err_clear(&err);
  dpt_plan_opts_init(&o);
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    switch (c) {
    case OPT_CONF:
    case OPT_IB:
    case OPT_ADDR: {
      const char *name = c == OPT_CONF ? "--topology-conf" : c == OPT_IB ? "--ibnetdiscover" : "--addr-list";
      if (tree_opt) {
        dpt_err_set(&err, DPT_E_INPUT, "%s and %s: give one switch tree source", tree_opt, name);
        goto fail;
      }
      tree_opt = name;
      tree_file = optarg;
      break;
    }
    case OPT_NODES: nodes = optarg; break;
    case OPT_GPUS:
      if (parse_int("--gpus-per-node", optarg, 0, &gpus, &err))
        goto fail;
      break;
    case OPT_XML: xml = optarg; break;
    case OPT_XML_DIR: xml_dir = optarg; break;
    case OPT_RPN:
      if (parse_int("--ranks-per-node", optarg, 1, &o.ranks_per_node, &err))
        goto fail;
      break;
    case OPT_OVER: o.allow_oversubscribe = 1; break;
    case OPT_TPR:
      if (parse_int("--threads-per-rank", optarg, 1, &o.threads_per_rank, &err))
        goto fail;
      break;
    case OPT_SIZE:
      if (parse_u64("--size", optarg, 1, &o.size_bytes, &err))
        goto fail;
      if (o.size_bytes == 0) {
        dpt_err_set(&err, DPT_E_INPUT, "--size 0: the message must have at least one byte");
        goto fail;
      }
      break;
    case OPT_FP16: o.fp16 = 1; break;
    case OPT_SEED:
      if (parse_u64("--seed", optarg, 0, &o.seed, &err))
        goto fail;
      if (o.seed > (uint64_t)INT64_MAX) { /* the JSON document stores it as an integer */
        dpt_err_set(&err, DPT_E_INPUT, "--seed %s: at most %lld", optarg, (long long)INT64_MAX);
        goto fail;
      }
      break;
    case OPT_HOST:
      if (parse_pos("--host-gbps", optarg, &o.host_gbps, &err))
        goto fail;
      break;
    case OPT_UP:
      if (parse_pos("--uplink-gbps", optarg, &o.uplink_gbps, &err))
        goto fail;
      break;
    case OPT_INTRA:
      if (parse_pos("--intra-gbps", optarg, &o.intra_gbps, &err))
        goto fail;
      break;
    case OPT_ALPHA:
      if (parse_pos("--alpha-us", optarg, &o.alpha_us, &err))
        goto fail;
      break;
    case OPT_JSON: json = 1; break;
    case OPT_OUTPUT: output = optarg; break;
    case OPT_HOSTFILE: hostfile = optarg; break;
    case OPT_REPORT: report_path = optarg; break;
    case OPT_NO_REPORT: no_report = 1; break;
    case 'h':
    case OPT_HELP:
      usage(stdout);
      return 0;
    case ':':
      dpt_err_set(&err, DPT_E_INPUT, "%s needs a value (see dpt-topo plan --help)", argv[optind - 1]);
      goto fail;
    default:
      dpt_err_set(&err, DPT_E_INPUT, "unknown option '%s' (see dpt-topo plan --help)", argv[optind - 1]);
      goto fail;
    }
  }
  if (optind < argc) {
    dpt_err_set(&err, DPT_E_INPUT, "unexpected argument '%s' (see dpt-topo plan --help)", argv[optind]);
    goto fail;
  }
  if (!nodes) {
    dpt_err_set(&err, DPT_E_INPUT, "--nodes HOSTLIST is required: the job's nodes, e.g. --nodes 'n[001-016]'");
    goto fail;
  }
  if ((xml != NULL) + (xml_dir != NULL) + (gpus >= 0) > 1) {
    dpt_err_set(&err, DPT_E_INPUT, "--gpus-per-node, --node-xml and --node-xml-dir: give one of them");
    goto fail;
  }
  if (!xml && !xml_dir && gpus < 0) {
    dpt_err_set(&err, DPT_E_INPUT,
                "say what a node holds: --gpus-per-node N, --node-xml FILE or --node-xml-dir DIR");
    goto fail;
  }
  if (report_path && no_report) {
    dpt_err_set(&err, DPT_E_INPUT, "--report and --no-report: give one of them");
    goto fail;
  }
  if (o.allow_oversubscribe && !o.ranks_per_node) {
    dpt_err_set(&err, DPT_E_INPUT, "--oversubscribe needs --ranks-per-node N");
    goto fail;
  }

  /* the job, planned as every other caller plans it (dpt_job.h) */
  dpt_job_init(&job);
  job.model = o;
  job.ranks_per_node = o.ranks_per_node;
  job.oversubscribe = o.allow_oversubscribe;
  job.threads_per_rank = o.threads_per_rank;
  job.hostlist = nodes;
  snprintf(hosts_what, sizeof hosts_what, "--nodes '%.500s'", nodes);
  job.hosts_what = hosts_what;
  if (tree_opt) {
    job.tree_source = tree_opt[2] == 't' ? DPT_JOB_TREE_TOPOLOGY_CONF
                      : tree_opt[2] == 'i' ? DPT_JOB_TREE_IBNETDISCOVER : DPT_JOB_TREE_ADDR_LIST;
    job.tree_path = tree_file;
    snprintf(tree_what, sizeof tree_what, "%s %.4096s", tree_opt, tree_file);
    job.tree_what = tree_what;
  }
  if (xml_dir) {
    job.node_source = DPT_JOB_NODE_XML_DIR;
    job.node_path = xml_dir;
    snprintf(node_what, sizeof node_what, "--node-xml-dir %.4096s", xml_dir);
  } else if (xml) {
    job.node_source = DPT_JOB_NODE_XML;
    job.node_path = xml;
    snprintf(node_what, sizeof node_what, "--node-xml %.4096s", xml);
  } else {
    job.node_source = DPT_JOB_NODE_GPUS;
    job.gpus_per_node = gpus;
    snprintf(node_what, sizeof node_what, "--gpus-per-node %d", gpus);
  }
  job.node_what = node_what;
  if (dpt_job_plan(&plan, &job, note, sizeof note, &err))
    goto fail;

  /* everything computed: now render, then write */
  if (json || output) {
    j = dpt_plan_to_json(plan);
    doc = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    if (!doc) {
      dpt_err_set(&err, DPT_E_NOMEM, "cannot render the plan as JSON");
      goto fail;
    }
  }
  if (!json) {
    FILE *m = open_memstream(&text, &text_len);
    if (!m) {
      dpt_err_set(&err, DPT_E_NOMEM, "cannot render the plan as text");
      goto fail;
    }
    dpt_plan_print(m, plan);
    if (fclose(m)) {
      dpt_err_set(&err, DPT_E_NOMEM, "cannot render the plan as text");
      goto fail;
    }
  }
  if (output && write_file("--output", output, doc, &err))
    goto fail;
  if (hostfile) {
    char *hf = NULL;
    size_t hf_len = 0;
    FILE *m = open_memstream(&hf, &hf_len);
    int ok = m != NULL;
    for (int r = 0; ok && r < plan->n_ranks; r++)
      ok = fprintf(m, "%s%s", r ? "\n" : "", plan->nodes[plan->ranks[r].node].host) > 0;
    if (m && fclose(m))
      ok = 0;
    if (!ok) {
      free(hf);
      dpt_err_set(&err, DPT_E_NOMEM, "cannot render the Slurm hostfile");
      goto fail;
    }
    ok = write_file("--slurm-hostfile", hostfile, hf, &err) == 0; /* adds the last newline */
    free(hf);
    if (!ok)
      goto fail;
  }
  if (report_path) {
    /* the command as typed: the program, then the subcommand and its options */
    if (!(cmd = calloc((size_t)argc + 2, sizeof *cmd))) {
      dpt_err_set(&err, DPT_E_NOMEM, "out of memory");
      goto fail;
    }
    cmd[0] = (char *)(program ? program : "dpt-topo");
    memcpy(cmd + 1, argv, sizeof *argv * (size_t)argc);
    if (dpt_report_create(&rep, "dpt-topo", argc + 1, cmd, 0, 1, &err) ||
        dpt_report_set_plan(rep, plan, &err))
      goto fail;
    dpt_report_set_software(rep, "wire", o.fp16 ? "fp16" : "fp32");
    dpt_report_set_allreduce(rep, plan->opts.size_bytes, -1);
    dpt_report_set_config(rep, "nodes", json_string(nodes));
    dpt_report_set_config(rep, "tree", json_string(tree_opt ? tree_file : "flat"));
    dpt_report_set_exit_status(rep, 0);
    if (dpt_report_finish(rep, NULL, report_path, NULL, &err))
      goto fail;
  }
  if (note[0])
    fprintf(stderr, "dpt-topo plan: %s\n", note);
  if (json ? (fputs(doc, stdout) < 0 || fputc('\n', stdout) < 0)
           : fwrite(text, 1, text_len, stdout) != text_len) {
    dpt_err_set(&err, DPT_E_RUNTIME, "cannot write to stdout: %s", strerror(errno));
    goto fail;
  }
  if (fflush(stdout)) {
    dpt_err_set(&err, DPT_E_RUNTIME, "cannot write to stdout: %s", strerror(errno));
    goto fail;
  }
  goto out;
fail:
  fprintf(stderr, "dpt-topo plan: %s\n", err.msg);
  status = dpt_err_exit_status(&err);
  if (!status)
    status = 1;
out:
  dpt_report_destroy(rep);
  free(cmd);
  free(text);
  free(doc);
  json_decref(j);
  dpt_plan_destroy(plan);
  return status;
}
