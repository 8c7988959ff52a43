/* dpt_file.h — whole files into memory, with one set of messages.
 *
 * The parsers of dpt (hwloc XML, topology.conf, SLURM_TOPOLOGY_ADDR lists,
 * ibnetdiscover dumps, hostfiles) work on buffers so that tests and fuzzers can
 * call them directly; their *_load() functions read the file with
 * dpt_file_read() and hand the buffer on. */
#ifndef DPT_FILE_H
#define DPT_FILE_H

#include <stddef.h>

#include "dpt_err.h"

/* Reads the whole file at path into a new buffer *buf (free() it) of *len bytes
 * followed by a NUL that *len does not count (the contents may hold NULs).
 * what names the file in messages ("hostfile", "topology file"); hint, when not
 * NULL, says what to give instead and ends the message when the file cannot be
 * opened; max_bytes > 0 refuses a larger file (0: no limit).
 * Returns 0, DPT_E_INPUT (no path, cannot open, cannot read - a directory -, too
 * large: "PATH: cannot open the WHAT: REASON (HINT)") or DPT_E_NOMEM; on error
 * *buf is NULL and *len 0. */
int dpt_file_read(const char *path, const char *what, const char *hint, size_t max_bytes, char **buf,
                  size_t *len, struct dpt_err *err);

#endif /* DPT_FILE_H */
