/*
 * listen.h -- the listening sockets. Every loop thread of one gateway has its own listener on the
 * same port (SO_REUSEPORT, so the kernel spreads connections across the loops), but no other
 * process may join that group: a second gateway started on a port in use would otherwise take a
 * share of the traffic silently (and answer it with its own keys and corpus).
 *
 * Start-up therefore (1) probes the address with a bind that does not set SO_REUSEPORT, which
 * fails while anything listens there, (2) opens the loops' listeners, and (3) checks in
 * /proc/net/tcp{,6} that every socket listening on the port is one of ours, which closes the
 * window between two gateways starting at the same moment. A failure names the port and, when
 * /proc tells, the process holding it.
 */
#ifndef SG_GATEWAY_LISTEN_H
#define SG_GATEWAY_LISTEN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct st_sg_listen_addr_t {
    struct sockaddr_storage ss;
    socklen_t len;
    char host[256]; /* as configured, for messages */
    uint16_t port;  /* as configured; 0 = any free port */
} sg_listen_addr_t;

enum { SG_LISTEN_LOOPBACK, SG_LISTEN_WILDCARD, SG_LISTEN_OTHER };
/** What a resolved address is: SG_LISTEN_LOOPBACK (127.0.0.0/8, ::1), SG_LISTEN_WILDCARD (0.0.0.0,
 * ::) or SG_LISTEN_OTHER (one interface's address). */
int sg_listen_addr_kind(const sg_listen_addr_t *a);
/** Resolves `host` (numeric or a name) for listening. Returns 0, or -1 with a message in `err`. */
int sg_listen_resolve(const char *host, uint16_t port, sg_listen_addr_t *out, char *err, size_t err_size);
/**
 * Fails (-1, with a message naming the port and its holder) when something already listens on the
 * address; binds a throw-away socket without SO_REUSEPORT and closes it. Port 0 always passes.
 */
int sg_listen_probe(const sg_listen_addr_t *a, char *err, size_t err_size);
/**
 * Opens one listener (SO_REUSEADDR + SO_REUSEPORT, TCP_NODELAY, backlog 4096) on `a`, with the
 * port replaced by `port`. Returns the fd and the bound port in `*bound`, or -1 with a message.
 */
int sg_listen_open(const sg_listen_addr_t *a, uint16_t port, uint16_t *bound, char *err, size_t err_size);
/**
 * Checks that every socket listening on `port` (on an overlapping address) is one of `fds`.
 * Returns 0 when so (or when /proc cannot be read), -1 with a message naming the other holder.
 */
int sg_listen_check_exclusive(const sg_listen_addr_t *a, uint16_t port, const int *fds, size_t n_fds, char *err, size_t err_size);
/**
 * Describes the processes (other than the sockets in `fds`) listening on `port` of an address
 * overlapping `a`, e.g. "pid 4242 (searchgate --config configs/default.json)", into `out`.
 * Returns the number of foreign listening sockets found in /proc/net (0 when none or unreadable).
 */
size_t sg_listen_holders(const sg_listen_addr_t *a, uint16_t port, const int *fds, size_t n_fds, char *out, size_t out_size);

#endif
