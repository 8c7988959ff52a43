/* dpt_comm_ring.c — the "ring" communicator and the ring engine it shares with
 * "hierarchical".
 *
 * Bandwidth-optimal ring all-reduce over MPI point-to-point: the buffer is cut
 * into p segments; in reduce-scatter step t (0 <= t < p-1) rank r sends segment
 * r-t to r+1 and receives segment r-t-1 from r-1, adding it in; after p-1
 * steps rank r holds the full sum of segment r+1, which the all-gather steps
 * pass around the ring.  Each segment is cut into chunks, and a chunk moves on
 * to the next step as soon as it has arrived and been reduced, so sends,
 * receives and additions of different chunks overlap (up to `window` receives
 * in flight).  Messages of one run carry tag = step * chunks + chunk, so they
 * match whatever order they complete in. */
#include "dpt_comm_int.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dpt_fp16.h"

void dpt_ring_segment(size_t n, int p, int i, size_t *off, size_t *len)
{
  size_t q = n / (size_t)p, rem = n % (size_t)p, ui = (size_t)i;
  *off = ui * q + (ui < rem ? ui : rem);
  *len = q + (ui < rem ? 1 : 0);
}

static inline int mod(int a, int p)
{
  a %= p;
  return a < 0 ? a + p : a;
}

static void add_f32(float *restrict acc, const float *restrict x, size_t n)
{
  for (size_t i = 0; i < n; i++)
    acc[i] += x[i];
}

static void div_f32(float *x, size_t n, float d)
{
  for (size_t i = 0; i < n; i++)
    x[i] /= d;
}

struct ring {
  const struct dpt_ring_args *a;
  struct dpt_comm *c;
  int p, r, left, right;
  int t0, t1, nch;
  size_t ce;            /* elements per chunk */
  size_t esz;           /* bytes per element on the wire */
  MPI_Datatype type;
  int m_total;
  MPI_Request *sreq;    /* [m_total] */
  unsigned char *sdone; /* [m_total] */
  int sends_pending;
  dpt_half *hs_rs;      /* [n] fp16 staging of reduce-scatter sends */
  dpt_half *hs_ag;      /* [n] fp16 staging of all-gather sends/receives */
};

static int seg_send(const struct ring *g, int t)
{
  return t < g->p - 1 ? mod(g->r - t, g->p) : mod(g->r + 1 - (t - (g->p - 1)), g->p);
}

static int seg_recv(const struct ring *g, int t)
{
  return t < g->p - 1 ? mod(g->r - t - 1, g->p) : mod(g->r - (t - (g->p - 1)), g->p);
}

static void chunk_range(const struct ring *g, int seg, int k, size_t *off, size_t *len)
{
  size_t so, sl, start = (size_t)k * g->ce;
  dpt_ring_segment(g->a->n, g->p, seg, &so, &sl);
  *off = so + start;
  *len = start >= sl ? 0 : (sl - start < g->ce ? sl - start : g->ce);
}

static int post_send(struct ring *g, int t, int k, struct dpt_err *err)
{
  const struct dpt_ring_args *a = g->a;
  int m = (t - g->t0) * g->nch + k, rc;
  size_t off, len;
  void *buf;

  chunk_range(g, seg_send(g, t), k, &off, &len);
  if (!len) {
    g->sdone[m] = 1;
    return 0;
  }
  if (t < g->p - 1) {
    if (a->fp16) {
      dpt_fp16_pack(g->hs_rs + off, a->data + off, len);
      buf = g->hs_rs + off;
    } else {
      buf = a->data + off;
    }
  } else {
    if (t == g->p - 1 && a->fp16) { /* our reduced segment: everyone gets the fp16 value */
      dpt_fp16_round(a->data + off, len);
      dpt_fp16_pack(g->hs_ag + off, a->data + off, len);
    }
    buf = a->fp16 ? (void *)(g->hs_ag + off) : (void *)(a->data + off);
  }
  rc = MPI_Isend(buf, (int)len, g->type, g->right, m, a->comm, &g->sreq[m]);
  if (rc != MPI_SUCCESS)
    return dpt_comm_mpi_err(g->c, rc, "MPI_Isend", err);
  g->sends_pending++;
  return 0;
}

/* A receive (t, k) has landed (or was empty): reduce / unpack, pass it on. */
static int process_recv(struct ring *g, int m, void *slot, struct dpt_err *err)
{
  const struct dpt_ring_args *a = g->a;
  int t = g->t0 + m / g->nch, k = m % g->nch;
  size_t off, len;

  chunk_range(g, seg_recv(g, t), k, &off, &len);
  if (len) {
    if (t < g->p - 1) {
      if (a->fp16)
        dpt_fp16_accumulate(a->data + off, slot, len);
      else
        add_f32(a->data + off, slot, len);
      if (t == g->p - 2 && a->divisor != 0.0f)
        div_f32(a->data + off, len, a->divisor);
    } else if (a->fp16) {
      dpt_fp16_unpack(a->data + off, g->hs_ag + off, len);
    }
  }
  if (t + 1 < g->t1)
    return post_send(g, t + 1, k, err);
  return 0;
}

int dpt_ring_run(struct dpt_comm *c, const struct dpt_ring_args *a, struct dpt_err *err)
{
  struct ring g;
  int p = a->p, W = c->window, rc = 0;
  size_t maxseg;
  int next_recv = 0, done_recv = 0, inflight = 0;
  MPI_Request *rreq = NULL;
  int *rm = NULL, *idx = NULL;
  unsigned char *slots = NULL;

  if (p == 1 || a->n == 0) {
    if (p == 1 && a->divisor != 0.0f && (a->mode & DPT_RING_RS))
      div_f32(a->data, a->n, a->divisor);
    return 0;
  }
  memset(&g, 0, sizeof g);
  g.a = a;
  g.c = c;
  g.p = p;
  g.r = a->r;
  g.left = mod(a->r - 1, p);
  g.right = mod(a->r + 1, p);
  g.t0 = (a->mode & DPT_RING_RS) ? 0 : p - 1;
  g.t1 = (a->mode & DPT_RING_AG) ? 2 * (p - 1) : p - 1;
  g.esz = a->fp16 ? 2 : 4;
  g.type = a->fp16 ? MPI_UINT16_T : MPI_FLOAT;
  g.ce = c->chunk_bytes / g.esz;
  maxseg = a->n / (size_t)p + (a->n % (size_t)p != 0);
  {
    /* Keep tags below 32767 (the smallest MPI_TAG_UB MPI allows) and counts in int. */
    size_t steps = (size_t)(g.t1 - g.t0), minc = (maxseg * steps + 32766) / 32767;
    if (g.ce < minc)
      g.ce = minc;
    if (g.ce > (size_t)1 << 30)
      g.ce = (size_t)1 << 30;
    if (g.ce < 1)
      g.ce = 1;
  }
  g.nch = (int)((maxseg + g.ce - 1) / g.ce);
  g.m_total = (g.t1 - g.t0) * g.nch;
  dpt_comm_note_peers(c, a->world_of[g.right], a->world_of[g.left]);

  if (W > g.m_total)
    W = g.m_total;
  g.sreq = malloc(sizeof *g.sreq * (size_t)g.m_total);
  g.sdone = calloc((size_t)g.m_total, 1);
  rreq = malloc(sizeof *rreq * (size_t)W);
  rm = malloc(sizeof *rm * (size_t)W);
  idx = malloc(sizeof *idx * (size_t)(g.m_total > W ? g.m_total : W));
  slots = malloc((size_t)W * g.ce * g.esz);
  if (a->fp16 && (a->mode & DPT_RING_RS))
    g.hs_rs = malloc(a->n * sizeof(dpt_half));
  if (a->fp16 && (a->mode & DPT_RING_AG))
    g.hs_ag = malloc(a->n * sizeof(dpt_half));
  if (!g.sreq || !g.sdone || !rreq || !rm || !idx || !slots ||
      (a->fp16 && (a->mode & DPT_RING_RS) && !g.hs_rs) ||
      (a->fp16 && (a->mode & DPT_RING_AG) && !g.hs_ag)) {
    rc = dpt_err_set(err, DPT_E_NOMEM, "%s: out of memory for the ring buffers (%zu floats)",
                     c->what, a->n);
    goto out;
  }
  for (int m = 0; m < g.m_total; m++)
    g.sreq[m] = MPI_REQUEST_NULL;
  for (int s = 0; s < W; s++) {
    rreq[s] = MPI_REQUEST_NULL;
    rm[s] = -1;
  }

  for (int k = 0; k < g.nch; k++)
    if ((rc = post_send(&g, g.t0, k, err)) < 0)
      goto fail_inflight;

  while (done_recv < g.m_total || g.sends_pending > 0) {
    int progress = 0, outcount = 0;

    /* Post receives in message order, up to W in flight. */
    while (next_recv < g.m_total && inflight < W) {
      int m = next_recv, t = g.t0 + m / g.nch, k = m % g.nch, s;
      size_t off, len;
      void *buf;
      chunk_range(&g, seg_recv(&g, t), k, &off, &len);
      if (!len) {
        next_recv++;
        done_recv++;
        progress = 1;
        if ((rc = process_recv(&g, m, NULL, err)) < 0)
          goto fail_inflight;
        continue;
      }
      if (t >= p - 1 && !a->fp16 && (a->mode & DPT_RING_RS)) {
        /* All-gather lands in data: the reduce-scatter send of that chunk must be done. */
        int ms = (t - (p - 1)) * g.nch + k;
        if (!g.sdone[ms])
          break;
      }
      for (s = 0; s < W && rm[s] >= 0; s++)
        ;
      if (t < p - 1)
        buf = slots + (size_t)s * g.ce * g.esz;
      else
        buf = a->fp16 ? (void *)(g.hs_ag + off) : (void *)(a->data + off);
      rc = MPI_Irecv(buf, (int)len, g.type, g.left, m, a->comm, &rreq[s]);
      if (rc != MPI_SUCCESS) {
        rc = dpt_comm_mpi_err(c, rc, "MPI_Irecv", err);
        goto fail_inflight;
      }
      rm[s] = m;
      inflight++;
      next_recv++;
    }

    if (inflight) {
      rc = MPI_Testsome(W, rreq, &outcount, idx, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        rc = dpt_comm_mpi_err(c, rc, "MPI_Testsome (receives)", err);
        goto fail_inflight;
      }
      for (int i = 0; i < outcount && outcount != MPI_UNDEFINED; i++) {
        int s = idx[i], m = rm[s];
        rm[s] = -1;
        inflight--;
        done_recv++;
        progress = 1;
        if ((rc = process_recv(&g, m, slots + (size_t)s * g.ce * g.esz, err)) < 0)
          goto fail_inflight;
      }
    }
    if (g.sends_pending) {
      rc = MPI_Testsome(g.m_total, g.sreq, &outcount, idx, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        rc = dpt_comm_mpi_err(c, rc, "MPI_Testsome (sends)", err);
        goto fail_inflight;
      }
      for (int i = 0; i < outcount && outcount != MPI_UNDEFINED; i++) {
        g.sdone[idx[i]] = 1;
        g.sends_pending--;
        progress = 1;
      }
    }
    if (progress) {
      dpt_watchdog_progress(c->wd);
    } else {
      dpt_watchdog_waiting_on(c->wd, inflight ? a->world_of[g.left] : a->world_of[g.right]);
      if (dpt_watchdog_expired(c->wd)) {
        rc = dpt_err_set(err, DPT_E_RUNTIME, "%s", dpt_watchdog_message(c->wd));
        goto fail_inflight;
      }
      sched_yield();
    }
  }
  rc = 0;
out:
  free(g.sreq);
  free(g.sdone);
  free(rreq);
  free(rm);
  free(idx);
  free(slots);
  free(g.hs_rs);
  free(g.hs_ag);
  return rc;
fail_inflight:
  /* Requests may still point into these buffers: MPI could write into them
   * later, so they are deliberately not freed (the job is failing anyway). */
  return rc;
}

static int ring_allreduce(struct dpt_comm *c, float *buf, size_t n, unsigned flags,
                          struct dpt_err *err)
{
  struct dpt_ring_args a = {
    .comm = c->ring,
    .p = c->size,
    .r = c->rank,
    .world_of = c->world_of,
    .data = buf,
    .n = n,
    .mode = DPT_RING_ALL,
    .fp16 = !!(flags & DPT_COMM_FP16),
    .divisor = (flags & DPT_COMM_AVG) ? (float)c->size : 0.0f,
  };
  return dpt_ring_run(c, &a, err);
}

const struct dpt_comm_ops dpt_comm_ring_ops = {
  .name = "ring",
  .init = NULL,
  .allreduce = ring_allreduce,
  .fini = NULL,
};
