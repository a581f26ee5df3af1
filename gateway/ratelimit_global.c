/*
 * ratelimit_global.c -- the rate limit of clients whose config says "global": shared by every
 * gateway replica through Redis.
 *
 * GCRA in one Lua script, so the read-modify-write of a client's theoretical arrival time is
 * atomic across every replica. Redis' own clock (TIME) is the time base, so replicas need no
 * synchronised clocks. Same semantics as sg_gcra() in clients.c. The script returns
 * {decision, wait_us}: 0 allow, 1 wait (slot reserved), 2 deny. Redis is only the transport
 * (cache/redis.h): the policy, and what happens when Redis cannot answer (fail open), live here.
 */
#include "ratelimit_global.h"
#include "../cache/cache.h"

#include <stdio.h>
#include <stdlib.h>

static sg_counter_t *m_global_failopen;

void sg_ratelimit_global_init(void)
{
    m_global_failopen =
        sg_metrics_counter("searchgate_ratelimit_global_failopen_total",
                           "Requests admitted without the shared (Redis) rate limit because Redis was down or slow.", "");
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
} glimit_t;

static void on_glimit(void *arg, redisReply *reply)
{
    glimit_t *g = arg;
    sg_ratelimit_global_cb cb = g->cb;
    void *ctx = g->ctx;
    free(g);
    int decision = -1;
    uint64_t wait = 0;
    if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_INTEGER && reply->element[1]->type == REDIS_REPLY_INTEGER) {
        decision = (int)reply->element[0]->integer;
        wait = reply->element[1]->integer > 0 ? (uint64_t)reply->element[1]->integer : 0;
    }
    if (decision < 0)
        sg_counter_add(m_global_failopen, 1);
    cb(ctx, decision, wait);
}

int sg_ratelimit_global(sg_redis_t *redis, const sg_client_t *c, uint64_t n, uint64_t max_wait_us, sg_ratelimit_global_cb cb,
                        void *ctx)
{
    if (redis == NULL || !sg_redis_is_up(redis)) {
        sg_counter_add(m_global_failopen, 1);
        return -1;
    }
    char key[256], rate[32], burst[32], cnt[24], wait[24];
    snprintf(key, sizeof(key), "%srl:%s", sg_cache_redis_prefix(), c->id);
    snprintf(rate, sizeof(rate), "%.17g", c->conf->rate);
    snprintf(burst, sizeof(burst), "%.17g", c->conf->burst);
    snprintf(cnt, sizeof(cnt), "%llu", (unsigned long long)n);
    snprintf(wait, sizeof(wait), "%llu", (unsigned long long)max_wait_us);
    const char *argv[] = {"EVAL", gcra_lua, "1", key, rate, burst, cnt, wait};
    size_t argvlen[8];
    for (size_t i = 0; i < 8; ++i)
        argvlen[i] = strlen(argv[i]);
    glimit_t *g = sg_mem_alloc(sizeof(*g));
    g->cb = cb;
    g->ctx = ctx;
    if (sg_redis_command(redis, on_glimit, g, 8, argv, argvlen) != 0) {
        free(g);
        sg_counter_add(m_global_failopen, 1);
        return -1;
    }
    return 0;
}
