/* test_strv.c — dpt_strv_free frees every entry and the array (the ASan and valgrind
 * builds fail on a leak or a double free), takes NULL arrays and NULL entries. */
#include "dpt_check.h"
#include "dpt_strv.h"

#include <stdlib.h>
#include <string.h>

int main(void)
{
  int n = 5;
  char **v = calloc((size_t)n, sizeof *v);
  CHECK(v != NULL, "calloc");
  for (int i = 0; v && i < n; i++)
    if (i != 2) /* entry 2 stays NULL */
      v[i] = strdup("host");
  dpt_strv_free(v, n);
  dpt_strv_free(NULL, 3);
  dpt_strv_free(NULL, 0);
  v = malloc(sizeof *v);
  dpt_strv_free(v, 0); /* an empty array: only the array */
  if (!failures)
    printf("test_strv: ok\n");
  return failures != 0;
}
