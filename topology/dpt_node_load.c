/* dpt_node_load.c — loading one node's topology: an hwloc XML buffer or file
 * (HWLOC_XMLFILE when none is named), the live machine, or a synthetic node of
 * N GPUs; the node's lifetime (dpt_node_destroy).  hwloc decides what it reads;
 * our own look at the XML's root element only explains a refusal in words a
 * user can act on.  The devices are found by dpt_node_build (dpt_node.c). */
#define _GNU_SOURCE
#include "dpt_node.h"
#include "dpt_node_int.h"
#include "dpt_file.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* loading                                                                   */

static struct dpt_node *node_alloc(const char *source)
{
  struct dpt_node *n = calloc(1, sizeof *n);
  if (n)
    dpt_node_copy_str(n->source, sizeof n->source, source);
  return n;
}

/* End of the start tag at p ('<'): the first '>' outside quoted attribute values. */
static const char *tag_end(const char *p, const char *end)
{
  char q = 0;
  for (; p < end; p++) {
    if (q)
      q = *p == q ? 0 : q;
    else if (*p == '"' || *p == '\'')
      q = *p;
    else if (*p == '>')
      return p;
  }
  return NULL;
}

/* Attribute attr of the start tag [tag, end): its value in *val (*vlen bytes) and the
 * position just after its closing quote; NULL when the tag has no such attribute.  The tag
 * is walked attribute by attribute (name, '=', quoted value), so a name inside another
 * attribute's value never matches; the walk stops at the first thing that is not an
 * attribute (a malformed tag: hwloc's parser refuses it). */
static const char *tag_attr(const char *tag, const char *end, const char *attr, const char **val, size_t *vlen)
{
  size_t n = strlen(attr);
  const char *p = tag;
  if (p < end && *p == '<')
    p++;
  while (p < end && !isspace((unsigned char)*p) && *p != '/' && *p != '>') /* the element's name */
    p++;
  for (;;) {
    const char *name, *q, *close;
    while (p < end && isspace((unsigned char)*p))
      p++;
    name = p;
    while (p < end && (isalnum((unsigned char)*p) || (*p && strchr("_:.-", *p))))
      p++;
    if (p == name)
      return NULL; /* '/', '>', the end, or not an attribute */
    q = p;
    while (q < end && isspace((unsigned char)*q))
      q++;
    if (q >= end || *q++ != '=')
      return NULL;
    while (q < end && isspace((unsigned char)*q))
      q++;
    if (q >= end || (*q != '"' && *q != '\'') || !(close = memchr(q + 1, *q, (size_t)(end - q - 1))))
      return NULL;
    if ((size_t)(p - name) == n && !memcmp(name, attr, n)) {
      *val = q + 1;
      *vlen = (size_t)(close - q - 1);
      return close + 1;
    }
    p = close + 1;
  }
}

/* The root element of an XML buffer: past the BOM, the XML declaration, comments and the
 * DOCTYPE.  On success *root points at its '<' and *gt at the '>' ending its start tag;
 * otherwise a message naming what is wrong (used to explain why hwloc refused a file). */
static int xml_root(const char *buf, size_t len, const char *name, const char **root, const char **gt,
                    struct dpt_err *err)
{
  const char *p = buf, *end = buf + len;
  char tag[64] = "";
  size_t k = 0;
  if (len >= 3 && (unsigned char)p[0] == 0xef && (unsigned char)p[1] == 0xbb && (unsigned char)p[2] == 0xbf)
    p += 3;
  for (;;) {
    while (p < end && isspace((unsigned char)*p))
      p++;
    if (p >= end)
      return dpt_err_set(err, DPT_E_INPUT,
                         "%s: %s; expected an hwloc XML topology (make one with `lstopo --of xml FILE`)",
                         name, len ? "the file holds no XML element" : "the file is empty");
    if (*p != '<')
      return dpt_err_set(err, DPT_E_INPUT,
                         "%s: not XML (first byte 0x%02x at offset %zu is not '<'); expected an hwloc XML "
                         "topology (make one with `lstopo --of xml FILE`)",
                         name, (unsigned char)*p, (size_t)(p - buf));
    const char *close = NULL;
    if (end - p >= 4 && !memcmp(p, "<!--", 4)) {
      close = memmem(p + 4, end - p - 4, "-->", 3);
      if (close)
        close += 2; /* at the '>' */
    } else if (end - p >= 2 && (p[1] == '?' || p[1] == '!')) {
      close = memchr(p, '>', end - p);
    } else {
      break;
    }
    if (!close)
      return dpt_err_set(err, DPT_E_INPUT, "%s: truncated XML: unterminated prologue at offset %zu "
                                           "(the file ends after %zu bytes); re-export it with `lstopo --of xml`",
                         name, (size_t)(p - buf), len);
    p = close + 1;
  }
  *root = p++;
  while (p < end && k + 1 < sizeof tag && (isalnum((unsigned char)*p) || (*p && strchr("_:.-", *p))))
    tag[k++] = *p++;
  tag[k] = 0;
  if (strcmp(tag, "topology"))
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: not an hwloc topology: the root element is <%s>, expected <topology> "
                       "(an hwloc XML export, `lstopo --of xml FILE`)",
                       name, tag);
  if (!(*gt = tag_end(p, end)))
    return dpt_err_set(err, DPT_E_INPUT, "%s: truncated XML: the <topology> start tag is not closed "
                                         "(the file ends after %zu bytes); re-export it with `lstopo --of xml`",
                       name, len);
  return 0;
}

/* The format's major version (the root's version="M.m"; 1 when absent, as hwloc 1.x wrote). */
static long xml_major(const char *root, const char *gt)
{
  const char *v;
  size_t n;
  return tag_attr(root, gt, "version", &v, &n) ? strtol(v, NULL, 10) : 1;
}

/* Why hwloc refused buf, when the file says it plainly (hwloc itself only says "invalid
 * argument"): 0 when none of these explains it. */
static int explain_refusal(const char *buf, size_t len, const char *name, struct dpt_err *err)
{
  const char *root, *gt;
  int rc = xml_root(buf, len, name, &root, &gt, err);
  if (rc)
    return rc;
  if (xml_major(root, gt) > 2) {
    const char *v;
    size_t n;
    tag_attr(root, gt, "version", &v, &n);
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: hwloc XML format version \"%.*s\" is not supported: this dpt is built with hwloc "
                       "2.x (API %u.%u), which reads the 1.x and 2.x formats; re-export the topology in the 2.x format "
                       "(hwloc 3: `lstopo --export-xml-flags v2 FILE.xml`, or lstopo from hwloc 2.x)",
                       name, (int)(n < 16 ? n : 16), v, (hwloc_get_api_version() >> 16) & 0xff,
                       (hwloc_get_api_version() >> 8) & 0xff);
  }
  if (!memmem(gt, buf + len - gt, "</topology>", 11))
    return dpt_err_set(err, DPT_E_INPUT,
                       "%s: truncated XML: no closing </topology> tag (the file ends after %zu bytes); "
                       "re-export it with `lstopo --of xml`",
                       name, len);
  return 0;
}

/* The buffer handed to hwloc: a NUL-terminated copy of buf (*out_len bytes with the NUL).
 *
 * The one thing dpt checks before hwloc does, because hwloc 2.9 crashes on it: in a
 * 2.x-format file, an <object> with a cpuset but no complete_cpuset, or a nodeset but no
 * complete_nodeset, makes its XML importer dereference the missing set (lstopo dies with
 * SIGSEGV; a PU, a NUMA node, the Machine).  Where the importer survives (a lone child),
 * hwloc's core completes the object with complete_cpuset = cpuset and complete_nodeset =
 * nodeset; the copy carries exactly those attributes, so dpt reads what hwloc reads and
 * hwloc never sees the crashing form.  1.x-format files are passed as they are: hwloc's
 * 1.x importer checks these sets itself (a Group with some missing is dropped, as hwloc
 * <= 1.7.2 wrote I/O Groups with a cpuset only; any other such object is refused). */
static char *xml_for_hwloc(const char *buf, size_t len, const char *name, size_t *out_len)
{
  static const char *const pairs[][2] = {{"cpuset", "complete_cpuset"}, {"nodeset", "complete_nodeset"}};
  const char *end = buf + len, *root, *gt, *done = buf;
  char *out = NULL;
  size_t n = 0;
  struct dpt_err ignore;
  FILE *m = open_memstream(&out, &n);
  if (!m)
    return NULL;
  if (!xml_root(buf, len, name, &root, &gt, &ignore) && xml_major(root, gt) >= 2)
    for (const char *p = gt, *te; (p = memmem(p, end - p, "<object", 7)); p = te) {
      const char *at[2] = {NULL, NULL}, *v[2], *other;
      size_t vl[2], ol;
      if (!(te = tag_end(p + 7, end)))
        break; /* truncated: hwloc refuses it */
      if (!isspace((unsigned char)p[7]))
        continue;
      for (int i = 0; i < 2; i++)
        if (!tag_attr(p, te, pairs[i][1], &other, &ol))
          at[i] = tag_attr(p, te, pairs[i][0], &v[i], &vl[i]);
      for (int k = 0; k < 2; k++) { /* insert after each value, in the order they come */
        int i = at[0] && (!at[1] || at[0] < at[1]) ? 0 : 1;
        if (!at[i])
          break;
        fwrite(done, 1, (size_t)(at[i] - done), m);
        fprintf(m, " %s=\"%.*s\"", pairs[i][1], (int)vl[i], v[i]);
        done = at[i];
        at[i] = NULL;
      }
    }
  fwrite(done, 1, (size_t)(end - done), m);
  fputc(0, m);
  if (fclose(m)) {
    free(out);
    return NULL;
  }
  *out_len = n;
  return out;
}

static int load_common(struct dpt_node *node, const char *buf, size_t len, const char *name,
                       struct dpt_err *err)
{
  int rc, e;
  char *copy = NULL;
  size_t copy_len = 0;
  if (hwloc_topology_init(&node->topo) < 0) {
    node->topo = NULL;
    return dpt_err_set(err, DPT_E_RUNTIME, "hwloc_topology_init failed: %s", strerror(errno));
  }
  hwloc_topology_set_io_types_filter(node->topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (buf) {
    if (len > (size_t)1 << 30)
      return dpt_err_set(err, DPT_E_INPUT, "%s: %zu bytes is too large for an hwloc XML topology", name, len);
    copy = xml_for_hwloc(buf, len, name, &copy_len); /* hwloc wants the size including the NUL */
    if (!copy || copy_len > INT_MAX) {
      free(copy);
      return dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory (%zu bytes)", name, len);
    }
    /* hwloc decides what it reads; our own look at the file only explains a refusal */
    if (hwloc_topology_set_xmlbuffer(node->topo, copy, (int)copy_len) < 0)
      goto refused;
  }
  if (hwloc_topology_load(node->topo) < 0) {
    if (buf)
      goto refused;
    return dpt_err_set(err, DPT_E_RUNTIME, "hwloc could not discover this machine's topology: %s",
                       strerror(errno));
  }
  free(copy);
  if (hwloc_get_nbobjs_by_type(node->topo, HWLOC_OBJ_PU) <= 0)
    return dpt_err_set(err, DPT_E_INPUT, "%s: the topology has no processing unit (PU)", name);
  return dpt_node_build(node, err);
refused:
  e = errno;
  free(copy);
  rc = explain_refusal(buf, len, name, err);
  return rc ? rc
            : dpt_err_set(err, DPT_E_INPUT,
                          "%s: hwloc could not load this XML topology (malformed XML or inconsistent content: %s); "
                          "run `HWLOC_XML_VERBOSE=1 lstopo-no-graphics --input %s` for hwloc's diagnosis",
                          name, strerror(e), name);
}

int dpt_node_load_buffer(struct dpt_node **out, const char *buf, size_t len, const char *name,
                         struct dpt_err *err)
{
  struct dpt_node *node;
  int rc;
  *out = NULL;
  if (!name)
    name = "(buffer)";
  if (!buf)
    return dpt_err_set(err, DPT_E_INPUT, "%s: no XML buffer given", name);
  node = node_alloc(name);
  if (!node)
    return dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory", name);
  rc = load_common(node, buf, len, name, err);
  if (rc) {
    dpt_node_destroy(node);
    return rc;
  }
  *out = node;
  return 0;
}

int dpt_node_load(struct dpt_node **out, const char *xml_path, struct dpt_err *err)
{
  struct dpt_node *node = NULL;
  char *buf = NULL;
  size_t len = 0;
  int rc;
  *out = NULL;
  if (!xml_path || !*xml_path) {
    const char *env = getenv("HWLOC_XMLFILE");
    if (env && *env)
      xml_path = env;
  }
  if (xml_path && *xml_path) {
    rc = dpt_file_read(xml_path, "topology file", "give an hwloc XML file made with `lstopo --of xml FILE`",
                       0, &buf, &len, err);
    if (rc)
      return rc;
  }
  node = node_alloc(xml_path && *xml_path ? xml_path : "live");
  if (!node) {
    free(buf);
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  }
  rc = load_common(node, buf, len, node->source, err);
  free(buf);
  if (rc) {
    dpt_node_destroy(node);
    return rc;
  }
  if (!xml_path && !node->hostname[0] && gethostname(node->hostname, sizeof node->hostname - 1) < 0)
    node->hostname[0] = 0;
  *out = node;
  return 0;
}

int dpt_node_synthetic(struct dpt_node **out, const char *hostname, int n_gpus, struct dpt_err *err)
{
  struct dpt_node *node;
  *out = NULL;
  if (n_gpus < 0 || n_gpus > 4096)
    return dpt_err_set(err, DPT_E_INPUT, "GPUs per node: %d is out of range (0..4096)", n_gpus);
  node = node_alloc("synthetic");
  if (!node)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory");
  dpt_node_copy_str(node->hostname, sizeof node->hostname, hostname);
  node->n_gpus = n_gpus;
  node->gpus = calloc(n_gpus ? n_gpus : 1, sizeof *node->gpus);
  node->hcas = calloc(1, sizeof *node->hcas);
  node->numa = calloc(1, sizeof *node->numa);
  node->gpu_gpu = calloc(n_gpus ? (size_t)n_gpus * n_gpus : 1, sizeof *node->gpu_gpu);
  node->gpu_hca = calloc(1, sizeof *node->gpu_hca);
  node->hca_hca = calloc(1, sizeof *node->hca_hca);
  node->cpuset = hwloc_bitmap_alloc();
  if (!node->gpus || !node->hcas || !node->numa || !node->gpu_gpu || !node->gpu_hca || !node->hca_hca ||
      !node->cpuset)
    goto fail;
  for (int g = 0; g < n_gpus; g++) {
    struct dpt_node_gpu *G = &node->gpus[g];
    G->index = g;
    snprintf(G->model, sizeof G->model, "unknown");
    G->numa = -1;
    G->package = -1;
    G->cpuset = hwloc_bitmap_alloc();
    if (!G->cpuset)
      goto fail;
    for (int b = 0; b < n_gpus; b++) {
      struct dpt_path *p = &node->gpu_gpu[g * n_gpus + b];
      p->cls = p->pcie = g == b ? DPT_PATH_X : DPT_PATH_UNKNOWN;
    }
  }
  *out = node;
  return 0;
fail:
  dpt_node_destroy(node);
  return dpt_err_set(err, DPT_E_NOMEM, "out of memory for a synthetic node of %d GPUs", n_gpus);
}

void dpt_node_destroy(struct dpt_node *node)
{
  if (!node)
    return;
  if (node->gpus)
    for (int i = 0; i < node->n_gpus; i++)
      hwloc_bitmap_free(node->gpus[i].cpuset);
  if (node->hcas)
    for (int i = 0; i < node->n_hcas; i++)
      hwloc_bitmap_free(node->hcas[i].cpuset);
  if (node->numa)
    for (int i = 0; i < node->n_numa; i++)
      hwloc_bitmap_free(node->numa[i].cpuset);
  free(node->gpus);
  free(node->ignored);
  free(node->hcas);
  free(node->numa);
  free(node->gpu_gpu);
  free(node->gpu_hca);
  free(node->hca_hca);
  hwloc_bitmap_free(node->cpuset);
  if (node->topo)
    hwloc_topology_destroy(node->topo);
  free(node);
}
