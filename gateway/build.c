/*
 * build.c -- the assembly (build.h): building a configuration generation (gen.h) from a config,
 * which wires every room -- routes and their plugin instances, clients, budgets, fusion routes,
 * MCP tools, traces -- publishing it, and disposing of it. The references that keep a generation
 * alive while requests of it run are core/gen.c's. It sits beside main.c, above the rooms.
 *
 * Building never touches what the running gateway uses. A route's core (route.h: the plugin
 * instance and the admission state) is kept when the previous generation has a route of the same
 * name built from the same instance key: the plugin's resolved path and the identity of its file,
 * the config's directory, the route's "config" and "rerank" objects as written, and the identity
 * (device, inode, size, modification time) of every file or folder a string of those objects names
 * -- so an index rebuilt in place is loaded again, and a config only re-indented is not (the
 * objects are compared as compact JSON: the order of their keys counts).
 * Other routes get a new instance, created here, on the main thread or the reload thread: creating
 * one may take a while (an index to map, a model to load) and the old generation serves meanwhile.
 *
 * The server's current generation and its list of live ones change under server->gen_mutex; a
 * loop compares the current pointer (an atomic) with the one it holds before each request.
 */
#include "build.h"
#include "gen.h"
#include "runtime.h"
#include "route.h"
#include "budget.h"
#include "clients.h"
#include "dispatch.h"
#include "fusion_route.h"
#include "blas.h"
#include "json.h"
#include "mcp.h"
#include "rerank.h"
#include "respond.h"
#include "retrieve.h"
#include "trace.h"

#include <cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define MAX_DIR_ENTRIES 4096 /* entries of a named folder whose identities make the key */

static _Atomic uint32_t next_core_id;

/* ---- route cores ---- */

/* Appends the identity of `path` (and, for a folder, of each entry in it) to the key. */
static void append_file(sg_buf_t *k, const char *path, int depth)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return;
    sg_buf_appendf(k, "\nfile %s %llu:%llu %lld %lld.%09ld", path, (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                   (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    if (!S_ISDIR(st.st_mode) || depth > 0)
        return;
    struct dirent **names = NULL;
    int n = scandir(path, &names, NULL, alphasort);
    for (int i = 0; i < n; ++i) {
        const char *e = names[i]->d_name;
        if (i < MAX_DIR_ENTRIES && strcmp(e, ".") != 0 && strcmp(e, "..") != 0) {
            char sub[PATH_MAX];
            if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", path, e) < sizeof(sub))
                append_file(k, sub, depth + 1);
        }
        free(names[i]);
    }
    free(names);
}

/* Every string of `j` that names an existing file or folder (relative ones against `base`). */
static void append_named_files(sg_buf_t *k, const cJSON *j, const char *base)
{
    for (const cJSON *it = j; it != NULL; it = it->next) {
        if (cJSON_IsString(it) && it->valuestring[0] != '\0' && strlen(it->valuestring) < PATH_MAX / 2) {
            char path[PATH_MAX];
            if (it->valuestring[0] == '/')
                snprintf(path, sizeof(path), "%s", it->valuestring);
            else
                snprintf(path, sizeof(path), "%s/%s", base, it->valuestring);
            append_file(k, path, 0);
        }
        if (it->child != NULL)
            append_named_files(k, it->child, base);
    }
}

/* What a route's plugin instance is made of: equal keys, same instance (see the top of the file). */
static char *instance_key(const sg_config_t *cfg, const sg_backend_conf_t *bc)
{
    sg_buf_t k = {0};
    sg_buf_appendf(&k, "plugin %s\nbase %s\nconfig %s\nrerank %s", bc->plugin_path, cfg->base_dir, bc->config_json,
                   bc->rerank_json != NULL ? bc->rerank_json : "null");
    append_file(&k, bc->plugin_path, 1);
    for (int i = 0; i < 2; ++i) {
        const char *text = i == 0 ? bc->config_json : bc->rerank_json;
        cJSON *j = text != NULL ? cJSON_Parse(text) : NULL;
        if (j != NULL)
            append_named_files(&k, j, cfg->base_dir);
        cJSON_Delete(j);
    }
    sg_buf_appendc(&k, '\0');
    return k.base;
}

static sg_route_core_t *core_new(const sg_backend_conf_t *bc, char *key)
{
    sg_route_core_t *k = sg_mem_calloc(1, sizeof(*k));
    atomic_init(&k->refs, 1);
    k->id = atomic_fetch_add(&next_core_id, 1) + 1;
    k->key = key;
    k->name = sg_strdup(bc->name);
    pthread_mutex_init(&k->admit_mutex, NULL);
    return k;
}

static void core_release(sg_route_core_t *k)
{
    if (k == NULL || atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (k->inst != NULL && !k->destroyed)
        k->plugin.vt->destroy(k->inst);
    if (k->plugin.dl != NULL)
        sg_plugin_unload(&k->plugin);
    pthread_mutex_destroy(&k->admit_mutex);
    free(k->key);
    free(k->name);
    free(k->identity);
    free(k);
}

/* The plugin instance of a new core: create(), the rerank stage, the cache identity. Errors are
 * --check's ("backend NAME (PATH): ..."). */
static int core_create(sg_route_core_t *k, const sg_config_t *cfg, const sg_backend_conf_t *bc, char *err, size_t err_size)
{
    char e[1024];
    e[0] = '\0';
    sg_status st = k->plugin.vt->create(sg_plugin_host_api(), bc->name, cfg->base_dir, bc->config_json, strlen(bc->config_json),
                                        &k->inst, e, sizeof(e));
    if (st != SG_OK) {
        snprintf(err, err_size, "backend %s (%s): %s", bc->name, bc->plugin_path, e[0] != '\0' ? e : "create failed");
        k->inst = NULL;
        return -1;
    }
    k->inner_vt = k->plugin.vt; /* the plugin's own limits, before any wrapper */
    k->inner_inst = k->inst;
    if (bc->rerank != NULL && sg_rerank_wrap(k, bc, e, sizeof(e)) != 0) {
        snprintf(err, err_size, "backend %s: %s", bc->name, e);
        return -1;
    }
    k->serves_access = sg_plugin_serves_access(&k->plugin, k->inst);
    const sg_backend_vtable *vt = k->plugin.vt;
    const char *ident = vt->identity != NULL ? vt->identity(k->inst) : NULL;
    size_t n = strlen(vt->name) + strlen(bc->name) + strlen(vt->version) + (ident ? strlen(ident) : 0) + 8;
    k->identity = sg_mem_alloc(n);
    snprintf(k->identity, n, "%s|%s|%s|%s", vt->name, bc->name, vt->version, ident != NULL ? ident : "");
    char l[256];
    snprintf(l, sizeof(l), "backend=\"%s\"", bc->name);
    sg_counter_add(sg_metrics_counter("searchgate_backend_instances_created_total",
                                      "Plugin instances created for the route (1 at start-up; one more per configuration reload "
                                      "that changed the route's plugin config or the files it names).",
                                      l),
                   1);
    return 0;
}

/* The core of route `i` of `g`: the previous generation's route of that name when built from the
 * same key, else a new one with its plugin loaded (not yet created). */
static int plan_core(sg_gen_t *g, size_t i, const sg_gen_t *prev, const char *plugin_dir, char *err, size_t err_size)
{
    sg_backend_conf_t *bc = &g->cfg->backends[i];
    if (bc->plugin_path == NULL) {
        size_t n = strlen(plugin_dir) + strlen(bc->plugin) + 16;
        bc->plugin_path = sg_mem_alloc(n);
        snprintf(bc->plugin_path, n, "%s/sg_%s.so", plugin_dir, bc->plugin);
    }
    char *key = instance_key(g->cfg, bc);
    sg_route_t *old = prev != NULL ? sg_gen_route(prev, bc->name, strlen(bc->name)) : NULL;
    if (old != NULL && strcmp(old->core->key, key) == 0 && !old->core->destroyed) {
        free(key);
        atomic_fetch_add(&old->core->refs, 1);
        g->routes[i].core = old->core;
        return 0;
    }
    sg_route_core_t *k = core_new(bc, key);
    g->routes[i].core = k;
    char e[1024];
    if (sg_plugin_load(&k->plugin, bc->plugin_path, e, sizeof(e)) != 0) {
        snprintf(err, err_size, "backend %s: %s", bc->name, e);
        return -1;
    }
    return 0;
}

/* The BLAS kernels the plugins run: one choice for the process (OpenBLAS is loaded once), made
 * at start-up; /stats shows it through sg_server_t.blas. */
static sg_blas_choice_t blas_choice;

/* Start-up: the BLAS kernels are fixed once every plugin is loaded and before any computes (blas.h:
 * this may re-execute the gateway). A reload keeps the start-up choice. */
static int tune_blas(sg_server_t *s, char **argv, char *err, size_t err_size)
{
    sg_blas_choice_t *c = &blas_choice;
    s->blas = c;
    if (sg_blas_tune(argv, c) != 0) {
        snprintf(err, err_size, "%s", c->reason);
        return -1;
    }
    if (strcmp(c->library, "none") != 0)
        SG_LOG(SG_LL_INFO, "main", "BLAS: %s with %s kernels (%s)", c->library, c->core, c->reason);
    char l[4 * sizeof(*c)]; /* four of its strings: roomy enough for any the compiler imagines */
    snprintf(l, sizeof(l), "library=\"%s\",core=\"%s\",default_core=\"%s\",source=\"%s\"", c->library, c->core, c->default_core,
             c->source);
    sg_gauge_set(sg_metrics_gauge("searchgate_blas_info", "The BLAS library and kernel set the plugins run (value 1).", l), 1);
    return 0;
}

/* Every route's core: kept or loaded (plan_core), the rerank module, the BLAS choice (start-up),
 * then the new instances created. */
static int build_cores(sg_gen_t *g, const sg_gen_t *prev, const sg_gen_opts_t *o, char *err, size_t err_size)
{
    for (size_t i = 0; i < g->n_routes; ++i)
        if (plan_core(g, i, prev, o->plugin_dir, err, err_size) != 0)
            return -1;
    char e[1024];
    if (sg_rerank_open_module(g->cfg, o->plugin_dir, e, sizeof(e)) != 0) {
        snprintf(err, err_size, "%s", e);
        return -1;
    }
    if (o->argv != NULL && tune_blas(g->server, o->argv, err, err_size) != 0)
        return -1;
    for (size_t i = 0; i < g->n_routes; ++i) {
        sg_route_core_t *k = g->routes[i].core;
        if (k->inst == NULL && core_create(k, g->cfg, &g->cfg->backends[i], err, err_size) != 0)
            return -1;
    }
    return 0;
}

/* ---- routes (the generation's view of each core) ---- */

/* The route's series: the same ones every generation's route of that name counts in. */
static void route_metrics(sg_route_t *b)
{
    const sg_backend_conf_t *bc = b->conf;
    char l[256];
    sg_route_meters_register(&b->meters, bc->name);
    snprintf(l, sizeof(l), "backend=\"%s\"", bc->name);
    b->inflight_queries =
        sg_metrics_gauge("searchgate_backend_inflight_queries", "Queries handed to the plugin and not yet answered.", l);
    b->queued_queries = sg_metrics_gauge("searchgate_backend_queued_queries", "Queries waiting for admission to the plugin.", l);
    b->calls = sg_metrics_counter("searchgate_backend_calls_total", "Plugin search calls.", l);
    b->call_errors = sg_metrics_counter("searchgate_backend_call_errors_total", "Plugin search calls that failed.", l);
    b->call_latency = sg_metrics_hist("searchgate_backend_call_duration_seconds", "Plugin search call latency.", l);
    b->batch_queries = sg_metrics_counter("searchgate_backend_call_queries_total",
                                          "Queries sent in plugin calls (divide by calls for the mean batch size).", l);
    b->shed =
        sg_metrics_counter("searchgate_backend_shed_total", "Calls refused with 503 because the admission queue was full.", l);
    b->expired = sg_metrics_counter("searchgate_backend_expired_total",
                                    "Queued calls dropped before reaching the plugin (deadline passed or nobody waiting).", l);
    b->coalesced = sg_metrics_counter("searchgate_coalesced_queries_total",
                                      "Queries that joined an identical in-flight query instead of calling the backend.", l);
    b->fallbacks = sg_metrics_counter("searchgate_fallbacks_total", "Requests that used the route's fallback backend.", l);
    b->cache_misses = sg_metrics_counter("searchgate_cache_misses_total", "Queries the cache could not answer.", l);
    b->floor_refused = sg_metrics_counter(
        "searchgate_backend_floor_refused_total",
        "Calls not started because less of their deadline was left than the route's floor (min_remaining_ms).", l);
    b->floor_ms = sg_metrics_gauge("searchgate_backend_floor_ms",
                                   "The route's floor: the least of a deadline a call needs left to start (ms).", l);
    snprintf(l, sizeof(l), "backend=\"%s\",layer=\"l1\"", bc->name);
    b->cache_hits_l1 = sg_metrics_counter("searchgate_cache_hits_total", "Queries answered by the cache, by layer.", l);
    snprintf(l, sizeof(l), "backend=\"%s\",layer=\"redis\"", bc->name);
    b->cache_hits_redis = sg_metrics_counter("searchgate_cache_hits_total", "Queries answered by the cache, by layer.", l);
}

/* Route `i` of `g` over its core: settings, metrics, admission limits, provenance. */
static void route_setup(sg_gen_t *g, size_t i)
{
    sg_route_t *b = &g->routes[i];
    sg_route_core_t *k = b->core;
    b->index = (int)i;
    b->gen = g;
    b->conf = &g->cfg->backends[i];
    route_metrics(b);
    sg_dispatch_setup_route(b, k->inner_vt, k->inner_inst);
    for (int op = 0; op < 2; ++op)
        b->admits[op] = sg_dispatch_capacity(b, op, g->cfg->limits.max_queries);
    const sg_backend_vtable *vt = k->plugin.vt;
    const char *ident = vt->identity != NULL ? vt->identity(k->inst) : NULL;
    sg_provenance_init(&b->prov, b->conf->name, b->conf->rerank != NULL ? "rerank" : "plugin", vt->name, vt->version, ident, NULL);
}

/* Shown with the route's limits once published (a reload may change them). */
static void route_publish_gauges(sg_route_t *b)
{
    const sg_backend_conf_t *bc = b->conf;
    char l[256];
    snprintf(l, sizeof(l), "backend=\"%s\"", bc->name);
    sg_gauge_set(sg_metrics_gauge("searchgate_backend_queue_limit_queries", "The route's max_queue (queries).", l), bc->max_queue);
    sg_gauge_set(
        sg_metrics_gauge("searchgate_backend_inflight_limit_queries", "The route's max_inflight (queries; 0 = unlimited).", l),
        bc->max_inflight);
    if (bc->min_remaining_quantile == SG_FLOOR_NONE || atomic_load(&b->core->floor_observed_ms) < bc->min_remaining_ms)
        sg_gauge_set(b->floor_ms, bc->min_remaining_ms);
    sg_provenance_register_metric(&b->prov, b->core->plugin.vt->name, b->core->plugin.vt->version);
}

/* ---- building ---- */

sg_gen_t *sg_gen_build(sg_server_t *s, sg_config_t *cfg, int owns_cfg, const sg_gen_t *prev, const sg_gen_opts_t *o, char *err,
                       size_t err_size)
{
    sg_gen_t *g = sg_mem_calloc(1, sizeof(*g));
    atomic_init(&g->refs, 1);
    g->bury = o->bury; /* its last release: the reload thread disposes of it (main.c and reload.c say so) */
    g->id = prev != NULL ? prev->id + 1 : 1;
    g->server = s;
    g->cfg = cfg;
    g->owns_cfg = owns_cfg;
    g->n_routes = cfg->n_backends;
    g->routes = sg_mem_calloc(g->n_routes > 0 ? g->n_routes : 1, sizeof(*g->routes));
    if (build_cores(g, prev, o, err, err_size) != 0)
        goto fail;
    for (size_t i = 0; i < g->n_routes; ++i)
        route_setup(g, i);
    g->clients = sg_clients_create(cfg, prev != NULL ? prev->clients : NULL);
    g->budgets = sg_budget_set_create(cfg, g->routes, g->n_routes);
    g->fusion = sg_fusion_build(g);
    g->mcp = s->cfg->mcp.enabled ? sg_mcp_tools_build(g) : NULL; /* mcp.* is read at start-up only */
    char e[1024];
    if (sg_trace_configure(cfg, o->check_only, e, sizeof(e)) != 0) {
        snprintf(err, err_size, "config %s: %s", cfg->path != NULL ? cfg->path : "", e);
        goto fail;
    }
    return g;
fail:
    sg__gen_dispose(g);
    return NULL;
}

/* ---- publishing ---- */

/* searchgate_route_info: 1 for the routes `g` serves, 0 for those of `old` it does not. */
static void publish_route_info(sg_gen_t *g, const sg_gen_t *old)
{
    for (size_t i = 0; i < g->n_routes; ++i)
        route_publish_gauges(&g->routes[i]);
    sg_fusion_publish(g->fusion, old != NULL ? old->fusion : NULL);
    for (size_t i = 0; old != NULL && i < old->n_routes; ++i) {
        sg_gauge_t *info = old->routes[i].prov.info;
        int still = 0;
        for (size_t j = 0; j < g->n_routes && !still; ++j)
            still = g->routes[j].prov.info == info;
        for (size_t j = 0; j < sg_fusion_count(g->fusion) && !still; ++j)
            still = sg_fusion_prov(g->fusion, j)->info == info;
        if (info != NULL && !still)
            sg_gauge_set(info, 0);
    }
    for (size_t i = 0; old != NULL && i < sg_fusion_count(old->fusion); ++i) {
        sg_gauge_t *info = sg_fusion_prov(old->fusion, i)->info;
        int still = 0;
        for (size_t j = 0; j < sg_fusion_count(g->fusion) && !still; ++j)
            still = sg_fusion_prov(g->fusion, j)->info == info;
        if (info != NULL && !still)
            sg_gauge_set(info, 0);
    }
}

/* What is process-wide: the log level, the response budget, budgets, trace settings, metrics. */
static void publish_settings(sg_server_t *s, sg_gen_t *g, const sg_gen_t *old)
{
    int level = s->log_level_override >= 0 ? s->log_level_override : g->cfg->log_level;
    sg_log_set_level(level);
    sg_respond_set_limit(s, g->cfg->limits.max_response_bytes_inflight);
    sg_budget_set_publish(g->budgets);
    sg_trace_publish(g->cfg);
    publish_route_info(g, old);
    sg_retrieve_init(old, g);
    sg_gauge_set(sg_metrics_gauge("searchgate_config_generation",
                                  "The configuration generation serving new requests (1 at start-up, one more per reload).", ""),
                 (int64_t)g->id);
}

static void live_gauge(sg_server_t *s)
{
    sg_gauge_set(sg_metrics_gauge("searchgate_config_generations_live",
                                  "Configuration generations still in use: the current one and those whose requests are still "
                                  "running after a reload.",
                                  ""),
                 (int64_t)atomic_load(&s->n_live));
}

void sg_gen_publish(sg_server_t *s, sg_gen_t *g)
{
    g->published = 1;
    pthread_mutex_lock(&s->gen_mutex);
    sg_gen_t *old = s->gen;
    for (size_t i = 0; old != NULL && i < old->n_routes; ++i)
        atomic_store(&old->routes[i].core->in_current, 0);
    for (size_t i = 0; i < g->n_routes; ++i)
        atomic_store(&g->routes[i].core->in_current, 1);
    g->live_next = s->live;
    if (s->live != NULL)
        s->live->live_prev = g;
    s->live = g;
    atomic_fetch_add(&s->n_live, 1);
    s->gen = g; /* the caller's reference */
    atomic_store_explicit(&s->gen_now, g, memory_order_release);
    pthread_mutex_unlock(&s->gen_mutex);
    publish_settings(s, g, old);
    live_gauge(s);
    for (int i = 0; i < s->n_loops && s->loops != NULL; ++i) /* idle loops let go of the old one now */
        h2o_multithread_send_message(&s->loops[i].deliveries, NULL);
    sg_gen_release(old);
}

void sg_gen_unpublish(sg_server_t *s)
{
    pthread_mutex_lock(&s->gen_mutex);
    sg_gen_t *g = s->gen;
    s->gen = NULL;
    atomic_store(&s->gen_now, NULL);
    pthread_mutex_unlock(&s->gen_mutex);
    sg_gen_release(g);
}

void sg_gen_destroy_instances(sg_server_t *s)
{
    pthread_mutex_lock(&s->gen_mutex);
    size_t n = 0, cap = 0;
    sg_route_core_t **cores = NULL;
    for (sg_gen_t *g = s->live; g != NULL; g = g->live_next)
        for (size_t i = 0; i < g->n_routes; ++i) {
            sg_route_core_t *k = g->routes[i].core;
            if (k->destroyed)
                continue;
            k->destroyed = 1;              /* under the mutex: each core once */
            atomic_fetch_add(&k->refs, 1); /* a listed generation still holds it: safe to take */
            if (n == cap)
                cores = sg_mem_realloc(cores, (cap = cap * 2 + 8) * sizeof(*cores));
            cores[n++] = k;
        }
    pthread_mutex_unlock(&s->gen_mutex);
    for (size_t i = 0; i < n; ++i) {
        if (cores[i]->inst != NULL)
            cores[i]->plugin.vt->destroy(cores[i]->inst);
        cores[i]->inst = NULL;
        core_release(cores[i]);
    }
    free(cores);
}

/* ---- disposing ---- */

void sg__gen_dispose(sg_gen_t *g)
{
    sg_server_t *s = g->server;
    if (g->published) {
        pthread_mutex_lock(&s->gen_mutex);
        if (g->live_prev != NULL)
            g->live_prev->live_next = g->live_next;
        else
            s->live = g->live_next;
        if (g->live_next != NULL)
            g->live_next->live_prev = g->live_prev;
        atomic_fetch_sub(&s->n_live, 1);
        pthread_mutex_unlock(&s->gen_mutex);
        live_gauge(s);
    }
    sg_trace_unconfigure(g->cfg);
    sg_mcp_tools_free(g->mcp);
    sg_fusion_table_free(g->fusion);
    sg_budget_set_free(g->budgets);
    sg_clients_destroy(g->clients);
    for (size_t i = 0; i < g->n_routes; ++i) {
        sg_provenance_dispose(&g->routes[i].prov);
        core_release(g->routes[i].core);
    }
    free(g->routes);
    if (g->owns_cfg) {
        sg_config_free(g->cfg);
        free(g->cfg);
    }
    free(g);
}
