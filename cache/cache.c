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
static sg_counter_t *m_redis_bypass, *m_redis_lookups;

void sg_cache_key(sg_buf_t *out, const sg_backend_t *b, uint32_t topk, const char *text, size_t len)
{
    out->len = 0;
    sg_buf_appends(out, b->identity);
    sg_buf_appendf(out, "%c%u%c", 0x1f, topk, 0x1f);
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
    for (uint32_t i = 0; i < n; ++i)
        if ((uint64_t)b->docs[i].off + b->docs[i].len > b->json_len)
            goto bad;
    if (b->json_len < 2 || s[0] != '[' || s[b->json_len - 1] != ']')
        goto bad;
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
            u->from = SG_FROM_REDIS;
            --r->n_pending;
            ++r->hits_redis;
            sg_counter_add(r->serving->cache_hits_redis, 1);
            if (server->l1 != NULL) { /* promote: the next hit is served from memory */
                sg_cache_key(&key, r->serving, r->topk, u->text, u->len);
                sg_l1_put(server->l1, key.base, key.len, b, expire);
            }
        }
        sg_buf_free(&key);
    }
    free(m);
    if (r->responded)
        sg_rreq_unref(r);
    else
        sg_rreq_after_cache(r);
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
            sg_cache_key(&key, b, r->topk, u->text, u->len);
            sg_blob_t *blob = sg_l1_get(server->l1, key.base, key.len, now);
            if (blob != NULL) {
                u->blob = blob;
                u->from = SG_FROM_L1;
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
        sg_cache_key(&key, b, r->topk, u->text, u->len);
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

void sg_cache_store(sg_loop_t *loop, sg_backend_t *b, uint32_t topk, const char *text, size_t len, sg_blob_t *blob)
{
    sg_buf_t key = {0};
    sg_cache_key(&key, b, topk, text, len);
    if (server->l1 != NULL)
        sg_l1_put(server->l1, key.base, key.len, blob, sg_now_ms() + (uint64_t)b->conf->cache_ttl_s * 1000);
    if (loop->redis != NULL) {
        sg_buf_t rk = {0}, val = {0};
        char ttl[16];
        redis_key(&rk, server->cfg->cache.redis_prefix, key.base, key.len);
        sg_cache_encode(&val, blob);
        snprintf(ttl, sizeof(ttl), "%u", b->conf->cache_ttl_s);
        const char *argv[5] = {"SET", rk.base, val.base, "EX", ttl};
        size_t argvlen[5] = {3, rk.len, val.len, 2, strlen(ttl)};
        sg_redis_command(loop->redis, NULL, NULL, 5, argv, argvlen);
        sg_buf_free(&rk);
        sg_buf_free(&val);
    }
    sg_buf_free(&key);
}

int sg_cache_redis_state(void)
{
    if (server == NULL || server->cfg->cache.redis_host == NULL)
        return -1;
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
    sg_buf_appendf(out, ",\"redis\":{\"enabled\":%s,\"up\":%s}", rs >= 0 ? "true" : "false", rs == 1 ? "true" : "false");
}
