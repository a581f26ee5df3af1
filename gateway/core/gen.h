/*
 * gen.h -- generations: one loaded configuration and everything the gateway built from it, so
 * that a reload (reload.h) can switch all of it at once while the requests of the old one finish.
 *
 * A generation holds the config, the routes (route.h: each a view over a reference-counted core,
 * shared with the previous generation when the route's plugin config did not change), the client
 * table (clients.h: the rate-limit state lives on across reloads, keyed by client id), the spend
 * budgets in use (budget.h, keyed by client id / route name), the fusion routes (fusion_route.h)
 * and the MCP tools (mcp_impl.h). The trace files (trace.h) are shared by path.
 *
 * Publishing and references. The server holds the current generation; each loop holds the one it
 * last took (sg_loop_refresh_gen(), at the start of each request, of the connection gate's check
 * and of each loop iteration) and everything that outlives a callback -- a query, a backend call,
 * a fusion query, an MCP POST -- holds a reference on the generation whose objects it uses. So a
 * request runs on one generation from start to end, and a generation is disposed when its last
 * user lets go: by the reload thread (reload.c), never on a loop or a plugin thread, because
 * disposing may destroy a plugin instance (which joins its threads). Building, publishing and
 * disposing are the assembly's (build.h, beside main.c); this header is what every room uses.
 */
#ifndef SG_GATEWAY_GEN_H
#define SG_GATEWAY_GEN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "config.h"
#include "buf.h"

struct st_sg_server_t;
struct st_sg_loop_t;
struct st_sg_route_t;
struct st_sg_clients_t;
struct st_sg_fusion_table_t;
struct st_sg_mcp_tools_t;
struct st_sg_budget_set_t;

typedef struct st_sg_gen_t sg_gen_t;
struct st_sg_gen_t {
    _Atomic uint32_t refs;
    uint64_t id; /* 1 at start-up, one more per successful reload */
    struct st_sg_server_t *server;
    sg_config_t *cfg; /* owned unless it is the start-up config (the server's own, kept to exit) */
    int owns_cfg;
    struct st_sg_route_t *routes; /* n_routes, in config order */
    size_t n_routes;
    struct st_sg_clients_t *clients;
    struct st_sg_fusion_table_t *fusion;
    struct st_sg_mcp_tools_t *mcp; /* NULL when mcp.enabled is off */
    struct st_sg_budget_set_t *budgets;
    int published;
    sg_gen_t *live_prev, *live_next; /* the server's live generations, under its gen_mutex */
    sg_gen_t *dead_next;             /* the reload thread's list of generations to dispose */
    void (*bury)(sg_gen_t *g);       /* what its last release hands it to (set by its builder, build.c:
                                      * the reload thread, reload.c); NULL: nothing (a test's) */
};

/** Takes one more reference. Any thread. */
static inline sg_gen_t *sg_gen_ref(sg_gen_t *g)
{
    if (g != NULL)
        atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}
/** Drops a reference; the last one hands the generation to its `bury` (the reload thread, which
 * disposes of it, or at once when that thread is not running: start-up, exit). Any thread. Inline
 * like sg_gen_ref: only the last release leaves the caller's file. */
static inline void sg_gen_release(sg_gen_t *g)
{
    if (g != NULL && atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1 && g->bury != NULL)
        g->bury(g);
}

/** The current generation, referenced. Any thread (a mutex). */
sg_gen_t *sg_gen_acquire(struct st_sg_server_t *s);
/**
 * Loop thread: when a newer generation was published, takes it and releases the one the loop
 * held. Call only where nothing of the loop's old generation is borrowed without a reference.
 */
void sg_loop_refresh_gen(struct st_sg_loop_t *l);

/** Calls `fn` for every route of every live generation whose core the current generation does not
 * serve, and for every route of the current one (the admission pumps, dispatch.c). Loop thread. */
void sg_gen_each_pumped_route(struct st_sg_loop_t *l, void (*fn)(struct st_sg_route_t *, struct st_sg_loop_t *));
/** Number of generations still referenced (the current one and those still draining). */
uint32_t sg_gen_live(struct st_sg_server_t *s);

/** Route `name` (length `len`) of `g`, or NULL. */
struct st_sg_route_t *sg_gen_route(const sg_gen_t *g, const char *name, size_t len);

#endif
