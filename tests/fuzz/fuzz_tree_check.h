/* fuzz_tree_check.h — what every switch tree a parser accepts must satisfy. */
#ifndef DPT_FUZZ_TREE_CHECK_H
#define DPT_FUZZ_TREE_CHECK_H

#include "dpt_tree.h"
#include "fuzz_common.h"

typedef int (*fuzz_tree_parser)(struct dpt_tree **, const char *, size_t, const char *,
                                struct dpt_err *);

static inline void fuzz_tree_check(const struct dpt_tree *t)
{
  FUZZ_CHECK(t->n_switches >= 1 && t->n_hosts >= 0);
  FUZZ_CHECK(t->sw[0].parent == -1);
  for (int i = 0; i < t->n_switches; i++) {
    const struct dpt_tree_switch *s = &t->sw[i];
    FUZZ_CHECK(memchr(s->name, '\0', sizeof s->name) && s->name[0]);
    FUZZ_CHECK(i == 0 || (s->parent >= 0 && s->parent < i)); /* preorder */
    FUZZ_CHECK(i == 0 || s->depth == t->sw[s->parent].depth + 1);
    FUZZ_CHECK(dpt_tree_find_switch(t, s->name) == i);
  }
  for (int i = 0; i < t->n_hosts; i++) {
    const struct dpt_tree_host *h = &t->hosts[i];
    FUZZ_CHECK(memchr(h->name, '\0', sizeof h->name) && h->name[0]);
    FUZZ_CHECK(h->sw >= 0 && h->sw < t->n_switches);
    FUZZ_CHECK(dpt_tree_find_host(t, h->name) == i);
    for (int j = 0; j < t->n_switches; j++) /* hosts hang off leaves only */
      FUZZ_CHECK(t->sw[j].parent != h->sw);
  }
  json_t *j = dpt_tree_to_json(t);
  FUZZ_CHECK(j != NULL);
  char *s = json_dumps(j, JSON_COMPACT);
  FUZZ_CHECK(s != NULL);
  free(s);
  json_decref(j);
}

static inline int fuzz_tree_run(fuzz_tree_parser parse, const uint8_t *data, size_t size)
{
  struct dpt_tree *t = NULL;
  struct dpt_err err = {0};
  int rc = parse(&t, (const char *)data, size, "fuzz", &err);
  if (rc == 0) {
    FUZZ_CHECK(t != NULL);
    fuzz_tree_check(t);
    dpt_tree_destroy(t);
  } else {
    fuzz_check_error(rc, &err);
  }
  return 0;
}

#endif /* DPT_FUZZ_TREE_CHECK_H */
