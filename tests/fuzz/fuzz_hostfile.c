/* fuzz_hostfile.c — dpt-launch's --hostfile parser (launcher/dpt_hostfile.c).
 * Properties: 0 or DPT_E_INPUT with a printable message (it does not echo raw
 * bytes); on success 1..DPT_HOSTFILE_MAX_HOSTS distinct names of 1..63
 * allowed characters, each of which occurs in the input. */
#define _GNU_SOURCE /* memmem */
#include "dpt_hostfile.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char **hosts = NULL;
  int n = -1;
  struct dpt_err err = {0};
  int rc = dpt_hostfile_parse((const char *)data, size, "fuzz", &hosts, &n, &err);
  if (rc) {
    fuzz_check_error_printable(rc, &err);
    FUZZ_CHECK(hosts == NULL && n == 0);
    return 0;
  }
  FUZZ_CHECK(hosts != NULL && n >= 1 && n <= DPT_HOSTFILE_MAX_HOSTS);
  for (int i = 0; i < n; i++) {
    size_t l = strlen(hosts[i]);
    FUZZ_CHECK(l >= 1 && l <= DPT_HOSTFILE_NAME_MAX);
    FUZZ_CHECK(strspn(hosts[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == l);
    FUZZ_CHECK(memmem(data, size, hosts[i], l) != NULL);
    for (int j = 0; j < i; j++)
      FUZZ_CHECK(strcmp(hosts[i], hosts[j]) != 0);
  }
  dpt_hostfile_free(hosts, n);
  return 0;
}
