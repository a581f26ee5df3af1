/*
 * ratelimit_global.c -- the rate limit of clients whose config says "global": shared by every
 * gateway replica through Redis.
 *
 * GCRA in one Lua script, so the read-modify-write of a client's theoretical arrival time is
 * atomic across every replica. Redis' own clock (TIME) is the time base, so replicas need no
 * synchronised clocks. Same semantics as sg_gcra() in clients.c. The script returns
 * {decision, wait_us}: 0 allow, 1 wait (slot reserved), 2 deny. Redis is only the transport
 * (lib/redis/redis.h): the policy, and what happens when Redis cannot answer, live here.
 *
 * When Redis cannot answer (off, not connected, the command not sent, no reply in time, an error
 * reply), the replica's own fallback bucket decides instead: a GCRA per client at its rate and
 * burst divided by clients.global_replicas (sg_clients_ratelimit_fallback), so N replicas
 * together still admit about the shared limit and an outage degrades the limit instead of
 * removing it. Each such decision is counted; the switch to the fallback and back is logged and
 * shown in a gauge (process-wide: every loop's Redis connection goes down with the server).
 */
#include "ratelimit_global.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define SWITCH_LOG_MS 10000 /* at most one "switched to the fallback" line per this */

static sg_counter_t *m_fallback;
static sg_gauge_t *m_fallback_active;
static _Atomic int fallback_active; /* the last decision was the fallback's */
static sg_log_every_t switch_log;
static char *key_prefix; /* cache.redis.prefix: every key this gateway writes starts with it */

void sg_ratelimit_global_init(const char *prefix)
{
    free(key_prefix);
    key_prefix = sg_strdup(prefix != NULL ? prefix : "");
    m_fallback = sg_metrics_counter("searchgate_ratelimit_global_fallback_total",
                                    "Requests of global clients decided by this replica's fallback bucket (the client's rate and "
                                    "burst / clients.global_replicas) because Redis could not answer.",
                                    "");
    m_fallback_active = sg_metrics_gauge("searchgate_ratelimit_global_fallback_active",
                                         "1 while the shared (Redis) rate limits are replaced by the local fallback buckets.", "");
}

/* The shared limit is back: one line when the switch away from it was logged. */
static void shared_again(void)
{
    if (!atomic_load_explicit(&fallback_active, memory_order_relaxed) || !atomic_exchange(&fallback_active, 0))
        return; /* the common case reads the flag only: no write to a line every loop shares */
    sg_gauge_set(m_fallback_active, 0);
    SG_LOG(SG_LL_INFO, "ratelimit", "Redis answers again: global rate limits are shared by every replica again");
}

/* Redis could not decide for client `c`: the fallback bucket does, counted, the switch logged
 * (at most one line per SWITCH_LOG_MS, with the count of switches in between). */
static int fallback(sg_clients_t *t, sg_client_t *c, uint64_t n, uint64_t max_wait_us, const char *why, uint64_t *wait_us)
{
    uint32_t n_replicas = sg_clients_config(t)->clients.global_replicas; /* the client's configuration generation's */
    if (n_replicas == 0)
        n_replicas = 1;
    sg_counter_add(m_fallback, 1);
    if (!atomic_load_explicit(&fallback_active, memory_order_relaxed) && !atomic_exchange(&fallback_active, 1)) {
        sg_gauge_set(m_fallback_active, 1);
        uint64_t skipped;
        if (sg_log_due(&switch_log, SWITCH_LOG_MS, sg_now_ms(), &skipped))
            SG_LOG(SG_LL_WARN, "ratelimit",
                   "Redis cannot decide the global rate limits (%s): each replica enforces 1/%u of every global client's "
                   "rate and burst on its own until it answers (%llu more switches since the last such line)",
                   why, n_replicas, (unsigned long long)skipped);
    }
    return sg_clients_ratelimit_fallback(t, c, n_replicas, n, sg_now_us(), max_wait_us, wait_us);
}

static const char gcra_lua[] = "local t = redis.call('TIME')\n"
                               "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
                               "local period = 1000000 / tonumber(ARGV[1])\n"
                               "local tau = period * math.max(tonumber(ARGV[2]) - 1, 0)\n"
                               "local tat = tonumber(redis.call('GET', KEYS[1]) or '0')\n"
                               "if tat < now then tat = now end\n"
                               "local allow_at = tat - tau\n"
                               "local new_tat = tat + period * tonumber(ARGV[3])\n"
                               "local max_wait = tonumber(ARGV[4])\n"
                               "local ttl = math.ceil((new_tat - now) / 1000) + 1000\n"
                               "if now >= allow_at then\n"
                               "  redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', ttl)\n"
                               "  return {0, 0}\n"
                               "end\n"
                               "local wait = allow_at - now\n"
                               "if max_wait > 0 and wait <= max_wait then\n"
                               "  redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', ttl)\n"
                               "  return {1, math.floor(wait)}\n"
                               "end\n"
                               "return {2, math.floor(wait)}\n";

typedef struct st_glimit_t {
    sg_ratelimit_global_cb cb;
    void *ctx;
    sg_clients_t *clients;
    sg_client_t *client; /* referenced */
    uint64_t n, max_wait_us;
} glimit_t;

static void on_glimit(void *arg, redisReply *reply)
{
    glimit_t *g = arg;
    int decision = -1;
    uint64_t wait = 0;
    if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_INTEGER && reply->element[1]->type == REDIS_REPLY_INTEGER &&
        reply->element[0]->integer >= SG_RL_ALLOW && reply->element[0]->integer <= SG_RL_DENY) {
        decision = (int)reply->element[0]->integer;
        wait = reply->element[1]->integer > 0 ? (uint64_t)reply->element[1]->integer : 0;
        shared_again();
    } else {
        decision = fallback(g->clients, g->client, g->n, g->max_wait_us, reply == NULL ? "no reply in time" : "an unexpected reply",
                            &wait);
    }
    sg_ratelimit_global_cb cb = g->cb;
    void *ctx = g->ctx;
    sg_clients_release(g->client);
    free(g);
    cb(ctx, decision, wait);
}

int sg_ratelimit_global(sg_redis_t *redis, sg_clients_t *t, sg_client_t *c, uint64_t n, uint64_t max_wait_us,
                        sg_ratelimit_global_cb cb, void *ctx, int *rl, uint64_t *wait_us)
{
    if (redis == NULL || !sg_redis_is_up(redis)) {
        *rl = fallback(t, c, n, max_wait_us, redis == NULL ? "no Redis connection" : "Redis is down", wait_us);
        return 0;
    }
    char key[256], rate[32], burst[32], cnt[24], wait[24];
    snprintf(key, sizeof(key), "%srl:%s", key_prefix != NULL ? key_prefix : "", c->id);
    snprintf(rate, sizeof(rate), "%.17g", c->conf->rate);
    snprintf(burst, sizeof(burst), "%.17g", c->conf->burst);
    snprintf(cnt, sizeof(cnt), "%llu", (unsigned long long)n);
    snprintf(wait, sizeof(wait), "%llu", (unsigned long long)max_wait_us);
    const char *argv[] = {"EVAL", gcra_lua, "1", key, rate, burst, cnt, wait};
    size_t argvlen[8];
    for (size_t i = 0; i < 8; ++i)
        argvlen[i] = strlen(argv[i]);
    glimit_t *g = sg_mem_alloc(sizeof(*g));
    *g = (glimit_t){cb, ctx, t, sg_clients_ref(c), n, max_wait_us};
    if (sg_redis_command(redis, on_glimit, g, 8, argv, argvlen) != 0) {
        sg_clients_release(g->client);
        free(g);
        *rl = fallback(t, c, n, max_wait_us, "the command could not be sent", wait_us);
        return 0;
    }
    return 1;
}
