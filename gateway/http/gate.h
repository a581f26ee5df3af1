/*
 * gate.h -- the door of every connection: accepting (and pausing at the file-descriptor limit),
 * and the checks a request must pass on its headers alone -- Host, Origin, the API key when
 * clients.require_key is on -- before anything of its body is read.
 *
 * h2o 2.2.5 reads a request's whole body before any handler runs (its HTTP/1 and HTTP/2 readers
 * have no hook after the headers), so the gate reads the first request of each HTTP/1 connection
 * itself: it parses the head with h2o's own parser (picohttpparser), refuses it there when a check
 * fails (JSON 401/403/413 with Connection: close, then reads and discards what the client is still
 * sending, bounded in bytes and time, so the client sees the answer instead of a reset), reads a
 * Content-Length body itself (a JSON 408 when it stops short), and only then hands the socket to
 * h2o. Later requests of a keep-alive connection and HTTP/2 streams are read by h2o; the request
 * handler runs the same checks first (sg_gate_check_request) and ends the connection after any
 * request that did not authenticate, so a connection carries a second request only when the first
 * presented a valid key. Loop thread only, but for sg_gate_init().
 */
#ifndef SG_GATEWAY_GATE_H
#define SG_GATEWAY_GATE_H

#include "runtime.h"
#include "listen.h"

typedef struct st_sg_gate_loop_t sg_gate_loop_t;
typedef struct st_sg_gate_listener_t sg_gate_listener_t;

/** Registers the gate's metrics and reads each listener's policy (s->gate) from its listen entry
 * and the address it is bound to: a loopback address restricts Host to loopback names and the
 * entry's allowed_hosts. Main thread, once s->listeners are open and h2o configured, before the
 * loops start. */
void sg_gate_init(sg_server_t *s);
/** Frees s->gate, once the loops are gone. Main thread. */
void sg_gate_dispose(sg_server_t *s);
/** Starts accepting on every listener of the loop (loop thread). */
void sg_gate_start_loop(sg_loop_t *l);
/** Stops accepting (the caller closes the listeners afterwards) and closes the connections that
 * have not sent a request head yet; a body being read or a refusal being written goes on. */
void sg_gate_stop_loop(sg_loop_t *l);
/** 1 while the gate holds connections of this loop (a first request being read, a refusal being
 * written or drained). */
int sg_gate_busy(sg_loop_t *l);
/** Closes what the gate still holds and frees its state: after the loop stopped serving, while
 * its evloop still exists. */
void sg_gate_dispose_loop(sg_loop_t *l);
/**
 * The handler's first step: Host, Origin and (with clients.require_key) the API key of `req`,
 * judged exactly as the gate judges a first request, by the rules of the listener its connection
 * came through. Returns 0 when the request may go on, or 1
 * after answering it (401 or 403, JSON, the connection closed after the answer). A request that
 * goes on without a valid key while keys are required (an open route: GET /health, /dashboard)
 * also ends its connection after the answer.
 */
int sg_gate_check_request(sg_loop_t *l, h2o_req_t *req);

#endif
