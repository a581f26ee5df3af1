/*
 * main.c -- searchgate: command line, start-up (config, plugins, listeners) and shutdown.
 * Start-up either succeeds completely or exits with status 1 and one line saying why.
 *
 * Once every listener accepts, the gateway announces itself: address files (listen.h), then
 * READY=1 to systemd (notify.h). On SIGTERM or SIGINT it says STOPPING=1, removes the address
 * files, reports "draining" on /health for shutdown_drain_ms while it still serves (so a load
 * balancer's health checks take it out first), then stops accepting and finishes the requests it
 * has (server.c).
 */
#include "server.h"
#include "fusion_route.h"
#include "clients.h"
#include "budget.h"
#include "dispatch.h"
#include "listen.h"
#include "ratelimit_global.h"
#include "rerank.h"
#include "mcp.h"
#include "notify.h"
#include "version.h"
#include "../cache/cache.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int sg_server_start(sg_server_t *s, char *err, size_t err_size);
void sg_server_stop(sg_server_t *s);
void sg_server_dispose(sg_server_t *s);

static void usage(FILE *fp)
{
    fprintf(fp, "usage: searchgate --config FILE [--port N] [--host ADDR] [--address-file PATH] [--threads N]\n"
                "                  [--log-level LEVEL] [--check]\n"
                "\n"
                "  -c, --config FILE    gateway config (JSON; see docs/configuration.md)\n"
                "  -p, --port N         listen port (overrides listen.port; 0 = any free port)\n"
                "      --host ADDR      listen address (overrides listen.host)\n"
                "      --address-file P write HOST:PORT to P once serving, remove it on exit (listen.address_file)\n"
                "  -t, --threads N      event-loop threads (overrides threads; 0 = one per CPU)\n"
                "      --log-level L    error, warn, info or debug\n"
                "      --check          do everything start-up does (config, address, plugins) but serve, then exit\n"
                "  -h, --help           this text\n"
                "  -V, --version        print the version, the git revision, the plugin ABI and the libraries\n");
}

static void exe_dir(char *out, size_t n)
{
    char path[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (len <= 0) {
        snprintf(out, n, ".");
        return;
    }
    path[len] = '\0';
    char *slash = strrchr(path, '/');
    if (slash != NULL)
        *slash = '\0';
    size_t l = strlen(path);
    if (l >= n)
        l = n - 1;
    memcpy(out, path, l);
    out[l] = '\0';
}

/* Loads every plugin (dlopen), so that the BLAS library some of them bring is in the process,
 * then fixes the BLAS kernels before any plugin computes anything: sg_blas_tune() may re-execute
 * the gateway with OPENBLAS_CORETYPE set (blas.h). */
static int open_plugins(sg_server_t *s, const char *plugin_dir, char **argv)
{
    sg_config_t *cfg = s->cfg;
    s->n_routes = cfg->n_backends;
    s->routes = sg_mem_calloc(s->n_routes, sizeof(*s->routes));
    for (size_t i = 0; i < s->n_routes; ++i) {
        sg_route_t *b = &s->routes[i];
        sg_backend_conf_t *bc = &cfg->backends[i];
        b->index = (int)i;
        b->conf = bc;
        pthread_mutex_init(&b->admit_mutex, NULL);
        if (bc->plugin_path == NULL) {
            size_t n = strlen(plugin_dir) + strlen(bc->plugin) + 16;
            bc->plugin_path = sg_mem_alloc(n);
            snprintf(bc->plugin_path, n, "%s/sg_%s.so", plugin_dir, bc->plugin);
        }
        char err[1024];
        if (sg_plugin_load(&b->plugin, bc->plugin_path, err, sizeof(err)) != 0) {
            fprintf(stderr, "searchgate: backend %s: %s\n", bc->name, err);
            return -1;
        }
    }
    char rerr[1024];
    if (sg_rerank_open_module(cfg, plugin_dir, rerr, sizeof(rerr)) != 0) {
        fprintf(stderr, "searchgate: %s\n", rerr);
        return -1;
    }
    if (sg_blas_tune(argv, &s->blas) != 0) {
        fprintf(stderr, "searchgate: %s\n", s->blas.reason);
        return -1;
    }
    if (strcmp(s->blas.library, "none") != 0)
        SG_LOG(SG_LL_INFO, "main", "BLAS: %s with %s kernels (%s)", s->blas.library, s->blas.core, s->blas.reason);
    char l[256];
    snprintf(l, sizeof(l), "library=\"%s\",core=\"%s\",default_core=\"%s\",source=\"%s\"", s->blas.library, s->blas.core,
             s->blas.default_core, s->blas.source);
    sg_gauge_set(sg_metrics_gauge("searchgate_blas_info", "The BLAS library and kernel set the plugins run (value 1).", l), 1);
    return 0;
}

static int load_backends(sg_server_t *s)
{
    sg_config_t *cfg = s->cfg;
    for (size_t i = 0; i < s->n_routes; ++i) {
        sg_route_t *b = &s->routes[i];
        sg_backend_conf_t *bc = &cfg->backends[i];
        char err[1024];
        err[0] = '\0';
        sg_status st = b->plugin.vt->create(sg_plugin_host_api(), bc->name, cfg->base_dir, bc->config_json, strlen(bc->config_json),
                                            &b->inst, err, sizeof(err));
        if (st != SG_OK) {
            fprintf(stderr, "searchgate: backend %s (%s): %s\n", bc->name, bc->plugin_path, err[0] != '\0' ? err : "create failed");
            b->inst = NULL;
            return -1;
        }
        sg_dispatch_setup_route(b, b->plugin.vt, b->inst); /* the plugin's own limits, before any wrapper */
        if (bc->rerank != NULL && sg_rerank_wrap(b, err, sizeof(err)) != 0) {
            fprintf(stderr, "searchgate: backend %s: %s\n", bc->name, err);
            return -1;
        }
        b->serves_access = sg_plugin_serves_access(&b->plugin, b->inst);
        const char *ident = b->plugin.vt->identity != NULL ? b->plugin.vt->identity(b->inst) : NULL;
        size_t n = strlen(b->plugin.vt->name) + strlen(bc->name) + strlen(b->plugin.vt->version) + (ident ? strlen(ident) : 0) + 8;
        b->identity = sg_mem_alloc(n);
        snprintf(b->identity, n, "%s|%s|%s|%s", b->plugin.vt->name, bc->name, b->plugin.vt->version, ident != NULL ? ident : "");
        /* metrics */
        char l[256];
        for (int c = 0; c < SG_NUM_CODES; ++c) {
            if (c == SG_CODE_OTHER)
                snprintf(l, sizeof(l), "backend=\"%s\",code=\"other\"", bc->name);
            else
                snprintf(l, sizeof(l), "backend=\"%s\",code=\"%d\"", bc->name, sg_code_values[c]);
            b->requests[c] =
                sg_metrics_counter("searchgate_requests_total", "Retrieve/access requests by backend and HTTP status.", l);
            b->queries[c] = sg_metrics_counter("searchgate_queries_total",
                                               "Queries in retrieve/access requests by backend and HTTP status.", l);
        }
        snprintf(l, sizeof(l), "backend=\"%s\"", bc->name);
        b->latency =
            sg_metrics_hist("searchgate_request_duration_seconds", "Retrieve/access request latency, arrival to response.", l);
        b->inflight_requests = sg_metrics_gauge("searchgate_inflight_requests", "Retrieve/access requests being processed.", l);
        b->inflight_queries =
            sg_metrics_gauge("searchgate_backend_inflight_queries", "Queries handed to the plugin and not yet answered.", l);
        b->queued_queries =
            sg_metrics_gauge("searchgate_backend_queued_queries", "Queries waiting for admission to the plugin.", l);
        sg_gauge_set(sg_metrics_gauge("searchgate_backend_queue_limit_queries", "The route's max_queue (queries).", l),
                     bc->max_queue);
        sg_gauge_set(
            sg_metrics_gauge("searchgate_backend_inflight_limit_queries", "The route's max_inflight (queries; 0 = unlimited).", l),
            bc->max_inflight);
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
        snprintf(l, sizeof(l), "backend=\"%s\",layer=\"l1\"", bc->name);
        b->cache_hits_l1 = sg_metrics_counter("searchgate_cache_hits_total", "Queries answered by the cache, by layer.", l);
        snprintf(l, sizeof(l), "backend=\"%s\",layer=\"redis\"", bc->name);
        b->cache_hits_redis = sg_metrics_counter("searchgate_cache_hits_total", "Queries answered by the cache, by layer.", l);
        snprintf(l, sizeof(l), "backend=\"%s\"", bc->name);
        b->cache_misses = sg_metrics_counter("searchgate_cache_misses_total", "Queries the cache could not answer.", l);
    }
    return 0;
}

static void destroy_backends(sg_server_t *s)
{
    for (size_t i = 0; i < s->n_routes; ++i) {
        sg_route_t *b = &s->routes[i];
        if (b->inst != NULL)
            b->plugin.vt->destroy(b->inst);
        b->inst = NULL;
    }
}

static void free_backends(sg_server_t *s)
{
    for (size_t i = 0; i < s->n_routes; ++i) {
        sg_route_t *b = &s->routes[i];
        sg_plugin_unload(&b->plugin);
        free(b->identity);
        pthread_mutex_destroy(&b->admit_mutex);
    }
    free(s->routes);
    s->routes = NULL;
}

/* The command line: --config and the overrides of config keys. */
typedef struct st_cmdline_t {
    const char *config, *host, *level, *address_file;
    long port, threads;
    int check, version;
} cmdline_t;

/* Returns 0 to go on, or 1 + the exit status (after --help, --version or an error). */
static int parse_args(int argc, char **argv, cmdline_t *cl)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},  {"port", required_argument, NULL, 'p'},
                                         {"host", required_argument, NULL, 'H'},    {"address-file", required_argument, NULL, 'A'},
                                         {"threads", required_argument, NULL, 't'}, {"log-level", required_argument, NULL, 'l'},
                                         {"check", no_argument, NULL, 'k'},         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},       {NULL, 0, NULL, 0}};
    *cl = (cmdline_t){NULL, NULL, NULL, NULL, -1, -1, 0, 0};
    int c;
    while ((c = getopt_long(argc, argv, "c:p:t:hV", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'c':
            cl->config = optarg;
            break;
        case 'p':
            cl->port = strtol(optarg, &end, 10);
            if (*end != '\0' || cl->port < 0 || cl->port > 65535) {
                fprintf(stderr, "searchgate: --port: expected 0..65535, got %s\n", optarg);
                return 2;
            }
            break;
        case 'H':
            cl->host = optarg;
            break;
        case 'A':
            if (optarg[0] == '\0') {
                fprintf(stderr, "searchgate: --address-file: expected a path\n");
                return 2;
            }
            cl->address_file = optarg;
            break;
        case 't':
            cl->threads = strtol(optarg, &end, 10);
            if (*end != '\0' || cl->threads < 0 || cl->threads > 1024) {
                fprintf(stderr, "searchgate: --threads: expected 0..1024, got %s\n", optarg);
                return 2;
            }
            break;
        case 'l':
            cl->level = optarg;
            break;
        case 'k':
            cl->check = 1;
            break;
        case 'h':
            usage(stdout);
            return 1;
        case 'V':
            cl->version = 1;
            return 1;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (cl->config == NULL || optind != argc) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* The command line's --port, --host, --address-file (the first TCP listener's), --threads and
 * --log-level over the config's. */
static int apply_overrides(sg_config_t *cfg, const cmdline_t *cl)
{
    if (cl->port >= 0 || cl->host != NULL || cl->address_file != NULL) {
        sg_listen_conf_t *l = sg_config_tcp_listener(cfg);
        if (cl->port >= 0)
            l->port = (uint16_t)cl->port;
        if (cl->host != NULL) {
            free(l->host);
            l->host = sg_strdup(cl->host);
        }
        if (cl->address_file != NULL) {
            free(l->address_file);
            l->address_file = sg_strdup(cl->address_file);
        }
    }
    if (cl->threads >= 0)
        cfg->threads = (int)cl->threads;
    sg_log_level = cfg->log_level;
    if (cl->level != NULL) {
        static const char *names[] = {"error", "warn", "info", "debug"};
        int found = -1;
        for (int i = 0; i < 4; ++i)
            if (strcmp(cl->level, names[i]) == 0)
                found = i;
        if (found < 0) {
            fprintf(stderr, "searchgate: --log-level: expected error, warn, info or debug, got %s\n", cl->level);
            return -1;
        }
        sg_log_level = found;
    }
    return 0;
}

static void log_started(const sg_server_t *s)
{
    const sg_config_t *cfg = s->cfg;
    sg_buf_t urls = {0};
    for (size_t i = 0; i < s->n_listeners; ++i)
        sg_buf_appendf(&urls, "%s%s", i != 0 ? ", " : "", s->listeners[i].url);
    sg_buf_appendc(&urls, '\0');
    SG_LOG(SG_LL_INFO, "main", "searchgate %s listening on %s (%d threads, %zu backends, default %s)", SG_VERSION, urls.base,
           s->n_loops, s->n_routes, cfg->backends[cfg->default_backend].name);
    sg_buf_free(&urls);
    for (size_t i = 0; i < s->n_listeners; ++i) {
        if (s->listeners[i].conf->unix_path == NULL) {
            SG_LOG(SG_LL_INFO, "main", "dashboard: %s/dashboard", s->listeners[i].url);
            break;
        }
    }
    for (size_t i = 0; i < s->n_listeners; ++i)
        if (s->listeners[i].announced)
            SG_LOG(SG_LL_INFO, "main", "address %s written to %s", s->listeners[i].address, s->listeners[i].conf->address_file);
    if (cfg->cache.redis_host != NULL)
        SG_LOG(SG_LL_INFO, "main", "cache: L1 %zu MiB in memory, Redis %s:%u (timeout %u ms, key prefix \"%s\")",
               cfg->cache.l1_bytes >> 20, cfg->cache.redis_host, cfg->cache.redis_port, cfg->cache.redis_timeout_ms,
               cfg->cache.redis_prefix);
    else
        SG_LOG(SG_LL_INFO, "main", "cache: L1 %zu MiB in memory, no Redis", cfg->cache.l1_bytes >> 20);
}

/* --check: the config is valid, the addresses free and every backend loaded. */
static void report_check(const char *config, const sg_config_t *cfg, size_t n_backends)
{
    sg_buf_t b = {0};
    for (size_t i = 0; i < cfg->n_listen; ++i) {
        const sg_listen_conf_t *l = &cfg->listen[i];
        if (l->unix_path != NULL)
            sg_buf_appendf(&b, "; unix:%s is free", l->unix_path);
        else if (l->port != 0)
            sg_buf_appendf(&b, "; %s:%u is free", l->host, l->port);
        else
            sg_buf_appendf(&b, "; %s resolves (port 0: any free port)", l->host);
    }
    sg_buf_appendc(&b, '\0');
    printf("searchgate: config %s is valid%s; %zu backend(s) loaded\n", config, b.base, n_backends);
    sg_buf_free(&b);
}

/* plugin_dir; else plugins/ beside the executable (a build tree), else ../lib/searchgate from it
 * (an installed tree: bin/searchgate and lib/searchgate/sg_*.so under one prefix). */
static void plugin_dir_of(const sg_config_t *cfg, char *dir, size_t size)
{
    if (cfg != NULL && cfg->plugin_dir != NULL) {
        snprintf(dir, size, "%s", cfg->plugin_dir);
        return;
    }
    char exe[PATH_MAX - 32];
    exe_dir(exe, sizeof(exe));
    snprintf(dir, size, "%s/plugins", exe);
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return;
    char *slash = strrchr(exe, '/');
    if (slash != NULL && slash != exe)
        *slash = '\0';
    snprintf(dir, size, "%s/lib/searchgate", exe);
}

/* ---- running: readiness, the watchdog, signals, draining ---- */

/* Tells systemd (when it runs us with Type=notify); a failure is logged once, never fatal. */
static void notify(const char *state)
{
    static int warned;
    char err[256];
    if (sg_notify(state, err, sizeof(err)) < 0 && !warned) {
        warned = 1;
        SG_LOG(SG_LL_WARN, "main", "sd_notify: %s", err);
    }
}

/* WATCHDOG=1 while every loop goes round: a loop idles at most 500 ms between rounds, so one
 * that has not come round for the watchdog interval (1.5 s at least) is stuck. */
static void ping_watchdog(const sg_server_t *s, uint64_t watchdog_us)
{
    static int stuck;
    uint64_t max_age_ms = watchdog_us / 1000 > 1500 ? watchdog_us / 1000 : 1500;
    if (sg_server_loops_alive(s, max_age_ms)) {
        stuck = 0;
        notify("WATCHDOG=1");
    } else if (!stuck) {
        stuck = 1;
        SG_LOG(SG_LL_ERROR, "main", "a loop thread has not gone round for %llu ms: not pinging the systemd watchdog",
               (unsigned long long)max_age_ms);
    }
}

/* Waits up to `ms` for one of `set` (-1 when none came); pings the watchdog every half interval. */
static int wait_signal(const sg_server_t *s, const sigset_t *set, uint64_t ms, uint64_t watchdog_us)
{
    uint64_t end = ms == UINT64_MAX ? UINT64_MAX : sg_now_ms() + ms, step = watchdog_us != 0 ? watchdog_us / 2000 : 0;
    for (;;) {
        uint64_t now = sg_now_ms();
        if (now >= end)
            return -1;
        uint64_t wait = end - now;
        if (step != 0 && wait > step)
            wait = step;
        int sig;
        if (end == UINT64_MAX && step == 0) { /* no deadline, no watchdog */
            if (sigwait(set, &sig) == 0)
                return sig;
            continue;
        }
        struct timespec ts = {(time_t)(wait / 1000), (long)(wait % 1000) * 1000000L};
        sig = sigtimedwait(set, NULL, &ts);
        if (sig > 0)
            return sig;
        if (errno == EAGAIN && step != 0)
            ping_watchdog(s, watchdog_us);
    }
}

/* Serves until SIGTERM or SIGINT. SIGHUP (systemd's ExecReload) is taken and logged: this build
 * cannot reload its configuration, and the signal's default action would end the process. */
static int serve_until_signal(const sg_server_t *s, const sigset_t *set, uint64_t watchdog_us)
{
    for (;;) {
        int sig = wait_signal(s, set, UINT64_MAX, watchdog_us);
        if (sig != SIGHUP)
            return sig;
        SG_LOG(SG_LL_WARN, "main",
               "SIGHUP: this build cannot reload its configuration; nothing changed (restart to apply a new one)");
    }
}

/* shutdown_drain_ms: /health answers 503 "draining" while everything is still served, so a load
 * balancer takes this replica out before its listeners close; a second SIGTERM/SIGINT ends it. */
static void drain(sg_server_t *s, const sigset_t *set)
{
    uint32_t ms = s->cfg->shutdown_drain_ms;
    if (ms == 0)
        return;
    atomic_store(&s->draining, 1);
    SG_LOG(SG_LL_INFO, "main", "draining for %u ms: /health answers 503 while requests are still served", ms);
    uint64_t end = sg_now_ms() + ms;
    for (;;) {
        uint64_t now = sg_now_ms();
        int sig = now < end ? wait_signal(s, set, end - now, 0) : -1;
        if (sig == SIGHUP)
            continue;
        if (sig > 0)
            SG_LOG(SG_LL_INFO, "main", "signal %d again: ending the drain now", sig);
        return;
    }
}

/* From a started server to its end: announce, serve, drain, stop. Returns the exit status. */
static int run(sg_server_t *s, const sigset_t *set)
{
    char err[1024];
    int rc = 0;
    if (sg_listen_announce(s->listeners, s->n_listeners, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        rc = 1;
    } else {
        log_started(s);
        sg_buf_t st = {0};
        sg_buf_appendf(&st, "READY=1\nSTATUS=serving on %s\nMAINPID=%ld", s->listeners[0].url, (long)getpid());
        sg_buf_appendc(&st, '\0');
        notify(st.base);
        sg_buf_free(&st);
        int sig = serve_until_signal(s, set, sg_notify_watchdog_usec());
        SG_LOG(SG_LL_INFO, "main", "signal %d: shutting down", sig);
        notify("STOPPING=1\nSTATUS=shutting down");
    }
    sg_listen_retract(s->listeners, s->n_listeners); /* new jobs no longer find this gateway */
    if (rc == 0)
        drain(s, set);
    sg_server_stop(s);
    destroy_backends(s);
    sg_server_dispose(s);
    sg_listen_dispose(s->listeners, s->n_listeners); /* the Unix socket files */
    s->listeners = NULL;
    return rc;
}

int main(int argc, char **argv)
{
    cmdline_t cl;
    int st = parse_args(argc, argv, &cl);
    /* BLAS and OpenMP pools oversubscribe small machines badly (platform.md): plugins
     * parallelise across requests instead, unless the operator says otherwise. */
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    char dir[PATH_MAX];
    if (st != 0) {
        if (cl.version) {
            plugin_dir_of(NULL, dir, sizeof(dir));
            sg_version_print(stdout, dir);
        }
        return st - 1;
    }
    signal(SIGPIPE, SIG_IGN);
    /* every thread (plugins' included) inherits this mask; only the main thread takes the signals */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    static sg_config_t cfg;
    char err[1024];
    if (sg_config_load(&cfg, cl.config, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: config %s\n", err);
        return 1;
    }
    if (apply_overrides(&cfg, &cl) != 0)
        return 1;

    static sg_server_t server; /* the one instance; every loop points to it */
    sg_server_t *s = &server;
    s->cfg = &cfg;
    s->started_ms = sg_now_ms();
    plugin_dir_of(&cfg, dir, sizeof(dir));
    sg_dispatch_init();
    int rc = 1;
    /* the addresses before the plugins: a typo'd host, a port or socket in use or an address file
     * that cannot be written fails at once, before a model or an index is loaded
     * (sg_server_start() binds for real later) */
    if (sg_listen_check(&cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        goto out;
    }
    if (open_plugins(s, dir, argv) != 0 || load_backends(s) != 0)
        goto out;
    sg_fusion_init(s);
    if (cl.check) {
        report_check(cl.config, &cfg, s->n_routes);
        rc = 0;
        goto out;
    }
    s->clients = sg_clients_create(&cfg);
    sg_cache_init(cfg.cache.l1_bytes, cfg.cache.redis_prefix);
    sg_ratelimit_global_init();
    sg_budget_init(s);
    sg_mcp_init(s);
    if (sg_server_start(s, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        goto out;
    }
    rc = run(s, &set);
out:
    destroy_backends(s);
    sg_cache_dispose();
    sg_budget_dispose();
    sg_clients_destroy(s->clients);
    sg_mcp_dispose();
    free_backends(s);
    sg_fusion_dispose();
    sg_dispatch_dispose();
    sg_metrics_reset();
    sg_config_free(&cfg);
    return rc;
}
