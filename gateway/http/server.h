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

/** Opens the listeners, starts the loop threads and waits until every loop serves. 0, or -1 with
 * `err` (a port in use, a listener that cannot be opened). Main thread, once. */
int sg_server_start(sg_server_t *s, char *err, size_t err_size);
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
