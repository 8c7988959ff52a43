/* dpt_tree_int.h — private to the switch-tree module (dpt_tree.c and its
 * sources dpt_tree_conf.c, dpt_tree_addr.c, dpt_tree_ibnet.c): error helpers,
 * the name index, name checks, virtual switches and the line reader they
 * share.  Not installed, not for other modules. */
#ifndef DPT_TREE_INT_H
#define DPT_TREE_INT_H

#include <stddef.h>

#include "dpt_tree.h"

#define NAME_MAX_LEN (DPT_TREE_NAME_MAX - 1)
#define MAX_FILE_BYTES ((size_t)256 << 20)

/* "name:line: message" (line 0: "name: message"); DPT_E_INPUT. */
int dpt_tree_err_at(struct dpt_err *err, const char *name, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* DPT_E_NOMEM "out of memory while WHAT". */
int dpt_tree_err_nomem(struct dpt_err *err, const char *what);

/* Open-addressing hash of indices; names are looked up through a callback so
 * the table works over any array (which may be realloc'd). */
typedef const char *(*dpt_tree_name_fn)(const void *ctx, int i);

struct dpt_tree_itab {
  int *slot;      /* [mask + 1], -1 = empty */
  unsigned mask;
  int n;
};

void dpt_tree_itab_free(struct dpt_tree_itab *t);
/* Index of name, or -1. */
int dpt_tree_itab_find(const struct dpt_tree_itab *t, const void *ctx, dpt_tree_name_fn fn, const char *name);
/* Add idx (its name must be absent).  0 or -1 (out of memory). */
int dpt_tree_itab_add(struct dpt_tree_itab *t, const void *ctx, dpt_tree_name_fn fn, int idx);

/* 1..63 printable ASCII characters; hosts also without blanks. */
int dpt_tree_name_ok(const char *name, int allow_space);

/* Add a virtual switch (parent -1) named base, base-2, ... (the first unused).
 * Index or negative code. */
int dpt_tree_add_virtual_switch(struct dpt_tree *t, const char *base, struct dpt_err *err);

/* Next physical line of buf: [*pos, end of line) without "\n" / "\r\n";
 * returns 0 at the end of the buffer.  A NUL byte inside makes *has_nul 1. */
int dpt_tree_next_phys_line(const char *buf, size_t len, size_t *pos, const char **line, size_t *n,
                            int *has_nul);
/* A tree parser on a buffer (dpt_tree_parse_topology_conf, ..._addr_list, ..._ibnetdiscover). */
typedef int (*dpt_tree_parse_fn)(struct dpt_tree **out, const char *buf, size_t len, const char *name,
                                 struct dpt_err *err);
/* Reads the file at path (what names it in messages; at most MAX_FILE_BYTES) and parses it with
 * parse under the file's name: the dpt_tree_load_* functions. */
int dpt_tree_load_file(struct dpt_tree **out, const char *path, const char *what, dpt_tree_parse_fn parse,
                       struct dpt_err *err);

/* p past blanks (space, \t, \r, \v, \f). */
const char *dpt_tree_skip_blank(const char *p);

#endif /* DPT_TREE_INT_H */
