/*
 * h2o_loopback.h -- an HTTP request without a socket, for the unit tests of the HTTP adapters
 * (h2o_loopback.c). A loopback connection is an h2o 2.2.5 connection with one request and no
 * transport: the test fills in the method, path, headers and body, the request goes through
 * h2o_process_request() -- host and path matching, the handlers and filters of the context's
 * configuration, as a request read off a socket does -- and the response is captured as the
 * final output stream sees it: status, reason, headers, body. A handler may answer at once or
 * later (a query that completes on a plugin thread); lb_run() runs the context's event loop until
 * the response is complete. A streamed answer gets its next window on the loop's next round, as
 * a socket that wrote the previous one would ask for it.
 *
 * The connection's peer is 127.0.0.1:55555 and it has no socket (get_socket returns NULL). The
 * request stays alive until lb_destroy(), which disposes it as h2o disposes a request whose
 * connection closed: whatever the request's pool holds is freed (a query still running is
 * cancelled).
 */
#ifndef SG_TEST_H2O_LOOPBACK_H
#define SG_TEST_H2O_LOOPBACK_H

#include <stddef.h>
#include <h2o.h>

typedef struct st_lb_conn_t {
    h2o_conn_t super;
    h2o_ostream_t final; /* the end of the response's output chain: the capture */
    int complete;        /* the final part of the body arrived */
    int sends;           /* do_send calls seen */
    char *body;          /* the response body so far, NUL-terminated (malloc) */
    size_t body_len, body_cap;
    h2o_req_t req; /* last: large, with its own initialiser */
} lb_conn_t;

/** A connection on `ctx` whose requests find their host among `hosts` (NULL-terminated, e.g.
 * ctx->globalconf->hosts), with a GET / request ready to be filled in. */
lb_conn_t *lb_create(h2o_context_t *ctx, h2o_hostconf_t **hosts);
/** Sets the request line: `method` and `path` (with its query), copied into the request's pool. */
void lb_request(lb_conn_t *c, const char *method, const char *path);
/** Adds request header `name` (any case; stored lower case, as h2o's parsers do) with `value`. */
void lb_header(lb_conn_t *c, const char *name, const char *value);
/** Sets the request body (copied; `len` bytes). Without one, req->entity.base stays NULL. */
void lb_body(lb_conn_t *c, const char *body, size_t len);
/** Sets the Host (HTTP/1's Host, HTTP/2's :authority). Without one, h2o puts the default host's
 * authority in its place. */
void lb_authority(lb_conn_t *c, const char *authority);
/**
 * Runs the request through the context's configuration and then the event loop until the
 * response is complete or `timeout_ms` passed; `tick` (NULL: none) is called after each round of
 * the loop with `arg` (a test's timers). Returns 0 once complete, -1 on timeout.
 */
int lb_run(lb_conn_t *c, void (*tick)(void *arg), void *arg, int timeout_ms);
/** The value of response header `name` (lower case), NUL-terminated in the request's pool, or
 * NULL when the response has none. */
const char *lb_res_header(lb_conn_t *c, const char *name);
/** Disposes the request (as h2o does when its connection closes) and frees the connection. */
void lb_destroy(lb_conn_t *c);

/** A handler for tests: `fn(data, req)` answers the request (0) or declines it (-1, as h2o's
 * handlers do). */
typedef int (*lb_handler_fn)(void *data, h2o_req_t *req);
/** Registers `fn` on `path` of `hostconf` (h2o_config_register_path: the path and below it). */
void lb_register(h2o_hostconf_t *hostconf, const char *path, lb_handler_fn fn, void *data);

#endif
