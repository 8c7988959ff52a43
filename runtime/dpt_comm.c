/* dpt_comm.c — communicator registry, creation, worker thread, watchdog glue.
 * The algorithms live in dpt_comm_<name>.c. */
#define _GNU_SOURCE
#include "dpt_comm_int.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const struct dpt_comm_ops *const all_ops[] = {
  &dpt_comm_mpi_ops, &dpt_comm_ring_ops, &dpt_comm_hier_ops,
#ifdef DPT_HAVE_NCCL
  &dpt_comm_nccl_ops,
#endif
  NULL,
};

static const char *const names[] = {
  "mpi", "ring", "hierarchical",
#ifdef DPT_HAVE_NCCL
  "nccl",
#endif
  NULL,
};

const char *const *dpt_comm_names(void) { return names; }

static const struct dpt_comm_ops *find_ops(const char *name)
{
  for (int i = 0; all_ops[i]; i++)
    if (!strcmp(all_ops[i]->name, name))
      return all_ops[i];
  return NULL;
}

const char *dpt_comm_resolve(const char *name, int device_buffers)
{
  if (name && strcmp(name, "auto"))
    return name;
#ifdef DPT_HAVE_NCCL
  if (device_buffers)
    return "nccl";
#else
  (void)device_buffers;
#endif
  return "ring";
}

int dpt_comm_check_name(const char *name, struct dpt_err *err)
{
  if (name && (!strcmp(name, "auto") || find_ops(name)))
    return 1;
  if (name && !strcmp(name, "nccl"))
    dpt_err_set(err, DPT_E_UNSUPPORTED,
                "communicator \"nccl\" is not in this build (CUDA toolkit or NCCL not found at "
                "configure time): use mpi, ring or hierarchical");
  else
    dpt_err_set(err, DPT_E_INPUT,
                "unknown communicator \"%s\": choose one of auto, mpi, ring, hierarchical%s",
                name ? name : "(null)",
#ifdef DPT_HAVE_NCCL
                ", nccl"
#else
                ""
#endif
    );
  return 0;
}

void dpt_comm_opts_init(struct dpt_comm_opts *o)
{
  memset(o, 0, sizeof *o);
  o->name = "ring";
  o->ring_pos = -1;
  o->node = -1;
  o->async = 1;
  o->gpu = -1;
}

int dpt_comm_mpi_err(struct dpt_comm *c, int mpirc, const char *call, struct dpt_err *err)
{
  char s[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(mpirc, s, &len);
  /* Inside a collective a failed call means, in practice, that a peer is gone (Open MPI
   * reports a dead TCP peer as an internal error).  The watchdog names the suspected rank
   * (pid, process gone / stopped) and ends this rank the way every other survivor ends:
   * let it, within its deadline, instead of failing with a message that names nobody. */
  if (c->in_collective && dpt_watchdog_seconds(c->wd) > 0) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (!dpt_watchdog_expired(c->wd))
      nanosleep(&ts, NULL);
    return dpt_err_set(err, DPT_E_RUNTIME, "%s failed in %s on rank %d (%s): %s; %s", call, c->what, c->rank,
                       c->host_of ? c->host_of[c->rank] : "?", s, dpt_watchdog_message(c->wd));
  }
  return dpt_err_set(err, DPT_E_RUNTIME, "%s failed in %s on rank %d (%s): %s", call,
                     c->what[0] ? c->what : "communicator setup", c->rank,
                     c->host_of ? c->host_of[c->rank] : "?", s);
}

void dpt_comm_note_peers(struct dpt_comm *c, int send_to, int recv_from)
{
  if (!c->record)
    return;
  for (int i = 0; i < c->n_peers; i++)
    if (c->peer_send[i] == send_to && c->peer_recv[i] == recv_from)
      return;
  if (c->n_peers < DPT_COMM_MAX_PEERS) {
    c->peer_send[c->n_peers] = send_to;
    c->peer_recv[c->n_peers] = recv_from;
    c->n_peers++;
  }
}

int dpt_comm_peers(const struct dpt_comm *c, int *send_to, int *recv_from, int cap)
{
  for (int i = 0; i < c->n_peers && i < cap; i++) {
    send_to[i] = c->peer_send[i];
    recv_from[i] = c->peer_recv[i];
  }
  return c->n_peers;
}

int dpt_comm_poll_wait(struct dpt_comm *c, MPI_Request *req, int waiting_on,
                       struct dpt_err *err)
{
  int flag = 0, rc;
  dpt_watchdog_waiting_on(c->wd, waiting_on);
  for (;;) {
    rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return dpt_comm_mpi_err(c, rc, "MPI_Test", err);
    if (flag)
      break;
    if (dpt_watchdog_expired(c->wd))
      return dpt_err_set(err, DPT_E_RUNTIME, "%s", dpt_watchdog_message(c->wd));
    sched_yield();
  }
  dpt_watchdog_progress(c->wd);
  return 0;
}

/* The watchdog's suspect: a peer on this node that is gone, a zombie or
 * stopped (from /proc), else the peer this rank was waiting on. */
static void suspect(void *arg, int waiting_on, char *buf, size_t len)
{
  struct dpt_comm *c = arg;
  for (int q = 0; q < c->size; q++) {
    char path[64], stat[512];
    const char *state = NULL;
    FILE *f;
    if (q == c->rank || strcmp(c->host_of[q], c->host_of[c->rank]))
      continue;
    snprintf(path, sizeof path, "/proc/%d/stat", c->pid_of[q]);
    f = fopen(path, "r");
    if (!f) {
      state = "process gone";
    } else {
      size_t got = fread(stat, 1, sizeof stat - 1, f);
      char *rp;
      fclose(f);
      stat[got] = '\0';
      rp = strrchr(stat, ')');
      if (rp && rp[1] == ' ') {
        if (rp[2] == 'Z' || rp[2] == 'X')
          state = "process dead (zombie)";
        else if (rp[2] == 'T' || rp[2] == 't')
          state = "process stopped";
      }
    }
    if (state) {
      snprintf(buf, len, "rank %d on %s (pid %d, %s)", c->world_of[q], c->host_of[q],
               c->pid_of[q], state);
      return;
    }
  }
  if (waiting_on >= 0) {
    int q = -1;
    for (int i = 0; i < c->size; i++)
      if (c->world_of[i] == waiting_on)
        q = i;
    snprintf(buf, len, "rank %d on %s (this rank was waiting on it)", waiting_on,
             q >= 0 ? c->host_of[q] : "?");
  } else {
    snprintf(buf, len, "one of the %d ranks (MPI does not say which; every peer on this node "
                       "is alive)", c->size);
  }
}

static int run_one(struct dpt_comm *c, struct dpt_comm_req *r)
{
  c->seq++;
  snprintf(c->what, sizeof c->what, "allreduce[%s] #%llu (%zu floats%s%s)", c->ops->name,
           (unsigned long long)c->seq, r->n, (r->flags & DPT_COMM_FP16) ? ", fp16 wire" : "",
           (r->flags & DPT_COMM_AVG) ? ", avg" : "");
  dpt_err_clear(&r->err);
  dpt_watchdog_begin(c->wd, c->what);
  c->in_collective = 1;
  r->rc = r->ready ? c->ops->wait_ready(c, r->ready, &r->err) : 0;
  if (!r->rc)
    r->rc = c->ops->allreduce(c, r->buf, r->n, r->flags, &r->err);
  c->in_collective = 0;
  dpt_watchdog_end(c->wd);
  return r->rc;
}

static void *worker(void *arg)
{
  struct dpt_comm *c = arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    struct dpt_comm_req *r = NULL;
    while (!c->stop && !c->head)
      pthread_cond_wait(&c->cv, &c->mu);
    if (!c->head && c->stop)
      break;
    for (r = c->head; r && r->done; r = r->next)
      ;
    if (!r) { /* all queued ones done: wait for more */
      if (c->stop)
        break;
      pthread_cond_wait(&c->cv, &c->mu);
      continue;
    }
    pthread_mutex_unlock(&c->mu);
    run_one(c, r);
    pthread_mutex_lock(&c->mu);
    r->done = 1;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

int dpt_comm_create(struct dpt_comm **out, MPI_Comm world, const struct dpt_comm_opts *opts_in,
                    struct dpt_err *err)
{
  struct dpt_comm_opts opts;
  struct dpt_comm *c = NULL;
  int wsize, wrank, rc, provided = 0;
  int *pos = NULL, *info = NULL;
  char *hosts = NULL;
  char self[128];
  struct {
    int world, pid, node;
  } mine;

  *out = NULL;
  if (opts_in)
    opts = *opts_in;
  else
    dpt_comm_opts_init(&opts);
  opts.name = dpt_comm_resolve(opts.name, 0); /* NULL / "auto": host buffers -> ring */
  if (!dpt_comm_check_name(opts.name, err))
    return err->code;

  c = calloc(1, sizeof *c);
  if (!c)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory creating communicator %s", opts.name);
  c->ops = find_ops(opts.name);
  c->world = world;
  c->ring = MPI_COMM_NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  MPI_Comm_size(world, &wsize);
  MPI_Comm_rank(world, &wrank);
  c->world_rank = wrank;
  if (opts.ring_pos < 0)
    opts.ring_pos = wrank;

  /* Ring positions must be a permutation of 0..p-1 (every rank checks the same data). */
  pos = malloc(sizeof *pos * (size_t)wsize);
  info = malloc(sizeof *info * 3 * (size_t)wsize);
  hosts = calloc((size_t)wsize, 64);
  if (!pos || !info || !hosts) {
    dpt_err_set(err, DPT_E_NOMEM, "out of memory creating communicator %s", opts.name);
    goto fail;
  }
  rc = MPI_Allgather(&opts.ring_pos, 1, MPI_INT, pos, 1, MPI_INT, world);
  if (rc != MPI_SUCCESS) {
    dpt_comm_mpi_err(c, rc, "MPI_Allgather", err);
    goto fail;
  }
  {
    char *seen = calloc((size_t)wsize, 1);
    if (!seen) {
      dpt_err_set(err, DPT_E_NOMEM, "out of memory");
      goto fail;
    }
    for (int i = 0; i < wsize; i++) {
      if (pos[i] < 0 || pos[i] >= wsize || seen[pos[i]]) {
        dpt_err_set(err, DPT_E_INPUT,
                    "ring positions are not a permutation of 0..%d: world rank %d has position "
                    "%d (%s); every rank must pass its plan rank as ring_pos",
                    wsize - 1, i, pos[i],
                    (pos[i] < 0 || pos[i] >= wsize) ? "out of range" : "duplicate");
        free(seen);
        goto fail;
      }
      seen[pos[i]] = 1;
    }
    free(seen);
  }
  rc = MPI_Comm_split(world, 0, opts.ring_pos, &c->ring);
  if (rc != MPI_SUCCESS) {
    dpt_comm_mpi_err(c, rc, "MPI_Comm_split", err);
    goto fail;
  }
  /* Errors come back to us (the sub-communicators split from it inherit this): with
   * MPI_ERRORS_ARE_FATAL, Open MPI aborted a rank whose TCP peer had just died with exit
   * code 17 (MPI_ERR_INTERN) and no word about the peer, before the watchdog could name it. */
  MPI_Comm_set_errhandler(c->ring, MPI_ERRORS_RETURN);
  MPI_Comm_size(c->ring, &c->size);
  MPI_Comm_rank(c->ring, &c->rank);

  c->world_of = malloc(sizeof(int) * (size_t)c->size);
  c->pid_of = malloc(sizeof(int) * (size_t)c->size);
  c->node_of = malloc(sizeof(int) * (size_t)c->size);
  c->host_of = calloc((size_t)c->size, 64);
  if (!c->world_of || !c->pid_of || !c->node_of || !c->host_of) {
    dpt_err_set(err, DPT_E_NOMEM, "out of memory");
    goto fail;
  }
  mine.world = wrank;
  mine.pid = (int)getpid();
  mine.node = opts.node;
  {
    char h[64] = "";
    if (gethostname(h, sizeof h - 1) != 0)
      snprintf(h, sizeof h, "localhost");
    rc = MPI_Allgather(&mine, 3, MPI_INT, info, 3, MPI_INT, c->ring);
    if (rc == MPI_SUCCESS)
      rc = MPI_Allgather(h, 64, MPI_CHAR, hosts, 64, MPI_CHAR, c->ring);
    if (rc != MPI_SUCCESS) {
      dpt_comm_mpi_err(c, rc, "MPI_Allgather", err);
      goto fail;
    }
  }
  c->n_nodes = 0;
  for (int q = 0; q < c->size; q++) {
    c->world_of[q] = info[3 * q];
    c->pid_of[q] = info[3 * q + 1];
    memcpy(c->host_of[q], hosts + 64 * q, 64);
    c->host_of[q][63] = '\0';
  }
  /* Nodes: given, or by host name in order of first appearance on the ring. */
  {
    int given = info[2] >= 0;
    for (int q = 0; q < c->size; q++) {
      if ((info[3 * q + 2] >= 0) != given) {
        dpt_err_set(err, DPT_E_INPUT,
                    "opts.node is set on some ranks and not on others (ring position %d has "
                    "%d): pass every rank's node or none", q, info[3 * q + 2]);
        goto fail;
      }
      if (given) {
        c->node_of[q] = info[3 * q + 2];
      } else {
        c->node_of[q] = -1;
        for (int j = 0; j < q; j++)
          if (!strcmp(c->host_of[j], c->host_of[q]))
            c->node_of[q] = c->node_of[j];
        if (c->node_of[q] < 0)
          c->node_of[q] = c->n_nodes++;
      }
      if (given && c->node_of[q] + 1 > c->n_nodes)
        c->n_nodes = c->node_of[q] + 1;
    }
  }

  c->chunk_bytes = opts.chunk_bytes;
  if (!c->chunk_bytes) {
    const char *v = getenv("DPT_COMM_CHUNK_BYTES");
    c->chunk_bytes = v && *v ? strtoull(v, NULL, 10) : 0;
    if (!c->chunk_bytes)
      c->chunk_bytes = 1024 * 1024;
  }
  if (c->chunk_bytes < 64)
    c->chunk_bytes = 64;
  c->window = opts.window;
  if (c->window <= 0) {
    const char *v = getenv("DPT_COMM_WINDOW");
    c->window = v && *v ? atoi(v) : 0;
    if (c->window <= 0)
      c->window = 4;
  }
  c->record = opts.record_peers;
  {
    /* The pipeline's geometry must be the same on every rank: rank 0's wins. */
    unsigned long long geo[2] = {c->chunk_bytes, (unsigned long long)c->window};
    rc = MPI_Bcast(geo, 2, MPI_UNSIGNED_LONG_LONG, 0, c->ring);
    if (rc != MPI_SUCCESS) {
      dpt_comm_mpi_err(c, rc, "MPI_Bcast", err);
      goto fail;
    }
    c->chunk_bytes = (size_t)geo[0];
    c->window = (int)geo[1];
  }

  snprintf(self, sizeof self, "rank %d (%s, pid %d)", c->world_of[c->rank],
           c->host_of[c->rank], (int)getpid());
  if ((rc = dpt_watchdog_create(&c->wd, opts.watchdog_s, self, err)) < 0)
    goto fail;
  dpt_watchdog_set_suspect(c->wd, suspect, c);

  snprintf(c->what, sizeof c->what, "creating communicator %s", opts.name);
  if (c->ops->init && (rc = c->ops->init(c, &opts, err)) < 0)
    goto fail;
  c->what[0] = '\0';

  MPI_Query_thread(&provided);
  if (getenv("DPT_COMM_ASYNC") && !strcmp(getenv("DPT_COMM_ASYNC"), "0"))
    opts.async = 0;
  if (opts.async && provided == MPI_THREAD_MULTIPLE) {
    rc = pthread_create(&c->worker, NULL, worker, c);
    if (rc) {
      dpt_err_set(err, DPT_E_RUNTIME, "cannot start the communicator thread: %s", strerror(rc));
      goto fail;
    }
    c->async = 1;
  }
  free(pos);
  free(info);
  free(hosts);
  *out = c;
  return 0;
fail:
  free(pos);
  free(info);
  free(hosts);
  dpt_comm_destroy(c);
  return err->code ? err->code : DPT_E_RUNTIME;
}

void dpt_comm_destroy(struct dpt_comm *c)
{
  if (!c)
    return;
  if (c->async) {
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->worker, NULL);
  }
  while (c->head) {
    struct dpt_comm_req *r = c->head;
    c->head = r->next;
    free(r);
  }
  if (c->impl && c->ops->fini)
    c->ops->fini(c);
  dpt_watchdog_destroy(c->wd);
  if (c->ring != MPI_COMM_NULL)
    MPI_Comm_free(&c->ring);
  free(c->world_of);
  free(c->pid_of);
  free(c->node_of);
  free(c->host_of);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

const char *dpt_comm_name(const struct dpt_comm *c) { return c->ops->name; }
int dpt_comm_rank(const struct dpt_comm *c) { return c->rank; }
int dpt_comm_size(const struct dpt_comm *c) { return c->size; }
int dpt_comm_async(const struct dpt_comm *c) { return c->async; }
MPI_Comm dpt_comm_mpi(const struct dpt_comm *c) { return c->ring; }

int dpt_comm_start(struct dpt_comm *c, float *buf, size_t n, unsigned flags,
                   struct dpt_comm_req **out, struct dpt_err *err)
{
  return dpt_comm_start_after(c, buf, n, flags, NULL, out, err);
}

int dpt_comm_start_after(struct dpt_comm *c, float *buf, size_t n, unsigned flags, void *ready,
                         struct dpt_comm_req **out, struct dpt_err *err)
{
  struct dpt_comm_req *r;
  *out = NULL;
  if (ready && !c->ops->wait_ready)
    return dpt_err_set(err, DPT_E_INPUT, "allreduce[%s]: asked to wait for a device event, but this "
                       "communicator reads host buffers; complete the buffer on the host first (or "
                       "use nccl for device buffers)", c->ops->name);
  if (n && !buf)
    return dpt_err_set(err, DPT_E_INPUT, "allreduce[%s]: NULL buffer for %zu floats",
                       c->ops->name, n);
  if (flags & ~(unsigned)(DPT_COMM_AVG | DPT_COMM_FP16))
    return dpt_err_set(err, DPT_E_INPUT, "allreduce[%s]: unknown flags 0x%x", c->ops->name,
                       flags);
  r = calloc(1, sizeof *r);
  if (!r)
    return dpt_err_set(err, DPT_E_NOMEM, "out of memory queueing an all-reduce");
  r->buf = buf;
  r->n = n;
  r->flags = flags;
  r->ready = ready;
  pthread_mutex_lock(&c->mu);
  if (c->tail)
    c->tail->next = r;
  else
    c->head = r;
  c->tail = r;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  *out = r;
  return 0;
}

int dpt_comm_enqueue_after(struct dpt_comm *c, float *buf, size_t n, unsigned flags, void *ready,
                           struct dpt_err *err)
{
  if (!c->ops->enqueue)
    return dpt_err_set(err, DPT_E_UNSUPPORTED, "allreduce[%s]: this communicator reads host buffers: it cannot "
                       "enqueue an all-reduce on the device (use nccl for device buffers)", c->ops->name);
  if (n && !buf)
    return dpt_err_set(err, DPT_E_INPUT, "allreduce[%s]: NULL buffer for %zu floats", c->ops->name, n);
  if (flags & ~(unsigned)(DPT_COMM_AVG | DPT_COMM_FP16))
    return dpt_err_set(err, DPT_E_INPUT, "allreduce[%s]: unknown flags 0x%x", c->ops->name, flags);
  pthread_mutex_lock(&c->mu);
  int queued = c->head != NULL;
  pthread_mutex_unlock(&c->mu);
  if (queued)
    return dpt_err_set(err, DPT_E_INPUT, "allreduce[%s]: an enqueued all-reduce while dpt_comm_start requests are "
                       "queued (wait for them first)", c->ops->name);
  c->seq++;
  return c->ops->enqueue(c, buf, n, flags, ready, err);
}

int dpt_comm_enqueue_join(struct dpt_comm *c, void **done, struct dpt_err *err)
{
  *done = NULL;
  if (!c->ops->enqueue_join)
    return dpt_err_set(err, DPT_E_UNSUPPORTED, "allreduce[%s]: no device stream to join", c->ops->name);
  return c->ops->enqueue_join(c, done, err);
}

int dpt_comm_wait(struct dpt_comm *c, struct dpt_comm_req *req, struct dpt_err *err)
{
  int rc;
  struct dpt_comm_req **pp;

  if (!req)
    return dpt_err_set(err, DPT_E_INPUT, "dpt_comm_wait: NULL request");
  pthread_mutex_lock(&c->mu);
  if (c->async) {
    while (!req->done)
      pthread_cond_wait(&c->cv, &c->mu);
  } else {
    /* Run everything queued before req, in start order (same order on every rank). */
    for (struct dpt_comm_req *r = c->head; r; r = r->next) {
      if (!r->done) {
        pthread_mutex_unlock(&c->mu);
        run_one(c, r);
        pthread_mutex_lock(&c->mu);
        r->done = 1;
      }
      if (r == req)
        break;
    }
  }
  for (pp = &c->head; *pp && *pp != req; pp = &(*pp)->next)
    ;
  if (*pp) {
    *pp = req->next;
    if (c->tail == req) {
      c->tail = NULL;
      for (struct dpt_comm_req *r = c->head; r; r = r->next)
        c->tail = r;
    }
  }
  pthread_mutex_unlock(&c->mu);
  rc = req->rc;
  if (rc < 0 && err)
    *err = req->err;
  free(req);
  return rc;
}

int dpt_comm_allreduce(struct dpt_comm *c, float *buf, size_t n, unsigned flags,
                       struct dpt_err *err)
{
  struct dpt_comm_req *r;
  int rc = dpt_comm_start(c, buf, n, flags, &r, err);
  if (rc < 0)
    return rc;
  return dpt_comm_wait(c, r, err);
}
