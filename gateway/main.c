/*
 * main.c -- searchgate: command line, start-up (config, plugins, listeners), signals and shutdown.
 * Start-up either succeeds completely or exits with status 1 and one line saying why. The
 * configuration is loaded into a first generation (gen.h); SIGHUP reloads it (reload.h).
 *
 * Once every listener accepts, the gateway announces itself: address files (listen.h), the pid
 * file, then READY=1 to systemd (notify.h), and pings systemd's watchdog while its loops go round.
 * On SIGTERM or SIGINT it says STOPPING=1, removes the address files, reports "draining" on
 * /health for shutdown_drain_ms while it still serves (so a load balancer's health checks take it
 * out first), then stops accepting and finishes the requests it has (server.c).
 */
#include "server.h"
#include "gen.h"
#include "build.h"
#include "reload.h"
#include "retrieve.h"
#include "budget.h"
#include "dispatch.h"
#include "listen.h"
#include "ratelimit_global.h"
#include "mcp.h"
#include "notify.h"
#include "trace.h"
#include "version.h"
#include "../cache/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *fp)
{
    fprintf(fp, "usage: searchgate --config FILE [--port N] [--host ADDR] [--address-file PATH] [--threads N]\n"
                "                  [--log-level LEVEL] [--pid-file PATH] [--check]\n"
                "       searchgate --reload PIDFILE\n"
                "       searchgate --version\n"
                "\n"
                "  -c, --config FILE    gateway config (JSON; see docs/configuration.md); SIGHUP re-reads it\n"
                "  -p, --port N         listen port (overrides listen.port; 0 = any free port)\n"
                "      --host ADDR      listen address (overrides listen.host)\n"
                "      --address-file P write HOST:PORT to P once serving, remove it on exit (listen.address_file)\n"
                "  -t, --threads N      event-loop threads (overrides threads; 0 = one per CPU)\n"
                "      --log-level L    error, warn, info or debug (a reload keeps it)\n"
                "      --pid-file PATH  write the process id there once serving; removed at exit\n"
                "      --check          do everything start-up does (config, address, plugins) but serve, then exit;\n"
                "                       also connects to Redis (and its sentinels) and fails when it refuses\n"
                "      --reload PIDFILE make the gateway whose pid PIDFILE holds re-read its config (SIGHUP)\n"
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
    const char *config, *host, *level, *pid_file, *reload, *address_file;
    long port, threads;
    int check, version;
} cmdline_t;

/* Returns 0 to go on, or 1 + the exit status (after --help, --version or an error). */
static int parse_args(int argc, char **argv, cmdline_t *cl)
{
    static const struct option opts[] = {{"config", required_argument, NULL, 'c'},  {"port", required_argument, NULL, 'p'},
                                         {"host", required_argument, NULL, 'H'},    {"address-file", required_argument, NULL, 'A'},
                                         {"threads", required_argument, NULL, 't'}, {"log-level", required_argument, NULL, 'l'},
                                         {"check", no_argument, NULL, 'k'},         {"pid-file", required_argument, NULL, 'P'},
                                         {"reload", required_argument, NULL, 'R'},  {"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},       {NULL, 0, NULL, 0}};
    *cl = (cmdline_t){NULL, NULL, NULL, NULL, NULL, NULL, -1, -1, 0, 0};
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
            cl->version = 1;
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

/* The command line's --port, --host, --address-file (the first TCP listener's), --threads and
 * --log-level over the config's (a reload keeps them: the first four are restart-only settings,
 * and the log level given here stays). */
static int apply_overrides(sg_server_t *s, sg_config_t *cfg, const cmdline_t *cl)
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
    sg_buf_t urls = {0};
    for (size_t i = 0; i < s->n_listeners; ++i)
        sg_buf_appendf(&urls, "%s%s", i != 0 ? ", " : "", s->listeners[i].url);
    sg_buf_appendc(&urls, '\0');
    SG_LOG(SG_LL_INFO, "main", "searchgate %s listening on %s (%d threads, %zu backends, default %s)", SG_VERSION, urls.base,
           s->n_loops, g->n_routes, cfg->backends[cfg->default_backend].name);
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
    if (cfg->cache.redis.enabled) {
        char where[1024], setup[512];
        sg_redis_conf_describe(&cfg->cache.redis, where, sizeof(where));
        sg_redis_conf_describe_setup(&cfg->cache.redis, setup, sizeof(setup));
        SG_LOG(SG_LL_INFO, "main", "cache: L1 %zu MiB in memory, %s (timeout %u ms, key prefix \"%s\", %s)",
               cfg->cache.l1_bytes >> 20, where, cfg->cache.redis.timeout_ms, cfg->cache.redis_prefix, setup);
    } else
        SG_LOG(SG_LL_INFO, "main", "cache: L1 %zu MiB in memory, no Redis", cfg->cache.l1_bytes >> 20);
}

/* --check: the config is valid, the addresses free and every backend loaded (and what cannot fit). */
static void report_check(const char *config, const sg_server_t *s, const sg_gen_t *g)
{
    const sg_config_t *cfg = s->cfg;
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
    printf("searchgate: config %s is valid%s; %zu backend(s) loaded\n", config, b.base, g->n_routes);
    sg_buf_free(&b);
    sg_buf_t warn = {0};
    sg_reload_warnings(NULL, g, &warn);
    for (char *p = warn.base, *nl; p != NULL && (nl = memchr(p, '\n', warn.len - (size_t)(p - warn.base))) != NULL; p = nl + 1)
        printf("searchgate: warning: %.*s\n", (int)(nl - p), p);
    sg_buf_free(&warn);
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

/* ---- running: readiness, the watchdog, signals, draining ---- */

/* WATCHDOG=1 while every loop goes round: a loop idles at most 500 ms between rounds, so one
 * that has not come round for the watchdog interval (1.5 s at least) is stuck. */
static void ping_watchdog(const sg_server_t *s, uint64_t watchdog_us)
{
    static int stuck;
    uint64_t max_age_ms = watchdog_us / 1000 > 1500 ? watchdog_us / 1000 : 1500;
    if (sg_server_loops_alive(s, max_age_ms)) {
        stuck = 0;
        sg_notify_event("WATCHDOG=1");
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

/* SIGUSR1: the trace files are reopened (after logrotate moved them). */
static void reopen_traces(void)
{
    SG_LOG(SG_LL_INFO, "main", "SIGUSR1: reopening the trace files");
    sg_trace_reopen();
}

/* Serves until SIGINT or SIGTERM; meanwhile SIGHUP (systemd's ExecReload, searchgate --reload)
 * reloads the configuration (reload.h) and SIGUSR1 reopens the trace files. */
static int serve_until_signal(const sg_server_t *s, const sigset_t *set, uint64_t watchdog_us)
{
    for (;;) {
        int sig = wait_signal(s, set, UINT64_MAX, watchdog_us);
        if (sig == SIGHUP) {
            SG_LOG(SG_LL_INFO, "main", "SIGHUP: reloading the configuration");
            sg_reload_signal();
        } else if (sig == SIGUSR1) {
            reopen_traces();
        } else {
            return sig;
        }
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
        if (sig == SIGHUP) {
            SG_LOG(SG_LL_WARN, "main", "SIGHUP while shutting down: not reloading");
            continue;
        }
        if (sig == SIGUSR1) {
            reopen_traces();
            continue;
        }
        if (sig > 0)
            SG_LOG(SG_LL_INFO, "main", "signal %d again: ending the drain now", sig);
        return;
    }
}

/* Once every loop serves: the address files, the pid file, the log lines, READY=1 to systemd. */
static int announce(sg_server_t *s, const sg_gen_t *g, const cmdline_t *cl)
{
    char err[1024];
    if (sg_listen_announce(s->listeners, s->n_listeners, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        return 1;
    }
    if (cl->pid_file != NULL && write_pid_file(cl->pid_file) != 0)
        return 1;
    log_started(s, g);
    sg_buf_t st = {0};
    sg_buf_appendf(&st, "READY=1\nSTATUS=serving on %s\nMAINPID=%ld", s->listeners[0].url, (long)getpid());
    sg_buf_appendc(&st, '\0');
    sg_notify_event(st.base);
    sg_buf_free(&st);
    return 0;
}

/* From the first generation to the end: start, announce, serve until SIGINT/SIGTERM, then shut
 * down: STOPPING=1, reloads refused, the address files removed, the drain, the loops stopped, the
 * plugins destroyed (their pending searches complete as cancelled), the loops deliver that and
 * exit. Returns the exit status. */
static int serve(sg_server_t *s, sg_gen_t *g, const cmdline_t *cl, const char *dir, const sigset_t *set)
{
    char err[1024];
    sg_gen_publish(s, g);
    static const sg_server_hooks_t hooks = {sg_reload_admin, sg_reload_init_loop, sg_reload_dispose_loop};
    if (sg_server_start(s, &hooks, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        return 1;
    }
    sg_reload_start(s, cl->config, dir);
    int rc = announce(s, g, cl);
    if (rc == 0) {
        int sig = serve_until_signal(s, set, sg_notify_watchdog_usec());
        SG_LOG(SG_LL_INFO, "main", "signal %d: shutting down", sig);
        sg_reload_refuse(); /* before STOPPING=1: no RELOADING=1 or READY=1 follows it */
        sg_notify_event("STOPPING=1\nSTATUS=shutting down");
    }
    sg_listen_retract(s->listeners, s->n_listeners); /* new jobs no longer find this gateway */
    if (rc == 0)
        drain(s, set);
    sg_reload_quiesce(); /* a reload under way finishes first */
    sg_server_stop(s);
    sg_gen_destroy_instances(s);
    sg_server_dispose(s);
    sg_listen_dispose(s->listeners, s->n_listeners); /* the Unix socket files */
    s->listeners = NULL;
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

/* The command line, and what needs no config: --help, --version (which opens the plugins'
 * libraries, so the thread settings come first), --reload. Returns -1 to go on, else the exit
 * status. */
static int command_line(int argc, char **argv, cmdline_t *cl)
{
    int st = parse_args(argc, argv, cl);
    /* BLAS and OpenMP pools oversubscribe small machines badly: plugins
     * parallelise across requests instead, unless the operator says otherwise. */
    setenv("OMP_NUM_THREADS", "1", 0);
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    if (st != 0) {
        if (cl->version) {
            char dir[PATH_MAX];
            plugin_dir_of(NULL, dir, sizeof(dir));
            sg_version_print(stdout, dir);
        }
        return st - 1;
    }
    return cl->reload != NULL ? send_reload(cl->reload) : -1;
}

int main(int argc, char **argv)
{
    cmdline_t cl;
    int st = command_line(argc, argv, &cl);
    if (st >= 0)
        return st;
    char dir[PATH_MAX];
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
    plugin_dir_of(&cfg, dir, sizeof(dir));
    sg_dispatch_init();
    int rc = 1;
    /* the addresses before the plugins: a typo'd host, a port or socket in use or an address file
     * that cannot be written fails at once, before a model or an index is loaded
     * (sg_server_start() binds for real later) */
    sg_gen_t *g = NULL;
    if (sg_listen_check(&cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate: %s\n", err);
        goto out;
    }
    sg_budget_init(cfg.cache.redis.enabled, cfg.cache.redis_prefix); /* before any budget is made */
    sg_gen_opts_t o = {dir, cl.check, argv, sg__reload_bury};
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
    sg_ratelimit_global_init(cfg.cache.redis_prefix);
    sg_mcp_init(s);
    char default_dir[PATH_MAX];
    plugin_dir_of(NULL, default_dir, sizeof(default_dir)); /* for a reloaded config without plugin_dir */
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
