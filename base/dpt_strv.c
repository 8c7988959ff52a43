/* dpt_strv.c — see dpt_strv.h */
#include "dpt_strv.h"

#include <stdlib.h>

void dpt_strv_free(char **v, int n)
{
  if (!v)
    return;
  for (int i = 0; i < n; i++)
    free(v[i]);
  free(v);
}
