/*
 * build.h -- the assembly (build.c): building, publishing and disposing of configuration
 * generations (gen.h). It wires every room, so it sits beside main.c, above them; main.c (start-up,
 * exit) and the reload thread (reload.c) call it.
 */
#ifndef SG_GATEWAY_BUILD_H
#define SG_GATEWAY_BUILD_H

#include "gen.h"

struct st_sg_server_t;

/** What building a generation is told besides the config. */
typedef struct st_sg_gen_opts_t {
    const char *plugin_dir;    /* where plugins without a path are found */
    int check_only;            /* --check: trace files are checked, not opened */
    char **argv;               /* start-up only: for the BLAS kernel choice (which may re-execute) */
    void (*bury)(sg_gen_t *g); /* what the generation's last release hands it to (sg_gen_t.bury) */
} sg_gen_opts_t;

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
/** Shutdown, after the loops stopped serving: destroys the plugin instance of every live core
 * (which completes their pending searches as cancelled). Main thread. */
void sg_gen_destroy_instances(struct st_sg_server_t *s);
/* ---- for the reload thread (reload.c) ---- */
/** Disposes a generation nobody references any more. Reload thread (or main, when it is not running). */
void sg__gen_dispose(sg_gen_t *g);

#endif
