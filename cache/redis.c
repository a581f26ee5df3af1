/*
 * redis.c -- hiredis 0.14 on the h2o evloop.
 *
 * The adapter follows h2o >= 2.3's lib/common/redis.c design (re-written for 2.2.5): the
 * connection's fd is wrapped in an h2o socket with H2O_SOCKET_FLAG_DONT_READ, so h2o only
 * reports readiness and hiredis does the I/O. h2o owns the fd: cleanup closes it through
 * h2o_socket_close and sets c.fd = -1 so hiredis does not close it twice.
 *
 * hiredis 0.14 has no command timeouts, so every command with a callback is tracked in a FIFO
 * with its start time; a per-loop timer fails commands older than timeout_ms and drops the
 * connection (redisAsyncFree answers every pending callback with NULL). Reconnection backs off
 * from 100 ms to 2 s; a connect that does not complete within max(timeout_ms, 1 s) is abandoned.
 *
 * Every loop has its own connection, but operators care about Redis as a whole: the loops report
 * to one shared record, which logs when Redis stops answering (at start-up: "configured but not
 * reachable") and when it answers again. A loop counts as answering once its connection got a
 * reply (each new connection sends a PING), not merely when TCP connected: a stopped Redis still
 * accepts connections. Outage lines are rate-limited to one per 10 s, so a flapping or absent
 * Redis cannot flood the log; a recovery is always logged.
 *
 * Circuit breaker. A stalled Redis would cost every L1 miss its full timeout_ms. After
 * BREAKER_FAILURES commands in a row got no reply in time (on any loop) the breaker opens: every
 * lookup and write skips Redis at once, without waiting, until Redis answers again. The probe is
 * the PING each new connection sends: the timed-out connection is dropped and re-made with
 * back-off (100 ms doubling to 2 s while nothing answers), so probing runs in the background at a
 * bounded rate and the first reply closes the breaker.
 */
#include "redis.h"
#include "metrics.h"

#include <async.h>
#include <stdlib.h>

#define MAX_FIRE_AND_FORGET 10000
#define LOG_INTERVAL_MS 10000 /* at most one "down" line (and one error-reply line) per interval */
#define MIN_CONNECT_TIMEOUT_MS 1000
#define BREAKER_FAILURES 3 /* commands in a row without a reply in time that open the breaker */

enum { ST_DOWN, ST_CONNECTING, ST_UP };

typedef struct st_pending_t {
    struct st_pending_t *next;
    sg_redis_t *owner;
    uint64_t start_ms;
    sg_redis_cb cb; /* NULL once answered by the timeout */
    void *arg;
} pending_t;

struct st_sg_redis_t {
    h2o_evloop_t *loop;  /* the loop thread's event loop: the socket lives there */
    sg_timers_t *timers; /* and its timers */
    int loop_id;         /* for the log */
    char *host;
    uint16_t port;
    uint32_t timeout_ms;
    redisAsyncContext *ac;    /* the live context; NULL once hiredis reported it down */
    redisAsyncContext *ev_ac; /* the context the adapter is attached to, until its cleanup */
    h2o_socket_t *sock;
    int state;
    uint32_t backoff_ms;
    sg_timer_t reconnect_timer;
    sg_timer_t check_timer;
    sg_timer_t connect_timer; /* abandons a connect that does not complete */
    pending_t *head, **tail;  /* commands with callbacks, oldest first */
    size_t n_forget;          /* fire-and-forget commands outstanding */
    int answering;            /* the current connection got a reply */
    int closing;
};

static sg_counter_t *m_err_timeout, *m_err_disconnect, *m_err_connect, *m_err_reply, *m_dropped, *m_connects, *m_trips;
static sg_gauge_t *m_up, *m_open;

/* ---- Redis as a whole, for the log: every loop reports here ---- */

enum { AV_UNKNOWN, AV_UP, AV_DOWN };

static struct {
    pthread_mutex_t mu;
    char where[300];         /* "Redis host:port" */
    int n_up;                /* loops whose connection answers */
    int actual;              /* AV_*: the state now */
    uint64_t down_since_ms;  /* when it last went down */
    int logged;              /* AV_*: what the log said last */
    uint64_t down_logged_ms; /* when it last said "down" */
    uint64_t outages;        /* outages since that line (the rate limit may hold some back) */
    uint64_t err_logged_ms, unlogged_errs;
    /* circuit breaker */
    atomic_int open;        /* read without the lock on every lookup */
    _Atomic uint32_t fails; /* commands in a row without a reply in time */
    uint64_t trip_logged_ms, unlogged_trips;
} g_av = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Logs a change of the overall state, if any. `why` says what went wrong (NULL when nothing did).
 * A "down" line waits until LOG_INTERVAL_MS after the previous one (the next report after that
 * writes it: a Redis that stays down keeps reporting through its reconnect attempts); an "up" line
 * is written at once, so the log never ends on a stale "down". Caller holds g_av.mu. */
static void av_update_locked(const char *why)
{
    uint64_t now = sg_now_ms();
    int cur = g_av.n_up > 0 && !atomic_load(&g_av.open) ? AV_UP : AV_DOWN;
    if (cur != g_av.actual) {
        if (cur == AV_DOWN) {
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
        SG_LOG(SG_LL_WARN, "redis",
               "%s is configured but not reachable at start-up (%s): results are cached in this process only (L1) until it "
               "answers; retrying in the background",
               g_av.where, why != NULL ? why : "no connection");
    } else if (g_av.down_logged_ms != 0 && now < g_av.down_logged_ms + LOG_INTERVAL_MS) {
        return; /* flapping: a later report writes the line */
    } else {
        char extra[96] = "";
        if (g_av.outages > 1)
            snprintf(extra, sizeof(extra), " (%llu outages since the last such line)", (unsigned long long)g_av.outages);
        SG_LOG(SG_LL_WARN, "redis", "%s is down (%s; for %.1f s): lookups skip it and writes are dropped until it answers%s",
               g_av.where, why != NULL ? why : "no connection", (double)(now - g_av.down_since_ms) / 1000.0, extra);
    }
    /* the start-up line does not hold back the first real outage's */
    g_av.down_logged_ms = g_av.logged == AV_UNKNOWN ? 0 : now;
    g_av.outages = 0;
    g_av.logged = AV_DOWN;
}

static void av_report(int up_delta, const char *why)
{
    pthread_mutex_lock(&g_av.mu);
    g_av.n_up += up_delta;
    av_update_locked(why);
    pthread_mutex_unlock(&g_av.mu);
}

/* Redis answered on `r`'s connection: it counts as answering again, the failure streak ends, and
 * an open breaker closes. Loop thread of `r`. */
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
                   g_av.where, fails, r->timeout_ms, (unsigned long long)g_av.unlogged_trips);
            g_av.trip_logged_ms = now;
            g_av.unlogged_trips = 0;
        }
        char why[128];
        snprintf(why, sizeof(why), "not answering: no reply within %u ms", r->timeout_ms);
        av_update_locked(why);
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
    m_dropped = sg_metrics_counter("searchgate_cache_redis_dropped_writes_total",
                                   "Cache writes skipped because Redis was down or too many writes were outstanding.", "");
    m_connects = sg_metrics_counter("searchgate_cache_redis_connects_total", "Successful (re)connections to Redis.", "");
    m_up = sg_metrics_gauge("searchgate_cache_redis_connections_up", "Loop threads with a live Redis connection.", "");
    m_trips = sg_metrics_counter("searchgate_cache_redis_breaker_trips_total",
                                 "Times the Redis circuit breaker opened (commands in a row without a reply in time).", "");
    m_open =
        sg_metrics_gauge("searchgate_cache_redis_breaker_open",
                         "1 while the Redis circuit breaker is open: every lookup and write skips Redis until it answers.", "");
}

/* ---- adapter ---- */

static void on_sock_read(h2o_socket_t *sock, const char *err)
{
    (void)err;
    sg_redis_t *r = sock->data;
    if (r != NULL && r->ac != NULL)
        redisAsyncHandleRead(r->ac);
}

static void on_sock_write(h2o_socket_t *sock, const char *err)
{
    (void)err;
    sg_redis_t *r = sock->data;
    if (r != NULL && r->ac != NULL)
        redisAsyncHandleWrite(r->ac);
}

static void ev_add_read(void *privdata)
{
    sg_redis_t *r = privdata;
    h2o_socket_read_start(r->sock, on_sock_read);
}

static void ev_del_read(void *privdata)
{
    sg_redis_t *r = privdata;
    h2o_socket_read_stop(r->sock);
}

static void ev_add_write(void *privdata)
{
    sg_redis_t *r = privdata;
    if (!h2o_socket_is_writing(r->sock))
        h2o_socket_notify_write(r->sock, on_sock_write);
}

static void ev_del_write(void *privdata)
{
    (void)privdata; /* a pending one-shot notification is harmless: hiredis finds nothing to write */
}

static void ev_cleanup(void *privdata)
{
    sg_redis_t *r = privdata;
    if (r->sock != NULL) {
        r->sock->data = NULL;
        h2o_socket_close(r->sock);
        r->sock = NULL;
    }
    if (r->ev_ac != NULL) {
        r->ev_ac->c.fd = -1; /* h2o closed it */
        r->ev_ac->ev.data = NULL;
        r->ev_ac = NULL;
    }
}

/* ---- connection management ---- */

static void connect_now(sg_redis_t *r);

static void on_reconnect_timer(sg_timer_t *t)
{
    sg_redis_t *r = H2O_STRUCT_FROM_MEMBER(sg_redis_t, reconnect_timer, t);
    connect_now(r);
}

static void schedule_reconnect(sg_redis_t *r)
{
    if (r->closing)
        return;
    sg_timer_start(r->timers, &r->reconnect_timer, sg_now_ms() + r->backoff_ms, on_reconnect_timer);
    r->backoff_ms = r->backoff_ms * 2 > 2000 ? 2000 : r->backoff_ms * 2;
}

static void went_down(sg_redis_t *r, const char *why)
{
    sg_timer_stop(r->timers, &r->connect_timer);
    if (r->state == ST_UP)
        sg_gauge_add(m_up, -1);
    if (!r->closing)
        av_report(r->answering ? -1 : 0, why);
    r->answering = 0;
    r->state = ST_DOWN;
    r->ac = NULL;
    r->n_forget = 0;
    /* every tracked command has been answered with NULL by hiredis by now */
    schedule_reconnect(r);
}

static int send_command(sg_redis_t *r, sg_redis_cb cb, void *arg, int argc, const char **argv, const size_t *argvlen);

static void on_ping_reply(void *arg, redisReply *reply)
{
    (void)arg, (void)reply; /* on_reply() did the bookkeeping */
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    sg_redis_t *r = ac->data;
    if (status != REDIS_OK) {
        sg_counter_add(m_err_connect, 1);
        SG_LOG(SG_LL_DEBUG, "redis", "loop %d: connect to %s:%u failed: %s", r->loop_id, r->host, r->port, ac->errstr);
        char why[160];
        snprintf(why, sizeof(why), "connect: %s", ac->errstr);
        went_down(r, why); /* hiredis frees the context after this callback */
        return;
    }
    sg_timer_stop(r->timers, &r->connect_timer);
    r->state = ST_UP;
    sg_counter_add(m_connects, 1);
    sg_gauge_add(m_up, 1);
    SG_LOG(SG_LL_DEBUG, "redis", "loop %d: connected to %s:%u", r->loop_id, r->host, r->port);
    /* a stopped Redis still accepts connections: it is answering once this PING has a reply (the
     * probe that closes an open breaker); the reconnect back-off is reset only then */
    static const char *ping[] = {"PING"};
    static const size_t ping_len[] = {4};
    send_command(r, on_ping_reply, r, 1, ping, ping_len);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    sg_redis_t *r = ac->data;
    char why[160];
    if (status != REDIS_OK) {
        sg_counter_add(m_err_disconnect, 1);
        snprintf(why, sizeof(why), "connection lost: %s", ac->errstr[0] != '\0' ? ac->errstr : "closed");
    } else { /* we dropped it: a command got no reply in time */
        snprintf(why, sizeof(why), "no reply within %u ms", r->timeout_ms);
    }
    went_down(r, why);
}

/* The connect did not complete (a host that drops SYNs would keep it pending for minutes). */
static void on_connect_timer(sg_timer_t *t)
{
    sg_redis_t *r = H2O_STRUCT_FROM_MEMBER(sg_redis_t, connect_timer, t);
    if (r->state != ST_CONNECTING || r->ac == NULL)
        return;
    sg_counter_add(m_err_connect, 1);
    redisAsyncContext *ac = r->ac;
    r->ac = NULL;
    redisAsyncFree(ac); /* not connected: no disconnect callback, only the adapter's cleanup */
    char why[96];
    snprintf(why, sizeof(why), "connect: no answer within %u ms",
             r->timeout_ms > MIN_CONNECT_TIMEOUT_MS ? r->timeout_ms : MIN_CONNECT_TIMEOUT_MS);
    went_down(r, why);
}

static void connect_now(sg_redis_t *r)
{
    if (r->closing || r->state != ST_DOWN)
        return;
    redisAsyncContext *ac = redisAsyncConnect(r->host, r->port);
    if (ac == NULL || ac->err) {
        sg_counter_add(m_err_connect, 1);
        char why[160];
        snprintf(why, sizeof(why), "connect: %s", ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL)
            redisAsyncFree(ac);
        av_report(0, why);
        schedule_reconnect(r);
        return;
    }
    ac->data = r;
    r->ac = ac;
    r->ev_ac = ac;
    r->sock = h2o_evloop_socket_create(r->loop, ac->c.fd, H2O_SOCKET_FLAG_DONT_READ);
    r->sock->data = r;
    ac->ev.data = r;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    r->state = ST_CONNECTING;
    sg_timer_start(r->timers, &r->connect_timer,
                   sg_now_ms() + (r->timeout_ms > MIN_CONNECT_TIMEOUT_MS ? r->timeout_ms : MIN_CONNECT_TIMEOUT_MS),
                   on_connect_timer);
    /* hiredis waits for the non-blocking connect to finish through addWrite */
    ev_add_write(r);
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
    if (reply != NULL)
        answered(r);
    if (p->cb != NULL) {
        redisReply *rep = reply;
        if (rep != NULL && rep->type == REDIS_REPLY_ERROR) {
            sg_counter_add(m_err_reply, 1);
            log_error_reply(rep);
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
    if (rep != NULL)
        answered(r);
    if (rep != NULL && rep->type == REDIS_REPLY_ERROR)
        sg_counter_add(m_err_reply, 1);
    if (r->n_forget > 0)
        --r->n_forget;
}

static void on_check_timer(sg_timer_t *t)
{
    sg_redis_t *r = H2O_STRUCT_FROM_MEMBER(sg_redis_t, check_timer, t);
    uint64_t now = sg_now_ms();
    uint32_t expired = 0;
    for (pending_t *p = r->head; p != NULL && p->start_ms + r->timeout_ms <= now; p = p->next) {
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
    if (expired && r->ac != NULL) {
        /* Redis is stalled: drop the connection, every pending callback gets NULL (already
         * answered ones are ignored), and reconnect with back-off */
        SG_LOG(SG_LL_DEBUG, "redis", "loop %d: no reply within %u ms; reconnecting", r->loop_id, r->timeout_ms);
        redisAsyncFree(r->ac);
    }
    if (r->head != NULL)
        sg_timer_start(r->timers, &r->check_timer, r->head->start_ms + r->timeout_ms, on_check_timer);
}

int sg_redis_command(sg_redis_t *r, sg_redis_cb cb, void *arg, int argc, const char **argv, const size_t *argvlen)
{
    if (atomic_load(&g_av.open)) { /* the breaker: skip a Redis that does not answer, at once */
        if (cb == NULL)
            sg_counter_add(m_dropped, 1);
        return -1;
    }
    return send_command(r, cb, arg, argc, argv, argvlen);
}

static int send_command(sg_redis_t *r, sg_redis_cb cb, void *arg, int argc, const char **argv, const size_t *argvlen)
{
    if (r == NULL || r->state != ST_UP || r->ac == NULL) {
        if (cb == NULL)
            sg_counter_add(m_dropped, 1);
        return -1;
    }
    if (cb == NULL) {
        if (r->n_forget >= MAX_FIRE_AND_FORGET) {
            sg_counter_add(m_dropped, 1);
            return -1;
        }
        if (redisAsyncCommandArgv(r->ac, on_forget_reply, r, argc, argv, argvlen) != REDIS_OK)
            return -1;
        ++r->n_forget;
        return 0;
    }
    pending_t *p = sg_mem_calloc(1, sizeof(*p));
    p->owner = r;
    p->start_ms = sg_now_ms();
    p->cb = cb;
    p->arg = arg;
    if (redisAsyncCommandArgv(r->ac, on_reply, p, argc, argv, argvlen) != REDIS_OK) {
        free(p);
        return -1;
    }
    *r->tail = p;
    r->tail = &p->next;
    if (!sg_timer_is_armed(&r->check_timer))
        sg_timer_start(r->timers, &r->check_timer, p->start_ms + r->timeout_ms, on_check_timer);
    return 0;
}

int sg_redis_is_up(const sg_redis_t *r)
{
    return r != NULL && r->state == ST_UP && !atomic_load(&g_av.open);
}

int sg_redis_breaker_open(void)
{
    return atomic_load(&g_av.open);
}

sg_redis_t *sg_redis_create(h2o_evloop_t *loop, sg_timers_t *timers, int loop_id, const char *host, uint16_t port,
                            uint32_t timeout_ms)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_metrics);
    pthread_mutex_lock(&g_av.mu);
    if (g_av.where[0] == '\0')
        snprintf(g_av.where, sizeof(g_av.where), "Redis %s:%u", host, port);
    pthread_mutex_unlock(&g_av.mu);
    sg_redis_t *r = sg_mem_calloc(1, sizeof(*r));
    r->loop = loop;
    r->timers = timers;
    r->loop_id = loop_id;
    r->host = sg_strdup(host);
    r->port = port;
    r->timeout_ms = timeout_ms;
    r->backoff_ms = 100;
    r->tail = &r->head;
    r->state = ST_DOWN;
    connect_now(r);
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
    if (r->ac != NULL)
        redisAsyncFree(r->ac); /* answers pending callbacks with NULL, then on_disconnect */
    while (r->head != NULL) {
        pending_t *p = r->head;
        r->head = p->next;
        if (p->cb != NULL)
            p->cb(p->arg, NULL);
        free(p);
    }
    free(r->host);
    free(r);
}
