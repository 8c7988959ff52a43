/* dpt_kprof.h — the per-step kernel breakdown (issue 15, item 4), host-only.
 *
 * From a list of GPU activity records (name, start, end, stream, the step it belongs to:
 * what dpt_cupti.c records for dpt-train, what bench/gpu/breakdown.py reads from
 * torch.profiler's trace for PyTorch) it computes, per step:
 *   - kernels per step, and the time in each kernel class (conv, gemm, norm, elementwise,
 *     pool, loss, optimizer, comm, data, other: bench/gpu/kernel-classes.tsv, compiled in,
 *     the table the Python side reads too);
 *   - the step's span on the GPU timeline: from its first activity to the next step's first
 *     activity (the last step: to its own last end; never before its own last end), so
 *     the gaps between steps count;
 *   - busy = the union of the kernel intervals over all streams (overlaps counted once),
 *     idle = span - busy (the idle time between kernels); gap = the part of idle after the
 *     step's last activity ends and before the next step's first starts (the host between
 *     steps: waiting for the loss, the next batch, a launch), so idle - gap is the idle
 *     inside the step (launch gaps between its kernels);
 *   - memcpy / memset records: their count and time, not kernels, not busy.
 * Class times are sums of kernel durations: with kernels running concurrently they add up
 * to more than busy.  The median over steps of every field is reported beside the steps.
 * bench/gpu/breakdown.py implements the same rules (tests/trainer/test_breakdown.py checks
 * both on the same records). */
#ifndef DPT_KPROF_H
#define DPT_KPROF_H

#include <stddef.h>
#include <stdio.h>

#include "dpt_err.h"

#define DPT_KCLASS_MAX 24
#define DPT_KCLASS_NAME 24

struct dpt_kclass_rule {
  char cls[DPT_KCLASS_NAME];
  char pat[96];   /* lower case */
  int index;      /* class index */
};

struct dpt_kclasses {
  int n_rules;
  struct dpt_kclass_rule *rule;
  int n_classes;                              /* the rules' classes in order of first use, then "other" */
  char name[DPT_KCLASS_MAX][DPT_KCLASS_NAME];
};

/* Parse "CLASS<TAB>PATTERN" lines ('#' comments and blank lines skipped).  DPT_E_INPUT naming
 * what:line for a line without a tab, an empty / too long class or pattern, a class named
 * "other", more than DPT_KCLASS_MAX - 1 classes. */
int dpt_kclasses_parse(struct dpt_kclasses *k, const char *text, size_t len, const char *what, struct dpt_err *err);
/* bench/gpu/kernel-classes.tsv as compiled in. */
int dpt_kclasses_builtin(struct dpt_kclasses *k, struct dpt_err *err);
void dpt_kclasses_free(struct dpt_kclasses *k);
/* Class index of a kernel name: the first rule whose pattern occurs in it (ASCII
 * case-insensitive); n_classes - 1 ("other") when none. */
int dpt_kclass_of(const struct dpt_kclasses *k, const char *name);

enum { DPT_KREC_KERNEL = 0, DPT_KREC_MEMCPY = 1, DPT_KREC_MEMSET = 2 };
struct dpt_krec {
  const char *name;
  int kind;                      /* DPT_KREC_* */
  int step;                      /* < 0: outside the recorded steps (ignored) */
  unsigned stream;
  unsigned long long start, end; /* ns on the GPU timeline */
};

struct dpt_kstep {
  int step;
  double kernels, copies;         /* counts (doubles: the median of an even number of steps may be .5) */
  double span_ns, busy_ns, idle_ns, copy_ns;
  double gap_ns;                   /* of idle_ns: between this step's last activity and the next step's first */
  double class_ns[DPT_KCLASS_MAX];
  double class_n[DPT_KCLASS_MAX];  /* kernels per class */
};

struct dpt_kbreakdown {
  int n_classes;
  char name[DPT_KCLASS_MAX][DPT_KCLASS_NAME];
  int n_steps;
  struct dpt_kstep *step; /* [n_steps], by step number */
  struct dpt_kstep median; /* every field the median over the steps (step = -1) */
};

/* The breakdown of records r[0, n).  DPT_E_INPUT for a record whose end is before its start or
 * whose name is NULL; DPT_E_NOMEM. */
int dpt_kprof_breakdown(const struct dpt_kclasses *k, const struct dpt_krec *r, size_t n, struct dpt_kbreakdown *b,
                        struct dpt_err *err);
void dpt_kprof_free(struct dpt_kbreakdown *b);

/* JSON ("format": "dpt.kernel-breakdown/1": label, classes, steps, median; times in ms). */
int dpt_kprof_write_json(const struct dpt_kbreakdown *b, const char *label, FILE *f, struct dpt_err *err);
/* The records as TSV, one per line: step, kind (kernel / memcpy / memset), stream, start_ns,
 * end_ns, name (tabs and newlines in names replaced by spaces): what breakdown.py --records
 * reads. */
int dpt_kprof_write_records(const struct dpt_krec *r, size_t n, FILE *f);

#endif /* DPT_KPROF_H */
