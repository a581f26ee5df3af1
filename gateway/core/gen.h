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
 * disposing may destroy a plugin instance (which joins its threads).
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
};

/** What building a generation is told besides the config. */
typedef struct st_sg_gen_opts_t {
    const char *plugin_dir; /* where plugins without a path are found */
    int check_only;         /* --check: trace files are checked, not opened */
    char **argv;            /* start-up only: for the BLAS kernel choice (which may re-execute) */
} sg_gen_opts_t;

/** Takes one more reference. Any thread. */
static inline sg_gen_t *sg_gen_ref(sg_gen_t *g)
{
    if (g != NULL)
        atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}
/** Drops a reference; the last one hands the generation to the reload thread for disposal
 * (or disposes it at once when that thread is not running: start-up, tests, exit). Any thread. */
void sg_gen_release(sg_gen_t *g);

/**
 * Builds a generation of `cfg` (taken over when `owns_cfg`) on the main thread or the reload
 * thread: routes whose instance key (plugin, its config, its rerank stage, the identities of the
 * files they name) equals one of `prev`'s keep that route's core, the others get a new plugin
 * instance; then the clients, budgets, fusion routes, MCP tools and trace files. Nothing of the
 * running gateway changes until sg_gen_publish(). Returns the generation (one reference), or NULL
 * with the --check message in `err` (everything it created undone; `cfg` freed when owned).
 */
sg_gen_t *sg_gen_build(struct st_sg_server_t *s, sg_config_t *cfg, int owns_cfg, const sg_gen_t *prev, const sg_gen_opts_t *o,
                       char *err, size_t err_size);
/**
 * Makes `g` the current generation (it takes over the caller's reference), applies what is
 * process-wide (log level, the response budget's limit, budgets' limits, trace settings, route
 * info metrics) and wakes the loops, which take it at their next request. The previous one is
 * released. Main thread or reload thread.
 */
void sg_gen_publish(struct st_sg_server_t *s, sg_gen_t *g);
/** Exit: the server lets go of its current generation (disposed once nothing else holds it). */
void sg_gen_unpublish(struct st_sg_server_t *s);
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
/** Shutdown, after the loops stopped serving: destroys the plugin instance of every live core
 * (which completes their pending searches as cancelled). Main thread. */
void sg_gen_destroy_instances(struct st_sg_server_t *s);
/** Number of generations still referenced (the current one and those still draining). */
uint32_t sg_gen_live(struct st_sg_server_t *s);

/** Route `name` (length `len`) of `g`, or NULL. */
struct st_sg_route_t *sg_gen_route(const sg_gen_t *g, const char *name, size_t len);

/* ---- internal (reload.c) ---- */
/** Disposes a generation nobody references any more. Reload thread (or main, when it is not running). */
void sg__gen_dispose(sg_gen_t *g);

#endif
