/*
 * reload.h -- reloading the configuration without a restart (docs/operations.md, "Reloading the
 * configuration"). SIGHUP (also sent by `searchgate --reload PIDFILE` and systemd's ExecReload)
 * and an admin-key POST /admin/reload re-read the config file on the reload thread, build a new generation from it
 * (gen.h) and publish it; a config that --check would refuse is refused as a whole, with the same
 * message, and the running one keeps serving. The same thread disposes of the generations nobody
 * uses any more (destroying the plugin instances of routes a reload removed or replaced).
 *
 * What a reload changes: clients and keys, rate limits, budgets, limits, route settings, routes
 * added, removed or recreated (their plugin config or the files it names changed), fusion and
 * rerank routes, traces, the log level. What it does not: listen (any of its forms: the object,
 * the array of entries, their sockets, address files and policies), threads, cache.l1_bytes,
 * cache.redis, mcp.*, limits.max_body_bytes -- the reply and the log line name those that changed
 * and keep the running values until a restart.
 */
#ifndef SG_GATEWAY_RELOAD_H
#define SG_GATEWAY_RELOAD_H

#include <h2o.h>
#include "gen.h"
#include "buf.h"

struct st_sg_server_t;
struct st_sg_loop_t;

/**
 * Starts the reload thread for `s` (its first generation published): reloads read `config_path`;
 * routes without a plugin path find their plugin in the config's plugin_dir, else in
 * `default_plugin_dir`. Main thread.
 */
void sg_reload_start(struct st_sg_server_t *s, const char *config_path, const char *default_plugin_dir);
/** Shutdown begins: new reloads are refused (503) and, from now on, none tells systemd RELOADING=1
 * or READY=1; returns at once. Main thread, before it tells systemd STOPPING=1. */
void sg_reload_refuse(void);
/** Refuses new reloads (503), lets the one running finish and answers the queued ones 503. The
 * thread keeps disposing of generations. Main thread, while the loops still serve. */
void sg_reload_quiesce(void);
/** After the loops stopped: disposes of what is left to dispose and joins the thread; generations
 * released afterwards are disposed on the releasing thread. Main thread. */
void sg_reload_stop(void);
/** SIGHUP: a reload is queued (its outcome is logged). Any thread. */
void sg_reload_signal(void);
/** POST /admin/reload (server.c routes it here): the admin key, then a reload; answered when it is
 * done, with what changed (200) or --check's message (422). Loop thread. */
void sg_reload_admin(struct st_sg_loop_t *loop, h2o_req_t *req);
/** The loop's receiver for the reload thread's answers. Loop thread, start-up and exit. */
void sg_reload_init_loop(struct st_sg_loop_t *loop);
void sg_reload_dispose_loop(struct st_sg_loop_t *loop);

/**
 * The warnings about generation `g` (NULL `prev`: at start-up) one per line: routes that can never
 * admit limits.max_queries queries of a request ("/retrieve NAME: WHY; limits.max_queries is N"),
 * and, at a reload, the restart-only settings that changed. Appended to `out`.
 */
void sg_reload_warnings(const sg_gen_t *prev, const sg_gen_t *g, sg_buf_t *out);

/* ---- internal (gen.c) ---- */
/** A generation's last reference is gone: it is disposed on the reload thread, or at once when
 * that thread is not running. Any thread. */
void sg__reload_bury(sg_gen_t *g);

#endif
