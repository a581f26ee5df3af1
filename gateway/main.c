/*
 * main.c -- searchgate: command line, start-up (config, plugins, listeners) and shutdown.
 * Start-up either succeeds completely or exits with status 1 and one line saying why.
 */
#include "server.h"
#include "retrieve.h"
#include "fusion_route.h"
#include "clients.h"
#include "budget.h"
#include "dispatch.h"
#include "listen.h"
#include "ratelimit_global.h"
#include "rerank.h"
#include "mcp.h"
#include "respond.h"
#include "trace.h"
#include "../cache/cache.h"

#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

int sg_server_start(sg_server_t *s, char *err, size_t err_size);
void sg_server_stop(sg_server_t *s);
void sg_server_dispose(sg_server_t *s);

static void usage(FILE *fp)
{
    fprintf(fp, "usage: searchgate --config FILE [--port N] [--host ADDR] [--threads N] [--log-level LEVEL] [--check]\n"
                "\n"
                "  -c, --config FILE    gateway config (JSON; see docs/configuration.md)\n"
                "  -p, --port N         listen port (overrides listen.port; 0 = any free port)\n"
                "      --host ADDR      listen address (overrides listen.host)\n"
                "  -t, --threads N      event-loop threads (overrides threads; 0 = one per CPU)\n"
                "      --log-level L    error, warn, info or debug\n"
                "      --check          do everything start-up does (config, address, plugins) but serve, then exit;\n"
                "                       also connects to Redis (and its sentinels) and fails when it refuses\n"
                "  -h, --help           this text\n"
                "  -V, --version        print the version\n");
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
        b->floor_refused = sg_metrics_counter(
            "searchgate_backend_floor_refused_total",
            "Calls not started because less of their deadline was left than the route's floor (min_remaining_ms).", l);
        b->floor_ms = sg_metrics_gauge("searchgate_backend_floor_ms",
                                       "The route's floor: the least of a deadline a call needs left to start (ms).", l);
        sg_gauge_set(b->floor_ms, bc->min_remaining_ms);
    }
    sg_retrieve_init(s); /* every route's serves_access is known */
    return 0;
}

/* Routes that could never admit a request of limits.max_queries queries (sg_dispatch_capacity):
 * such requests get 413. A warning on stdout (--check) or in the log, with the numbers. */
static void warn_capacity(const sg_server_t *s, int to_stdout)
{
    uint32_t max = s->cfg->limits.max_queries;
    for (size_t i = 0; i < s->n_routes; ++i) {
        sg_route_t *b = &s->routes[i];
        char msg[600];
        for (int op = 0; op < 2; ++op) {
            if ((op == 1 && !b->serves_access) || sg_dispatch_describe_capacity(b, op, max, msg, sizeof(msg)) == 0)
                continue;
            if (to_stdout)
                printf("searchgate: warning: %s %s: %s; limits.max_queries is %u\n", op ? "/access" : "/retrieve", b->conf->name,
                       msg, max);
            else
                SG_LOG(SG_LL_WARN, "main", "%s %s: %s; limits.max_queries is %u: larger requests are answered 413",
                       op ? "/access" : "/retrieve", b->conf->name, msg, max);
        }
    }
}

/* Each route's provenance (provenance.h): its data fingerprint, from the identity its plugin gives
 * the cache (a rerank stage's included), and its info metric. */
static void describe_routes(sg_server_t *s)
{
    for (size_t i = 0; i < s->n_routes; ++i) {
        sg_route_t *b = &s->routes[i];
        const sg_backend_vtable *vt = b->plugin.vt;
        const char *ident = vt->identity != NULL ? vt->identity(b->inst) : NULL;
        sg_provenance_init(&b->prov, b->conf->name, b->conf->rerank != NULL ? "rerank" : "plugin", vt->name, vt->version, ident,
                           NULL);
        sg_provenance_register_metric(&b->prov, vt->name, vt->version);
    }
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
        sg_provenance_dispose(&b->prov);
        pthread_mutex_destroy(&b->admit_mutex);
    }
    free(s->routes);
    s->routes = NULL;
}

/* Raises the soft RLIMIT_NOFILE to the hard limit (each connection, the Redis connections and the
 * plugins' files and sockets take a descriptor; distributions start services with a soft limit of
 * 1024) and logs the value in effect, which /metrics shows as searchgate_fd_limit. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t before = rl.rlim_cur, want = rl.rlim_max;
    if (want == RLIM_INFINITY) { /* the kernel's ceiling for one process */
        unsigned long long nr_open = 1048576;
        FILE *fp = fopen("/proc/sys/fs/nr_open", "r");
        if (fp != NULL) {
            if (fscanf(fp, "%llu", &nr_open) != 1)
                nr_open = 1048576;
            fclose(fp);
        }
        want = (rlim_t)nr_open;
    }
    if (want > before) {
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            rl.rlim_cur = before;
    }
    if (rl.rlim_cur > before)
        SG_LOG(SG_LL_INFO, "main", "file descriptors: limit %llu (RLIMIT_NOFILE raised from %llu to the hard limit)",
               (unsigned long long)rl.rlim_cur, (unsigned long long)before);
    else
        SG_LOG(SG_LL_INFO, "main", "file descriptors: limit %llu (RLIMIT_NOFILE, the hard limit)", (unsigned long long)rl.rlim_cur);
    sg_gauge_set(
        sg_metrics_gauge("searchgate_fd_limit", "The file descriptors the process may hold (RLIMIT_NOFILE in effect).", ""),
        (int64_t)rl.rlim_cur);
}

/* The command line: --config and the overrides of config keys. */
typedef struct st_cmdline_t {
    const char *config, *host, *level;
    long port, threads;
    int check;
} cmdline_t;

/* Returns 0 to go on, or 1 + the exit status (after --help, --version or an error). */
static int parse_args(int argc, char **argv, cmdline_t *cl)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
                                         {"port", required_argument, NULL, 'p'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"log-level", required_argument, NULL, 'l'},
                                         {"check", no_argument, NULL, 'k'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    *cl = (cmdline_t){NULL, NULL, NULL, -1, -1, 0};
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
            printf("searchgate %s (h2o %s, plugin ABI %d.%d)\n", SG_VERSION, H2O_VERSION, SG_BACKEND_ABI_MAJOR,
                   SG_BACKEND_ABI_MINOR);
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

/* The command line's --port, --threads, --host and --log-level over the config's. */
static int apply_overrides(sg_config_t *cfg, const cmdline_t *cl)
{
    if (cl->port >= 0)
        cfg->port = (uint16_t)cl->port;
    if (cl->threads >= 0)
        cfg->threads = (int)cl->threads;
    if (cl->host != NULL) {
        free(cfg->host);
        cfg->host = sg_strdup(cl->host);
    }
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
    warn_capacity(s, 0);
    SG_LOG(SG_LL_INFO, "main", "searchgate %s listening on http://%s:%u (%d threads, %zu backends, default %s)", SG_VERSION,
           cfg->host, s->bound_port, s->n_loops, s->n_routes, cfg->backends[cfg->default_backend].name);
    SG_LOG(SG_LL_INFO, "main", "dashboard: http://%s:%u/dashboard", cfg->host, s->bound_port);
    if (cfg->cache.redis.enabled) {
        char where[1024], setup[512];
        sg_redis_conf_describe(&cfg->cache.redis, where, sizeof(where));
        sg_redis_conf_describe_setup(&cfg->cache.redis, setup, sizeof(setup));
        SG_LOG(SG_LL_INFO, "main", "cache: L1 %zu MiB in memory, %s (timeout %u ms, key prefix \"%s\", %s)",
               cfg->cache.l1_bytes >> 20, where, cfg->cache.redis.timeout_ms, cfg->cache.redis_prefix, setup);
    } else
        SG_LOG(SG_LL_INFO, "main", "cache: L1 %zu MiB in memory, no Redis", cfg->cache.l1_bytes >> 20);
}

static void warn_capacity(const sg_server_t *s, int to_stdout);

/* --check: the config is valid, the address free and every backend loaded (and what cannot fit). */
static void report_check(const char *config, const sg_server_t *s)
{
    const sg_config_t *cfg = s->cfg;
    size_t n_backends = s->n_routes;
    if (cfg->port != 0)
        printf("searchgate: config %s is valid; %s:%u is free; %zu backend(s) loaded\n", config, cfg->host, cfg->port, n_backends);
    else
        printf("searchgate: config %s is valid; %s resolves (port 0: any free port); %zu backend(s) loaded\n", config, cfg->host,
               n_backends);
    warn_capacity(s, 1);
}

/* Waits for SIGINT or SIGTERM; SIGUSR1 meanwhile reopens the trace files (after logrotate moved them). */
static void wait_for_stop(const sigset_t *set)
{
    for (;;) {
        int sig = 0;
        sigwait(set, &sig);
        if (sig != SIGUSR1) {
            SG_LOG(SG_LL_INFO, "main", "signal %d: shutting down", sig);
            return;
        }
        SG_LOG(SG_LL_INFO, "main", "SIGUSR1: reopening the trace files");
        sg_trace_reopen();
    }
}

/* --check: connects to Redis (and its sentinels) the way the loops will, after open_plugins (which
 * may re-execute the process) and before the plugins load their data, so a refused password fails
 * at once. A refusal (credentials, db, master name) fails the check; an unreachable Redis is a
 * warning, as a start would run (bypassing it) until it answers. */
static int check_redis(const sg_config_t *cfg)
{
    char msg[1024];
    if (!cfg->cache.redis.enabled)
        return 0;
    int st = sg_redis_check(&cfg->cache.redis, msg, sizeof(msg));
    if (st == SG_REDIS_CHECK_REFUSED) {
        fprintf(stderr, "searchgate: cache.redis: %s\n", msg);
        return -1;
    }
    if (st == SG_REDIS_CHECK_UNREACHABLE)
        fprintf(stderr, "searchgate: warning: cache.redis: %s; a start would bypass Redis (L1 only) until it answers\n", msg);
    else
        printf("searchgate: %s\n", msg);
    return 0;
}

/* plugin_dir, or plugins/ beside the executable. */
static void plugin_dir_of(const sg_config_t *cfg, char *dir, size_t size)
{
    if (cfg->plugin_dir != NULL) {
        snprintf(dir, size, "%s", cfg->plugin_dir);
    } else {
        char exe[PATH_MAX - 16];
        exe_dir(exe, sizeof(exe));
        snprintf(dir, size, "%s/plugins", exe);
    }
}

/* The plugins and routes, their provenance, and the query traces (opened, or only checked with --check). */
static int set_up_routes(sg_server_t *s, const char *dir, char **argv, const cmdline_t *cl)
{
    char err[1024];
    if (open_plugins(s, dir, argv) != 0 || (cl->check && check_redis(s->cfg) != 0) || load_backends(s) != 0)
        return -1;
    describe_routes(s);
    sg_fusion_init(s);
    if (sg_trace_start(s->cfg, cl->check, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: config %s: %s\n", cl->config, err);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    cmdline_t cl;
    int st = parse_args(argc, argv, &cl);
    if (st != 0)
        return st - 1;
    /* BLAS and OpenMP pools oversubscribe small machines badly (platform.md): plugins
     * parallelise across requests instead, unless the operator says otherwise. */
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    signal(SIGPIPE, SIG_IGN);
    /* every thread (plugins' included) inherits this mask; only sigwait() below takes the signals */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1); /* reopen the trace files (logrotate) */
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    static sg_config_t cfg;
    char err[1024];
    if (sg_config_load(&cfg, cl.config, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: config %s\n", err);
        return 1;
    }
    if (apply_overrides(&cfg, &cl) != 0)
        return 1;
    raise_fd_limit();
    static sg_server_t server; /* the one instance; every loop points to it */
    sg_server_t *s = &server;
    s->cfg = &cfg;
    s->started_ms = sg_now_ms();
    char dir[PATH_MAX];
    plugin_dir_of(&cfg, dir, sizeof(dir));
    sg_dispatch_init();
    int rc = 1;
    /* the address before the plugins: a typo'd host or a port in use fails at once, before a
     * model or an index is loaded (sg_server_start() binds for real later) */
    sg_listen_addr_t addr;
    if (sg_listen_resolve(cfg.host, cfg.port, &addr, err, sizeof(err)) != 0 || sg_listen_probe(&addr, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        goto out;
    }
    if (set_up_routes(s, dir, argv, &cl) != 0)
        goto out;
    if (cl.check) {
        report_check(cl.config, s);
        rc = 0;
        goto out;
    }
    s->clients = sg_clients_create(&cfg);
    sg_cache_init(cfg.cache.l1_bytes, cfg.cache.redis_prefix);
    sg_ratelimit_global_init(cfg.clients.global_replicas);
    sg_budget_init(s);
    sg_mcp_init(s);
    if (sg_server_start(s, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        goto out;
    }
    log_started(s);
    wait_for_stop(&set);
    sg_server_stop(s);
    destroy_backends(s);
    sg_server_dispose(s);
    rc = 0;
out:
    destroy_backends(s);
    sg_trace_stop(); /* after the loops: the last answers are traced too */
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
