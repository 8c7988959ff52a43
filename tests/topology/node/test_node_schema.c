/* test_node_schema.c — validate a "dpt.node/1" document (docs/schema-node.md).
 *
 * usage: test_node_schema FILE.json            validate (exit 0 valid, 1 invalid)
 *        test_node_schema --self-test FILE.json  FILE must be valid, and every
 *          mutation (each required field removed, each field given a wrong type,
 *          a path word or matrix shape broken) must be rejected. */
#define _GNU_SOURCE
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

enum ftype { T_STR, T_INT, T_OBJ, T_ARR };

struct field {
  const char *name;
  enum ftype type;
  long min;                 /* for T_INT */
  const struct field *sub;  /* T_OBJ: its fields; T_ARR: fields of each element (objects) */
  int arr_of;               /* T_ARR: element type when sub is NULL (T_STR, T_INT, T_ARR = matrix) */
};

static const struct field machine_f[] = {
    {"packages", T_INT, 0, NULL, 0}, {"numa_nodes", T_INT, 0, NULL, 0}, {"cores", T_INT, 0, NULL, 0},
    {"pus", T_INT, 0, NULL, 0},      {"cpuset", T_STR, 0, NULL, 0},     {NULL, 0, 0, NULL, 0}};
static const struct field numa_f[] = {
    {"os_index", T_INT, 0, NULL, 0}, {"package", T_INT, -1, NULL, 0}, {"memory_bytes", T_INT, 0, NULL, 0},
    {"cpuset", T_STR, 0, NULL, 0},   {NULL, 0, 0, NULL, 0}};
static const struct field gpu_f[] = {
    {"index", T_INT, 0, NULL, 0},        {"osdev", T_STR, 0, NULL, 0},      {"busid", T_STR, 0, NULL, 0},
    {"model", T_STR, 0, NULL, 0},        {"uuid", T_STR, 0, NULL, 0},       {"numa", T_INT, -1, NULL, 0},
    {"package", T_INT, -1, NULL, 0},     {"cpuset", T_STR, 0, NULL, 0},     {"local_cores", T_INT, 0, NULL, 0},
    {"local_pus", T_INT, 0, NULL, 0},    {"nearest_hcas", T_ARR, 0, NULL, T_INT}, {NULL, 0, 0, NULL, 0}};
static const struct field hca_f[] = {
    {"index", T_INT, 0, NULL, 0},      {"name", T_STR, 0, NULL, 0},      {"kind", T_STR, 0, NULL, 0},
    {"busid", T_STR, 0, NULL, 0},      {"netdev", T_STR, 0, NULL, 0},    {"port_state", T_STR, 0, NULL, 0},
    {"port_guid", T_STR, 0, NULL, 0},  {"node_guid", T_STR, 0, NULL, 0}, {"port_lid", T_INT, -1, NULL, 0},
    {"numa", T_INT, -1, NULL, 0},      {"cpuset", T_STR, 0, NULL, 0},    {NULL, 0, 0, NULL, 0}};
static const struct field paths_f[] = {
    {"nvlink_bw_per_link", T_INT, 0, NULL, 0}, {"gpu_gpu", T_ARR, 0, NULL, T_ARR},
    {"gpu_gpu_pcie", T_ARR, 0, NULL, T_ARR},   {"gpu_gpu_nvlinks", T_ARR, 0, NULL, T_ARR},
    {"gpu_hca", T_ARR, 0, NULL, T_ARR},        {"hca_hca", T_ARR, 0, NULL, T_ARR},
    {NULL, 0, 0, NULL, 0}};
static const struct field top_f[] = {
    {"schema", T_STR, 0, NULL, 0},   {"hostname", T_STR, 0, NULL, 0}, {"source", T_STR, 0, NULL, 0},
    {"machine", T_OBJ, 0, machine_f, 0}, {"numa", T_ARR, 0, numa_f, 0}, {"gpus", T_ARR, 0, gpu_f, 0},
    {"hcas", T_ARR, 0, hca_f, 0},    {"paths", T_OBJ, 0, paths_f, 0}, {"warnings", T_ARR, 0, NULL, T_STR},
    {NULL, 0, 0, NULL, 0}};

static int errors;
static int quiet;

static void fail(const char *where, const char *what)
{
  errors++;
  if (!quiet)
    fprintf(stderr, "schema: %s: %s\n", where, what);
}

static int type_ok(json_t *v, enum ftype t)
{
  switch (t) {
  case T_STR: return json_is_string(v);
  case T_INT: return json_is_integer(v);
  case T_OBJ: return json_is_object(v);
  default: return json_is_array(v);
  }
}

static void check_fields(json_t *obj, const struct field *fs, const char *where)
{
  char w[256];
  for (const struct field *f = fs; f->name; f++) {
    json_t *v = json_object_get(obj, f->name);
    snprintf(w, sizeof w, "%s.%s", where, f->name);
    if (!v) {
      fail(w, "required field missing");
      continue;
    }
    if (!type_ok(v, f->type)) {
      fail(w, "wrong type");
      continue;
    }
    if (f->type == T_INT && json_integer_value(v) < f->min)
      fail(w, "integer below its minimum");
    if (f->type == T_OBJ)
      check_fields(v, f->sub, w);
    if (f->type == T_ARR) {
      size_t i;
      json_t *e;
      json_array_foreach(v, i, e) {
        char we[300];
        snprintf(we, sizeof we, "%s[%zu]", w, i);
        if (f->sub) {
          if (!json_is_object(e))
            fail(we, "element is not an object");
          else
            check_fields(e, f->sub, we);
        } else if (!type_ok(e, f->arr_of)) {
          fail(we, "element of the wrong type");
        }
      }
    }
  }
}

static int word_ok(const char *s, int pcie)
{
  static const char *const words[] = {"X", "PIX", "PXB", "PHB", "NODE", "SYS", "?", NULL};
  for (int i = 0; words[i]; i++)
    if (!strcmp(s, words[i]))
      return 1;
  if (pcie || strncmp(s, "NV", 2) || !s[2])
    return 0;
  for (const char *p = s + 2; *p; p++)
    if (*p < '0' || *p > '9')
      return 0;
  return 1;
}

/* rows x cols matrix of path words (kind 0: -m words, 1: PCIe words, 2: integers >= 0) */
static void check_matrix(json_t *m, size_t rows, size_t cols, int kind, int diag, const char *where)
{
  char w[256];
  if (!json_is_array(m))
    return; /* reported by check_fields */
  if (json_array_size(m) != rows) {
    fail(where, "wrong number of rows");
    return;
  }
  for (size_t r = 0; r < rows; r++) {
    json_t *row = json_array_get(m, r);
    snprintf(w, sizeof w, "%s[%zu]", where, r);
    if (!json_is_array(row) || json_array_size(row) != cols) {
      fail(w, "row is not an array of the right length");
      continue;
    }
    for (size_t c = 0; c < cols; c++) {
      json_t *v = json_array_get(row, c);
      snprintf(w, sizeof w, "%s[%zu][%zu]", where, r, c);
      if (kind == 2) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
          fail(w, "NVLink count must be an integer >= 0");
      } else if (!json_is_string(v) || !word_ok(json_string_value(v), kind == 1)) {
        fail(w, "not a path word (X, NV<n>, PIX, PXB, PHB, NODE, SYS, ?)");
      } else if (diag && (r == c) != !strcmp(json_string_value(v), "X")) {
        fail(w, "X exactly on the diagonal");
      }
    }
  }
}

static int validate(json_t *doc)
{
  errors = 0;
  if (!json_is_object(doc)) {
    fail("$", "document is not a JSON object");
    return errors;
  }
  check_fields(doc, top_f, "$");
  json_t *s = json_object_get(doc, "schema");
  if (json_is_string(s) && strcmp(json_string_value(s), "dpt.node/1"))
    fail("$.schema", "must be \"dpt.node/1\"");
  size_t ng = json_array_size(json_object_get(doc, "gpus")), nh = json_array_size(json_object_get(doc, "hcas"));
  json_t *paths = json_object_get(doc, "paths"), *e;
  size_t i;
  if (json_is_object(paths)) {
    check_matrix(json_object_get(paths, "gpu_gpu"), ng, ng, 0, 1, "$.paths.gpu_gpu");
    check_matrix(json_object_get(paths, "gpu_gpu_pcie"), ng, ng, 1, 1, "$.paths.gpu_gpu_pcie");
    check_matrix(json_object_get(paths, "gpu_gpu_nvlinks"), ng, ng, 2, 0, "$.paths.gpu_gpu_nvlinks");
    check_matrix(json_object_get(paths, "gpu_hca"), ng, nh, 1, 0, "$.paths.gpu_hca");
    check_matrix(json_object_get(paths, "hca_hca"), nh, nh, 1, 1, "$.paths.hca_hca");
  }
  json_array_foreach(json_object_get(doc, "gpus"), i, e) {
    json_t *idx = json_object_get(e, "index"), *near = json_object_get(e, "nearest_hcas"), *h;
    size_t k;
    if (json_is_integer(idx) && (size_t)json_integer_value(idx) != i)
      fail("$.gpus[].index", "must equal the position in the array");
    json_array_foreach(near, k, h)
      if (json_is_integer(h) && (json_integer_value(h) < 0 || (size_t)json_integer_value(h) >= nh))
        fail("$.gpus[].nearest_hcas", "index out of range");
  }
  json_array_foreach(json_object_get(doc, "hcas"), i, e) {
    static const char *const kinds[] = {"InfiniBand", "RoCE", "iWARP", "EFA", "OmniPath", "RDMA", NULL};
    json_t *k = json_object_get(e, "kind"), *idx = json_object_get(e, "index");
    int ok = 0;
    for (int j = 0; json_is_string(k) && kinds[j]; j++)
      ok |= !strcmp(json_string_value(k), kinds[j]);
    if (json_is_string(k) && !ok)
      fail("$.hcas[].kind", "unknown HCA kind");
    if (json_is_integer(idx) && (size_t)json_integer_value(idx) != i)
      fail("$.hcas[].index", "must equal the position in the array");
  }
  return errors;
}

/* ---- self-test: every mutation of a valid document must be rejected ---- */

static int mutations, missed;

static void expect_invalid(json_t *doc, const char *what)
{
  mutations++;
  quiet = 1;
  int e = validate(doc);
  quiet = 0;
  if (e == 0) {
    missed++;
    fprintf(stderr, "self-test: mutation not detected: %s\n", what);
  }
}

static void mutate_fields(json_t *root, json_t *obj, const struct field *fs, const char *where)
{
  char w[256];
  for (const struct field *f = fs; f->name; f++) {
    json_t *v = json_object_get(obj, f->name);
    if (!v)
      continue;
    snprintf(w, sizeof w, "%s.%s", where, f->name);
    json_incref(v);
    json_object_del(obj, f->name); /* removed */
    expect_invalid(root, w);
    json_object_set_new(obj, f->name, f->type == T_STR ? json_integer(7) : json_string("seven")); /* wrong type */
    expect_invalid(root, w);
    json_object_set_new(obj, f->name, v); /* restored */
    if (f->type == T_OBJ)
      mutate_fields(root, v, f->sub, w);
    if (f->type == T_ARR && f->sub && json_array_size(v) > 0)
      mutate_fields(root, json_array_get(v, 0), f->sub, w);
  }
}

static int self_test(json_t *doc)
{
  if (validate(doc)) {
    fprintf(stderr, "self-test: the input document itself is invalid\n");
    return 1;
  }
  mutate_fields(doc, doc, top_f, "$");
  /* value-level mutations */
  json_t *schema = json_object_get(doc, "schema");
  json_incref(schema);
  json_object_set_new(doc, "schema", json_string("dpt.node/2"));
  expect_invalid(doc, "schema version");
  json_object_set_new(doc, "schema", schema);
  json_t *paths = json_object_get(doc, "paths");
  json_t *gg = json_object_get(paths, "gpu_gpu");
  if (json_array_size(gg) > 1) {
    json_t *row = json_array_get(gg, 0), *old = json_array_get(row, 1);
    json_incref(old);
    json_array_set_new(row, 1, json_string("NVX"));
    expect_invalid(doc, "bad path word");
    json_array_set_new(row, 1, json_string("X"));
    expect_invalid(doc, "X off the diagonal");
    json_array_set(row, 1, old);
    json_decref(old);
    json_t *last = json_array_get(gg, json_array_size(gg) - 1);
    json_incref(last);
    json_array_remove(gg, json_array_size(gg) - 1);
    expect_invalid(doc, "matrix with a missing row");
    json_array_append_new(gg, last);
  }
  json_t *gpus = json_object_get(doc, "gpus");
  if (json_array_size(gpus) > 0) {
    json_t *g0 = json_array_get(gpus, 0), *idx = json_object_get(g0, "index");
    json_incref(idx);
    json_object_set_new(g0, "index", json_integer(5));
    expect_invalid(doc, "GPU index not its position");
    json_object_set_new(g0, "index", idx);
  }
  if (validate(doc)) {
    fprintf(stderr, "self-test: document not restored after mutations\n");
    return 1;
  }
  printf("self-test: %d mutations, %d undetected\n", mutations, missed);
  return mutations > 20 && missed == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
  int self = argc == 3 && !strcmp(argv[1], "--self-test");
  if (argc != 2 && !self) {
    fprintf(stderr, "usage: test_node_schema [--self-test] FILE.json\n");
    return 2;
  }
  json_error_t jerr;
  json_t *doc = json_load_file(argv[argc - 1], 0, &jerr);
  if (!doc) {
    fprintf(stderr, "schema: %s: not JSON: %s (line %d)\n", argv[argc - 1], jerr.text, jerr.line);
    return 1;
  }
  int rc = self ? self_test(doc) : (validate(doc) ? 1 : 0);
  if (!self && rc == 0)
    printf("%s: valid dpt.node/1 (%zu GPUs, %zu HCAs)\n", argv[1], json_array_size(json_object_get(doc, "gpus")),
           json_array_size(json_object_get(doc, "hcas")));
  json_decref(doc);
  return rc;
}
