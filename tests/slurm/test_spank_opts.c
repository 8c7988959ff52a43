/* test_spank_opts.c — the --dpt option parser: every key, defaults layering,
 * idempotent re-parsing, and bad input (unknown keys, 10,000-character values,
 * non-ASCII bytes, empty items, out-of-range numbers) with clear messages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_spank_opts.h"
#include "dpt_check.h"

static int apply(struct dpt_spank_opts *o, const char *s, struct dpt_err *e)
{
  dpt_err_clear(e);
  return dpt_spank_opts_apply(o, s, "--dpt", e);
}

/* s must be rejected, the message must contain want, and *o must not change. */
static void bad(const char *s, const char *want)
{
  struct dpt_spank_opts o, before;
  struct dpt_err e;
  dpt_spank_opts_init(&o);
  apply(&o, "comm=ring,fp16", &e);
  before = o;
  int rc = apply(&o, s, &e);
  CHECK(rc == DPT_E_INPUT, "'%.60s' accepted", s);
  CHECK(e.code == DPT_E_INPUT, "code %d", e.code);
  CHECK(strstr(e.msg, want) != NULL, "'%.60s': message '%s' lacks '%s'", s, e.msg, want);
  CHECK(strncmp(e.msg, "--dpt", 5) == 0, "message '%s' does not name the source", e.msg);
  CHECK(memcmp(&o, &before, sizeof o) == 0, "'%.60s' changed the options on error", s);
  for (const char *p = e.msg; *p; p++)
    CHECK((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f, "non-printable byte in message for '%.40s'", s);
}

static void test_defaults(void)
{
  struct dpt_spank_opts o;
  char buf[4096];
  dpt_spank_opts_init(&o);
  CHECK(!o.enabled && !strcmp(o.comm, "auto") && !strcmp(o.tree, "slurm") && o.bind == DPT_SPANK_BIND_AUTO &&
            !o.fp16 && !o.ranks_per_gpu && !o.threads && !o.report[0] && !o.topology[0] && !o.verbose,
        "defaults");
  CHECK(dpt_spank_opts_format(&o, buf, sizeof buf) == 0, "format");
  CHECK(!strcmp(buf, "comm=auto,fp16=0,ranks-per-gpu=0,threads=0,report=,topology=,tree=slurm,bind=auto,verbose=0"),
        "%s", buf);
}

static void test_every_key(void)
{
  struct dpt_spank_opts o;
  struct dpt_err e;
  char buf[4096];
  dpt_spank_opts_init(&o);
  CHECK(apply(&o, NULL, &e) == 0 && apply(&o, "", &e) == 0, "empty");
  CHECK(apply(&o, "comm=nccl,fp16,ranks-per-gpu=2,threads=7,report=/tmp/r-%j.json,"
                  "topology=/etc/dpt/node.xml,tree=/etc/slurm/topology.conf,bind=strict,verbose=3",
              &e) == 0, "%s", e.msg);
  CHECK(dpt_spank_opts_format(&o, buf, sizeof buf) == 0, "format");
  CHECK(!strcmp(buf, "comm=nccl,fp16=1,ranks-per-gpu=2,threads=7,report=/tmp/r-%j.json,"
                     "topology=/etc/dpt/node.xml,tree=/etc/slurm/topology.conf,bind=strict,verbose=3"),
        "%s", buf);
  CHECK(!o.enabled, "apply must not enable");
  const char *const comms[] = {"auto", "mpi", "ring", "hierarchical", "nccl"};
  for (int i = 0; i < 5; i++) {
    char s[64];
    snprintf(s, sizeof s, "comm=%s", comms[i]);
    CHECK(apply(&o, s, &e) == 0 && !strcmp(o.comm, comms[i]), "%s", s);
  }
  const char *const yes[] = {"fp16", "fp16=1", "fp16=yes", "fp16=true", "fp16=on"};
  const char *const no[] = {"fp16=0", "fp16=no", "fp16=false", "fp16=off"};
  for (int i = 0; i < 5; i++)
    CHECK(apply(&o, "fp16=0", &e) == 0 && apply(&o, yes[i], &e) == 0 && o.fp16 == 1, "%s", yes[i]);
  for (int i = 0; i < 4; i++)
    CHECK(apply(&o, "fp16", &e) == 0 && apply(&o, no[i], &e) == 0 && o.fp16 == 0, "%s", no[i]);
  CHECK(apply(&o, "verbose", &e) == 0 && o.verbose == 1, "bare verbose");
  CHECK(apply(&o, "verbose=0", &e) == 0 && o.verbose == 0, "verbose=0");
  CHECK(apply(&o, "bind=none", &e) == 0 && o.bind == DPT_SPANK_BIND_NONE, "bind=none");
  CHECK(apply(&o, "bind=auto", &e) == 0 && o.bind == DPT_SPANK_BIND_AUTO, "bind=auto");
  CHECK(apply(&o, "tree=flat", &e) == 0 && !strcmp(o.tree, "flat"), "tree=flat");
  CHECK(apply(&o, "ranks-per-gpu=1", &e) == 0 && o.ranks_per_gpu == 1, "rpg 1");
  CHECK(apply(&o, "ranks-per-gpu=64", &e) == 0 && o.ranks_per_gpu == 64, "rpg 64");
  CHECK(apply(&o, "threads=0", &e) == 0 && o.threads == 0, "threads 0");
  CHECK(apply(&o, "comm=mpi,comm=ring", &e) == 0 && !strcmp(o.comm, "ring"), "last one wins");
}

static void test_layering(void)
{
  struct dpt_spank_opts defaults, o;
  struct dpt_err e;
  dpt_spank_opts_init(&defaults);
  /* plugstack.conf: optional spank_dpt.so comm=ring fp16 */
  CHECK(dpt_spank_opts_apply(&defaults, "comm=ring", "plugstack.conf argument 1", &e) == 0, "%s", e.msg);
  CHECK(dpt_spank_opts_apply(&defaults, "fp16", "plugstack.conf argument 2", &e) == 0, "%s", e.msg);
  dpt_spank_opts_init(&o);
  CHECK(dpt_spank_opts_from_option(&o, &defaults, NULL, &e) == 0 && o.enabled && !strcmp(o.comm, "ring") && o.fp16,
        "bare --dpt keeps the site defaults");
  CHECK(dpt_spank_opts_from_option(&o, &defaults, "comm=mpi,verbose", &e) == 0 && !strcmp(o.comm, "mpi") &&
            o.fp16 && o.verbose == 1, "--dpt=comm=mpi overrides one key");
  /* the callback again (Slurm calls it twice: env form and command line, or local and remote) */
  CHECK(dpt_spank_opts_from_option(&o, &defaults, "threads=3", &e) == 0 && !strcmp(o.comm, "ring") &&
            o.verbose == 0 && o.threads == 3, "a second call starts again from the defaults");
  struct dpt_spank_opts keep = o;
  CHECK(dpt_spank_opts_from_option(&o, &defaults, "bogus", &e) == DPT_E_INPUT, "bogus accepted");
  CHECK(memcmp(&o, &keep, sizeof o) == 0, "a failed call changed the options");
  CHECK(strstr(e.msg, "unknown key 'bogus'") && strstr(e.msg, "comm, fp16"), "%s", e.msg);
  /* plugstack arguments are checked with the same rules */
  CHECK(dpt_spank_opts_apply(&defaults, "colour=blue", "plugstack.conf argument 3", &e) == DPT_E_INPUT &&
            strstr(e.msg, "plugstack.conf argument 3: unknown key 'colour'"), "%s", e.msg);
}

static void test_bad(void)
{
  char *big = malloc(10006);
  memcpy(big, "comm=", 5);
  memset(big + 5, 'x', 10000);
  big[10005] = '\0';
  bad(big, "the value is longer than the limit of 4095 characters");
  char mid[200];
  memcpy(mid, "comm=", 5);
  memset(mid + 5, 'r', 100);
  mid[105] = '\0';
  bad(mid, "value of 'comm' is 100 characters long");
  char path[1100] = "report=/";
  memset(path + 8, 'a', 1030);
  path[1038] = '\0';
  bad(path, "limit is 1023");
  bad("bogus", "unknown key 'bogus'");
  bad("bogus=1", "unknown key 'bogus'");
  bad("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=1", "unknown key of 48 characters");
  bad("comm=r\xc3\xa9ng", "byte 0xC3 at offset 6");
  bad("\xff", "byte 0xFF at offset 0");
  bad("comm=ring,\x01", "byte 0x01 at offset 10");
  bad("comm=ring fp16", "byte 0x20 at offset 9");
  bad("comm=", "comm= is not a communicator");
  bad("comm", "comm= is not a communicator");
  bad("comm=tcp", "comm=tcp is not a communicator; expected one of auto|mpi|ring|hierarchical|nccl");
  bad(",", "empty item at offset 0");
  bad("comm=ring,,fp16", "empty item at offset 10");
  bad("comm=ring,", "trailing ','");
  bad("=ring", "no key");
  bad("fp16=maybe", "not a boolean");
  bad("ranks-per-gpu=0", "from 1 to 64");
  bad("ranks-per-gpu=65", "from 1 to 64");
  bad("ranks-per-gpu=-1", "from 1 to 64");
  bad("ranks-per-gpu=1x", "from 1 to 64");
  bad("ranks-per-gpu", "from 1 to 64");
  bad("ranks-per-gpu=99999999999999999999999", "from 1 to 64");
  bad("threads=4097", "from 0");
  bad("verbose=4", "expected 0, 1, 2 or 3");
  bad("bind=loose", "expected one of auto|strict|none");
  bad("topology=", "needs a path");
  bad("topology", "needs a path");
  bad("topology=/tmp/$(reboot)", "character '$' at offset 14");
  bad("report=/tmp/a;b", "character ';' at offset 13");
  bad("tree=a|b", "character '|'");
  free(big);
}

int main(void)
{
  test_defaults();
  test_every_key();
  test_layering();
  test_bad();
  if (failures) {
    fprintf(stderr, "test_spank_opts: %d failure(s)\n", failures);
    return 1;
  }
  printf("test_spank_opts: ok\n");
  return 0;
}
