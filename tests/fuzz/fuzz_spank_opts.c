/* fuzz_spank_opts.c — the --dpt option value and plugstack.conf arguments through
 * spank/dpt_spank_opts.c (parsed as root in slurmstepd).
 * Input: byte 0 chooses the entry point (even: dpt_spank_opts_apply as a
 * plugstack argument; odd: dpt_spank_opts_from_option as --dpt, on top of
 * defaults from a site argument), the rest is the string (NUL-terminated; an
 * embedded NUL ends it, as it would in argv).
 * Properties: 0 or DPT_E_INPUT only; a rejection leaves the options untouched
 * and has a printable message (the plugin promises not to echo raw input); an
 * accepted value gives in-range fields, and written back as k=v it parses
 * to the same options. */
#include "dpt_spank_opts.h"
#include "fuzz_common.h"

static void check_opts(const struct dpt_spank_opts *o)
{
  FUZZ_CHECK(o->ranks_per_gpu >= 0 && o->threads >= 0 && o->verbose >= 0 && o->verbose <= 3);
  FUZZ_CHECK(o->bind == DPT_SPANK_BIND_AUTO || o->bind == DPT_SPANK_BIND_STRICT ||
             o->bind == DPT_SPANK_BIND_NONE);
  FUZZ_CHECK(o->fp16 == 0 || o->fp16 == 1);
  FUZZ_CHECK(fuzz_printable(o->comm, sizeof o->comm) && fuzz_printable(o->report, sizeof o->report) &&
             fuzz_printable(o->topology, sizeof o->topology) && fuzz_printable(o->tree, sizeof o->tree));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1)
    return 0;
  char *s = fuzz_strndup(data + 1, size - 1);
  struct dpt_spank_opts o, before, defaults, back;
  struct dpt_err err = {0};
  int rc;
  dpt_spank_opts_init(&defaults);
  if (data[0] & 1) {
    FUZZ_CHECK(dpt_spank_opts_apply(&defaults, "comm=nccl,topology=/etc/dpt/node.xml", "site", &err) == 0);
    memset(&o, 0x5a, sizeof o);
    before = o;
    rc = dpt_spank_opts_from_option(&o, &defaults, s, &err);
    if (rc == 0)
      FUZZ_CHECK(o.enabled == 1);
  } else {
    o = defaults;
    before = o;
    rc = dpt_spank_opts_apply(&o, s, "plugstack.conf argument 1", &err);
    if (rc == 0)
      FUZZ_CHECK(o.enabled == 0);
  }
  if (rc) {
    fuzz_check_error_printable(rc, &err);
    FUZZ_CHECK(rc == DPT_E_INPUT);
    FUZZ_CHECK(memcmp(&o, &before, sizeof o) == 0);
    free(s);
    return 0;
  }
  check_opts(&o);
  /* Round trip: the accepted values, written back as k=v (empty paths and the
   * default ranks-per-gpu=0 left out: the parser refuses "report=" and
   * "ranks-per-gpu=0", so dpt_spank_opts_format()'s log form is not input). */
  char canon[3 * DPT_SPANK_PATH_MAX + 512], *c = canon;
  size_t left = sizeof canon;
  int w = snprintf(c, left, "comm=%s,fp16=%d,threads=%d,bind=%s,verbose=%d", o.comm, o.fp16, o.threads,
                   dpt_spank_bind_name(o.bind), o.verbose);
  FUZZ_CHECK(w > 0 && (size_t)w < left);
  c += w, left -= (size_t)w;
  if (o.ranks_per_gpu)
    c += snprintf(c, left, ",ranks-per-gpu=%d", o.ranks_per_gpu), left = sizeof canon - (size_t)(c - canon);
  if (o.report[0])
    c += snprintf(c, left, ",report=%s", o.report), left = sizeof canon - (size_t)(c - canon);
  if (o.topology[0])
    c += snprintf(c, left, ",topology=%s", o.topology), left = sizeof canon - (size_t)(c - canon);
  if (o.tree[0])
    c += snprintf(c, left, ",tree=%s", o.tree), left = sizeof canon - (size_t)(c - canon);
  FUZZ_CHECK(left > 1);
  char log[sizeof canon];
  FUZZ_CHECK(dpt_spank_opts_format(&o, log, sizeof log) == 0); /* the log form fits */
  dpt_spank_opts_init(&back);
  back.tree[0] = '\0';
  rc = dpt_spank_opts_apply(&back, canon, "canonical form", &err);
  if (rc) {
    fprintf(stderr, "accepted options written back as \"%s\" are rejected: %s\n", canon, err.msg);
    FUZZ_CHECK(rc == 0);
  }
  back.enabled = o.enabled;
  FUZZ_CHECK(!strcmp(back.comm, o.comm) && back.fp16 == o.fp16 && back.ranks_per_gpu == o.ranks_per_gpu &&
             back.threads == o.threads && !strcmp(back.report, o.report) &&
             !strcmp(back.topology, o.topology) && !strcmp(back.tree, o.tree) && back.bind == o.bind &&
             back.verbose == o.verbose);
  free(s);
  return 0;
}
