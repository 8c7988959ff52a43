/* dpt_engine_cache.h — the cuDNN engine-config cache file (issue 15), host-only.
 *
 * The fused step times the heuristics' candidate engine configs of each cuDNN
 * operation graph once per shape and keeps the fastest (dpt_cudnn_graph.c).  The
 * choice is stored in a JSON file so the next run starts at once:
 *
 *   { "format": "dpt.engine-cache/1",
 *     "gpu": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver": 13000, "cudnn": 91900,
 *     "entries": { "<operation-graph key>": { "engine": 17, "knobs": [[2, 3], [14, 4]],
 *                                             "time_ms": 0.412, "workspace": 1048576 }, ... } }
 *
 * Keyed by the GPU (name, compute capability, driver), the cuDNN version and the
 * operation-graph key (pattern, shapes, data types, layout: the caller's string).
 * Location: the directory given (an option), else $DPT_ENGINE_CACHE ("off" turns the
 * file off), else $XDG_CACHE_HOME/dpt, else $HOME/.cache/dpt; the file is
 * engines-<gpu>-sm<cc>-cudnn<version>.json (so ranks with different GPUs or cuDNN
 * builds never share one).  Stores are atomic: under an exclusive flock on
 * <file>.lock the file on disk is read again, merged (the newer run's entries win),
 * written to a temporary file in the same directory, fsync'ed and renamed over the
 * old one, so concurrent ranks on one node never corrupt it nor lose each other's
 * entries.  A corrupt, truncated, unreadable or other-version file, or one made for
 * another GPU / driver / cuDNN, is ignored with one warning (cache->warning) naming
 * the file and what to do; never an error, never a stale engine. */
#ifndef DPT_ENGINE_CACHE_H
#define DPT_ENGINE_CACHE_H

#include <stddef.h>

#include "dpt_err.h"

#define DPT_ENGINE_CACHE_FORMAT "dpt.engine-cache/1"
#define DPT_ENGINE_MAX_KNOBS 32
#define DPT_ENGINE_KEY_MAX 512

struct dpt_engine_ident {
  char gpu[128];          /* cudaDeviceProp.name */
  int cc_major, cc_minor; /* compute capability */
  int driver;             /* cudaDriverGetVersion, e.g. 13000 */
  long cudnn;             /* cudnnGetVersion(), e.g. 91900 */
};

/* One chosen engine config: what CUDNN_BACKEND_ENGINECFG_DESCRIPTOR needs to be rebuilt. */
struct dpt_engine_choice {
  long long engine;                              /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX */
  int n_knobs;
  long long knob_type[DPT_ENGINE_MAX_KNOBS];     /* cudnnBackendKnobType_t */
  long long knob_value[DPT_ENGINE_MAX_KNOBS];
  double time_ms;                                /* measured when it was chosen */
  size_t workspace;                              /* bytes */
};

/* 1 when a and b name the same engine config: the same engine and the same knob settings, in
 * any order (the heuristics' modes A and FALLBACK may offer one config twice); times and
 * workspace are not compared. */
int dpt_engine_choice_same(const struct dpt_engine_choice *a, const struct dpt_engine_choice *b);

struct dpt_engine_entry {
  char *key;
  struct dpt_engine_choice c;
  char *none; /* non-NULL: no engine runs this key here (this ident), and why; c unused */
};

struct dpt_engine_cache {
  struct dpt_engine_ident id;
  char path[1024];            /* the file; "" when the cache is off (entries stay in memory) */
  int n, cap;
  struct dpt_engine_entry *e; /* [n], sorted by key */
  char warning[2048];         /* set when open ignored the file: print it once */
  int dirty;                  /* a put / put_none since open: worth storing */
};

/* The file for id: dir (NULL: $DPT_ENGINE_CACHE, $XDG_CACHE_HOME/dpt, $HOME/.cache/dpt) +
 * engines-<gpu>-sm<major><minor>-cudnn<version>.json, the GPU name reduced to [A-Za-z0-9_-].
 * out = "" when the cache is off (dir or $DPT_ENGINE_CACHE "off").  DPT_E_INPUT when no
 * directory can be named (no HOME) or the path is too long. */
int dpt_engine_cache_path(const struct dpt_engine_ident *id, const char *dir, char *out, size_t len,
                          struct dpt_err *err);

/* Open the cache for id: names the file (as above) and loads it.  A missing file is an empty
 * cache; a file that cannot be used is ignored with cache->warning set.  Errors only for
 * dpt_engine_cache_path's reasons and DPT_E_NOMEM. */
int dpt_engine_cache_open(struct dpt_engine_cache *c, const struct dpt_engine_ident *id, const char *dir,
                          struct dpt_err *err);
void dpt_engine_cache_close(struct dpt_engine_cache *c);

/* The choice for key, NULL when there is none. */
const struct dpt_engine_choice *dpt_engine_cache_get(const struct dpt_engine_cache *c, const char *key);
/* Add or replace (in memory).  DPT_E_INPUT for an empty / too long key or too many knobs. */
int dpt_engine_cache_put(struct dpt_engine_cache *c, const char *key, const struct dpt_engine_choice *ch,
                         struct dpt_err *err);
/* Merge into the file atomically (see above).  Off: nothing.  DPT_E_RUNTIME naming the path and
 * the reason (the directory cannot be made, the file not written) and what to do; the entries
 * stay in memory. */
int dpt_engine_cache_store(struct dpt_engine_cache *c, struct dpt_err *err);

/* Negative entries: the key has no engine here (file member "no_engine": {key: why}, which
 * readers without it ignore; dpt_engine_cache_get does not return them).  _none: why, or NULL
 * when the key is not known to fail.  _put_none replaces an entry with an engine. */
const char *dpt_engine_cache_none(const struct dpt_engine_cache *c, const char *key);
int dpt_engine_cache_put_none(struct dpt_engine_cache *c, const char *key, const char *why, struct dpt_err *err);

#endif /* DPT_ENGINE_CACHE_H */
