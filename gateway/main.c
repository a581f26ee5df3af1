/*
 * main.c -- searchgate: command line, start-up (config, plugins, listeners), signals and shutdown.
 * Start-up either succeeds completely or exits with status 1 and one line saying why. The
 * configuration is loaded into a first generation (gen.h); SIGHUP reloads it (reload.h).
 */
#include "server.h"
#include "gen.h"
#include "reload.h"
#include "retrieve.h"
#include "budget.h"
#include "dispatch.h"
#include "listen.h"
#include "ratelimit_global.h"
#include "mcp.h"
#include "trace.h"
#include "../cache/cache.h"

#include <errno.h>
#include <fcntl.h>
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
    fprintf(fp, "usage: searchgate --config FILE [--port N] [--host ADDR] [--threads N] [--log-level LEVEL] [--pid-file PATH]\n"
                "                  [--check]\n"
                "       searchgate --reload PIDFILE\n"
                "\n"
                "  -c, --config FILE    gateway config (JSON; see docs/configuration.md); SIGHUP re-reads it\n"
                "  -p, --port N         listen port (overrides listen.port; 0 = any free port)\n"
                "      --host ADDR      listen address (overrides listen.host)\n"
                "  -t, --threads N      event-loop threads (overrides threads; 0 = one per CPU)\n"
                "      --log-level L    error, warn, info or debug (a reload keeps it)\n"
                "      --pid-file PATH  write the process id there once serving; removed at exit\n"
                "      --check          do everything start-up does (config, address, plugins) but serve, then exit;\n"
                "                       also connects to Redis (and its sentinels) and fails when it refuses\n"
                "      --reload PIDFILE make the gateway whose pid PIDFILE holds re-read its config (SIGHUP)\n"
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
    const char *config, *host, *level, *pid_file, *reload;
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
                                         {"pid-file", required_argument, NULL, 'P'},
                                         {"reload", required_argument, NULL, 'R'},
                                         {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {NULL, 0, NULL, 0}};
    *cl = (cmdline_t){NULL, NULL, NULL, NULL, NULL, -1, -1, 0};
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
        case 'P':
            cl->pid_file = optarg;
            break;
        case 'R':
            cl->reload = optarg;
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
    if ((cl->config == NULL && cl->reload == NULL) || optind != argc) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* The command line's --port, --threads, --host and --log-level over the config's (a reload keeps
 * them: the first three are restart-only settings, and the log level given here stays). */
static int apply_overrides(sg_server_t *s, sg_config_t *cfg, const cmdline_t *cl)
{
    if (cl->port >= 0)
        cfg->port = (uint16_t)cl->port;
    if (cl->threads >= 0)
        cfg->threads = (int)cl->threads;
    if (cl->host != NULL) {
        free(cfg->host);
        cfg->host = sg_strdup(cl->host);
    }
    s->log_level_override = -1;
    sg_log_set_level(cfg->log_level);
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
        sg_log_set_level(found);
        s->log_level_override = found;
    }
    return 0;
}

static void log_started(const sg_server_t *s, const sg_gen_t *g)
{
    const sg_config_t *cfg = s->cfg;
    sg_buf_t warn = {0};
    sg_reload_warnings(NULL, g, &warn);
    for (char *p = warn.base, *nl; p != NULL && (nl = memchr(p, '\n', warn.len - (size_t)(p - warn.base))) != NULL; p = nl + 1)
        SG_LOG(SG_LL_WARN, "main", "%.*s: larger requests are answered 413", (int)(nl - p), p);
    sg_buf_free(&warn);
    SG_LOG(SG_LL_INFO, "main", "searchgate %s listening on http://%s:%u (%d threads, %zu backends, default %s)", SG_VERSION,
           cfg->host, s->bound_port, s->n_loops, g->n_routes, cfg->backends[cfg->default_backend].name);
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

/* --check: the config is valid, the address free and every backend loaded (and what cannot fit). */
static void report_check(const char *config, const sg_server_t *s, const sg_gen_t *g)
{
    const sg_config_t *cfg = s->cfg;
    if (cfg->port != 0)
        printf("searchgate: config %s is valid; %s:%u is free; %zu backend(s) loaded\n", config, cfg->host, cfg->port, g->n_routes);
    else
        printf("searchgate: config %s is valid; %s resolves (port 0: any free port); %zu backend(s) loaded\n", config, cfg->host,
               g->n_routes);
    sg_buf_t warn = {0};
    sg_reload_warnings(NULL, g, &warn);
    for (char *p = warn.base, *nl; p != NULL && (nl = memchr(p, '\n', warn.len - (size_t)(p - warn.base))) != NULL; p = nl + 1)
        printf("searchgate: warning: %.*s\n", (int)(nl - p), p);
    sg_buf_free(&warn);
}

/* Waits for SIGINT or SIGTERM; meanwhile SIGHUP reloads the configuration (reload.h) and SIGUSR1
 * reopens the trace files (after logrotate moved them). */
static void wait_for_stop(const sigset_t *set)
{
    for (;;) {
        int sig = 0;
        sigwait(set, &sig);
        if (sig == SIGHUP) {
            SG_LOG(SG_LL_INFO, "main", "SIGHUP: reloading the configuration");
            sg_reload_signal();
            continue;
        }
        if (sig != SIGUSR1) {
            SG_LOG(SG_LL_INFO, "main", "signal %d: shutting down", sig);
            return;
        }
        SG_LOG(SG_LL_INFO, "main", "SIGUSR1: reopening the trace files");
        sg_trace_reopen();
    }
}

/* --check: connects to Redis (and its sentinels) the way the loops will, once the plugins are
 * loaded. A refusal (credentials, db, master name) fails the check; an unreachable Redis is a
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

/* --reload PIDFILE: SIGHUP to the gateway whose pid the file holds (checked to be a searchgate, so
 * a stale file never signals another program). Returns the exit status. */
static int send_reload(const char *pid_file)
{
    FILE *fp = fopen(pid_file, "r");
    long pid = -1;
    if (fp == NULL || fscanf(fp, "%ld", &pid) != 1 || pid <= 1) {
        fprintf(stderr, "searchgate: --reload: %s: %s\n", pid_file, fp == NULL ? strerror(errno) : "holds no process id");
        if (fp != NULL)
            fclose(fp);
        return 1;
    }
    fclose(fp);
    char path[64], exe[PATH_MAX];
    snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
    ssize_t n = readlink(path, exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    const char *base = strrchr(exe, '/');
    if (n <= 0 || strncmp(base != NULL ? base + 1 : exe, "searchgate", 10) != 0) {
        fprintf(stderr, "searchgate: --reload: process %ld (from %s) is %s, not a searchgate\n", pid, pid_file,
                n <= 0 ? "not running (or not yours)" : exe);
        return 1;
    }
    if (kill((pid_t)pid, SIGHUP) != 0) {
        fprintf(stderr, "searchgate: --reload: cannot signal process %ld: %s\n", pid, strerror(errno));
        return 1;
    }
    printf("searchgate: asked process %ld to reload its configuration (SIGHUP); its log says how it went\n", pid);
    return 0;
}

/* --pid-file: written once the gateway serves (atomically: a reader never sees half a number). */
static int write_pid_file(const char *path)
{
    char tmp[PATH_MAX], line[32];
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid());
    int n = snprintf(line, sizeof(line), "%ld\n", (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, line, (size_t)n) != n || close(fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "searchgate: --pid-file %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        return -1;
    }
    return 0;
}

/* At exit: the pid file goes, unless another process has written its own there since. */
static void remove_pid_file(const char *path)
{
    FILE *fp = fopen(path, "r");
    long pid = -1;
    if (fp == NULL)
        return;
    int ok = fscanf(fp, "%ld", &pid) == 1;
    fclose(fp);
    if (ok && pid == (long)getpid())
        unlink(path);
}

/* Serves until SIGINT/SIGTERM, then shuts down: reloads stop, the loops stop, the plugins are
 * destroyed (their pending searches complete as cancelled), the loops deliver that and exit. */
static int serve(sg_server_t *s, sg_gen_t *g, const cmdline_t *cl, const char *dir, const sigset_t *set)
{
    char err[1024];
    sg_gen_publish(s, g);
    if (sg_server_start(s, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        return 1;
    }
    sg_reload_start(s, cl->config, dir);
    log_started(s, g);
    int rc = 0;
    if (cl->pid_file != NULL && write_pid_file(cl->pid_file) != 0)
        rc = 1;
    else
        wait_for_stop(set);
    sg_reload_quiesce(); /* a reload under way finishes first */
    sg_server_stop(s);
    sg_gen_destroy_instances(s);
    sg_server_dispose(s);
    if (cl->pid_file != NULL)
        remove_pid_file(cl->pid_file);
    return rc;
}

/* Every thread (plugins' included) inherits this mask; only the main thread's sigwait() takes
 * the signals. */
static void block_signals(sigset_t *set)
{
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);  /* reload the configuration */
    sigaddset(set, SIGUSR1); /* reopen the trace files (logrotate) */
    pthread_sigmask(SIG_BLOCK, set, NULL);
}

int main(int argc, char **argv)
{
    cmdline_t cl;
    int st = parse_args(argc, argv, &cl);
    if (st != 0)
        return st - 1;
    if (cl.reload != NULL)
        return send_reload(cl.reload);
    /* BLAS and OpenMP pools oversubscribe small machines badly (platform.md): plugins
     * parallelise across requests instead, unless the operator says otherwise. */
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    sigset_t set;
    block_signals(&set);

    static sg_config_t cfg;    /* the start-up config: its restart-only settings serve until exit */
    static sg_server_t server; /* the one instance; every loop points to it */
    sg_server_t *s = &server;
    char err[1024];
    if (sg_config_load(&cfg, cl.config, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: config %s\n", err);
        return 1;
    }
    if (apply_overrides(s, &cfg, &cl) != 0)
        return 1;
    raise_fd_limit();
    s->cfg = &cfg;
    s->started_ms = sg_now_ms();
    pthread_mutex_init(&s->gen_mutex, NULL);
    char dir[PATH_MAX];
    plugin_dir_of(&cfg, dir, sizeof(dir));
    sg_dispatch_init();
    int rc = 1;
    /* the address before the plugins: a typo'd host or a port in use fails at once, before a
     * model or an index is loaded (sg_server_start() binds for real later) */
    sg_listen_addr_t addr;
    sg_gen_t *g = NULL;
    if (sg_listen_resolve(cfg.host, cfg.port, &addr, err, sizeof(err)) != 0 || sg_listen_probe(&addr, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        goto out;
    }
    sg_budget_init(cfg.cache.redis.enabled, cfg.cache.redis_prefix); /* before any budget is made */
    sg_gen_opts_t o = {dir, cl.check, argv};
    if ((g = sg_gen_build(s, &cfg, 0, NULL, &o, err, sizeof(err))) == NULL) {
        fprintf(stderr, "searchgate: %s\n", err);
        goto out;
    }
    if (cl.check && check_redis(&cfg) != 0) {
        sg_gen_release(g);
        goto out;
    }
    if (cl.check) {
        sg_retrieve_init(NULL, g);
        report_check(cl.config, s, g);
        sg_gen_release(g);
        rc = 0;
        goto out;
    }
    sg_cache_init(cfg.cache.l1_bytes, cfg.cache.redis_prefix);
    sg_ratelimit_global_init();
    sg_mcp_init(s);
    char default_dir[PATH_MAX];
    plugin_dir_of(&(sg_config_t){0}, default_dir, sizeof(default_dir)); /* for a reloaded config without plugin_dir */
    rc = serve(s, g, &cl, default_dir, &set);
out:
    sg_gen_unpublish(s); /* the last generations are disposed here: their plugins, clients, budgets */
    sg_reload_stop();
    sg_trace_stop(); /* after the loops: the last answers are traced too */
    sg_cache_dispose();
    sg_budget_dispose();
    sg_mcp_dispose();
    sg_dispatch_dispose();
    sg_metrics_reset();
    pthread_mutex_destroy(&s->gen_mutex);
    sg_config_free(&cfg);
    return rc;
}
