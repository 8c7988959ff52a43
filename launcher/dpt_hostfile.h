/* dpt_hostfile.h — the hostfile of `dpt-launch --hostfile FILE`.
 *
 * One host per line: the first blank-separated word is the host name, the
 * rest of the line ("slots=8", Open MPI style) is ignored; '#' starts a
 * comment; blank lines are skipped; lines may be of any length and end in
 * "\n" or "\r\n".  A host name is 1..63 characters of [A-Za-z0-9._-] (it goes
 * into mpirun's --host list and rankfile, where ',' ':' '=' have meanings).
 * Errors (DPT_E_INPUT, "NAME:LINE: ..."): a bad character (shown as \xNN,
 * never echoed raw), a name that is too long, a host listed twice, no host at
 * all, more than DPT_HOSTFILE_MAX_HOSTS hosts. */
#ifndef DPT_HOSTFILE_H
#define DPT_HOSTFILE_H

#include <stddef.h>

#include "dpt_err.h"

#define DPT_HOSTFILE_MAX_HOSTS 65536
#define DPT_HOSTFILE_NAME_MAX 63

/* Parse buf[0..len) (need not be NUL-terminated; name is used in messages).
 * On success *hosts is a malloc'd array of *n malloc'd names, in file order
 * (free with dpt_hostfile_free); on error *hosts is NULL and *n is 0. */
int dpt_hostfile_parse(const char *buf, size_t len, const char *name, char ***hosts, int *n,
                       struct dpt_err *err);
/* The same on a file. */
int dpt_hostfile_load(const char *path, char ***hosts, int *n, struct dpt_err *err);
void dpt_hostfile_free(char **hosts, int n);

#endif /* DPT_HOSTFILE_H */
