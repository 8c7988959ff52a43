/* dpt_rdzv.c — see dpt_rdzv.h */
#define _GNU_SOURCE
#include "dpt_rdzv.h"

#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

const char *const dpt_rdzv_env_names[] = {
  "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
  "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
  "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", NULL};

int dpt_rdzv_port(unsigned long job, unsigned long step)
{
  return DPT_RDZV_PORT_BASE + (int)((31ul * (job % DPT_RDZV_PORT_SPAN) + step) % DPT_RDZV_PORT_SPAN);
}

/* The addresses a name resolves to (TCP), NULL when it does not resolve. */
static struct addrinfo *resolve(const char *name)
{
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(name, NULL, &hints, &res) != 0)
    return NULL;
  return res;
}

/* Same IP address (the port is not compared). */
static int same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
  if (a->sa_family != b->sa_family)
    return 0;
  if (a->sa_family == AF_INET)
    return !memcmp(&((const struct sockaddr_in *)(const void *)a)->sin_addr,
                   &((const struct sockaddr_in *)(const void *)b)->sin_addr, sizeof(struct in_addr));
  if (a->sa_family == AF_INET6)
    return !memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                   &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr, sizeof(struct in6_addr));
  return 0;
}

/* The address is this machine's: loopback, or one of its interfaces'. */
static int is_local(const struct sockaddr *sa)
{
  struct ifaddrs *ifs = NULL;
  int local = 0;
  if (sa->sa_family == AF_INET &&
      (ntohl(((const struct sockaddr_in *)(const void *)sa)->sin_addr.s_addr) >> 24) == 127)
    return 1;
  if (sa->sa_family == AF_INET6 &&
      IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr))
    return 1;
  if (getifaddrs(&ifs) != 0)
    return 0;
  for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next)
    local = i->ifa_addr && same_addr(i->ifa_addr, sa);
  freeifaddrs(ifs);
  return local;
}

static int all_local(const struct addrinfo *ai)
{
  for (; ai; ai = ai->ai_next)
    if (!is_local(ai->ai_addr))
      return 0;
  return 1;
}

int dpt_rdzv_same_host(const char *a, const char *b, int local_ok)
{
  struct addrinfo *ra = NULL, *rb = NULL;
  int same = 0;
  if (!a || !b || !*a || !*b)
    return 0;
  if (!strcmp(a, b))
    return 1;
  if (!(ra = resolve(a)) || !(rb = resolve(b)))
    goto done;
  for (const struct addrinfo *x = ra; x && !same; x = x->ai_next)
    for (const struct addrinfo *y = rb; y && !same; y = y->ai_next)
      same = same_addr(x->ai_addr, y->ai_addr);
  if (!same && local_ok)
    same = all_local(ra) && all_local(rb);
done:
  if (ra)
    freeaddrinfo(ra);
  if (rb)
    freeaddrinfo(rb);
  return same;
}

int dpt_rdzv_port_check(int port, struct dpt_err *err)
{
  struct sockaddr_in6 a6;
  struct sockaddr_in a4;
  int fd, one = 1, rc = 0;

  if (port < 1 || port > 65535)
    return dpt_err_set(err, DPT_E_INPUT, "port %d is not in 1-65535", port);
  /* TCPStore listens on the IPv6 wildcard (dual stack) where it can, else IPv4 */
  if ((fd = socket(AF_INET6, SOCK_STREAM, 0)) >= 0) {
    memset(&a6, 0, sizeof a6);
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons((uint16_t)port);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a6, sizeof a6) != 0 || listen(fd, 1) != 0)
      rc = dpt_err_set(err, DPT_E_INPUT, "port %d: %s", port, strerror(errno));
  } else if ((fd = socket(AF_INET, SOCK_STREAM, 0)) >= 0) {
    memset(&a4, 0, sizeof a4);
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons((uint16_t)port);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a4, sizeof a4) != 0 || listen(fd, 1) != 0)
      rc = dpt_err_set(err, DPT_E_INPUT, "port %d: %s", port, strerror(errno));
  } else {
    return dpt_err_set(err, DPT_E_RUNTIME, "cannot open a TCP socket: %s", strerror(errno));
  }
  close(fd);
  return rc;
}

/* A port from a variable: 1-65535. */
static int port_of(const char *name, const char *v, int *port, struct dpt_err *err)
{
  char *end;
  long p;
  errno = 0;
  p = strtol(v, &end, 10);
  if (end == v || *end || errno || p < 1 || p > 65535)
    return dpt_err_set(err, DPT_E_INPUT, "%s=\"%.64s\" is not a TCP port (1-65535)", name, v);
  *port = (int)p;
  return 0;
}

/* A variable copied into buf (a getter may reuse one buffer for every call, as
 * the SPANK plugin's does); NULL when unset or empty. */
static const char *nonempty(dpt_bind_getenv_fn get, void *arg, const char *name, char *buf, size_t len)
{
  const char *v = get ? get(arg, name) : NULL;
  if (!v || !*v)
    return NULL;
  snprintf(buf, len, "%s", v);
  return buf;
}

int dpt_rdzv_env(const struct dpt_plan *plan, int rank, dpt_bind_getenv_fn get, void *get_arg,
                 dpt_bind_setenv_fn set, void *set_arg, char *report, size_t report_len,
                 struct dpt_err *err)
{
  const struct dpt_plan_rank *rk;
  const struct dpt_plan_node *n0;
  const char *addr, *user_addr, *user_port, *v;
  char buf[512], addr_b[256], uaddr_b[256], uport_b[32], v_b[256];
  int port = DPT_RDZV_PORT_DEFAULT, rc;

  if (rank < 0 || rank >= plan->n_ranks || plan->n_ranks < 1)
    return dpt_err_set(err, DPT_E_INPUT, "rank %d is not in the plan (%d ranks)", rank, plan->n_ranks);
  rk = &plan->ranks[rank];
  n0 = &plan->nodes[plan->ranks[0].node];
  addr = nonempty(get, get_arg, "DPT_MASTER_ADDR", addr_b, sizeof addr_b);
  if (!addr)
    addr = n0->host;
  if ((v = nonempty(get, get_arg, "DPT_MASTER_PORT", v_b, sizeof v_b)) && (rc = port_of("DPT_MASTER_PORT", v, &port, err)) < 0)
    return rc;
  user_addr = nonempty(get, get_arg, "MASTER_ADDR", uaddr_b, sizeof uaddr_b);
  if (user_addr && strcmp(user_addr, addr) &&
      !dpt_rdzv_same_host(user_addr, n0->host, plan->n_nodes == 1) &&
      !dpt_rdzv_same_host(user_addr, addr, plan->n_nodes == 1))
    return dpt_err_set(err, DPT_E_INPUT,
                       "rank %d on %s: MASTER_ADDR=%.128s (set before the launch) is not the node of "
                       "plan rank 0 (%s, address %s), where RANK 0 hosts the rendezvous: the other "
                       "ranks would wait for it at the wrong address.  Unset MASTER_ADDR (dpt sets it "
                       "from the plan) or set it to an address of %s",
                       rank, plan->nodes[rk->node].host, user_addr, n0->host, addr, n0->host);
  user_port = nonempty(get, get_arg, "MASTER_PORT", uport_b, sizeof uport_b);
  if (user_port) {
    int p = 0;
    if (port_of("MASTER_PORT", user_port, &p, err) < 0)
      return dpt_err_set(err, DPT_E_INPUT, "rank %d on %s: MASTER_PORT=\"%.64s\" (set before the "
                         "launch) is not a TCP port (1-65535): unset it (dpt derives one) or give a "
                         "free port", rank, plan->nodes[rk->node].host, user_port);
    if (p != port)
      dpt_bind_note(report, report_len, "MASTER_PORT=%d kept (set by the user; dpt's would be %d)", p, port);
  }
  if (user_addr && strcmp(user_addr, addr))
    dpt_bind_note(report, report_len, "MASTER_ADDR=%.128s kept (set by the user; names %s, plan rank 0's node)",
        user_addr, n0->host);
#define P(name, ...)                                                                           \
  do {                                                                                         \
    snprintf(buf, sizeof buf, __VA_ARGS__);                                                    \
    if ((rc = set(set_arg, name, buf)) < 0)                                                    \
      return dpt_err_set(err, rc, "cannot set %s for rank %d", name, rank);                    \
  } while (0)
  /* a kept value is set again: dpt-launch passes only what is set here to other hosts */
  P("MASTER_ADDR", "%.256s", user_addr ? user_addr : addr);
  if (user_port)
    P("MASTER_PORT", "%.16s", user_port);
  else
    P("MASTER_PORT", "%d", port);
  P("GROUP_RANK", "%d", rk->node);
  P("NODE_RANK", "%d", rk->node);
  P("GROUP_WORLD_SIZE", "%d", plan->n_nodes);
  P("ROLE_RANK", "%d", rank);
  P("ROLE_WORLD_SIZE", "%d", plan->n_ranks);
  P("ROLE_NAME", "default");
  v = nonempty(get, get_arg, "DPT_RUN_ID", v_b, sizeof v_b);
  P("TORCHELASTIC_RUN_ID", "%s%.200s", v ? "" : "dpt-", v ? v : plan->digest);
  P("TORCHELASTIC_RESTART_COUNT", "0");
  P("TORCHELASTIC_MAX_RESTARTS", "0");
  P("TORCHELASTIC_USE_AGENT_STORE", "False");
#undef P
  return 0;
}
