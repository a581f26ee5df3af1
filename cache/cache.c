/*
 * cache.c -- keys, the Redis value format, and the lookup/store steps of a /retrieve request.
 *
 * The store is one call, made on the thread that has the result (the plugin's): it puts the
 * result in L1 there, then queues its Redis SET on the writer of the loop the result is for. A
 * loop's hiredis connection is used on that loop only, so the writer -- a mutex-guarded FIFO per
 * loop plus one h2o_multithread message that wakes the loop when the FIFO stops being empty --
 * carries the write there, and the SET is sent from the writer's receiver (on_writes), a callback
 * of the loop's queue: no other file calls into the cache for it. The FIFO is bounded in writes
 * and in result bytes; a store that finds it full keeps its L1 copy and drops the Redis write
 * (counted). The writer ends before its connection, dropping what it still holds.
 */
#include "cache.h"
#include "redis.h"
#include "metrics.h"

#include <openssl/sha.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static sg_l1_t *l1; /* NULL when cache.l1_bytes is 0 */
static size_t l1_max_bytes;
static char *prefix; /* of every Redis key */
static sg_counter_t *m_redis_bypass, *m_redis_lookups, *m_invalid_values, *m_queue_dropped;
static sg_gauge_t *m_queued; /* writes in the loops' write-behind queues */
/* the "invalid value" log line: at most one per INVALID_LOG_MS, with the count of those not logged */
#define INVALID_LOG_MS 10000
static sg_log_every_t invalid_log;

/* sg_cache_key(), appended to what `out` holds. */
static void key_append(sg_buf_t *out, const char *identity, uint32_t topk, const char *params, const char *text, size_t len)
{
    sg_buf_appends(out, identity);
    if (params == NULL || params[0] == '\0') {
        sg_buf_appendf(out, "%c%u%c", 0x1f, topk, 0x1f); /* the key of requests without search parameters */
    } else {
        sg_buf_appendf(out, "%c%u%c%zu:", 0x1f, topk, 0x1e, strlen(params)); /* length-prefixed: no ambiguity */
        sg_buf_appends(out, params);
        sg_buf_appendc(out, 0x1f);
    }
    sg_buf_append(out, text, len);
}

void sg_cache_key(sg_buf_t *out, const char *identity, uint32_t topk, const char *params, const char *text, size_t len)
{
    out->len = 0;
    key_append(out, identity, topk, params, text, len);
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

/* Nesting of a cached document: far beyond any real document, and well inside the limit of every
 * JSON parser a client reads the reply with (cJSON's and Python's are 1000), the reply's own four
 * levels included. */
#define DOC_MAX_DEPTH 512

static int bad_value(const char **why, const char *msg)
{
    *why = msg;
    return -1;
}

/* The fragment must be exactly what sg_blob_from_hits() writes, [{"document":DOC,"score":S},...],
 * with DOC a JSON object (RFC 8259, lib/json.c) at the offset and of the length the header gives,
 * and S a number or null. Both reply shapes are spliced from these bytes without parsing, so a
 * value that is anything else (damaged, foreign, written by a buggy replica) would be served as
 * invalid JSON. Walking the documents in the header's order also keeps them inside the brackets,
 * in order and apart: the flat reply, spliced from them, is never larger than the value. */
static int fragment_ok(const sg_blob_t *b, const char *json, const char **why)
{
    static const char doc_key[] = "{\"document\":", score_key[] = ",\"score\":";
    const char *s = json + 1, *end = json + b->json_len - 1; /* inside the brackets (checked) */
    size_t bad_at;
    for (uint32_t i = 0; i < b->n_hits; ++i) {
        if (i != 0 && (s >= end || *s++ != ','))
            return bad_value(why, "hits not separated by ','");
        if ((size_t)(end - s) < sizeof(doc_key) - 1 || memcmp(s, doc_key, sizeof(doc_key) - 1) != 0)
            return bad_value(why, "a hit is not {\"document\":...");
        s += sizeof(doc_key) - 1;
        if ((size_t)(s - json) != b->docs[i].off || b->docs[i].len > (size_t)(end - s))
            return bad_value(why, "a document is not where the header says");
        if (*s != '{' || sg_json_value_len(s, b->docs[i].len, DOC_MAX_DEPTH, &bad_at, why) != (long)b->docs[i].len)
            return bad_value(why, "a document is not one valid JSON object");
        s += b->docs[i].len;
        if ((size_t)(end - s) < sizeof(score_key) - 1 || memcmp(s, score_key, sizeof(score_key) - 1) != 0)
            return bad_value(why, "a document is not followed by its score");
        s += sizeof(score_key) - 1;
        long n = s < end && (*s == '-' || (*s >= '0' && *s <= '9') || *s == 'n')
                     ? sg_json_value_len(s, (size_t)(end - s), 1, &bad_at, why)
                     : -1;
        if (n < 0)
            return bad_value(why, "a score is not a number or null");
        s += n;
        if (s >= end || *s++ != '}')
            return bad_value(why, "a hit has more than a document and a score");
    }
    return s == end ? 0 : bad_value(why, "data after the last hit");
}

sg_blob_t *sg_cache_decode(const char *p, size_t len, const char **why)
{
    const char *end = p + len, *s = p, *unused;
    uint32_t n;
    why = why != NULL ? why : &unused;
    if (len < 6 || memcmp(s, "SG1", 3) != 0) {
        *why = "not an SG1 value";
        return NULL;
    }
    s += 3;
    /* each hit takes at least 4 bytes of header (" 1 2"): a count the value cannot hold is refused
     * before the offsets are allocated */
    if (read_u32(&s, end, &n) != 0 || n > 100000 || n > len / 4) {
        *why = "bad hit count";
        return NULL;
    }
    sg_blob_t *b = sg_blob_new(n);
    *why = "bad header";
    for (uint32_t i = 0; i < n; ++i)
        if (read_u32(&s, end, &b->docs[i].off) != 0 || read_u32(&s, end, &b->docs[i].len) != 0)
            goto bad;
    if (s >= end || *s != '\n')
        goto bad;
    ++s;
    b->json_len = (size_t)(end - s);
    if (b->json_len < 2 || s[0] != '[' || s[b->json_len - 1] != ']') {
        *why = "the fragment is not a JSON array";
        goto bad;
    }
    if (fragment_ok(b, s, why) != 0)
        goto bad;
    b->json = sg_strndup(s, b->json_len);
    return b;
bad:
    sg_blob_release(b);
    return NULL;
}

void sg_cache_init(size_t l1_bytes, const char *redis_prefix)
{
    if (l1_bytes > 0)
        l1 = sg_l1_create(l1_bytes);
    l1_max_bytes = l1_bytes;
    prefix = sg_strdup(redis_prefix != NULL ? redis_prefix : "");
    m_redis_bypass =
        sg_metrics_counter("searchgate_cache_redis_bypass_total",
                           "Lookups that skipped Redis because no connection was up (the request went on without it).", "");
    m_redis_lookups = sg_metrics_counter("searchgate_cache_redis_lookups_total", "Pipelined MGET lookups sent to Redis.", "");
    m_invalid_values = sg_metrics_counter(
        "searchgate_cache_invalid_values_total",
        "Values read from Redis that were not valid cache entries (damaged or foreign): treated as misses, and replaced.", "");
    m_queue_dropped = sg_metrics_counter("searchgate_cache_redis_write_queue_dropped_total",
                                         "Redis cache writes dropped because their loop's write-behind queue was full (or the "
                                         "loop stopped before sending them); the results stay in L1.",
                                         "");
    m_queued = sg_metrics_gauge("searchgate_cache_redis_write_queue",
                                "Redis cache writes waiting in the loops' write-behind queues for their loop to send them.", "");
}

void sg_cache_dispose(void)
{
    sg_l1_destroy(l1);
    l1 = NULL;
    free(prefix);
    prefix = NULL;
}

/* The prefix of every Redis key this gateway writes (cache.redis.prefix). */
static const char *redis_prefix(void)
{
    return prefix != NULL ? prefix : "";
}

/* The Redis key of a binary key, written to `out` (redis_key_len() bytes): the prefix + "r1:" + hex
 * SHA-256 of the binary key, so keys have a fixed size and hold no query text. Any thread. */
static void redis_key_to(char *out, const char *key, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key, len, d);
    size_t n = strlen(redis_prefix());
    memcpy(out, redis_prefix(), n);
    memcpy(out + n, "r1:", 3);
    out += n + 3;
    for (size_t i = 0; i < sizeof(d); ++i) {
        *out++ = hex[d[i] >> 4];
        *out++ = hex[d[i] & 15];
    }
}

static size_t redis_key_len(void)
{
    return strlen(redis_prefix()) + 3 + 2 * SHA256_DIGEST_LENGTH;
}

/* redis_key_to() into `out` (cleared first). */
static void redis_key(sg_buf_t *out, const char *key, size_t len)
{
    out->len = 0;
    sg_buf_reserve(out, redis_key_len());
    redis_key_to(out->base, key, len);
    out->len = redis_key_len();
}

/* One lookup: its answer as it fills, and while it waits for Redis the entries L1 did not answer,
 * by index into the caller's keys. */
typedef struct st_mget_t {
    sg_cache_lookup_cb cb;
    void *ctx;
    uint32_t ttl_s;
    sg_cache_answer_t answer;
    sg_blob_t **blobs;
    uint8_t *tier;
    sg_l1_miss_t **misses;
    uint32_t *key_off, *key_len;
    char **keys; /* binary keys of the Redis lookups (for the L1 promotion) */
    size_t *key_lens;
    uint32_t n;    /* Redis lookups */
    uint32_t *idx; /* the text of each Redis lookup */
} mget_t;

/* One allocation per lookup: the struct, then its per-text arrays (pointers first, for alignment). */
static mget_t *mget_new(const sg_cache_lookup_t *req, sg_cache_lookup_cb cb, void *ctx)
{
    size_t n = req->n != 0 ? req->n : 1;
    mget_t *m = sg_mem_calloc(1, sizeof(*m) + n * (sizeof(*m->blobs) + sizeof(*m->misses) + 3 * sizeof(uint32_t) + 1));
    char *p = (char *)(m + 1);
    m->blobs = (sg_blob_t **)p;
    p += n * sizeof(*m->blobs);
    m->misses = (sg_l1_miss_t **)p;
    p += n * sizeof(*m->misses);
    m->idx = (uint32_t *)p;
    m->key_off = m->idx + n;
    m->key_len = m->key_off + n;
    m->tier = (uint8_t *)(m->key_len + n);
    m->cb = cb;
    m->ctx = ctx;
    m->ttl_s = req->ttl_s;
    m->answer = (sg_cache_answer_t){req->n, m->blobs, m->tier, m->misses, m->key_off, m->key_len};
    return m;
}

static void mget_finish(mget_t *m)
{
    m->cb(m->ctx, &m->answer);
    for (uint32_t i = 0; i < m->n; ++i)
        free(m->keys[i]);
    free(m->keys);
    free(m->key_lens);
    free(m);
}

/* A value that is not a valid entry is a miss: the backend answers and the fresh result replaces
 * it in Redis. One log line per INVALID_LOG_MS (any loop thread), saying how many were not logged. */
static void invalid_value(const char *why)
{
    sg_counter_add(m_invalid_values, 1);
    uint64_t skipped;
    if (!sg_log_due(&invalid_log, INVALID_LOG_MS, sg_now_ms(), &skipped))
        return;
    SG_LOG(SG_LL_WARN, "cache",
           "a value read from Redis is not a valid cache entry (%s); treated as a miss and replaced (%llu more since the "
           "last such line)",
           why, (unsigned long long)skipped);
}

static void on_mget(void *arg, redisReply *reply)
{
    mget_t *m = arg;
    if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == m->n) {
        uint64_t expire = sg_now_ms() + (uint64_t)m->ttl_s * 1000;
        for (uint32_t i = 0; i < m->n; ++i) {
            redisReply *e = reply->element[i];
            if (e->type != REDIS_REPLY_STRING)
                continue;
            const char *why;
            sg_blob_t *b = sg_cache_decode(e->str, e->len, &why);
            if (b == NULL) {
                invalid_value(why);
                continue;
            }
            m->blobs[m->idx[i]] = b;
            m->tier[m->idx[i]] = SG_CACHE_REDIS;
            if (l1 != NULL) /* promote: the next hit is served from memory */
                sg_l1_put(l1, m->keys[i], m->key_lens[i], b, expire);
            sg_l1_miss_release(m->misses[m->idx[i]]); /* found: nothing to watch for */
            m->misses[m->idx[i]] = NULL;
        }
    }
    mget_finish(m);
}

/* Sends one MGET for the `missing` keys of `m` that L1 did not answer (`keys`: the request's). 0,
 * or -1 when it could not be sent. */
static int send_mget(sg_redis_t *redis, mget_t *m, const sg_buf_t *keys, uint32_t missing)
{
    m->keys = sg_mem_calloc(missing, sizeof(*m->keys));
    m->key_lens = sg_mem_calloc(missing, sizeof(*m->key_lens));
    const char **argv = sg_mem_alloc((missing + 1) * sizeof(*argv));
    size_t *argvlen = sg_mem_alloc((missing + 1) * sizeof(*argvlen));
    sg_buf_t *rkeys = sg_mem_calloc(missing, sizeof(*rkeys));
    argv[0] = "MGET";
    argvlen[0] = 4;
    for (uint32_t i = 0; i < m->answer.n; ++i) {
        if (m->blobs[i] != NULL)
            continue;
        uint32_t k = m->n++;
        const char *key = keys->base + m->key_off[i];
        m->idx[k] = i;
        m->keys[k] = sg_strndup(key, m->key_len[i]);
        m->key_lens[k] = m->key_len[i];
        redis_key(&rkeys[k], key, m->key_len[i]);
        argv[k + 1] = rkeys[k].base;
        argvlen[k + 1] = rkeys[k].len;
    }
    int rc = sg_redis_command(redis, on_mget, m, (int)missing + 1, argv, argvlen);
    for (uint32_t i = 0; i < missing; ++i)
        sg_buf_free(&rkeys[i]);
    free(rkeys);
    free(argv);
    free(argvlen);
    return rc;
}

void sg_cache_lookup(sg_redis_t *redis, const sg_cache_lookup_t *req, sg_cache_lookup_cb cb, void *ctx)
{
    mget_t *m = mget_new(req, cb, ctx);
    for (uint32_t i = 0; i < req->n; ++i) { /* the keys, made once: the caller stores results under them */
        m->key_off[i] = (uint32_t)req->keys->len;
        key_append(req->keys, req->identity, req->topk, req->params, req->texts[i], req->lens[i]);
        m->key_len[i] = (uint32_t)(req->keys->len - m->key_off[i]);
    }
    uint32_t missing = 0;
    uint64_t now = sg_now_ms();
    for (uint32_t i = 0; i < req->n; ++i) {
        const char *key = req->keys->base + m->key_off[i];
        if (l1 != NULL && (m->blobs[i] = sg_l1_lookup(l1, key, m->key_len[i], now, &m->misses[i])) != NULL)
            m->tier[i] = SG_CACHE_L1;
        else
            ++missing;
    }
    if (missing == 0 || redis == NULL) {
        mget_finish(m);
        return;
    }
    if (!sg_redis_is_up(redis)) {
        sg_counter_add(m_redis_bypass, 1);
        mget_finish(m);
        return;
    }
    if (send_mget(redis, m, req->keys, missing) != 0) {
        sg_counter_add(m_redis_bypass, 1);
        mget_finish(m);
        return;
    }
    sg_counter_add(m_redis_lookups, 1);
}

sg_blob_t *sg_cache_get_l1(const char *key, size_t key_len)
{
    return l1 != NULL ? sg_l1_get(l1, key, key_len, sg_now_ms()) : NULL;
}

/* ---- the store: L1 at once, Redis on the loop that owns the connection ---- */

/* One queued Redis write: the result and its Redis key (made on the storing thread). */
typedef struct st_write_t {
    struct st_write_t *next;
    sg_blob_t *blob;
    uint32_t ttl_s;
    uint32_t rkey_len;
    char rkey[]; /* redis_key_to(), NUL-terminated */
} write_t;

struct st_sg_cache_writer_t {
    h2o_multithread_receiver_t receiver; /* on the loop's queue: on_writes */
    h2o_multithread_message_t wake;      /* in the receiver's messages while wake_sent */
    sg_redis_t *redis;
    size_t max_writes, max_bytes;
    pthread_mutex_t mu;
    write_t *head, **tail; /* the queue, oldest first; under mu, like the three below */
    size_t n, bytes;       /* writes queued and the bytes of their results */
    int wake_sent;         /* `wake` was sent and on_writes has not taken the queue since */
};

/* SET key value EX ttl, fire-and-forget (lib/redis drops and counts it when Redis is down or too
 * many writes are outstanding). `val` is scratch space. Loop thread of `redis`. */
static void send_set(sg_redis_t *redis, const write_t *x, sg_buf_t *val)
{
    char ttl[16];
    sg_cache_encode(val, x->blob);
    snprintf(ttl, sizeof(ttl), "%u", x->ttl_s);
    const char *argv[5] = {"SET", x->rkey, val->base, "EX", ttl};
    size_t argvlen[5] = {3, x->rkey_len, val->len, 2, strlen(ttl)};
    sg_redis_command(redis, NULL, NULL, 5, argv, argvlen);
}

/* Takes the whole queue out of `w` (its writes, oldest first). */
static write_t *take_queue(sg_cache_writer_t *w)
{
    pthread_mutex_lock(&w->mu);
    write_t *list = w->head;
    int64_t n = (int64_t)w->n;
    w->head = NULL;
    w->tail = &w->head;
    w->n = 0;
    w->bytes = 0;
    w->wake_sent = 0;
    sg_gauge_add(m_queued, -n);
    pthread_mutex_unlock(&w->mu);
    return list;
}

/* The loop's turn: sends what was queued since the last one. */
static void on_writes(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    sg_cache_writer_t *w = H2O_STRUCT_FROM_MEMBER(sg_cache_writer_t, receiver, receiver);
    while (!h2o_linklist_is_empty(messages)) /* `wake`, unlinked before wake_sent is cleared: a store may send it again */
        h2o_linklist_unlink(messages->next);
    sg_buf_t val = {0};
    for (write_t *x = take_queue(w), *next; x != NULL; x = next) {
        next = x->next;
        send_set(w->redis, x, &val);
        sg_blob_release(x->blob);
        free(x);
    }
    sg_buf_free(&val);
}

sg_cache_writer_t *sg_cache_writer_create(h2o_multithread_queue_t *queue, sg_redis_t *redis, size_t max_writes, size_t max_bytes)
{
    sg_cache_writer_t *w = sg_mem_calloc(1, sizeof(*w));
    w->redis = redis;
    w->max_writes = max_writes;
    w->max_bytes = max_bytes;
    w->tail = &w->head;
    pthread_mutex_init(&w->mu, NULL);
    h2o_multithread_register_receiver(queue, &w->receiver, on_writes);
    return w;
}

void sg_cache_writer_destroy(sg_cache_writer_t *w)
{
    if (w == NULL)
        return;
    /* a wake sent but not delivered (the loop stops before its turn): out of the receiver's
     * messages, which no other thread touches any more */
    if (h2o_linklist_is_linked(&w->wake.link))
        h2o_linklist_unlink(&w->wake.link);
    h2o_multithread_unregister_receiver(w->receiver.queue, &w->receiver);
    uint64_t dropped = 0;
    for (write_t *x = take_queue(w), *next; x != NULL; x = next, ++dropped) {
        next = x->next;
        sg_blob_release(x->blob);
        free(x);
    }
    sg_counter_add(m_queue_dropped, dropped);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* Queues the Redis write of `blob` under `key` on `w`, or drops it when the queue is full. */
static void queue_write(sg_cache_writer_t *w, const char *key, size_t key_len, sg_blob_t *blob, uint32_t ttl_s)
{
    size_t rlen = redis_key_len();
    write_t *x = sg_mem_alloc(sizeof(*x) + rlen + 1);
    x->next = NULL;
    x->ttl_s = ttl_s;
    x->rkey_len = (uint32_t)rlen;
    redis_key_to(x->rkey, key, key_len);
    x->rkey[rlen] = '\0';
    int queued = 0, wake = 0;
    pthread_mutex_lock(&w->mu);
    if (w->n < w->max_writes && w->bytes + blob->json_len <= w->max_bytes) {
        x->blob = sg_blob_ref(blob);
        *w->tail = x;
        w->tail = &x->next;
        ++w->n;
        w->bytes += blob->json_len;
        sg_gauge_add(m_queued, 1); /* under the lock, like take_queue()'s: never below 0 */
        queued = 1;
        wake = !w->wake_sent;
        w->wake_sent = 1;
    }
    pthread_mutex_unlock(&w->mu);
    if (!queued) {
        free(x);
        sg_counter_add(m_queue_dropped, 1);
        return;
    }
    if (wake)
        h2o_multithread_send_message(&w->receiver, &w->wake);
}

void sg_cache_store(sg_cache_writer_t *w, const char *key, size_t key_len, sg_blob_t *blob, uint32_t ttl_s)
{
    if (l1 != NULL) /* first: it fills the watches on the key, before the caller's flight ends */
        sg_l1_put(l1, key, key_len, blob, sg_now_ms() + (uint64_t)ttl_s * 1000);
    if (w != NULL)
        queue_write(w, key, key_len, blob, ttl_s);
}

void sg_cache_stats_json(sg_jw_t *w, int redis_state)
{
    size_t bytes = 0, entries = 0;
    if (l1 != NULL)
        sg_l1_usage(l1, &bytes, &entries);
    sg_jw_key(w, "l1");
    sg_jw_obj(w);
    sg_jw_kbool(w, "enabled", l1 != NULL);
    sg_jw_ku64(w, "bytes", bytes);
    sg_jw_ku64(w, "max_bytes", l1_max_bytes);
    sg_jw_ku64(w, "entries", entries);
    sg_jw_end(w);
    sg_jw_key(w, "redis");
    sg_jw_obj(w);
    sg_jw_kbool(w, "enabled", redis_state >= 0);
    sg_jw_kbool(w, "up", redis_state == 1);
    sg_jw_kbool(w, "breaker_open", redis_state == 2);
    sg_jw_kbool(w, "auth_failed", redis_state == 3);
    char master[300];
    sg_redis_master(master, sizeof(master));
    if (master[0] != '\0')
        sg_jw_kstr(w, "master", master);
    sg_jw_end(w);
}
