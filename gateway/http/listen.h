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
 *
 * Beside TCP, a listener may be a Unix domain socket (one socket whose descriptor every loop
 * watches: SO_REUSEPORT does not apply to them). A socket file left behind by a gateway that was
 * killed is replaced; one that a live process accepts on stops start-up.
 *
 * Address files: once the gateway serves, "host:port" of a TCP listener can be written to a file
 * (atomically: a temporary file in the same directory, then rename()) for jobs that must find a
 * gateway started with port 0; it is removed on exit if it is still the one this process wrote.
 */
#ifndef SG_GATEWAY_LISTEN_H
#define SG_GATEWAY_LISTEN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include "config.h"

typedef struct st_sg_listen_addr_t {
    struct sockaddr_storage ss;
    socklen_t len;
    char host[256]; /* as configured, for messages */
    uint16_t port;  /* as configured; 0 = any free port */
} sg_listen_addr_t;

enum { SG_LISTEN_LOOPBACK, SG_LISTEN_WILDCARD, SG_LISTEN_OTHER, SG_LISTEN_UNIX };
/** What a resolved address is: SG_LISTEN_LOOPBACK (127.0.0.0/8, ::1), SG_LISTEN_WILDCARD (0.0.0.0,
 * ::) or SG_LISTEN_OTHER (one interface's address). (SG_LISTEN_UNIX: a listener's Unix domain socket.) */
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

/* ---- the server's listeners (every `listen` entry of the config) ---- */

/** One listener of the server, opened by sg_listen_open_all(). */
typedef struct st_sg_listener_t {
    const sg_listen_conf_t *conf;
    char url[300];     /* "http://127.0.0.1:8000", "http://[::1]:8000" or "unix:/run/searchgate.sock", for the log */
    char address[300]; /* TCP: what an address file says, "host:port" */
    uint16_t port;     /* TCP: the bound port (the kernel's pick for port 0) */
    int kind;          /* SG_LISTEN_LOOPBACK, _WILDCARD or _OTHER for TCP; SG_LISTEN_UNIX */
    dev_t dev;         /* Unix: the socket file, removed on exit if still ours */
    ino_t ino;
    int announced; /* the address file was written (addr_dev/addr_ino identify it) */
    dev_t addr_dev;
    ino_t addr_ino;
} sg_listener_t;

/**
 * Start-up's early check, before any plugin is loaded: every TCP address resolves, is free and
 * is not configured twice; every Unix socket path is free; every address file can be written.
 * Returns 0, or -1 with one message.
 */
int sg_listen_check(const sg_config_t *cfg, char *err, size_t err_size);
/**
 * Opens every listener of `cfg` for `n_loops` loops: `*fds` gets n_listeners x n_loops
 * descriptors (listener i of loop j at [i * n_loops + j]); a TCP listener is one SO_REUSEPORT
 * socket per loop, all on the one port the first bind got; a Unix one is one socket dup()ed per
 * loop. Returns the number of listeners (`*out`, `*fds` malloc'ed), or -1 with a message and
 * nothing left open.
 */
int sg_listen_open_all(const sg_config_t *cfg, int n_loops, sg_listener_t **out, int **fds, char *err, size_t err_size);
/** Writes the address files of the listeners that have one. Returns 0, or -1 with a message. */
int sg_listen_announce(sg_listener_t *ls, size_t n, char *err, size_t err_size);
/** Removes the address files written by sg_listen_announce() (still ours only). */
void sg_listen_retract(sg_listener_t *ls, size_t n);
/** Removes the Unix socket files (still ours only) and frees `ls`. The descriptors are the loops'. */
void sg_listen_dispose(sg_listener_t *ls, size_t n);

/** Whether listeners on `a` and `b` would take the same connections (equal, non-zero ports on overlapping addresses). */
int sg_listen_same_socket(const sg_listen_addr_t *a, const sg_listen_addr_t *b);

/**
 * Fails (-1 with a message) when a process accepts on the Unix domain socket `path`, or when
 * `path` exists and is not a socket, or its directory does not exist. A stale socket file passes.
 */
int sg_listen_unix_probe(const char *path, char *err, size_t err_size);
/**
 * Opens a listening Unix domain socket at `path` with permission bits `mode` (a stale socket
 * file there is removed first). Returns the fd, and the file's identity in `*dev`/`*ino` for
 * sg_listen_unix_remove(), or -1 with a message.
 */
int sg_listen_unix_open(const char *path, uint32_t mode, dev_t *dev, ino_t *ino, char *err, size_t err_size);
/** Removes `path` if it is still the file identified by `dev`/`ino` (another process may have replaced it). */
void sg_listen_remove_if_ours(const char *path, dev_t dev, ino_t ino);

/**
 * What an address file says for a TCP listener on `host` and bound `port`: "host:port", the
 * machine's host name for a wildcard address (0.0.0.0, ::), an IPv6 address in brackets.
 */
void sg_listen_address_text(const sg_listen_addr_t *a, const char *host, uint16_t port, char *out, size_t out_size);
/** Fails (-1 with a message) when an address file could not be written at `path`: its directory is missing or read-only. */
int sg_listen_address_file_probe(const char *path, char *err, size_t err_size);
/**
 * Writes `text` (no newline) to `path` atomically (a temporary file beside it, fsync, rename).
 * Returns 0 and the file's identity in `*dev`/`*ino`, or -1 with a message.
 */
int sg_listen_write_address_file(const char *path, const char *text, dev_t *dev, ino_t *ino, char *err, size_t err_size);

#endif
