/* dpt_strv.h — arrays of malloc'd strings (host lists, gathered per-rank strings).
 *
 * The modules that return such arrays (dpt_tree_hostlist_expand,
 * dpt_hostfile_load, dpt_boot_allgather) free them through their own
 * *_free names, which all come here. */
#ifndef DPT_STRV_H
#define DPT_STRV_H

/* Frees v[0..n) and v; v may be NULL (then nothing is freed), entries may be NULL. */
void dpt_strv_free(char **v, int n);

#endif /* DPT_STRV_H */
