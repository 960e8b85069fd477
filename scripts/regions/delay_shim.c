/* delay_shim: holds every packet of one netfilter queue for a fixed delay, then accepts it.
 *
 * The dev kernel has no netem, so scripts/regions.sh emulates WAN latency with
 * `iptables -j NFQUEUE` in a router namespace plus this daemon. Usage:
 *   delay_shim --queue N --delay-ms D [--pid-file F]   (D may be fractional, e.g. 12.5)
 * Exit status: 0 after SIGTERM/SIGINT, 1 on a runtime failure, 2 on bad arguments or
 * when the queue cannot be bound. The pid file is written only once the queue is bound,
 * so a caller can wait for it to know the delay is in place. */
/* _GNU_SOURCE for ppoll: a nanosecond timeout and an atomic signal mask. */
#define _GNU_SOURCE
#include <arpa/inet.h> /* ntohl */
#include <errno.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h> /* NF_ACCEPT */
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The ring holds as many entries as the kernel may queue, so it can never overflow: a
 * packet the kernel cannot queue is dropped there, like a full router buffer. */
#define RING 65536u
static struct {
  uint32_t id;
  uint64_t due_ns;
} ring[RING];
static unsigned head, count;
static uint64_t delay_ns;
static volatile sig_atomic_t stop;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

/* Arrival time is taken when the packet reaches us; the queueing latency before that is
 * microseconds, far below the millisecond delays we emulate. */
static int on_packet(struct nfq_q_handle* qh, struct nfgenmsg* m, struct nfq_data* d, void* u) {
  (void)qh;
  (void)m;
  (void)u;
  struct nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(d);
  if (!ph || count == RING)
    return 0; /* full cannot happen: the kernel caps at RING */
  ring[(head + count) % RING].id = ntohl(ph->packet_id);
  ring[(head + count) % RING].due_ns = now_ns() + delay_ns;
  count++;
  return 0;
}

/* The delay is constant, so due times grow with arrival order, and the kernel numbers
 * packets in arrival order too: one batch verdict for the newest due id accepts every
 * older one, which keeps the daemon cheap at gigabit packet rates. */
static void release(struct nfq_q_handle* qh, uint64_t upto_ns) {
  uint32_t last = 0;
  int any = 0;
  while (count && ring[head].due_ns <= upto_ns) {
    last = ring[head].id;
    any = 1;
    head = (head + 1) % RING;
    count--;
  }
  if (any && nfq_set_verdict_batch(qh, last, NF_ACCEPT) < 0)
    perror("delay_shim: verdict");
}

static int usage(const char* why) {
  fprintf(stderr, "delay_shim: %s\nusage: delay_shim --queue N --delay-ms D [--pid-file F]\n", why);
  return 2;
}

int main(int argc, char** argv) {
  long queue = -1;
  double delay_ms = -1;
  const char* pid_file = NULL;
  for (int i = 1; i < argc; i++) {
    char* end = NULL;
    if (i + 1 >= argc)
      return usage("missing value after an option");
    if (!strcmp(argv[i], "--queue"))
      queue = strtol(argv[++i], &end, 10);
    else if (!strcmp(argv[i], "--delay-ms"))
      delay_ms = strtod(argv[++i], &end);
    else if (!strcmp(argv[i], "--pid-file")) {
      pid_file = argv[++i];
      continue;
    } else
      return usage("unknown argument");
    if (!end || *end || end == argv[i])
      return usage("option value is not a number");
  }
  if (queue < 0 || queue > 65535)
    return usage("--queue must be 0..65535");
  if (!(delay_ms >= 0 && delay_ms <= 60000))
    return usage("--delay-ms must be 0..60000");
  delay_ns = (uint64_t)(delay_ms * 1e6 + 0.5);

  struct nfq_handle* h = nfq_open();
  struct nfq_q_handle* qh = h ? nfq_create_queue(h, (uint16_t)queue, on_packet, NULL) : NULL;
  if (!qh) {
    fprintf(stderr, "delay_shim: cannot bind queue %ld: %s (root? queue taken?)\n", queue, strerror(errno));
    return 2;
  }
  /* Only the packet id is needed, so copy no payload: the kernel then sends a few dozen
   * bytes per packet instead of the whole packet. */
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0) {
    fprintf(stderr, "delay_shim: cannot set copy-meta mode on queue %ld\n", queue);
    return 2;
  }
  /* Default kernel queue length is 1024: at 1 Gbit/s x 50 ms that overflows and drops. */
  nfq_set_queue_maxlen(qh, RING);
  /* Let GSO super-packets through whole (no payload is inspected): ~40x fewer packets.
   * Older kernels refuse the flag; then we simply see segmented packets. */
  nfq_set_queue_flags(qh, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
  /* A burst can outrun us between two polls; a small socket buffer would then lose
   * queue messages (ENOBUFS). As root this can exceed net.core.rmem_max. */
  nfnl_rcvbufsiz(nfq_nfnlh(h), 8u << 20);

  /* Block the signals except inside ppoll, so a stop request cannot slip in between the
   * check of `stop` and the sleep (the classic lost-wakeup race). */
  sigset_t block, during_poll;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &during_poll);
  struct sigaction sa = {0};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  if (pid_file) {
    FILE* f = fopen(pid_file, "w");
    if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f)) {
      fprintf(stderr, "delay_shim: cannot write %s: %s\n", pid_file, strerror(errno));
      return 2;
    }
  }

  int fd = nfq_fd(h);
  static char buf[65536];
  while (!stop) {
    struct timespec ts, *tp = NULL; /* nothing queued: sleep until a packet or signal */
    if (count) {
      uint64_t now = now_ns(), due = ring[head].due_ns;
      uint64_t wait = due > now ? due - now : 0;
      ts.tv_sec = (time_t)(wait / 1000000000u);
      ts.tv_nsec = (long)(wait % 1000000000u);
      tp = &ts; /* ppoll's nanosecond timeout, not poll's milliseconds: keeps delays exact */
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = ppoll(&p, 1, tp, &during_poll);
    if (r < 0 && errno != EINTR) {
      perror("delay_shim: ppoll");
      break;
    }
    if (r > 0) {
      /* Drain everything pending so a burst costs one wakeup, not one per packet. */
      for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          nfq_handle_packet(h, buf, (int)n);
          continue;
        }
        if (n < 0 && errno == ENOBUFS) {
          /* Lost notifications only: those packets still sit in the kernel and the next
           * batch verdict (all ids up to a newer one) releases them, merely undelayed. */
          fprintf(stderr, "delay_shim: netlink overrun, some packets not delayed\n");
          continue;
        }
        break;
      }
    }
    release(qh, now_ns());
  }
  /* Shutting down: let every held packet go now rather than strand it in the kernel,
   * where it would be dropped when the queue is unbound. */
  release(qh, UINT64_MAX);
  nfq_destroy_queue(qh);
  nfq_close(h);
  if (pid_file)
    unlink(pid_file);
  return stop ? 0 : 1;
}
