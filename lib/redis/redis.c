/*
 * redis.c -- hiredis 0.14 on the h2o evloop: one data connection per loop thread, set up with the
 * configured credentials and database, to one server or to the master a group of sentinels names.
 *
 * The adapter follows h2o >= 2.3's lib/common/redis.c design (re-written for 2.2.5): a context's
 * fd is wrapped in an h2o socket with H2O_SOCKET_FLAG_DONT_READ, so h2o only reports readiness and
 * hiredis does the I/O. h2o owns the fd: cleanup closes it through h2o_socket_close and sets
 * c.fd = -1 so hiredis does not close it twice. A "link" is one such socket + context. A link is
 * only ever (re)connected from a timer, never from a hiredis callback: a context freed inside one
 * of its own callbacks is freed when that callback returns, and a link is reused only once clean.
 *
 * Set-up. Every new data connection sends, pipelined, AUTH [user] password (with a password),
 * SELECT db (db not 0), ROLE (with sentinels) and PING, and carries commands only once all of them
 * answered well: no lookup ever runs in the wrong database and nothing is written to a replica.
 * A refusal (credentials, an ACL without a command, a database out of range, NOAUTH without a
 * password) is a state of its own, like "down": logged (at start-up and on each change,
 * rate-limited), counted in searchgate_cache_redis_errors_total{kind="auth"}, shown by the gauge
 * searchgate_cache_redis_auth_failed, /health and /stats; the connection is retried with back-off,
 * so fixing the server's ACL (or the gateway's environment and a restart) heals it.
 *
 * Sentinel. Each loop keeps one connection to a sentinel, on which it asks SENTINEL
 * get-master-addr-by-name and then stays SUBSCRIBEd to +switch-master (hiredis delivers the regular
 * replies before any pub/sub message, so both share the one pipelined connection). The data
 * connection goes to the address named there. It is dropped and the master discovered again (a
 * fresh sentinel connection; the next sentinel when one fails, or named a node whose ROLE is not
 * master) when it is lost, when its ROLE is not master, or when a command is answered -READONLY (a
 * demoted master: Redis keeps client connections open on REPLICAOF); a +switch-master message
 * moves it to the new master at once, without waiting for the back-off. Sentinels kill the
 * clients of the instances they reconfigure, but a live old master (SENTINEL FAILOVER, or one back
 * from a partition) is reconfigured only a while after +switch-master: the message is the signal.
 *
 * hiredis 0.14 has no command timeouts, so every command with a callback is tracked in a FIFO
 * with its start time; a per-loop timer fails commands older than timeout_ms and drops the
 * connection (redisAsyncFree answers every pending callback with NULL). Reconnection backs off
 * from 100 ms to 2 s; a connect that does not complete within max(timeout_ms, 1 s) is abandoned.
 *
 * Every loop has its own connection, but operators care about Redis as a whole: the loops report
 * to one shared record, which logs when Redis stops answering (at start-up: "configured but not
 * reachable"), when it refuses the set-up, when the master moves and when it answers again. A
 * loop counts as answering once its connection's set-up is answered, not merely when TCP
 * connected: a stopped Redis still accepts connections. Outage lines are rate-limited to one per
 * 10 s, so a flapping or absent Redis cannot flood the log; a recovery is always logged.
 *
 * Circuit breaker. A stalled Redis would cost every L1 miss its full timeout_ms. After
 * BREAKER_FAILURES commands in a row got no reply in time (on any loop) the breaker opens: every
 * lookup and write skips Redis at once, without waiting, until Redis answers again. The probe is
 * the set-up each new connection sends: the timed-out connection is dropped and re-made with
 * back-off (100 ms doubling to 2 s while nothing answers), so probing runs in the background at a
 * bounded rate and the first complete set-up closes the breaker.
 */
#include "redis.h"
#include "metrics.h"

#include <async.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_FIRE_AND_FORGET 10000
#define LOG_INTERVAL_MS 10000 /* at most one "down" line (and one error-reply line) per interval */
#define MIN_CONNECT_TIMEOUT_MS 1000
#define BREAKER_FAILURES 3 /* commands in a row without a reply in time that open the breaker */
#define MAX_BACKOFF_MS 2000
#define WHY_MAX 640 /* a state change's reason, for the log */

/* the data connection */
enum { ST_DOWN, ST_DISCOVERING, ST_CONNECTING, ST_HANDSHAKE, ST_UP, ST_CLOSING };
/* the sentinel connection */
enum { SEN_IDLE, SEN_QUERYING, SEN_SUBSCRIBED };

typedef struct st_pending_t {
    struct st_pending_t *next;
    sg_redis_t *owner;
    uint64_t start_ms;
    sg_redis_cb cb; /* NULL once answered by the timeout */
    void *arg;
    int raw; /* error replies reach cb as they are (the set-up reads them) */
} pending_t;

typedef struct st_link_t link_t;
/** `err` is NULL when connected. */
typedef void (*link_connected_cb)(link_t *l, const char *err);
/** `err` is NULL when we closed it. */
typedef void (*link_lost_cb)(link_t *l, const char *err);

struct st_link_t {
    sg_redis_t *r;
    redisAsyncContext *ac;    /* the live context; NULL once hiredis reported it gone */
    redisAsyncContext *ev_ac; /* the context the adapter is attached to, until its cleanup */
    h2o_socket_t *sock;
    link_connected_cb on_connected;
    link_lost_cb on_lost;
    int lost_err; /* hiredis' error kind (REDIS_ERR_*) when on_lost runs: REDIS_ERR_OTHER is an error reply */
};

struct st_sg_redis_t {
    h2o_evloop_t *loop;  /* the loop thread's event loop: the sockets live there */
    sg_timers_t *timers; /* and its timers */
    int loop_id;         /* for the log */
    const sg_redis_conf_t *conf;
    char host[256]; /* the server the data connection goes to: the configured one, or the master named by a sentinel */
    uint16_t port;
    link_t data;
    int state;
    int counted_up; /* in searchgate_cache_redis_connections_up */
    uint32_t backoff_ms;
    sg_timer_t reconnect_timer;
    sg_timer_t check_timer;
    sg_timer_t connect_timer; /* abandons a connect that does not complete */
    pending_t *head, **tail;  /* commands with callbacks, oldest first */
    size_t n_forget;          /* fire-and-forget commands outstanding */
    int answering;            /* the current connection's set-up was answered */
    int settled;              /* the first connection attempt ended (g_settled counts it) */
    int closing;
    char drop_why[WHY_MAX]; /* why we dropped the data connection */
    /* Sentinel mode */
    int addr_fresh; /* host:port was just named by a sentinel: connect without asking again */
    link_t sen;
    int sen_state;
    size_t sen_idx, sen_tries; /* the sentinel in use; failures in a row in this round */
    size_t named_by;           /* the sentinel that named host:port */
    uint32_t sen_backoff_ms;
    sg_timer_t sen_timer;  /* the query's deadline, or the next sentinel connection */
    char sen_why[WHY_MAX]; /* the first failure of a round */
};

static atomic_int g_settled; /* loops whose first connection attempt ended, set up or not */

static sg_counter_t *m_err_timeout, *m_err_disconnect, *m_err_connect, *m_err_reply, *m_err_auth, *m_err_readonly, *m_err_sentinel,
    *m_dropped, *m_connects, *m_trips, *m_master_changes;
static sg_gauge_t *m_up, *m_open, *m_auth_failed;

/* ---- Redis as a whole, for the log: every loop reports here ---- */

enum { AV_UNKNOWN, AV_UP, AV_DOWN, AV_REFUSED };

static struct {
    pthread_mutex_t mu;
    char where[300];         /* "Redis host:port" or "Redis master \"name\"" */
    int n_up;                /* loops whose connection answers */
    int actual;              /* AV_*: the state now */
    uint64_t down_since_ms;  /* when it last went down */
    int logged;              /* AV_*: what the log said last */
    uint64_t down_logged_ms; /* when it last said "down" */
    uint64_t outages;        /* outages since that line (the rate limit may hold some back) */
    uint64_t err_logged_ms, unlogged_errs;
    atomic_int refused; /* the last set-up was refused (until one succeeds) */
    char refused_why[WHY_MAX];
    char master[300];        /* Sentinel mode: the master last confirmed */
    uint64_t sub_logged_ms;  /* when a refused +switch-master subscription was last logged */
    uint64_t role_logged_ms; /* when a named master that is not one was last logged */
    /* circuit breaker */
    atomic_int open;        /* read without the lock on every lookup */
    _Atomic uint32_t fails; /* commands in a row without a reply in time */
    uint64_t trip_logged_ms, unlogged_trips;
} g_av = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The first line of an outage (or of a refusal) at start-up, when nothing was logged yet. */
static void av_log_startup_locked(int cur, const char *why)
{
    if (cur == AV_REFUSED)
        SG_LOG(SG_LL_ERROR, "redis",
               "%s refused the gateway's connection set-up at start-up (%s): results are cached in this process only (L1) "
               "until it accepts it; fix cache.redis (username, password_env, db) or the server's ACL; retrying in the "
               "background",
               g_av.where, g_av.refused_why);
    else
        SG_LOG(SG_LL_WARN, "redis",
               "%s is configured but not reachable at start-up (%s): results are cached in this process only (L1) until it "
               "answers; retrying in the background",
               g_av.where, why != NULL ? why : "no connection");
}

/* Logs a change of the overall state, if any. `why` says what went wrong (NULL when nothing did).
 * A "down" or "refused" line waits until LOG_INTERVAL_MS after the previous one (the next report
 * after that writes it: a Redis that stays down keeps reporting through its reconnect attempts);
 * an "up" line is written at once, so the log never ends on a stale "down". Caller holds g_av.mu. */
static void av_update_locked(const char *why)
{
    uint64_t now = sg_now_ms();
    int cur = g_av.n_up > 0 && !atomic_load(&g_av.open) ? AV_UP : atomic_load(&g_av.refused) ? AV_REFUSED : AV_DOWN;
    if (cur != g_av.actual) {
        if (cur != AV_UP && (g_av.actual == AV_UP || g_av.actual == AV_UNKNOWN)) {
            g_av.down_since_ms = now;
            ++g_av.outages;
        }
        g_av.actual = cur;
    }
    if (cur == g_av.logged)
        return;
    if (cur == AV_UP) {
        if (g_av.logged == AV_UNKNOWN)
            SG_LOG(SG_LL_INFO, "redis", "%s: connected", g_av.where);
        else
            SG_LOG(SG_LL_INFO, "redis", "%s is answering again after %.1f s: the cache uses it again", g_av.where,
                   (double)(now - g_av.down_since_ms) / 1000.0);
        g_av.logged = AV_UP;
        return;
    }
    if (g_av.logged == AV_UNKNOWN) {
        av_log_startup_locked(cur, why);
    } else if (g_av.down_logged_ms != 0 && now < g_av.down_logged_ms + LOG_INTERVAL_MS) {
        return; /* flapping: a later report writes the line */
    } else {
        char extra[96] = "";
        if (g_av.outages > 1)
            snprintf(extra, sizeof(extra), " (%llu outages since the last such line)", (unsigned long long)g_av.outages);
        double for_s = (double)(now - g_av.down_since_ms) / 1000.0;
        if (cur == AV_REFUSED)
            SG_LOG(SG_LL_ERROR, "redis",
                   "%s refuses the gateway's connection set-up (%s; for %.1f s): lookups skip it and writes are dropped until it "
                   "accepts it%s",
                   g_av.where, g_av.refused_why, for_s, extra);
        else
            SG_LOG(SG_LL_WARN, "redis", "%s is down (%s; for %.1f s): lookups skip it and writes are dropped until it answers%s",
                   g_av.where, why != NULL ? why : "no connection", for_s, extra);
    }
    /* the start-up line does not hold back the first real outage's */
    g_av.down_logged_ms = g_av.logged == AV_UNKNOWN ? 0 : now;
    g_av.outages = 0;
    g_av.logged = cur;
}

static void av_report(int up_delta, const char *why)
{
    pthread_mutex_lock(&g_av.mu);
    g_av.n_up += up_delta;
    av_update_locked(why);
    pthread_mutex_unlock(&g_av.mu);
}

/* Redis answered on `r`'s set-up connection: it counts as answering again, the failure streak
 * ends, and an open breaker closes. Loop thread of `r`. */
static void answered(sg_redis_t *r)
{
    atomic_store(&g_av.fails, 0);
    r->backoff_ms = 100;
    if (r->answering && !atomic_load(&g_av.open))
        return;
    pthread_mutex_lock(&g_av.mu);
    if (!r->answering) {
        r->answering = 1;
        ++g_av.n_up;
    }
    if (atomic_load(&g_av.open)) {
        atomic_store(&g_av.open, 0);
        sg_gauge_set(m_open, 0);
    }
    av_update_locked(NULL);
    pthread_mutex_unlock(&g_av.mu);
}

/* A server or a sentinel refused the set-up: the state is "refused" until a set-up succeeds. */
static void set_refused(const char *why)
{
    sg_counter_add(m_err_auth, 1);
    pthread_mutex_lock(&g_av.mu);
    atomic_store(&g_av.refused, 1);
    snprintf(g_av.refused_why, sizeof(g_av.refused_why), "%s", why);
    sg_gauge_set(m_auth_failed, 1);
    pthread_mutex_unlock(&g_av.mu);
}

/* `n` commands on `r` got no reply within the timeout. Opens the breaker once the streak is long
 * enough. Loop thread of `r`. */
static void timed_out(sg_redis_t *r, uint32_t n)
{
    uint32_t fails = atomic_fetch_add(&g_av.fails, n) + n;
    if (fails < BREAKER_FAILURES || atomic_load(&g_av.open))
        return;
    pthread_mutex_lock(&g_av.mu);
    if (!atomic_load(&g_av.open)) {
        atomic_store(&g_av.open, 1);
        sg_counter_add(m_trips, 1);
        sg_gauge_set(m_open, 1);
        uint64_t now = sg_now_ms();
        if (g_av.trip_logged_ms != 0 && now < g_av.trip_logged_ms + LOG_INTERVAL_MS) {
            ++g_av.unlogged_trips;
        } else {
            SG_LOG(SG_LL_WARN, "redis",
                   "%s: circuit breaker open: %u commands in a row got no reply within %u ms; every lookup and write skips "
                   "Redis, without waiting, until it answers a probe (%llu more trips since the last such line)",
                   g_av.where, fails, r->conf->timeout_ms, (unsigned long long)g_av.unlogged_trips);
            g_av.trip_logged_ms = now;
            g_av.unlogged_trips = 0;
        }
        char why[128];
        snprintf(why, sizeof(why), "not answering: no reply within %u ms", r->conf->timeout_ms);
        av_update_locked(why);
    }
    pthread_mutex_unlock(&g_av.mu);
}

static void format_addr(char *out, size_t size, const char *host, uint16_t port)
{
    snprintf(out, size, strchr(host, ':') != NULL ? "[%s]:%u" : "%s:%u", host, port);
}

/* Sentinel mode: the data connection of `r` was set up on a master; log when the master moved. */
static void note_master(sg_redis_t *r)
{
    char addr[300];
    format_addr(addr, sizeof(addr), r->host, r->port);
    pthread_mutex_lock(&g_av.mu);
    if (strcmp(g_av.master, addr) != 0) {
        if (g_av.master[0] == '\0') {
            SG_LOG(SG_LL_INFO, "redis", "%s is %s (named by a sentinel; it answers ROLE master)", g_av.where, addr);
        } else {
            sg_counter_add(m_master_changes, 1);
            SG_LOG(SG_LL_WARN, "redis",
                   "%s moved from %s to %s (failover): the cache, budgets and global rate limits use the new master", g_av.where,
                   g_av.master, addr);
        }
        snprintf(g_av.master, sizeof(g_av.master), "%s", addr);
    }
    pthread_mutex_unlock(&g_av.mu);
}

static void init_metrics(void)
{
    static const char *help = "Redis cache errors by kind; each one is a cache bypass, never a failed request.";
    m_err_timeout = sg_metrics_counter("searchgate_cache_redis_errors_total", help, "kind=\"timeout\"");
    m_err_disconnect = sg_metrics_counter("searchgate_cache_redis_errors_total", help, "kind=\"disconnect\"");
    m_err_connect = sg_metrics_counter("searchgate_cache_redis_errors_total", help, "kind=\"connect\"");
    m_err_reply = sg_metrics_counter("searchgate_cache_redis_errors_total", help, "kind=\"reply\"");
    m_err_auth = sg_metrics_counter("searchgate_cache_redis_errors_total", help, "kind=\"auth\"");
    m_err_readonly = sg_metrics_counter("searchgate_cache_redis_errors_total", help, "kind=\"readonly\"");
    m_err_sentinel = sg_metrics_counter("searchgate_cache_redis_errors_total", help, "kind=\"sentinel\"");
    m_dropped = sg_metrics_counter("searchgate_cache_redis_dropped_writes_total",
                                   "Cache writes skipped because Redis was down or too many writes were outstanding.", "");
    m_connects = sg_metrics_counter("searchgate_cache_redis_connects_total", "Successful (re)connections to Redis.", "");
    m_up = sg_metrics_gauge("searchgate_cache_redis_connections_up", "Loop threads with a live, set-up Redis connection.", "");
    m_trips = sg_metrics_counter("searchgate_cache_redis_breaker_trips_total",
                                 "Times the Redis circuit breaker opened (commands in a row without a reply in time).", "");
    m_open =
        sg_metrics_gauge("searchgate_cache_redis_breaker_open",
                         "1 while the Redis circuit breaker is open: every lookup and write skips Redis until it answers.", "");
    m_auth_failed = sg_metrics_gauge("searchgate_cache_redis_auth_failed",
                                     "1 while Redis (or a sentinel) refuses the connection set-up: credentials, ACL permissions "
                                     "or database; the cache is bypassed meanwhile.",
                                     "");
    m_master_changes =
        sg_metrics_counter("searchgate_cache_redis_master_changes_total",
                           "Times the Redis master the sentinels name moved to another address (failovers seen).", "");
}

/* ---- adapter ---- */

static void on_sock_read(h2o_socket_t *sock, const char *err)
{
    (void)err;
    link_t *l = sock->data;
    if (l != NULL && l->ac != NULL)
        redisAsyncHandleRead(l->ac);
}

static void on_sock_write(h2o_socket_t *sock, const char *err)
{
    (void)err;
    link_t *l = sock->data;
    if (l != NULL && l->ac != NULL)
        redisAsyncHandleWrite(l->ac);
}

static void ev_add_read(void *privdata)
{
    link_t *l = privdata;
    h2o_socket_read_start(l->sock, on_sock_read);
}

static void ev_del_read(void *privdata)
{
    link_t *l = privdata;
    h2o_socket_read_stop(l->sock);
}

static void ev_add_write(void *privdata)
{
    link_t *l = privdata;
    if (!h2o_socket_is_writing(l->sock))
        h2o_socket_notify_write(l->sock, on_sock_write);
}

static void ev_del_write(void *privdata)
{
    (void)privdata; /* a pending one-shot notification is harmless: hiredis finds nothing to write */
}

static void ev_cleanup(void *privdata)
{
    link_t *l = privdata;
    if (l->sock != NULL) {
        l->sock->data = NULL;
        h2o_socket_close(l->sock);
        l->sock = NULL;
    }
    if (l->ev_ac != NULL) {
        l->ev_ac->c.fd = -1; /* h2o closed it */
        l->ev_ac->ev.data = NULL;
        l->ev_ac = NULL;
    }
}

static void link_on_connect(const redisAsyncContext *ac, int status)
{
    link_t *l = ac->data;
    if (status != REDIS_OK) {
        l->ac = NULL; /* hiredis frees the context after this callback */
        l->on_connected(l, ac->errstr != NULL && ac->errstr[0] != '\0' ? ac->errstr : "connect failed");
        return;
    }
    l->on_connected(l, NULL);
}

static void link_on_disconnect(const redisAsyncContext *ac, int status)
{
    link_t *l = ac->data;
    l->ac = NULL;
    l->lost_err = ac->err;
    l->on_lost(l, status == REDIS_OK ? NULL : ac->errstr != NULL && ac->errstr[0] != '\0' ? ac->errstr : "closed");
}

/* Starts a non-blocking connect. Returns 0 (on_connected follows) or -1 with `err`. */
static int link_connect(link_t *l, const char *host, uint16_t port, char *err, size_t size)
{
    if (l->ac != NULL || l->ev_ac != NULL) { /* the link rule above was broken: never reuse a live link */
        snprintf(err, size, "internal error: the connection is still open");
        return -1;
    }
    redisAsyncContext *ac = redisAsyncConnect(host, port);
    if (ac == NULL || ac->err) {
        snprintf(err, size, "%s", ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        return -1;
    }
    ac->data = l;
    l->ac = ac;
    l->ev_ac = ac;
    l->sock = h2o_evloop_socket_create(l->r->loop, ac->c.fd, H2O_SOCKET_FLAG_DONT_READ);
    l->sock->data = l;
    ac->ev.data = l;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    redisAsyncSetConnectCallback(ac, link_on_connect);
    redisAsyncSetDisconnectCallback(ac, link_on_disconnect);
    /* hiredis waits for the non-blocking connect to finish through addWrite */
    ev_add_write(l);
    return 0;
}

/* Closes the link, if open. A connected one reports on_lost(NULL), at once or when the callback
 * running on it returns; an unconnected one reports nothing. Returns 1 when on_lost follows. */
static int link_close(link_t *l)
{
    redisAsyncContext *ac = l->ac;
    if (ac == NULL)
        return 0;
    int connected = (ac->c.flags & REDIS_CONNECTED) != 0;
    if (!connected)
        l->ac = NULL;
    redisAsyncFree(ac);
    return connected;
}

/* ---- the data connection ---- */

static void connect_data(sg_redis_t *r);
static void discover(sg_redis_t *r);
static int track(sg_redis_t *r, int raw, sg_redis_cb cb, void *arg, int argc, const char **argv, const size_t *argvlen);

static uint32_t connect_timeout_ms(const sg_redis_t *r)
{
    return r->conf->timeout_ms > MIN_CONNECT_TIMEOUT_MS ? r->conf->timeout_ms : MIN_CONNECT_TIMEOUT_MS;
}

static void on_reconnect_timer(sg_timer_t *t)
{
    sg_redis_t *r = H2O_STRUCT_FROM_MEMBER(sg_redis_t, reconnect_timer, t);
    if (r->closing || r->state != ST_DOWN)
        return;
    if (r->conf->n_sentinels > 0 && !r->addr_fresh) {
        discover(r);
        return;
    }
    r->addr_fresh = 0;
    connect_data(r);
}

static void schedule_reconnect(sg_redis_t *r)
{
    if (r->closing)
        return;
    sg_timer_start(r->timers, &r->reconnect_timer, sg_now_ms() + (r->addr_fresh ? 0 : r->backoff_ms), on_reconnect_timer);
    if (!r->addr_fresh)
        r->backoff_ms = r->backoff_ms * 2 > MAX_BACKOFF_MS ? MAX_BACKOFF_MS : r->backoff_ms * 2;
}

/* The first attempt of `r` ended: start-up may go on (sg_redis_wait_started). */
static void settle(sg_redis_t *r)
{
    if (!r->settled) {
        r->settled = 1;
        atomic_fetch_add(&g_settled, 1);
    }
}

static void went_down(sg_redis_t *r, const char *why)
{
    settle(r);
    sg_timer_stop(r->timers, &r->connect_timer);
    if (r->counted_up) {
        sg_gauge_add(m_up, -1);
        r->counted_up = 0;
    }
    if (!r->closing)
        av_report(r->answering ? -1 : 0, why);
    r->answering = 0;
    r->state = ST_DOWN;
    r->n_forget = 0;
    /* every tracked command has been answered with NULL by hiredis by now */
    schedule_reconnect(r);
}

/* Drops the data connection; went_down() follows, at once or when the running callback returns. */
static void drop(sg_redis_t *r, const char *why)
{
    if (r->state != ST_CONNECTING && r->state != ST_HANDSHAKE && r->state != ST_UP)
        return;
    snprintf(r->drop_why, sizeof(r->drop_why), "%s", why);
    SG_LOG(SG_LL_DEBUG, "redis", "loop %d: dropping the connection to %s:%u: %s", r->loop_id, r->host, r->port, why);
    r->state = ST_CLOSING;
    if (!link_close(&r->data))
        went_down(r, why); /* it was not connected: nothing else reports */
}

static void data_lost(link_t *l, const char *err)
{
    sg_redis_t *r = l->r;
    char why[sizeof(r->drop_why) + 64];
    if (err != NULL) {
        sg_counter_add(m_err_disconnect, 1);
        snprintf(why, sizeof(why), "connection to %s:%u lost: %s", r->host, r->port, err);
    } else {
        snprintf(why, sizeof(why), "%s", r->drop_why);
    }
    went_down(r, why);
}

/* ---- the set-up of a data connection ---- */

/* The set-up refused (credentials, permissions, database): a state of its own, then retried. */
static void handshake_refused(sg_redis_t *r, const char *step, const redisReply *rep)
{
    char why[WHY_MAX];
    int len = (int)(rep->len > 200 ? 200 : rep->len);
    if (strncmp(rep->str, "NOAUTH", 6) == 0 && r->conf->password == NULL)
        snprintf(why, sizeof(why), "%s:%u requires a password (%.*s) and cache.redis has no password_env", r->host, r->port, len,
                 rep->str);
    else
        snprintf(why, sizeof(why), "%s:%u refused %s: %.*s", r->host, r->port, step, len, rep->str);
    set_refused(why);
    drop(r, why);
}

static int handshake_reply(const sg_redis_t *r, const redisReply *rep)
{
    return rep != NULL && r->state == ST_HANDSHAKE; /* NULL: the connection is going, went_down() reports */
}

static void on_hs_auth(void *arg, redisReply *rep)
{
    sg_redis_t *r = arg;
    if (!handshake_reply(r, rep) || rep->type != REDIS_REPLY_ERROR)
        return;
    char step[300];
    snprintf(step, sizeof(step), "AUTH as user \"%s\" (password from $%s)",
             r->conf->username != NULL ? r->conf->username : "default", r->conf->password_env);
    handshake_refused(r, step, rep);
}

static void on_hs_select(void *arg, redisReply *rep)
{
    sg_redis_t *r = arg;
    if (!handshake_reply(r, rep) || rep->type != REDIS_REPLY_ERROR)
        return;
    char step[64];
    snprintf(step, sizeof(step), "SELECT %u (cache.redis.db)", r->conf->db);
    handshake_refused(r, step, rep);
}

/* The server a sentinel named answers ROLE `role`, not master: not yet promoted, demoted, or the
 * sentinel's view is stale (cut off from the others, or misconfigured). Nothing is sent to it, and
 * the next discovery starts with the next sentinel, so one stale sentinel cannot keep a loop from
 * the master the others name. Logged (warn, at most once per interval) with the sentinel. */
static void named_not_master(sg_redis_t *r, const char *role)
{
    const sg_redis_node_t *s = &r->conf->sentinels[r->named_by];
    char why[WHY_MAX];
    snprintf(why, sizeof(why), "%s:%u, named master by sentinel %s:%u, answers ROLE %s (not yet promoted, or demoted)", r->host,
             r->port, s->host, s->port, role);
    sg_counter_add(m_err_readonly, 1);
    uint64_t now = sg_now_ms();
    pthread_mutex_lock(&g_av.mu);
    if (g_av.role_logged_ms == 0 || now >= g_av.role_logged_ms + LOG_INTERVAL_MS) {
        SG_LOG(SG_LL_WARN, "redis",
               "%s: sentinel %s:%u named %s:%u, which answers ROLE %s: not using it (a promotion under way, a demoted node, or "
               "a sentinel with a stale view); asking the next sentinel",
               g_av.where, s->host, s->port, r->host, r->port, role);
        g_av.role_logged_ms = now;
    }
    pthread_mutex_unlock(&g_av.mu);
    r->sen_idx = (r->named_by + 1) % r->conf->n_sentinels;
    drop(r, why);
}

static void on_hs_role(void *arg, redisReply *rep)
{
    sg_redis_t *r = arg;
    if (!handshake_reply(r, rep))
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        handshake_refused(r, "ROLE", rep);
        return;
    }
    const char *role = rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 && rep->element[0]->type == REDIS_REPLY_STRING
                           ? rep->element[0]->str
                           : "?";
    if (strcmp(role, "master") != 0)
        named_not_master(r, role);
}

static void handshake_done(sg_redis_t *r)
{
    r->state = ST_UP;
    r->counted_up = 1;
    sg_gauge_add(m_up, 1);
    if (atomic_load(&g_av.refused)) {
        pthread_mutex_lock(&g_av.mu);
        atomic_store(&g_av.refused, 0);
        sg_gauge_set(m_auth_failed, 0);
        pthread_mutex_unlock(&g_av.mu);
    }
    if (r->conf->n_sentinels > 0)
        note_master(r);
    SG_LOG(SG_LL_DEBUG, "redis", "loop %d: connected to %s:%u", r->loop_id, r->host, r->port);
    answered(r);
    settle(r);
}

static void on_hs_ping(void *arg, redisReply *rep)
{
    sg_redis_t *r = arg;
    if (!handshake_reply(r, rep))
        return;
    if (rep->type != REDIS_REPLY_ERROR) {
        handshake_done(r);
    } else if (strncmp(rep->str, "NOAUTH", 6) == 0 || strncmp(rep->str, "NOPERM", 6) == 0) {
        handshake_refused(r, "PING", rep);
    } else { /* e.g. LOADING: try again later */
        char why[WHY_MAX];
        snprintf(why, sizeof(why), "%s:%u answered PING with %.*s", r->host, r->port, (int)(rep->len > 200 ? 200 : rep->len),
                 rep->str);
        drop(r, why);
    }
}

/* AUTH, SELECT, ROLE and PING, pipelined: the connection carries commands once PING is answered
 * after all the others (replies come in order). Each is tracked, so a stalled set-up times out. */
static void send_handshake(sg_redis_t *r)
{
    const sg_redis_conf_t *c = r->conf;
    char db[16];
    snprintf(db, sizeof(db), "%u", c->db);
    const char *auth[3] = {"AUTH", c->username != NULL ? c->username : c->password, c->password};
    const char *select[2] = {"SELECT", db}, *role[1] = {"ROLE"}, *ping[1] = {"PING"};
    int rc = 0;
    if (c->password != NULL)
        rc |= track(r, 1, on_hs_auth, r, c->username != NULL ? 3 : 2, auth, NULL);
    if (c->db != 0)
        rc |= track(r, 1, on_hs_select, r, 2, select, NULL);
    if (c->n_sentinels > 0)
        rc |= track(r, 1, on_hs_role, r, 1, role, NULL);
    rc |= track(r, 1, on_hs_ping, r, 1, ping, NULL);
    if (rc != 0)
        drop(r, "could not send the connection set-up");
}

static void data_connected(link_t *l, const char *err)
{
    sg_redis_t *r = l->r;
    if (err != NULL) {
        sg_counter_add(m_err_connect, 1);
        SG_LOG(SG_LL_DEBUG, "redis", "loop %d: connect to %s:%u failed: %s", r->loop_id, r->host, r->port, err);
        char why[WHY_MAX];
        snprintf(why, sizeof(why), "connect to %s:%u: %s", r->host, r->port, err);
        went_down(r, why); /* hiredis frees the context after this callback */
        return;
    }
    sg_timer_stop(r->timers, &r->connect_timer);
    sg_counter_add(m_connects, 1);
    r->state = ST_HANDSHAKE;
    send_handshake(r);
}

/* The connect did not complete (a host that drops SYNs would keep it pending for minutes). */
static void on_connect_timer(sg_timer_t *t)
{
    sg_redis_t *r = H2O_STRUCT_FROM_MEMBER(sg_redis_t, connect_timer, t);
    if (r->state != ST_CONNECTING)
        return;
    sg_counter_add(m_err_connect, 1);
    char why[WHY_MAX];
    snprintf(why, sizeof(why), "connect to %s:%u: no answer within %u ms", r->host, r->port, connect_timeout_ms(r));
    drop(r, why);
}

static void connect_data(sg_redis_t *r)
{
    char err[256];
    if (link_connect(&r->data, r->host, r->port, err, sizeof(err)) != 0) {
        sg_counter_add(m_err_connect, 1);
        char why[WHY_MAX];
        snprintf(why, sizeof(why), "connect to %s:%u: %s", r->host, r->port, err);
        went_down(r, why);
        return;
    }
    r->state = ST_CONNECTING;
    sg_timer_start(r->timers, &r->connect_timer, sg_now_ms() + connect_timeout_ms(r), on_connect_timer);
}

/* ---- Sentinel: the master's address ---- */

static void sen_start(sg_redis_t *r);

/* A sentinel named the master (asked, or a +switch-master message): go there. */
static void master_addr(sg_redis_t *r, const char *host, uint16_t port)
{
    int same = strcmp(host, r->host) == 0 && port == r->port;
    if (same && (r->state == ST_CONNECTING || r->state == ST_HANDSHAKE || r->state == ST_UP))
        return;
    r->named_by = r->sen_idx;
    snprintf(r->host, sizeof(r->host), "%s", host);
    r->port = port;
    r->addr_fresh = 1;
    if (r->state == ST_DISCOVERING || r->state == ST_DOWN) {
        r->state = ST_DOWN;
        sg_timer_start(r->timers, &r->reconnect_timer, sg_now_ms(), on_reconnect_timer); /* the link rule: from a timer */
    } else if (r->state != ST_CLOSING) {
        char why[WHY_MAX];
        snprintf(why, sizeof(why), "a sentinel named a new master, %s:%u", host, port);
        drop(r, why); /* went_down() reconnects at once: addr_fresh */
    }
}

static void on_sen_timer(sg_timer_t *t);

/* The subscription is to be made again after the back-off (a discovery that starts meanwhile makes
 * it sooner: sen_start() re-arms the same timer). */
static void sen_retry_later(sg_redis_t *r)
{
    sg_timer_start(r->timers, &r->sen_timer, sg_now_ms() + r->sen_backoff_ms, on_sen_timer);
    r->sen_backoff_ms = r->sen_backoff_ms * 2 > MAX_BACKOFF_MS ? MAX_BACKOFF_MS : r->sen_backoff_ms * 2;
}

/* The sentinel in use failed: the next one, or (all failed) back-off. */
static void sen_failed(sg_redis_t *r, const char *why)
{
    const sg_redis_conf_t *c = r->conf;
    sg_counter_add(m_err_sentinel, 1);
    SG_LOG(SG_LL_DEBUG, "redis", "loop %d: %s", r->loop_id, why);
    if (r->sen_tries == 0)
        snprintf(r->sen_why, sizeof(r->sen_why), "%s", why);
    r->sen_state = SEN_IDLE;
    sg_timer_stop(r->timers, &r->sen_timer);
    link_close(&r->sen);
    r->sen_idx = (r->sen_idx + 1) % c->n_sentinels;
    if (++r->sen_tries < c->n_sentinels) {
        sg_timer_start(r->timers, &r->sen_timer, sg_now_ms(), on_sen_timer);
        return;
    }
    r->sen_tries = 0;
    if (r->state == ST_DISCOVERING) {
        char all[sizeof(r->sen_why) + 128];
        snprintf(all, sizeof(all), "no sentinel named master \"%s\" (%s%s)", c->master, r->sen_why,
                 c->n_sentinels > 1 ? "; the others failed too" : "");
        went_down(r, all); /* back-off, then discover again */
    } else {
        sen_retry_later(r); /* the data connection has its address: keep trying to subscribe */
    }
}

static void sen_fail_reply(sg_redis_t *r, const char *what, const redisReply *rep)
{
    const sg_redis_node_t *s = &r->conf->sentinels[r->sen_idx];
    char why[WHY_MAX];
    snprintf(why, sizeof(why), "sentinel %s:%u %s%.*s", s->host, s->port, what,
             rep != NULL ? (int)(rep->len > 200 ? 200 : rep->len) : 0, rep != NULL ? rep->str : "");
    sen_failed(r, why);
}

static int sen_reply(const sg_redis_t *r, const redisAsyncContext *ac, const redisReply *rep)
{
    return rep != NULL && ac == r->sen.ac && r->sen_state == SEN_QUERYING;
}

static void on_sen_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    sg_redis_t *r = privdata;
    redisReply *rep = reply;
    if (!sen_reply(r, ac, rep) || rep->type != REDIS_REPLY_ERROR)
        return;
    const sg_redis_node_t *s = &r->conf->sentinels[r->sen_idx];
    char why[WHY_MAX];
    snprintf(why, sizeof(why), "sentinel %s:%u refused AUTH as user \"%s\" (password from $%s): %.*s", s->host, s->port,
             r->conf->sentinel_username != NULL ? r->conf->sentinel_username : "default", r->conf->sentinel_password_env,
             (int)(rep->len > 200 ? 200 : rep->len), rep->str);
    set_refused(why);
    sen_failed(r, why);
}

static void on_sen_addr(redisAsyncContext *ac, void *reply, void *privdata)
{
    sg_redis_t *r = privdata;
    redisReply *rep = reply;
    if (!sen_reply(r, ac, rep))
        return;
    if (rep->type == REDIS_REPLY_ERROR) {
        sen_fail_reply(r, "answered SENTINEL get-master-addr-by-name with ", rep);
        return;
    }
    long port = 0;
    if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_STRING &&
        rep->element[1]->type == REDIS_REPLY_STRING && rep->element[0]->len < sizeof(r->host))
        port = strtol(rep->element[1]->str, NULL, 10);
    if (port < 1 || port > 65535) {
        char what[300];
        snprintf(what, sizeof(what), "does not know a master named \"%s\" (cache.redis.master)", r->conf->master);
        sen_fail_reply(r, what, NULL);
        return;
    }
    SG_LOG(SG_LL_DEBUG, "redis", "loop %d: sentinel %s:%u names master \"%s\" at %s:%ld", r->loop_id,
           r->conf->sentinels[r->sen_idx].host, r->conf->sentinels[r->sen_idx].port, r->conf->master, rep->element[0]->str, port);
    sg_timer_stop(r->timers, &r->sen_timer);
    r->sen_state = SEN_SUBSCRIBED;
    r->sen_tries = 0;
    master_addr(r, rep->element[0]->str, (uint16_t)port);
}

/* +switch-master "<name> <old ip> <old port> <new ip> <new port>" */
static void on_sen_message(redisAsyncContext *ac, void *reply, void *privdata)
{
    sg_redis_t *r = privdata;
    redisReply *rep = reply;
    if (rep == NULL || ac != r->sen.ac || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
        rep->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(rep->element[0]->str, "subscribe") == 0) { /* subscribed: the re-subscription back-off starts over */
        r->sen_backoff_ms = 100;
        return;
    }
    if (strcmp(rep->element[0]->str, "message") != 0 || rep->element[2]->type != REDIS_REPLY_STRING)
        return;
    char name[256], old_host[256], new_host[256];
    unsigned old_port, new_port;
    if (sscanf(rep->element[2]->str, "%255s %255s %u %255s %u", name, old_host, &old_port, new_host, &new_port) != 5 ||
        strcmp(name, r->conf->master) != 0 || new_port < 1 || new_port > 65535)
        return;
    SG_LOG(SG_LL_DEBUG, "redis", "loop %d: +switch-master %s", r->loop_id, rep->element[2]->str);
    master_addr(r, new_host, (uint16_t)new_port);
}

static void sen_connected(link_t *l, const char *err)
{
    sg_redis_t *r = l->r;
    const sg_redis_conf_t *c = r->conf;
    const sg_redis_node_t *s = &c->sentinels[r->sen_idx];
    char why[WHY_MAX];
    if (err != NULL) {
        snprintf(why, sizeof(why), "sentinel %s:%u: connect: %s", s->host, s->port, err);
        sen_failed(r, why);
        return;
    }
    const char *auth[3] = {"AUTH", c->sentinel_username != NULL ? c->sentinel_username : c->sentinel_password,
                           c->sentinel_password};
    const char *query[3] = {"SENTINEL", "get-master-addr-by-name", c->master};
    const char *subscribe[2] = {"SUBSCRIBE", "+switch-master"};
    int rc = REDIS_OK;
    if (c->sentinel_password != NULL)
        rc |= redisAsyncCommandArgv(l->ac, on_sen_auth, r, c->sentinel_username != NULL ? 3 : 2, auth, NULL);
    rc |= redisAsyncCommandArgv(l->ac, on_sen_addr, r, 3, query, NULL);
    rc |= redisAsyncCommandArgv(l->ac, on_sen_message, r, 2, subscribe, NULL);
    if (rc != REDIS_OK) {
        snprintf(why, sizeof(why), "sentinel %s:%u: could not send the query", s->host, s->port);
        sen_failed(r, why);
    }
}

static void sen_lost(link_t *l, const char *err)
{
    sg_redis_t *r = l->r;
    if (r->closing || r->sen_state == SEN_IDLE || err == NULL)
        return; /* we closed it */
    const sg_redis_node_t *s = &r->conf->sentinels[r->sen_idx];
    char why[WHY_MAX];
    snprintf(why, sizeof(why), "sentinel %s:%u: connection lost: %s", s->host, s->port, err);
    if (r->sen_state == SEN_QUERYING) {
        sen_failed(r, why);
        return;
    }
    /* the subscription ended (a sentinel restarted, or refused it: an error reply closes it):
     * subscribe again through the next sentinel. A refusal would repeat: it is a warning, as
     * failovers are then only seen at the next try (it asks for the master again first: at most
     * the 2 s back-off late) or when the master's connection drops or answers READONLY. */
    sg_counter_add(m_err_sentinel, 1);
    int refused = l->lost_err == REDIS_ERR_OTHER;
    uint64_t now = sg_now_ms();
    pthread_mutex_lock(&g_av.mu);
    if (refused && (g_av.sub_logged_ms == 0 || now >= g_av.sub_logged_ms + LOG_INTERVAL_MS)) {
        SG_LOG(SG_LL_WARN, "redis",
               "%s: sentinel %s:%u refused the +switch-master subscription (%s): give the sentinels' user &+switch-master "
               "and +subscribe; without it a failover is noticed only at the next try to subscribe (every 2 s, each asking for "
               "the master again) or when the old master's connection drops or answers READONLY",
               g_av.where, s->host, s->port, err);
        g_av.sub_logged_ms = now;
    } else {
        SG_LOG(SG_LL_DEBUG, "redis", "loop %d: %s", r->loop_id, why);
    }
    pthread_mutex_unlock(&g_av.mu);
    r->sen_state = SEN_IDLE;
    r->sen_idx = (r->sen_idx + 1) % r->conf->n_sentinels;
    sen_retry_later(r);
}

/* A fresh connection to the sentinel in use: query, then subscribe. From a timer (the link rule). */
static void sen_start(sg_redis_t *r)
{
    r->sen_state = SEN_IDLE;
    link_close(&r->sen); /* its on_lost finds SEN_IDLE */
    const sg_redis_node_t *s = &r->conf->sentinels[r->sen_idx];
    char err[256];
    if (link_connect(&r->sen, s->host, s->port, err, sizeof(err)) != 0) {
        char why[WHY_MAX];
        snprintf(why, sizeof(why), "sentinel %s:%u: connect: %s", s->host, s->port, err);
        sen_failed(r, why);
        return;
    }
    r->sen_state = SEN_QUERYING;
    sg_timer_start(r->timers, &r->sen_timer, sg_now_ms() + connect_timeout_ms(r), on_sen_timer);
}

static void on_sen_timer(sg_timer_t *t)
{
    sg_redis_t *r = H2O_STRUCT_FROM_MEMBER(sg_redis_t, sen_timer, t);
    if (r->closing)
        return;
    if (r->sen_state == SEN_QUERYING) {
        const sg_redis_node_t *s = &r->conf->sentinels[r->sen_idx];
        char why[WHY_MAX];
        snprintf(why, sizeof(why), "sentinel %s:%u: no answer within %u ms", s->host, s->port, connect_timeout_ms(r));
        sen_failed(r, why);
    } else if (r->sen_state == SEN_IDLE) {
        sen_start(r);
    }
}

/* Asks the sentinels for the master's address (the data connection is down). From a timer. */
static void discover(sg_redis_t *r)
{
    r->state = ST_DISCOVERING;
    r->sen_tries = 0;
    sen_start(r);
}

/* ---- commands ---- */

/* An error reply (a Redis that needs a password, is out of memory, is read-only ...) would repeat on
 * every request: one line per interval, with the count. */
static void log_error_reply(const redisReply *rep)
{
    uint64_t now = sg_now_ms();
    pthread_mutex_lock(&g_av.mu);
    if (g_av.err_logged_ms != 0 && now < g_av.err_logged_ms + LOG_INTERVAL_MS) {
        ++g_av.unlogged_errs;
    } else {
        SG_LOG(SG_LL_WARN, "redis", "%s answered an error: %.*s (%llu more since the last such line); treated as a miss",
               g_av.where, (int)(rep->len > 200 ? 200 : rep->len), rep->str, (unsigned long long)g_av.unlogged_errs);
        g_av.err_logged_ms = now;
        g_av.unlogged_errs = 0;
    }
    pthread_mutex_unlock(&g_av.mu);
}

/* An error reply to a command. -READONLY: the server is a replica now (a failover demoted it);
 * with sentinels, the master is looked up again. */
static void error_reply(sg_redis_t *r, const redisReply *rep)
{
    sg_counter_add(m_err_reply, 1);
    log_error_reply(rep);
    if (strncmp(rep->str, "READONLY", 8) != 0)
        return;
    sg_counter_add(m_err_readonly, 1);
    if (r->conf->n_sentinels > 0) {
        char why[WHY_MAX];
        snprintf(why, sizeof(why), "%s:%u answered READONLY: it is a replica now", r->host, r->port);
        drop(r, why);
    }
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    pending_t *p = privdata;
    sg_redis_t *r = p->owner;
    /* replies arrive in order, so p is the head (or was already timed out and unlinked) */
    for (pending_t **pp = &r->head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            if (r->tail == &p->next)
                r->tail = pp;
            break;
        }
    }
    redisReply *rep = reply;
    if (rep != NULL && r->state == ST_UP)
        answered(r);
    if (p->cb != NULL) {
        if (rep != NULL && rep->type == REDIS_REPLY_ERROR && !p->raw) {
            error_reply(r, rep);
            rep = NULL;
        }
        p->cb(p->arg, rep);
    }
    free(p);
}

static void on_forget_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    (void)ac;
    sg_redis_t *r = privdata;
    redisReply *rep = reply;
    if (rep != NULL && r->state == ST_UP)
        answered(r);
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR)
        error_reply(r, rep);
    if (r->n_forget > 0)
        --r->n_forget;
}

static void on_check_timer(sg_timer_t *t)
{
    sg_redis_t *r = H2O_STRUCT_FROM_MEMBER(sg_redis_t, check_timer, t);
    uint64_t now = sg_now_ms();
    uint32_t expired = 0, timeout_ms = r->conf->timeout_ms;
    for (pending_t *p = r->head; p != NULL && p->start_ms + timeout_ms <= now; p = p->next) {
        if (p->cb != NULL) {
            sg_redis_cb cb = p->cb;
            p->cb = NULL;
            sg_counter_add(m_err_timeout, 1);
            cb(p->arg, NULL);
            ++expired;
        }
    }
    if (expired > 0)
        timed_out(r, expired);
    if (expired > 0) {
        /* Redis is stalled: drop the connection, every pending callback gets NULL (already
         * answered ones are ignored), and reconnect with back-off */
        char why[64];
        snprintf(why, sizeof(why), "no reply within %u ms", timeout_ms);
        drop(r, why);
    }
    if (r->head != NULL)
        sg_timer_start(r->timers, &r->check_timer, r->head->start_ms + timeout_ms, on_check_timer);
}

/* Sends a command whose callback is tracked against the timeout, on a connected link. */
static int track(sg_redis_t *r, int raw, sg_redis_cb cb, void *arg, int argc, const char **argv, const size_t *argvlen)
{
    if (r->data.ac == NULL)
        return -1;
    pending_t *p = sg_mem_calloc(1, sizeof(*p));
    p->owner = r;
    p->start_ms = sg_now_ms();
    p->cb = cb;
    p->arg = arg;
    p->raw = raw;
    if (redisAsyncCommandArgv(r->data.ac, on_reply, p, argc, argv, argvlen) != REDIS_OK) {
        free(p);
        return -1;
    }
    *r->tail = p;
    r->tail = &p->next;
    if (!sg_timer_is_armed(&r->check_timer))
        sg_timer_start(r->timers, &r->check_timer, p->start_ms + r->conf->timeout_ms, on_check_timer);
    return 0;
}

int sg_redis_command(sg_redis_t *r, sg_redis_cb cb, void *arg, int argc, const char **argv, const size_t *argvlen)
{
    if (atomic_load(&g_av.open) || r == NULL || r->state != ST_UP || r->data.ac == NULL) {
        /* the breaker (skip a Redis that does not answer, at once), or no set-up connection */
        if (cb == NULL)
            sg_counter_add(m_dropped, 1);
        return -1;
    }
    if (cb != NULL)
        return track(r, 0, cb, arg, argc, argv, argvlen);
    if (r->n_forget >= MAX_FIRE_AND_FORGET) {
        sg_counter_add(m_dropped, 1);
        return -1;
    }
    if (redisAsyncCommandArgv(r->data.ac, on_forget_reply, r, argc, argv, argvlen) != REDIS_OK)
        return -1;
    ++r->n_forget;
    return 0;
}

void sg_redis_wait_started(const sg_redis_conf_t *conf, int n_loops)
{
    uint32_t step = conf->timeout_ms > MIN_CONNECT_TIMEOUT_MS ? conf->timeout_ms : MIN_CONNECT_TIMEOUT_MS;
    uint64_t deadline = sg_now_ms() + (conf->n_sentinels > 0 ? 2 : 1) * (uint64_t)step;
    struct timespec ms = {0, 1000000};
    while (atomic_load(&g_settled) < n_loops && sg_now_ms() < deadline)
        nanosleep(&ms, NULL);
}

int sg_redis_is_up(const sg_redis_t *r)
{
    return r != NULL && r->state == ST_UP && !atomic_load(&g_av.open);
}

int sg_redis_breaker_open(void)
{
    return atomic_load(&g_av.open);
}

int sg_redis_refused(void)
{
    return atomic_load(&g_av.refused);
}

void sg_redis_master(char *out, size_t size)
{
    pthread_mutex_lock(&g_av.mu);
    snprintf(out, size, "%s", g_av.master);
    pthread_mutex_unlock(&g_av.mu);
}

sg_redis_t *sg_redis_create(h2o_evloop_t *loop, sg_timers_t *timers, int loop_id, const sg_redis_conf_t *conf)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_metrics);
    pthread_mutex_lock(&g_av.mu);
    if (g_av.where[0] == '\0') {
        if (conf->n_sentinels > 0)
            snprintf(g_av.where, sizeof(g_av.where), "Redis master \"%s\"", conf->master);
        else
            snprintf(g_av.where, sizeof(g_av.where), strchr(conf->node.host, ':') != NULL ? "Redis [%s]:%u" : "Redis %s:%u",
                     conf->node.host, conf->node.port);
    }
    pthread_mutex_unlock(&g_av.mu);
    sg_redis_t *r = sg_mem_calloc(1, sizeof(*r));
    r->loop = loop;
    r->timers = timers;
    r->loop_id = loop_id;
    r->conf = conf;
    r->backoff_ms = 100;
    r->sen_backoff_ms = 100;
    r->tail = &r->head;
    r->state = ST_DOWN;
    r->data = (link_t){r, NULL, NULL, NULL, data_connected, data_lost, 0};
    r->sen = (link_t){r, NULL, NULL, NULL, sen_connected, sen_lost, 0};
    if (conf->n_sentinels > 0) {
        r->sen_idx = (size_t)loop_id % conf->n_sentinels; /* the loops' subscriptions spread over the sentinels */
        discover(r);
    } else {
        snprintf(r->host, sizeof(r->host), "%s", conf->node.host);
        r->port = conf->node.port;
        connect_data(r);
    }
    return r;
}

void sg_redis_destroy(sg_redis_t *r)
{
    if (r == NULL)
        return;
    r->closing = 1;
    sg_timer_stop(r->timers, &r->reconnect_timer);
    sg_timer_stop(r->timers, &r->check_timer);
    sg_timer_stop(r->timers, &r->connect_timer);
    sg_timer_stop(r->timers, &r->sen_timer);
    r->sen_state = SEN_IDLE;
    link_close(&r->sen);
    link_close(&r->data); /* answers pending callbacks with NULL, then data_lost */
    while (r->head != NULL) {
        pending_t *p = r->head;
        r->head = p->next;
        if (p->cb != NULL)
            p->cb(p->arg, NULL);
        free(p);
    }
    free(r);
}
