/*
 * cache.c -- keys, the Redis value format, and the lookup/store steps of a /retrieve request.
 */
#include "cache.h"
#include "redis.h"
#include "../gateway/json.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>

static sg_server_t *server;
static sg_counter_t *m_redis_bypass, *m_redis_lookups, *m_global_failopen;

void sg_cache_key(sg_buf_t *out, const sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len)
{
    out->len = 0;
    sg_buf_appends(out, b->identity);
    if (params == NULL || params[0] == '\0') {
        sg_buf_appendf(out, "%c%u%c", 0x1f, topk, 0x1f); /* the key of requests without search parameters */
    } else {
        sg_buf_appendf(out, "%c%u%c%zu:", 0x1f, topk, 0x1e, strlen(params)); /* length-prefixed: no ambiguity */
        sg_buf_appends(out, params);
        sg_buf_appendc(out, 0x1f);
    }
    sg_buf_append(out, text, len);
}

/* Redis key: prefix + hex SHA-256 of the binary key, so keys have a fixed size and hold no query text. */
static void redis_key(sg_buf_t *out, const char *prefix, const char *key, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key, len, d);
    out->len = 0;
    sg_buf_appends(out, prefix);
    sg_buf_appends(out, "r1:");
    for (size_t i = 0; i < sizeof(d); ++i) {
        sg_buf_appendc(out, hex[d[i] >> 4]);
        sg_buf_appendc(out, hex[d[i] & 15]);
    }
}

void sg_cache_encode(sg_buf_t *out, const sg_blob_t *blob)
{
    out->len = 0;
    sg_buf_appendf(out, "SG1 %u", blob->n_hits);
    for (uint32_t i = 0; i < blob->n_hits; ++i)
        sg_buf_appendf(out, " %u %u", blob->docs[i].off, blob->docs[i].len);
    sg_buf_appendc(out, '\n');
    sg_buf_append(out, blob->json, blob->json_len);
}

static int read_u32(const char **p, const char *end, uint32_t *v)
{
    const char *s = *p;
    if (s >= end || *s != ' ')
        return -1;
    ++s;
    uint64_t acc = 0;
    const char *start = s;
    while (s < end && *s >= '0' && *s <= '9' && s - start < 10)
        acc = acc * 10 + (uint64_t)(*s++ - '0');
    if (s == start || acc > UINT32_MAX)
        return -1;
    *v = (uint32_t)acc;
    *p = s;
    return 0;
}

sg_blob_t *sg_cache_decode(const char *p, size_t len)
{
    const char *end = p + len, *s = p;
    uint32_t n;
    if (len < 6 || memcmp(s, "SG1", 3) != 0)
        return NULL;
    s += 3;
    if (read_u32(&s, end, &n) != 0 || n > 100000)
        return NULL;
    sg_blob_t *b = sg_mem_calloc(1, sizeof(*b));
    atomic_init(&b->refs, 1);
    b->shape = SG_SHAPE_BOTH;
    b->n_hits = n;
    b->docs = n != 0 ? sg_mem_alloc(n * sizeof(*b->docs)) : NULL;
    for (uint32_t i = 0; i < n; ++i)
        if (read_u32(&s, end, &b->docs[i].off) != 0 || read_u32(&s, end, &b->docs[i].len) != 0)
            goto bad;
    if (s >= end || *s != '\n')
        goto bad;
    ++s;
    b->json_len = (size_t)(end - s);
    if (b->json_len < 2 || s[0] != '[' || s[b->json_len - 1] != ']')
        goto bad;
    /* documents inside the brackets, in order, never overlapping: the flat reply is spliced from
     * them, and is then never larger than the value (a value naming one span many times would
     * make a reply many times its size) */
    uint64_t next = 1;
    for (uint32_t i = 0; i < n; ++i) {
        if (b->docs[i].len < 2 || b->docs[i].off < next || (uint64_t)b->docs[i].off + b->docs[i].len > b->json_len - 1)
            goto bad;
        next = (uint64_t)b->docs[i].off + b->docs[i].len;
    }
    b->json = sg_strndup(s, b->json_len);
    return b;
bad:
    free(b->docs);
    free(b);
    return NULL;
}

void sg_cache_init(sg_server_t *s)
{
    server = s;
    if (s->cfg->cache.l1_bytes > 0)
        s->l1 = sg_l1_create(s->cfg->cache.l1_bytes);
    m_redis_bypass =
        sg_metrics_counter("searchgate_cache_redis_bypass_total",
                           "Lookups that skipped Redis because no connection was up (the request went on without it).", "");
    m_redis_lookups = sg_metrics_counter("searchgate_cache_redis_lookups_total", "Pipelined MGET lookups sent to Redis.", "");
    m_global_failopen =
        sg_metrics_counter("searchgate_ratelimit_global_failopen_total",
                           "Requests admitted without the shared (Redis) rate limit because Redis was down or slow.", "");
}

void sg_cache_init_loop(sg_loop_t *loop)
{
    const sg_config_t *cfg = loop->server->cfg;
    if (cfg->cache.redis_host != NULL)
        loop->redis = sg_redis_create(loop, cfg->cache.redis_host, cfg->cache.redis_port, cfg->cache.redis_timeout_ms);
}

void sg_cache_dispose_loop(sg_loop_t *loop)
{
    sg_redis_destroy(loop->redis);
    loop->redis = NULL;
}

void sg_cache_dispose(sg_server_t *s)
{
    sg_l1_destroy(s->l1);
    s->l1 = NULL;
}

typedef struct st_mget_t {
    sg_rreq_t *r;
    uint32_t n;
    uint32_t idx[];
} mget_t;

static void on_mget(void *arg, redisReply *reply)
{
    mget_t *m = arg;
    sg_rreq_t *r = m->r;
    r->redis_pending = 0;
    if (!r->responded && reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == m->n) {
        sg_buf_t key = {0};
        uint64_t expire = sg_now_ms() + (uint64_t)r->serving->conf->cache_ttl_s * 1000;
        for (uint32_t i = 0; i < m->n; ++i) {
            redisReply *e = reply->element[i];
            if (e->type != REDIS_REPLY_STRING)
                continue;
            sg_blob_t *b = sg_cache_decode(e->str, e->len);
            if (b == NULL)
                continue;
            sg_uq_t *u = &r->uniq[m->idx[i]];
            if (u->blob != NULL) {
                sg_blob_release(b);
                continue;
            }
            u->blob = b;
            --r->n_pending;
            ++r->hits_redis;
            sg_counter_add(r->serving->cache_hits_redis, 1);
            if (server->l1 != NULL) { /* promote: the next hit is served from memory */
                sg_cache_key(&key, r->serving, r->topk, sg_rreq_params(r), u->text, u->len);
                sg_l1_put(server->l1, key.base, key.len, b, expire);
            }
        }
        sg_buf_free(&key);
    }
    free(m);
    if (!r->responded)
        sg_rreq_after_cache(r);
    sg_rreq_unref(r); /* the lookup's reference, taken in sg_cache_lookup() */
}

void sg_cache_lookup(sg_rreq_t *r)
{
    sg_backend_t *b = r->serving;
    if (!b->conf->cache || r->is_access) {
        sg_rreq_after_cache(r);
        return;
    }
    sg_buf_t key = {0};
    uint64_t now = sg_now_ms();
    if (server->l1 != NULL) {
        for (uint32_t i = 0; i < r->n_uniq; ++i) {
            sg_uq_t *u = &r->uniq[i];
            if (u->blob != NULL)
                continue;
            sg_cache_key(&key, b, r->topk, sg_rreq_params(r), u->text, u->len);
            sg_blob_t *blob = sg_l1_get(server->l1, key.base, key.len, now);
            if (blob != NULL) {
                u->blob = blob;
                --r->n_pending;
                ++r->hits_l1;
                sg_counter_add(b->cache_hits_l1, 1);
            }
        }
    }
    sg_redis_t *redis = r->loop->redis;
    if (r->n_pending == 0 || redis == NULL) {
        sg_buf_free(&key);
        sg_rreq_after_cache(r);
        return;
    }
    if (!sg_redis_is_up(redis)) {
        sg_counter_add(m_redis_bypass, 1);
        sg_buf_free(&key);
        sg_rreq_after_cache(r);
        return;
    }
    uint32_t n = r->n_pending;
    mget_t *m = sg_mem_alloc(sizeof(*m) + n * sizeof(uint32_t));
    m->r = r;
    m->n = n;
    const char **argv = sg_mem_alloc((n + 1) * sizeof(*argv));
    size_t *argvlen = sg_mem_alloc((n + 1) * sizeof(*argvlen));
    sg_buf_t *keys = sg_mem_calloc(n, sizeof(*keys));
    argv[0] = "MGET";
    argvlen[0] = 4;
    uint32_t k = 0;
    for (uint32_t i = 0; i < r->n_uniq && k < n; ++i) {
        sg_uq_t *u = &r->uniq[i];
        if (u->blob != NULL)
            continue;
        sg_cache_key(&key, b, r->topk, sg_rreq_params(r), u->text, u->len);
        redis_key(&keys[k], server->cfg->cache.redis_prefix, key.base, key.len);
        argv[k + 1] = keys[k].base;
        argvlen[k + 1] = keys[k].len;
        m->idx[k++] = i;
    }
    int rc = sg_redis_command(redis, on_mget, m, (int)n + 1, argv, argvlen);
    for (uint32_t i = 0; i < n; ++i)
        sg_buf_free(&keys[i]);
    free(keys);
    free(argv);
    free(argvlen);
    sg_buf_free(&key);
    if (rc != 0) {
        free(m);
        sg_counter_add(m_redis_bypass, 1);
        sg_rreq_after_cache(r);
        return;
    }
    sg_counter_add(m_redis_lookups, 1);
    r->redis_pending = 1;
    sg_rreq_ref(r);
}

void sg_cache_store_l1(sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len, sg_blob_t *blob)
{
    if (server->l1 == NULL)
        return;
    sg_buf_t key = {0};
    sg_cache_key(&key, b, topk, params, text, len);
    sg_l1_put(server->l1, key.base, key.len, blob, sg_now_ms() + (uint64_t)b->conf->cache_ttl_s * 1000);
    sg_buf_free(&key);
}

sg_blob_t *sg_cache_peek_l1(sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len)
{
    if (server == NULL || server->l1 == NULL)
        return NULL;
    sg_buf_t key = {0};
    sg_cache_key(&key, b, topk, params, text, len);
    sg_blob_t *blob = sg_l1_get(server->l1, key.base, key.len, sg_now_ms());
    sg_buf_free(&key);
    return blob;
}

void sg_cache_store_redis(sg_loop_t *loop, sg_backend_t *b, uint32_t topk, const char *params, const char *text, size_t len,
                          sg_blob_t *blob)
{
    if (loop->redis == NULL)
        return;
    sg_buf_t key = {0}, rk = {0}, val = {0};
    char ttl[16];
    sg_cache_key(&key, b, topk, params, text, len);
    redis_key(&rk, server->cfg->cache.redis_prefix, key.base, key.len);
    sg_cache_encode(&val, blob);
    snprintf(ttl, sizeof(ttl), "%u", b->conf->cache_ttl_s);
    const char *argv[5] = {"SET", rk.base, val.base, "EX", ttl};
    size_t argvlen[5] = {3, rk.len, val.len, 2, strlen(ttl)};
    sg_redis_command(loop->redis, NULL, NULL, 5, argv, argvlen);
    sg_buf_free(&rk);
    sg_buf_free(&val);
    sg_buf_free(&key);
}

int sg_cache_redis_state(void)
{
    if (server == NULL || server->cfg->cache.redis_host == NULL)
        return -1;
    if (sg_redis_breaker_open())
        return 2;
    for (int i = 0; i < server->n_loops; ++i)
        if (sg_redis_is_up(server->loops[i].redis))
            return 1;
    return 0;
}

void sg_cache_stats_json(sg_buf_t *out)
{
    size_t bytes = 0, entries = 0;
    if (server->l1 != NULL)
        sg_l1_usage(server->l1, &bytes, &entries);
    sg_buf_appendf(out, "\"l1\":{\"enabled\":%s,\"bytes\":%zu,\"max_bytes\":%zu,\"entries\":%zu}",
                   server->l1 != NULL ? "true" : "false", bytes, server->cfg->cache.l1_bytes, entries);
    int rs = sg_cache_redis_state();
    sg_buf_appendf(out, ",\"redis\":{\"enabled\":%s,\"up\":%s,\"breaker_open\":%s}", rs >= 0 ? "true" : "false",
                   rs == 1 ? "true" : "false", rs == 2 ? "true" : "false");
}

/* ---- rate limits shared by replicas ----
 *
 * GCRA in one Lua script, so the read-modify-write of a client's theoretical arrival time is
 * atomic across every gateway replica. Redis' own clock (TIME) is the time base, so replicas need
 * no synchronised clocks. Same semantics as sg_gcra() in gateway/clients.c. Returns
 * {decision, wait_us}: 0 allow, 1 wait (slot reserved), 2 deny. */
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
    sg_rreq_t *r;
    sg_global_limit_cb cb;
} glimit_t;

static void on_glimit(void *arg, redisReply *reply)
{
    glimit_t *g = arg;
    sg_rreq_t *r = g->r;
    sg_global_limit_cb cb = g->cb;
    free(g);
    r->redis_pending = 0;
    int decision = -1;
    uint64_t wait = 0;
    if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_INTEGER && reply->element[1]->type == REDIS_REPLY_INTEGER) {
        decision = (int)reply->element[0]->integer;
        wait = reply->element[1]->integer > 0 ? (uint64_t)reply->element[1]->integer : 0;
    }
    if (decision < 0)
        sg_counter_add(m_global_failopen, 1);
    if (r->responded) {
        sg_rreq_unref(r);
        return;
    }
    sg_rreq_unref(r);
    cb(r, decision, wait);
}

int sg_cache_global_limit(sg_rreq_t *r, const sg_client_t *c, uint64_t n, uint64_t max_wait_us, sg_global_limit_cb cb)
{
    sg_redis_t *redis = r->loop->redis;
    if (redis == NULL || !sg_redis_is_up(redis)) {
        sg_counter_add(m_global_failopen, 1);
        return -1;
    }
    char key[256], rate[32], burst[32], cnt[24], wait[24];
    snprintf(key, sizeof(key), "%srl:%s", server->cfg->cache.redis_prefix, c->id);
    snprintf(rate, sizeof(rate), "%.17g", c->conf->rate);
    snprintf(burst, sizeof(burst), "%.17g", c->conf->burst);
    snprintf(cnt, sizeof(cnt), "%llu", (unsigned long long)n);
    snprintf(wait, sizeof(wait), "%llu", (unsigned long long)max_wait_us);
    const char *argv[] = {"EVAL", gcra_lua, "1", key, rate, burst, cnt, wait};
    size_t argvlen[8];
    for (size_t i = 0; i < 8; ++i)
        argvlen[i] = strlen(argv[i]);
    glimit_t *g = sg_mem_alloc(sizeof(*g));
    g->r = r;
    g->cb = cb;
    if (sg_redis_command(redis, on_glimit, g, 8, argv, argvlen) != 0) {
        free(g);
        sg_counter_add(m_global_failopen, 1);
        return -1;
    }
    r->redis_pending = 1;
    sg_rreq_ref(r);
    return 0;
}
