/*
 * budget.c -- spend budgets per client and per route (budget.h says what counts).
 *
 * Counting. Each budget keeps, per calendar period (UTC), what this replica sent (`spent`), its
 * local reservations, and -- when Redis is configured -- the shared counter as last seen. The
 * shared counter is one Redis hash per budget and period (`<prefix>budget:client:<id>:<period>:
 * <start>`, `...:route:<name>:...`, anonymous clients `...:anonymous:...`; fields `used` and
 * `seq`, its version) that expires a few minutes after the period's end. One Lua script admits a
 * request atomically across replicas: it checks every budget that applies and reserves the
 * request's misses in all of them, or in none; what dispatch then does not send is given back
 * with a second script (only while the key exists). Both run on the loop's own asynchronous
 * hiredis connection; nothing waits. Replies carry the version, so the value this replica shows
 * is the latest it was told even when replies on several loops' connections cross.
 *
 * Without Redis the same decisions are made in process. With Redis configured but not answering,
 * a budget that fails "closed" refuses (503 budget_unavailable, Retry-After: 1); "open" decides on
 * this replica's own view (the last shared value seen plus what it sent since), and what it sends
 * meanwhile is carried into the shared counter by its next script, so an outage is not a free
 * pass once Redis is back.
 *
 * Reloads. A budget is the same object in every configuration generation that names it (the same
 * client id, anonymous clients, or route name, with the same period), so what it counted survives a
 * reload; its `queries` and `fail` take the new values when the new generation is published. A
 * changed period makes a new budget (a new counter in Redis too). /metrics and /stats show the
 * budgets of the current generation.
 *
 * Locks: one mutex for every budget (requests with misses on budgeted routes only); it is never
 * held while calling into dispatch or Redis.
 */
#include "budget.h"
#include "route.h"
#include "json.h"
#include "redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define WARN_FRACTION 0.8
#define KEY_GRACE_S 300 /* the shared counter outlives its period by this much: replicas' clocks differ a little */

struct st_sg_budget_t {
    sg_budget_conf_t conf; /* queries and fail change at a reload (under budget_registry.mu); the period never does */
    int is_route;
    int anon;       /* the anonymous clients' */
    uint32_t refs;  /* the budget sets (generations) that use it, under budget_registry.mu */
    int current;    /* the current generation uses it: shown in /metrics and /stats (under budget_registry.mu) */
    char *name;     /* client id, "(anonymous)" or route name */
    char *label;    /* client="..." or route="..." */
    char *key_base; /* <prefix>budget:<kind>:<name>:<period>: */
    /* guarded by budget_registry.mu */
    uint64_t start_s, end_s;
    uint64_t spent;       /* queries this replica sent in the period */
    uint64_t reserved;    /* local reservations not yet sent or given back */
    int64_t carry;        /* sent under a local decision, not yet added to the shared counter */
    uint64_t shared_seen; /* the shared counter as this replica last saw it */
    int64_t seq;          /* the counter's version with that value: replies from several connections may cross */
    int warned, exhausted_logged;
    sg_counter_t *m_spent, *m_warnings, *m_exhausted, *m_unavail_closed, *m_unavail_open;
};

static struct {
    pthread_mutex_t mu;
    int shared;        /* Redis is configured: budgets are shared by the replicas */
    int collecting;    /* the /metrics collector is registered (at start-up) */
    char *prefix;      /* cache.redis.prefix (start-up) */
    sg_budget_t **all; /* every budget some generation uses */
    size_t n_all;
} budget_registry = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The budgets of one generation. */
struct st_sg_budget_set_t {
    const sg_config_t *cfg;
    sg_budget_t **clients; /* per keyed client (NULL: none) */
    sg_budget_t *anon;     /* anonymous clients together, or NULL */
    sg_budget_t **routes;  /* per route (NULL: none) */
    size_t n_clients, n_routes, n_enabled;
};

static const char *const period_names[] = {"hour", "day", "week", "month"};

/* ---- calendar periods ---- */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

void sg_budget_period(int period, uint64_t now_s, uint64_t *start_s, uint64_t *end_s)
{
    switch (period) {
    case SG_PERIOD_HOUR:
        *start_s = now_s - now_s % 3600;
        *end_s = *start_s + 3600;
        return;
    case SG_PERIOD_WEEK: {
        uint64_t days = now_s / 86400;
        uint64_t dow = (days + 3) % 7; /* 1970-01-01 was a Thursday; Monday = 0 */
        *start_s = (days - dow) * 86400;
        *end_s = *start_s + 7 * 86400;
        return;
    }
    case SG_PERIOD_MONTH: {
        time_t t = (time_t)now_s;
        struct tm tm;
        gmtime_r(&t, &tm);
        int64_t y = (int64_t)tm.tm_year + 1900;
        unsigned m = (unsigned)tm.tm_mon + 1;
        *start_s = (uint64_t)days_from_civil(y, m, 1) * 86400;
        *end_s = (uint64_t)(m == 12 ? days_from_civil(y + 1, 1, 1) : days_from_civil(y, m + 1, 1)) * 86400;
        return;
    }
    default: /* SG_PERIOD_DAY */
        *start_s = now_s - now_s % 86400;
        *end_s = *start_s + 86400;
        return;
    }
}

static uint64_t wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec;
}

static void iso_utc(uint64_t s, char *out, size_t n)
{
    time_t t = (time_t)s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Moves `b` to the period holding `now`. Caller holds budget_registry.mu. */
static void refresh_locked(sg_budget_t *b, uint64_t now)
{
    if (now >= b->start_s && now < b->end_s)
        return;
    uint64_t start, end;
    sg_budget_period(b->conf.period, now, &start, &end);
    if (start != b->start_s) {
        b->spent = 0;
        b->carry = 0;
        b->shared_seen = 0;
        b->seq = 0;
        b->warned = 0;
        b->exhausted_logged = 0;
    }
    b->start_s = start;
    b->end_s = end;
}

/* What the period has used as far as this replica knows. Caller holds budget_registry.mu. */
static uint64_t used_locked(const sg_budget_t *b)
{
    int64_t shared = (int64_t)b->shared_seen + (b->carry > 0 ? b->carry : 0);
    return (uint64_t)shared > b->spent ? (uint64_t)shared : b->spent;
}

/* A reply of Redis says the counter of `b` (period `period`) was `used` at version `seq`. Caller holds budget_registry.mu. */
static void observe_locked(sg_budget_t *b, uint64_t period, long long used, long long seq)
{
    if (period != b->start_s || seq <= b->seq)
        return; /* an older period, or overtaken by a later reply */
    b->seq = seq;
    b->shared_seen = used > 0 ? (uint64_t)used : 0;
}

/* The 80% warning: one metric increment and one log line per crossing per period. Caller holds budget_registry.mu. */
static void check_warn_locked(sg_budget_t *b)
{
    if (b->warned || b->conf.queries == 0)
        return;
    uint64_t used = used_locked(b);
    if ((double)used < WARN_FRACTION * (double)b->conf.queries)
        return;
    b->warned = 1;
    sg_counter_add(b->m_warnings, 1);
    uint64_t now = wall_s();
    SG_LOG(SG_LL_WARN, "budget", "%s %s has used %llu of its %llu queries this %s (%.0f%%); it resets in %llu s",
           b->is_route ? "route" : "client", b->name, (unsigned long long)used, (unsigned long long)b->conf.queries,
           period_names[b->conf.period], 100.0 * (double)used / (double)b->conf.queries,
           (unsigned long long)(b->end_s > now ? b->end_s - now : 0));
}

/* ---- set-up ---- */

static void safe_label(char *dst, size_t n, const char *src)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < n; ++i) {
        char ch = src[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
                 ch == ':' || ch == '-' || ch == '(' || ch == ')';
        dst[i] = ok ? ch : '_';
    }
    dst[i] = '\0';
}

/* A new budget (refs 1) named `name` of `kind` ("client", "anonymous", "route"), counting `conf`. Caller holds budget_registry.mu.
 */
static sg_budget_t *budget_new_locked(const sg_budget_conf_t *conf, const char *name, const char *kind)
{
    sg_budget_t *b = sg_mem_calloc(1, sizeof(*b));
    b->conf = *conf;
    b->refs = 1;
    b->is_route = strcmp(kind, "route") == 0;
    b->anon = strcmp(kind, "anonymous") == 0;
    b->name = sg_strdup(name);
    char safe[160], label[200];
    safe_label(safe, sizeof(safe), name);
    snprintf(label, sizeof(label), "%s=\"%s\"", b->is_route ? "route" : "client", safe);
    b->label = sg_strdup(label);
    const char *prefix = budget_registry.prefix != NULL ? budget_registry.prefix : "sg:";
    size_t n = strlen(prefix) + strlen(kind) + strlen(name) + 32;
    b->key_base = sg_mem_alloc(n);
    if (strcmp(kind, "anonymous") == 0)
        snprintf(b->key_base, n, "%sbudget:anonymous:%s:", prefix, period_names[conf->period]);
    else
        snprintf(b->key_base, n, "%sbudget:%s:%s:%s:", prefix, kind, name, period_names[conf->period]);
    b->m_spent = sg_metrics_counter("searchgate_budget_spent_queries_total",
                                    "Backend queries this replica sent that count against a budget (client or route).", label);
    b->m_warnings = sg_metrics_counter("searchgate_budget_warnings_total",
                                       "Times a budget crossed 80% of its queries in a period (one per period).", label);
    b->m_exhausted = sg_metrics_counter(
        "searchgate_budget_exhausted_total",
        "Requests refused with budget_exhausted (429, or the client's reject_status) because the budget could not cover their "
        "cache misses.",
        label);
    char l2[240];
    snprintf(l2, sizeof(l2), "%s,fail=\"closed\"", label);
    b->m_unavail_closed = sg_metrics_counter(
        "searchgate_budget_unavailable_total",
        "Requests whose budget could not be checked in Redis: refused 503 (fail=closed) or decided by this replica (fail=open).",
        l2);
    snprintf(l2, sizeof(l2), "%s,fail=\"open\"", label);
    b->m_unavail_open = sg_metrics_counter(
        "searchgate_budget_unavailable_total",
        "Requests whose budget could not be checked in Redis: refused 503 (fail=closed) or decided by this replica (fail=open).",
        l2);
    refresh_locked(b, wall_s());
    budget_registry.all = sg_mem_realloc(budget_registry.all, (budget_registry.n_all + 1) * sizeof(*budget_registry.all));
    budget_registry.all[budget_registry.n_all++] = b;
    return b;
}

/* The budget of `name` counting `conf` (enabled): the one an earlier generation uses when the
 * kind, name and period agree, else a new one. Referenced. */
static sg_budget_t *budget_get(const sg_budget_conf_t *conf, const char *name, const char *kind)
{
    int is_route = strcmp(kind, "route") == 0, anon = strcmp(kind, "anonymous") == 0;
    pthread_mutex_lock(&budget_registry.mu);
    for (size_t i = 0; i < budget_registry.n_all; ++i) {
        sg_budget_t *b = budget_registry.all[i];
        if (b->is_route == is_route && b->anon == anon && strcmp(b->name, name) == 0 && b->conf.period == conf->period) {
            ++b->refs;
            pthread_mutex_unlock(&budget_registry.mu);
            return b;
        }
    }
    sg_budget_t *b = budget_new_locked(conf, name, kind);
    pthread_mutex_unlock(&budget_registry.mu);
    return b;
}

static void budget_free(sg_budget_t *b)
{
    free(b->name);
    free(b->label);
    free(b->key_base);
    free(b);
}

static void budget_release(sg_budget_t *b)
{
    if (b == NULL)
        return;
    pthread_mutex_lock(&budget_registry.mu);
    if (--b->refs != 0) {
        pthread_mutex_unlock(&budget_registry.mu);
        return;
    }
    for (size_t i = 0; i < budget_registry.n_all; ++i)
        if (budget_registry.all[i] == b) { /* the order stays the configs' (/stats lists them in it) */
            memmove(&budget_registry.all[i], &budget_registry.all[i + 1],
                    (budget_registry.n_all - i - 1) * sizeof(*budget_registry.all));
            --budget_registry.n_all;
            break;
        }
    if (budget_registry.n_all == 0) {
        free(budget_registry.all);
        budget_registry.all = NULL;
    }
    pthread_mutex_unlock(&budget_registry.mu);
    budget_free(b);
}

static void collector(sg_buf_t *out, void *arg);

void sg_budget_init(int shared, const char *prefix)
{
    budget_registry.shared = shared;
    free(budget_registry.prefix);
    budget_registry.prefix = prefix != NULL ? sg_strdup(prefix) : NULL;
    if (!budget_registry.collecting) { /* at start-up: the collector list is only appended to before the loops run */
        budget_registry.collecting = 1;
        sg_metrics_add_collector(collector, NULL);
    }
}

void sg_budget_dispose(void)
{
    free(budget_registry.prefix);
    budget_registry.prefix = NULL;
}

sg_budget_set_t *sg_budget_set_create(const sg_config_t *cfg, const sg_route_t *routes, size_t n_routes)
{
    sg_budget_set_t *set = sg_mem_calloc(1, sizeof(*set));
    set->cfg = cfg;
    set->n_clients = cfg->clients.n_keyed;
    set->n_routes = n_routes;
    set->clients = sg_mem_calloc(set->n_clients > 0 ? set->n_clients : 1, sizeof(*set->clients));
    set->routes = sg_mem_calloc(n_routes > 0 ? n_routes : 1, sizeof(*set->routes));
    for (size_t i = 0; i < set->n_clients; ++i)
        if (cfg->clients.keyed[i].budget.enabled) {
            set->clients[i] = budget_get(&cfg->clients.keyed[i].budget, cfg->clients.keyed[i].id, "client");
            ++set->n_enabled;
        }
    if (cfg->clients.defaults.budget.enabled) {
        set->anon = budget_get(&cfg->clients.defaults.budget, "(anonymous)", "anonymous");
        ++set->n_enabled;
    }
    for (size_t i = 0; i < n_routes; ++i)
        if (routes[i].conf->budget.enabled) {
            set->routes[i] = budget_get(&routes[i].conf->budget, routes[i].conf->name, "route");
            ++set->n_enabled;
        }
    return set;
}

/* `b` takes `conf`'s limit and failure mode and is the current generation's. Caller holds budget_registry.mu. */
static void publish_locked(sg_budget_t *b, const sg_budget_conf_t *conf)
{
    if (b == NULL)
        return;
    b->conf.queries = conf->queries;
    b->conf.fail = conf->fail;
    b->current = 1;
}

void sg_budget_set_publish(sg_budget_set_t *set)
{
    const sg_config_t *cfg = set->cfg;
    pthread_mutex_lock(&budget_registry.mu);
    for (size_t i = 0; i < budget_registry.n_all; ++i)
        budget_registry.all[i]->current = 0;
    for (size_t i = 0; i < set->n_clients; ++i)
        publish_locked(set->clients[i], &cfg->clients.keyed[i].budget);
    publish_locked(set->anon, &cfg->clients.defaults.budget);
    for (size_t i = 0; i < set->n_routes; ++i)
        publish_locked(set->routes[i], &cfg->backends[i].budget); /* routes are in config order */
    pthread_mutex_unlock(&budget_registry.mu);
}

void sg_budget_set_free(sg_budget_set_t *set)
{
    if (set == NULL)
        return;
    for (size_t i = 0; i < set->n_clients; ++i)
        budget_release(set->clients[i]);
    budget_release(set->anon);
    for (size_t i = 0; i < set->n_routes; ++i)
        budget_release(set->routes[i]);
    free(set->clients);
    free(set->routes);
    free(set);
}

/* ---- which budgets apply ---- */

static sg_budget_t *client_budget(const sg_budget_set_t *set, const sg_client_t *c)
{
    const sg_config_t *cfg = set->cfg;
    if (c == NULL || c->conf == NULL || !c->conf->budget.enabled)
        return NULL;
    if (c->conf == &cfg->clients.defaults)
        return set->anon;
    if (c->conf >= cfg->clients.keyed && c->conf < cfg->clients.keyed + cfg->clients.n_keyed)
        return set->clients[c->conf - cfg->clients.keyed];
    return NULL;
}

static int budgets_for(const sg_budget_set_t *set, const sg_route_t *be, const sg_client_t *client, sg_budget_t **out)
{
    int n = 0;
    if (set == NULL || set->n_enabled == 0) /* none configured */
        return 0;
    sg_budget_t *cb = be->conf->metered ? client_budget(set, client) : NULL;
    if (cb != NULL)
        out[n++] = cb;
    if (be->conf->budget.enabled && (size_t)be->index < set->n_routes && set->routes[be->index] != NULL)
        out[n++] = set->routes[be->index];
    return n;
}

static void counter_key(char *out, size_t n, const sg_budget_t *b, uint64_t start)
{
    snprintf(out, n, "%s%llu", b->key_base, (unsigned long long)start);
}

/* ---- giving back ---- */

/* Gives ARGV[1] back to every counter that still exists: {used, version} per key ({-1, -1} when gone). */
static const char refund_lua[] = "local out = {}\n"
                                 "for i = 1, #KEYS do\n"
                                 "  if redis.call('EXISTS', KEYS[i]) == 1 then\n"
                                 "    out[#out + 1] = redis.call('HINCRBY', KEYS[i], 'used', -tonumber(ARGV[1]))\n"
                                 "    out[#out + 1] = redis.call('HINCRBY', KEYS[i], 'seq', 1)\n"
                                 "  else\n"
                                 "    out[#out + 1] = -1\n"
                                 "    out[#out + 1] = -1\n"
                                 "  end\n"
                                 "end\n"
                                 "return out\n";

typedef struct st_refund_t {
    sg_budget_t *b[2]; /* compacted */
    uint64_t period[2];
    int nb;
} refund_t;

static void on_refund(void *arg, redisReply *reply)
{
    refund_t *f = arg;
    if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == (size_t)(2 * f->nb)) {
        pthread_mutex_lock(&budget_registry.mu);
        for (int i = 0; i < f->nb; ++i)
            if (reply->element[2 * i]->type == REDIS_REPLY_INTEGER && reply->element[2 * i + 1]->type == REDIS_REPLY_INTEGER)
                observe_locked(f->b[i], f->period[i], reply->element[2 * i]->integer, reply->element[2 * i + 1]->integer);
        pthread_mutex_unlock(&budget_registry.mu);
    }
    for (int i = 0; i < f->nb; ++i) /* the round trip's references (a reload may have dropped the budget) */
        budget_release(f->b[i]);
    free(f);
}

static void give_back(sg_loop_t *loop, sg_budget_t *const *bs, const uint64_t *periods, uint32_t n, int shared)
{
    if (n == 0)
        return;
    uint64_t now = wall_s();
    refund_t *f = sg_mem_calloc(1, sizeof(*f));
    pthread_mutex_lock(&budget_registry.mu);
    for (int i = 0; i < 2; ++i) {
        sg_budget_t *b = bs[i];
        if (b == NULL)
            continue;
        refresh_locked(b, now);
        if (!shared) {
            b->reserved -= n < b->reserved ? n : b->reserved;
        } else if (periods[i] == b->start_s) { /* a past period's counter no longer matters */
            b->shared_seen -= n < b->shared_seen ? n : b->shared_seen;
            ++b->refs; /* the reply may come after the call's generation is gone */
            f->b[f->nb] = b;
            f->period[f->nb++] = periods[i];
        }
    }
    pthread_mutex_unlock(&budget_registry.mu);
    if (f->nb == 0) {
        free(f);
        return;
    }
    char keys[2][400], cnt[24], numkeys[16];
    const char *argv[6];
    size_t argvlen[6];
    int argc = 0;
    argv[argc++] = "EVAL";
    argv[argc++] = refund_lua;
    snprintf(numkeys, sizeof(numkeys), "%d", f->nb);
    argv[argc++] = numkeys;
    for (int i = 0; i < f->nb; ++i) {
        counter_key(keys[i], sizeof(keys[i]), f->b[i], f->period[i]);
        argv[argc++] = keys[i];
    }
    snprintf(cnt, sizeof(cnt), "%u", n);
    argv[argc++] = cnt;
    for (int i = 0; i < argc; ++i)
        argvlen[i] = strlen(argv[i]);
    if (loop != NULL && loop->redis != NULL && sg_redis_command(loop->redis, on_refund, f, argc, argv, argvlen) == 0)
        return;
    /* not sent: the next script of this replica gives it back */
    pthread_mutex_lock(&budget_registry.mu);
    for (int i = 0; i < f->nb; ++i)
        if (f->period[i] == f->b[i]->start_s)
            f->b[i]->carry -= (int64_t)n;
    pthread_mutex_unlock(&budget_registry.mu);
    for (int i = 0; i < f->nb; ++i)
        budget_release(f->b[i]);
    free(f);
}

void sg_budget_take(sg_budget_charge_t *reservation, sg_budget_charge_t *call, uint32_t n)
{
    *call = *reservation;
    call->n = n < reservation->n ? n : reservation->n;
    reservation->n -= call->n;
}

void sg_budget_started(sg_budget_charge_t *ch)
{
    if (ch->n == 0 || (ch->b[0] == NULL && ch->b[1] == NULL))
        return;
    uint64_t now = wall_s();
    pthread_mutex_lock(&budget_registry.mu);
    for (int i = 0; i < 2; ++i) {
        sg_budget_t *b = ch->b[i];
        if (b == NULL)
            continue;
        refresh_locked(b, now);
        if (!ch->shared)
            b->reserved -= ch->n < b->reserved ? ch->n : b->reserved;
        if (ch->period[i] == b->start_s) {
            b->spent += ch->n;
            if (!ch->shared && budget_registry.shared)
                b->carry += ch->n;
            check_warn_locked(b);
        }
        sg_counter_add(b->m_spent, ch->n);
    }
    pthread_mutex_unlock(&budget_registry.mu);
    ch->n = 0;
}

void sg_budget_unused(sg_loop_t *loop, sg_budget_charge_t *ch)
{
    if (ch->n == 0)
        return;
    give_back(loop, ch->b, ch->period, ch->n, ch->shared);
    ch->n = 0;
}

/* ---- admission ---- */

/* One admission: who asks, and where the decision goes. */
typedef struct st_admit_t {
    const sg_budget_next_t *next;
    void *ctx;
    const sg_client_t *client;
    sg_loop_t *loop;
} admit_t;

/* Admitted: hands the reservation to the caller's next step. */
static void run(const admit_t *a, sg_budget_t *const *bs, const uint64_t *periods, uint32_t n, int shared)
{
    sg_budget_decision_t d = {.admitted = 1, .charge = {{bs[0], bs[1]}, {periods[0], periods[1]}, n, (uint8_t)shared}};
    a->next->decided(a->ctx, &d);
}

static void refused(const admit_t *a, int status, const char *type, const char *msg, uint32_t retry_after_s)
{
    sg_budget_decision_t d = {.status = status, .type = type, .message = msg, .retry_after_s = retry_after_s};
    a->next->decided(a->ctx, &d);
}

static void refuse(const admit_t *a, sg_budget_t *b, uint64_t used, uint32_t n)
{
    uint64_t now = wall_s();
    pthread_mutex_lock(&budget_registry.mu);
    refresh_locked(b, now);
    uint64_t end = b->end_s, limit = b->conf.queries; /* a reload may change the limit: read it here */
    int log = !b->exhausted_logged;
    b->exhausted_logged = 1;
    pthread_mutex_unlock(&budget_registry.mu);
    sg_counter_add(b->m_exhausted, 1);
    uint32_t retry = end > now ? (uint32_t)(end - now) : 1;
    char at[32];
    iso_utc(end, at, sizeof(at));
    uint64_t left = used < limit ? limit - used : 0;
    const char *period = period_names[b->conf.period];
    if (log)
        SG_LOG(SG_LL_WARN, "budget",
               "%s %s: budget of %llu queries per %s is exhausted (%llu used); requests that miss the "
               "cache are refused (budget_exhausted) until %s",
               b->is_route ? "route" : "client", b->name, (unsigned long long)limit, period, (unsigned long long)used, at);
    char msg[400];
    snprintf(msg, sizeof(msg),
             "spend budget of %s %s exhausted: %llu of %llu queries per %s (UTC) used, %llu left, and this request needs %u "
             "backend queries; it resets at %s (in %u s)",
             b->is_route ? "route" : "client", b->name, (unsigned long long)(used < limit ? used : limit),
             (unsigned long long)limit, period, (unsigned long long)left, n, at, retry);
    /* 429, or 503 when the refused client's software retries only 5xx (clients.*.reject_status) */
    refused(a, a->client->conf->reject_status == 503 ? 503 : 429, "budget_exhausted", msg, retry);
}

/* Decides on this replica's own counts (no Redis, or Redis down with every budget failing open). */
static void decide_local(const admit_t *a, sg_budget_t *const *bs, uint32_t n)
{
    uint64_t now = wall_s(), periods[2] = {0, 0};
    sg_budget_t *over = NULL;
    uint64_t over_used = 0;
    pthread_mutex_lock(&budget_registry.mu);
    for (int i = 0; i < 2 && over == NULL; ++i) {
        sg_budget_t *b = bs[i];
        if (b == NULL)
            continue;
        refresh_locked(b, now);
        uint64_t used = used_locked(b) + b->reserved;
        if (used + n > b->conf.queries) {
            over = b;
            over_used = used;
        }
    }
    if (over == NULL)
        for (int i = 0; i < 2; ++i)
            if (bs[i] != NULL) {
                bs[i]->reserved += n;
                periods[i] = bs[i]->start_s;
            }
    pthread_mutex_unlock(&budget_registry.mu);
    if (over != NULL) {
        refuse(a, over, over_used, n);
        return;
    }
    run(a, bs, periods, n, 0);
}

static void unavailable(const admit_t *a, sg_budget_t *const *bs, uint32_t n, const char *why)
{
    int closed[2] = {0, 0};
    pthread_mutex_lock(&budget_registry.mu); /* a reload may change the failure mode */
    for (int i = 0; i < 2; ++i)
        closed[i] = bs[i] != NULL && bs[i]->conf.fail == SG_BUDGET_FAIL_CLOSED;
    pthread_mutex_unlock(&budget_registry.mu);
    for (int i = 0; i < 2; ++i)
        if (closed[i]) {
            sg_counter_add(bs[i]->m_unavail_closed, 1);
            char msg[300];
            snprintf(msg, sizeof(msg),
                     "the spend budget of %s %s is kept in Redis, which %s; it fails closed (budget.fail), so no backend "
                     "query is sent until Redis answers",
                     bs[i]->is_route ? "route" : "client", bs[i]->name, why);
            refused(a, 503, "budget_unavailable", msg, 1);
            return;
        }
    for (int i = 0; i < 2; ++i)
        if (bs[i] != NULL)
            sg_counter_add(bs[i]->m_unavail_open, 1);
    decide_local(a, bs, n);
}

/* Reserves n in every counter, or in none. A counter is a hash: `used` (queries) and `seq` (its
 * version, so replies that cross on several connections are applied in order). KEYS: the counters;
 * ARGV[1] = n, then per key: limit, expiry (Unix s), carry (what this replica sent without a script,
 * added first; negative for give-backs that could not be sent; the count never goes below 0).
 * Returns {admitted, index of the budget that refused (1-based; 0), then used and seq per key}. */
static const char reserve_lua[] = "local n = tonumber(ARGV[1])\n"
                                  "local used = {}\n"
                                  "for i = 1, #KEYS do\n"
                                  "  local carry = tonumber(ARGV[i * 3 + 1])\n"
                                  "  if carry ~= 0 then\n"
                                  "    if redis.call('HINCRBY', KEYS[i], 'used', carry) < 0 then\n"
                                  "      redis.call('HSET', KEYS[i], 'used', 0)\n"
                                  "    end\n"
                                  "    redis.call('HINCRBY', KEYS[i], 'seq', 1)\n"
                                  "    redis.call('EXPIREAT', KEYS[i], ARGV[i * 3])\n"
                                  "  end\n"
                                  "  local v = tonumber(redis.call('HGET', KEYS[i], 'used') or '0')\n"
                                  "  if v < 0 then v = 0 end\n"
                                  "  used[i] = v\n"
                                  "end\n"
                                  "local admitted, which = 1, 0\n"
                                  "for i = 1, #KEYS do\n"
                                  "  if admitted == 1 and used[i] + n > tonumber(ARGV[i * 3 - 1]) then\n"
                                  "    admitted, which = 0, i\n"
                                  "  end\n"
                                  "end\n"
                                  "if admitted == 1 then\n"
                                  "  for i = 1, #KEYS do\n"
                                  "    used[i] = redis.call('HINCRBY', KEYS[i], 'used', n)\n"
                                  "    redis.call('HINCRBY', KEYS[i], 'seq', 1)\n"
                                  "    redis.call('EXPIREAT', KEYS[i], ARGV[i * 3])\n"
                                  "  end\n"
                                  "end\n"
                                  "local out = {admitted, which}\n"
                                  "for i = 1, #KEYS do\n"
                                  "  out[#out + 1] = used[i]\n"
                                  "  out[#out + 1] = tonumber(redis.call('HGET', KEYS[i], 'seq') or '0')\n"
                                  "end\n"
                                  "return out\n";

typedef struct st_reserve_t {
    admit_t a;
    sg_budget_t *b[2]; /* compacted: b[0..nb) */
    uint64_t period[2];
    int64_t carry[2];
    int nb;
    uint32_t n;
} reserve_t;

static void on_reserve(void *arg, redisReply *reply)
{
    reserve_t *q = arg;
    const admit_t *a = &q->a;
    int gone = a->next->gone(a->ctx);
    int ok = reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == (size_t)(2 + 2 * q->nb);
    for (size_t i = 0; ok && i < reply->elements; ++i)
        ok = reply->element[i]->type == REDIS_REPLY_INTEGER;
    sg_budget_t *bs[2] = {q->b[0], q->b[1]};
    if (!ok) {
        if (!gone)
            unavailable(a, bs, q->n, "did not answer in time");
        goto out;
    }
    int admitted = reply->element[0]->integer == 1;
    long long which = reply->element[1]->integer;
    uint64_t used[2] = {0, 0}, now = wall_s();
    pthread_mutex_lock(&budget_registry.mu);
    for (int i = 0; i < q->nb; ++i) {
        sg_budget_t *b = q->b[i];
        long long v = reply->element[2 + 2 * i]->integer;
        used[i] = v > 0 ? (uint64_t)v : 0;
        refresh_locked(b, now);
        if (q->period[i] == b->start_s) {
            b->carry -= q->carry[i];
            observe_locked(b, q->period[i], v, reply->element[3 + 2 * i]->integer);
            check_warn_locked(b);
        }
    }
    pthread_mutex_unlock(&budget_registry.mu);
    if (gone) { /* answered meanwhile (deadline): nothing is sent */
        if (admitted)
            give_back(a->loop, bs, q->period, q->n, 1);
        goto out;
    }
    if (!admitted) {
        int k = which >= 1 && which <= q->nb ? (int)which - 1 : 0;
        refuse(a, q->b[k], used[k], q->n);
        goto out;
    }
    run(a, bs, q->period, q->n, 1);
out:
    if (a->next->round_trip_done != NULL)
        a->next->round_trip_done(a->ctx);
    free(q);
}

void sg_budget_admit(const sg_budget_set_t *set, sg_loop_t *loop, const sg_route_t *serving, const sg_client_t *client, uint32_t n,
                     const sg_budget_next_t *next, void *ctx)
{
    sg_budget_t *bs[2] = {NULL, NULL};
    int nb = budgets_for(set, serving, client, bs);
    admit_t a = {next, ctx, client, loop};
    if (nb == 0 || n == 0) {
        sg_budget_decision_t d = {.admitted = 1};
        next->decided(ctx, &d); /* no reservation: nothing applies */
        return;
    }
    if (!budget_registry.shared) {
        decide_local(&a, bs, n);
        return;
    }
    sg_redis_t *redis = loop->redis;
    if (redis == NULL || !sg_redis_is_up(redis)) {
        unavailable(&a, bs, n, "is not connected");
        return;
    }
    reserve_t *q = sg_mem_calloc(1, sizeof(*q));
    q->a = a;
    q->nb = nb;
    q->n = n;
    uint64_t now = wall_s();
    char keys[2][400], limits[2][24], expiry[2][24], carry[2][24], cnt[24], numkeys[16];
    pthread_mutex_lock(&budget_registry.mu);
    for (int i = 0; i < nb; ++i) {
        sg_budget_t *b = bs[i];
        refresh_locked(b, now);
        q->b[i] = b;
        q->period[i] = b->start_s;
        q->carry[i] = b->carry;
        counter_key(keys[i], sizeof(keys[i]), b, b->start_s);
        snprintf(limits[i], sizeof(limits[i]), "%llu", (unsigned long long)b->conf.queries);
        snprintf(expiry[i], sizeof(expiry[i]), "%llu", (unsigned long long)(b->end_s + KEY_GRACE_S));
        snprintf(carry[i], sizeof(carry[i]), "%lld", (long long)b->carry);
    }
    pthread_mutex_unlock(&budget_registry.mu);
    snprintf(cnt, sizeof(cnt), "%u", n);
    snprintf(numkeys, sizeof(numkeys), "%d", nb);
    const char *argv[12];
    size_t argvlen[12];
    int argc = 0;
    argv[argc++] = "EVAL";
    argv[argc++] = reserve_lua;
    argv[argc++] = numkeys;
    for (int i = 0; i < nb; ++i)
        argv[argc++] = keys[i];
    argv[argc++] = cnt;
    for (int i = 0; i < nb; ++i) {
        argv[argc++] = limits[i];
        argv[argc++] = expiry[i];
        argv[argc++] = carry[i];
    }
    for (int i = 0; i < argc; ++i)
        argvlen[i] = strlen(argv[i]);
    if (sg_redis_command(redis, on_reserve, q, argc, argv, argvlen) != 0) {
        free(q);
        unavailable(&a, bs, n, "is not connected");
        return;
    }
    if (next->round_trip != NULL)
        next->round_trip(ctx); /* the caller stays alive until on_reserve() ran */
}

/* ---- /metrics and /stats ---- */

typedef struct st_snap_t {
    uint64_t limit, used, spent, start, end;
} snap_t;

static snap_t snapshot_locked(sg_budget_t *b, uint64_t now)
{
    refresh_locked(b, now);
    snap_t s = {b->conf.queries, used_locked(b), b->spent, b->start_s, b->end_s};
    return s;
}

/* One sample of family `f` (collector()'s) for a budget. */
static void sample(sg_buf_t *out, size_t f, const snap_t *s, uint64_t now)
{
    uint64_t used = s->used < s->limit ? s->used : s->limit;
    switch (f) {
    case 0:
        sg_buf_appendf(out, "%llu\n", (unsigned long long)s->limit);
        break;
    case 1:
        sg_buf_appendf(out, "%llu\n", (unsigned long long)s->used);
        break;
    case 2:
        sg_buf_appendf(out, "%llu\n", (unsigned long long)(s->limit - used));
        break;
    case 3:
        sg_buf_appendf(out, "%.6f\n", s->limit > 0 ? (double)s->used / (double)s->limit : (s->used > 0 ? 1.0 : 0.0));
        break;
    default:
        sg_buf_appendf(out, "%llu\n", (unsigned long long)(s->end > now ? s->end - now : 0));
        break;
    }
}

/* The current generation's budgets (a budget only a draining one still uses would repeat a label). */
static void collector(sg_buf_t *out, void *arg)
{
    (void)arg;
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"searchgate_budget_limit_queries", "Backend queries a budget allows per period."},
        {"searchgate_budget_used_queries",
         "Backend queries used in the current period (the shared Redis counter as this replica last saw it, or this replica's "
         "own count without Redis)."},
        {"searchgate_budget_remaining_queries", "Backend queries left in the current period."},
        {"searchgate_budget_used_ratio", "Share of the budget used in the current period (0..1); the warning fires at 0.8."},
        {"searchgate_budget_reset_seconds", "Seconds until the current period ends (calendar periods in UTC)."},
    };
    uint64_t now = wall_s();
    pthread_mutex_lock(&budget_registry.mu);
    size_t current = 0;
    for (size_t i = 0; i < budget_registry.n_all; ++i)
        current += budget_registry.all[i]->current != 0;
    if (current == 0) { /* no budget configured: no families either */
        pthread_mutex_unlock(&budget_registry.mu);
        return;
    }
    snap_t *snaps = sg_mem_alloc((budget_registry.n_all > 0 ? budget_registry.n_all : 1) * sizeof(*snaps));
    for (size_t i = 0; i < budget_registry.n_all; ++i)
        snaps[i] = snapshot_locked(budget_registry.all[i], now);
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); ++f) {
        sg_buf_appendf(out, "# HELP %s %s\n# TYPE %s gauge\n", fam[f].name, fam[f].help, fam[f].name);
        for (size_t i = 0; i < budget_registry.n_all; ++i) {
            if (!budget_registry.all[i]->current)
                continue;
            sg_buf_appendf(out, "%s{%s} ", fam[f].name, budget_registry.all[i]->label);
            sample(out, f, &snaps[i], now);
        }
    }
    pthread_mutex_unlock(&budget_registry.mu);
    free(snaps);
}

static void budget_json(sg_jw_t *w, const sg_budget_t *b, const snap_t *s, uint64_t now)
{
    char start[32], end[32];
    iso_utc(s->start, start, sizeof(start));
    iso_utc(s->end, end, sizeof(end));
    uint64_t used = s->used < s->limit ? s->used : s->limit;
    sg_jw_key(w, b->name);
    sg_jw_obj(w);
    sg_jw_ku64(w, "queries", s->limit);
    sg_jw_kstr(w, "period", period_names[b->conf.period]);
    sg_jw_kstr(w, "period_start", start);
    sg_jw_kstr(w, "period_end", end);
    sg_jw_ku64(w, "resets_in_s", s->end > now ? s->end - now : 0);
    sg_jw_ku64(w, "used", s->used);
    sg_jw_ku64(w, "remaining", s->limit - used);
    sg_jw_kdouble(w, "used_ratio", s->limit > 0 ? (double)s->used / (double)s->limit : (s->used > 0 ? 1.0 : 0.0));
    sg_jw_ku64(w, "spent_here", s->spent);
    sg_jw_kbool(w, "shared", budget_registry.shared);
    sg_jw_kstr(w, "fail", b->conf.fail == SG_BUDGET_FAIL_OPEN ? "open" : "closed");
    sg_jw_kbool(w, "warning", s->limit > 0 && (double)s->used >= WARN_FRACTION * (double)s->limit);
    sg_jw_end(w);
}

void sg_budget_stats_json(sg_jw_t *w)
{
    uint64_t now = wall_s();
    pthread_mutex_lock(&budget_registry.mu); /* held while writing: a reload may add or drop budgets */
    sg_jw_key(w, "budgets");
    sg_jw_obj(w);
    for (int routes = 0; routes <= 1; ++routes) {
        sg_jw_key(w, routes ? "routes" : "clients");
        sg_jw_obj(w);
        for (size_t i = 0; i < budget_registry.n_all; ++i)
            if ((budget_registry.all[i]->is_route != 0) == routes && budget_registry.all[i]->current) {
                snap_t snap = snapshot_locked(budget_registry.all[i], now);
                budget_json(w, budget_registry.all[i], &snap, now);
            }
        sg_jw_end(w);
    }
    sg_jw_end(w);
    pthread_mutex_unlock(&budget_registry.mu);
}
