/*
 * server.h -- the HTTP server (server.c): the loop threads, their h2o contexts and listeners, the
 * h2o configuration with one handler per path, and the operations routes (/, /health, /metrics,
 * /stats, /dashboard). The state it runs is core/runtime.h's sg_server_t.
 */
#ifndef SG_GATEWAY_SERVER_H
#define SG_GATEWAY_SERVER_H

#include <stdint.h>
#include <h2o.h>
#include "runtime.h"

/** What the assembly lends the server (main.c: the reload thread's, reload.h): the answer to POST
 * /admin/reload and the per-loop state it needs, set up and torn down on each loop's thread. Any
 * may be NULL (then /admin/reload is not found). */
typedef struct st_sg_server_hooks_t {
    void (*admin_reload)(sg_loop_t *loop, h2o_req_t *req);
    void (*loop_init)(sg_loop_t *loop);
    void (*loop_dispose)(sg_loop_t *loop);
} sg_server_hooks_t;

/** Opens the listeners, starts the loop threads and waits until every loop serves; `hooks` (kept,
 * NULL: none) is what the assembly lends it. 0, or -1 with `err` (a port in use, a listener that
 * cannot be opened). Main thread, once. */
int sg_server_start(sg_server_t *s, const sg_server_hooks_t *hooks, char *err, size_t err_size);
/** Tells the loops to stop serving (they stop accepting, let the requests in progress finish
 * within shutdown_grace_ms and fail the rest with 503) and waits until every loop stopped. Main
 * thread. */
void sg_server_stop(sg_server_t *s);
/** Waits for the loops to deliver the plugins' last completions and exit; frees them. Main thread,
 * after the plugin instances were destroyed. */
void sg_server_dispose(sg_server_t *s);
/** Whether every loop went round within the last `max_age_ms` (for the systemd watchdog). */
int sg_server_loops_alive(const sg_server_t *s, uint64_t max_age_ms);
#endif
