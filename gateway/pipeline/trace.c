/*
 * trace.c -- query traces (trace.h, docs/traces.md): the "trace" config objects, the trace files
 * (sinks) with their bounded buffers, the hot-path hand-over and the writer thread.
 *
 *   loop thread: sampling decision -> one record (texts copied, blobs referenced) -> the file's
 *                queue, or dropped and counted when its buffer_bytes are used up
 *   writer:      every 50 ms (sooner when a queue is half full) takes each queue whole, formats one
 *                JSON line per query, writes them, rotates by size and age, reopens on request
 *
 * Formatting is the writer's: it reads each document's "id"/"url" and its score straight from the
 * result blob's bytes (a top-level member scan, no JSON parse), so the cost a loop pays is an
 * allocation, a copy of the texts, a few atomic increments and one uncontended mutex.
 *
 * Process-wide state: `trace_writer` (the sinks and the writer thread). A sink is one file, shared
 * by path by the trace confs of every configuration generation (gen.h) that names it: created and
 * opened by sg_trace_configure(), its settings changed by sg_trace_publish(), retired when its last
 * conf lets go (sg_trace_unconfigure()) -- the writer then writes what it still holds, closes and
 * frees it -- and the rest freed by sg_trace_stop(). Queues and settings are guarded by the sink's
 * mutex, the list of sinks and their reference counts by trace_writer.mu; the file belongs to the
 * writer thread.
 */
#include "trace.h"
#include "common.h"
#include "config.h"
#include "metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <openssl/sha.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WRITER_PERIOD_MS 50
#define STOP_GRACE_MS 2000 /* at shutdown, a file that accepts nothing (a full pipe) is given up after this */

static const char *const source_names[SG_SRC_COUNT] = {"none", "l1", "redis", "joined", "backend", "fallback", "fusion"};

/* ---- sinks and records ---- */

typedef struct st_rec_query_t {
    sg_blob_t *blob; /* NULL: unanswered, or the trace writes nothing of the answers */
    char *text;      /* NULL when the trace writes neither query nor query_hash */
    uint32_t len;
    uint8_t source;
} rec_query_t;

/* A traced request, waiting in its file's queue; one allocation with its arrays and strings. */
typedef struct st_rec_t {
    struct st_rec_t *next;
    uint64_t bytes; /* counted against the file's buffer_bytes: the record and the blobs it holds */
    uint32_t fields;
    uint64_t start_us; /* arrival (sg_now_us() clock); the writer makes it wall-clock time */
    uint64_t latency_us;
    int status;
    int is_access;
    uint32_t topk, n, n_distinct;
    char *route, *fallback; /* in the record (a reload may free the config meanwhile) */
    char request_id[24];
    char *client, *params, *error; /* in the record; params and error may be NULL */
    uint32_t *slot;
    rec_query_t *q;
} rec_t;

/* What a trace file's confs say of it (they agree: sg_trace_conf_check_shared); a reload may change it. */
typedef struct st_sink_settings_t {
    uint64_t rotate_bytes;
    uint32_t rotate_s;
    uint32_t keep;
    uint64_t buffer_bytes;
} sink_settings_t;

struct st_sg_trace_sink_t {
    char *path;
    pthread_mutex_t mu;
    sink_settings_t set; /* under mu */
    rec_t *head, *tail;  /* under mu */
    uint64_t queued;     /* bytes, under mu */
    int kicked;          /* the writer was woken for this queue, under mu */
    /* the configs' trace confs that write here (one reference each), under trace_writer.mu; at 0
     * the sink is retired: the writer writes what it holds, closes it and frees it */
    uint32_t refs;
    /* the writer thread's */
    sink_settings_t w; /* a copy of `set` taken at each pass */
    int fd;
    uint64_t size;
    double opened_s;
    sg_buf_t out;
    uint64_t out_lines;
    uint64_t warned_ms;
    /* metrics */
    sg_counter_t *m_lines, *m_dropped, *m_failed, *m_rotations, *m_reopens;
    sg_gauge_t *m_buffered;
};

/* The trace files and their writer. The sink list changes under `mu` (a reload adds sinks, the
 * writer frees retired ones); the writer works on a snapshot of it. */
static struct {
    sg_trace_sink_t **sinks;
    size_t n, cap;
    pthread_t tid;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int stop, reopen, kick;
} trace_writer = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void rec_free(rec_t *r)
{
    for (uint32_t d = 0; d < r->n_distinct; ++d)
        if (r->q[d].blob != NULL)
            sg_blob_release(r->q[d].blob);
    free(r);
}

static char *put_str(char **at, const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = *at;
    memcpy(p, s, n);
    *at += n;
    return p;
}

/* The record of `ev` for a trace writing `fields`: what those fields need and nothing else. */
static rec_t *rec_new(const sg_trace_event_t *ev, uint32_t fields)
{
    int texts = (fields & (SG_TRACE_F_QUERY | SG_TRACE_F_QUERY_HASH)) != 0;
    int answers = (fields & (SG_TRACE_F_HITS | SG_TRACE_F_IDS | SG_TRACE_F_SCORES | SG_TRACE_F_EMPTY | SG_TRACE_F_DOCS)) != 0;
    size_t strings = strlen(ev->client) + 1 + (ev->params != NULL ? strlen(ev->params) + 1 : 0) +
                     (ev->error != NULL ? strlen(ev->error) + 1 : 0) + strlen(ev->route) + 1 +
                     (ev->fallback != NULL ? strlen(ev->fallback) + 1 : 0);
    sg_trace_item_t it;
    for (uint32_t d = 0; texts && d < ev->n_distinct; ++d) {
        ev->item(ev->ctx, d, &it);
        strings += it.len;
    }
    size_t size = sizeof(rec_t) + ev->n_distinct * sizeof(rec_query_t) + ev->n * sizeof(uint32_t) + strings;
    rec_t *r = sg_mem_alloc(size);
    *r = (rec_t){.bytes = size,
                 .fields = fields,
                 .start_us = ev->start_us,
                 .latency_us = ev->latency_us,
                 .status = ev->status,
                 .is_access = ev->is_access,
                 .topk = ev->topk,
                 .n = ev->n,
                 .n_distinct = ev->n_distinct};
    size_t idl = strnlen(ev->request_id, sizeof(r->request_id) - 1);
    memcpy(r->request_id, ev->request_id, idl);
    r->request_id[idl] = '\0';
    r->q = (rec_query_t *)(r + 1);
    r->slot = (uint32_t *)(r->q + ev->n_distinct);
    memcpy(r->slot, ev->slot, ev->n * sizeof(uint32_t));
    char *at = (char *)(r->slot + ev->n);
    r->client = put_str(&at, ev->client);
    r->params = put_str(&at, ev->params);
    r->error = put_str(&at, ev->error);
    r->route = put_str(&at, ev->route);
    r->fallback = put_str(&at, ev->fallback);
    for (uint32_t d = 0; d < ev->n_distinct; ++d) {
        ev->item(ev->ctx, d, &it);
        rec_query_t *q = &r->q[d];
        *q = (rec_query_t){NULL, NULL, it.len, (uint8_t)it.source};
        if (texts) {
            q->text = at;
            memcpy(at, it.text, it.len);
            at += it.len;
        }
        if (answers && it.blob != NULL && ev->status == 200) {
            q->blob = sg_blob_ref(it.blob);
            r->bytes += it.blob->json_len;
        }
    }
    return r;
}

static void kick_writer(void)
{
    pthread_mutex_lock(&trace_writer.mu);
    atomic_store(&trace_writer.kick, 1);
    pthread_cond_signal(&trace_writer.cv);
    pthread_mutex_unlock(&trace_writer.mu);
}

/* Queues `r` on `s`, or drops it (counting its lines) when the buffer has no room. */
static void enqueue(sg_trace_sink_t *s, rec_t *r)
{
    int kick = 0, room;
    pthread_mutex_lock(&s->mu);
    room = s->queued + r->bytes <= s->set.buffer_bytes;
    if (room) {
        if (s->tail != NULL)
            s->tail->next = r;
        else
            s->head = r;
        s->tail = r;
        s->queued += r->bytes;
        if (!s->kicked && s->queued * 2 > s->set.buffer_bytes)
            kick = s->kicked = 1;
    }
    pthread_mutex_unlock(&s->mu);
    if (!room) {
        sg_counter_add(s->m_dropped, r->n);
        rec_free(r);
        return;
    }
    if (kick)
        kick_writer();
}

/* Whether trace `t` takes this request (its share `sample`, decided per request). */
static int sampled(const sg_trace_conf_t *t)
{
    if (t == NULL || t->sink == NULL || t->sample <= 0)
        return 0;
    if (t->sample >= 1)
        return 1;
    static __thread uint64_t x;
    if (x == 0)
        x = (sg_now_us() ^ (uint64_t)(uintptr_t)&x) | 1;
    x ^= x >> 12; /* xorshift64* */
    x ^= x << 25;
    x ^= x >> 27;
    return (double)((x * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53 < t->sample;
}

void sg_trace_request(const sg_trace_conf_t *rt, const sg_trace_conf_t *ct, const sg_trace_event_t *ev)
{
    int a = sampled(rt), b = sampled(ct);
    if (!a && !b)
        return;
    if (a && b && rt->sink == ct->sink) {
        enqueue(rt->sink, rec_new(ev, rt->fields | ct->fields));
        return;
    }
    if (a)
        enqueue(rt->sink, rec_new(ev, rt->fields));
    if (b)
        enqueue(ct->sink, rec_new(ev, ct->fields));
}

/* The writer formats every line itself, into buffers it reserves once per piece: no printf, and
 * few calls per member (a line is written for every query of a traced request). */

/* Room for `n` more bytes (and the NUL) at the end of `b`; the caller writes them and calls done(). */
static char *room(sg_buf_t *b, size_t n)
{
    if (b->base == NULL || b->len + n + 1 > b->cap)
        sg_buf_reserve(b, n);
    return b->base + b->len;
}

/* Whether `s` can go into a JSON string as it is (printable ASCII without quote or backslash). */
static int plain(const char *s)
{
    for (; *s != '\0'; ++s)
        if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
            return 0;
    return 1;
}

static void done(sg_buf_t *b, char *end)
{
    b->len = (size_t)(end - b->base);
    *end = '\0';
}

static char *put(char *p, const void *s, size_t n)
{
    if (n != 0) /* s may be NULL then (an empty buffer) */
        memcpy(p, s, n);
    return p + n;
}

/* Decimal digits of `v`. */
static char *put_u64(char *p, uint64_t v)
{
    char tmp[20], *t = tmp + sizeof(tmp);
    do {
        *--t = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return put(p, t, (size_t)(tmp + sizeof(tmp) - t));
}

/* ---- reading documents out of a result blob (the writer's) ---- */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        ++p;
    return p;
}

/* The end of the JSON string at `p` (its opening quote), or NULL. Keys and ids are short: a byte
 * loop; past 24 bytes, memchr to each quote, which ends the string unless an odd number of
 * backslashes precede it. */
static const char *skip_string(const char *p, const char *end)
{
    const char *start = ++p, *stop = end - p > 24 ? p + 24 : end;
    for (; p < stop; ++p) {
        if (*p == '"')
            return p + 1;
        if (*p == '\\' && ++p >= end)
            return NULL;
    }
    while (p < end) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (q == NULL)
            return NULL;
        size_t k = 0;
        while (q - k > start && q[-1 - (ptrdiff_t)k] == '\\')
            ++k;
        if (k % 2 == 0)
            return q + 1;
        p = q + 1;
    }
    return NULL;
}

/* The end of the JSON value at `p` (valid JSON: the plugins' documents are), or NULL. */
static const char *skip_value(const char *p, const char *end)
{
    if (p >= end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < end) {
            if (*p == '"') {
                if ((p = skip_string(p, end)) == NULL)
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[')
                ++depth;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
            ++p;
        }
        return NULL;
    }
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\n' && *p != '\t' && *p != '\r')
        ++p;
    return p;
}

/* What a trace reads of a document: the raw values of its top-level "id", "url" and "contents"
 * (NULL when absent), found in one pass that stops once it has them all. */
typedef struct st_doc_view_t {
    const char *id, *url, *contents;
    size_t id_len, url_len, contents_len;
} doc_view_t;

/* An "id" that identifies the document: present, not null, not "". */
static int usable_id(const doc_view_t *v)
{
    return v->id != NULL && !(v->id_len == 4 && memcmp(v->id, "null", 4) == 0) && !(v->id_len == 2 && v->id[0] == '"');
}

static void view_doc(const char *doc, size_t len, doc_view_t *v)
{
    const char *end = doc + len, *p = skip_ws(doc, end);
    memset(v, 0, sizeof(*v));
    if (p >= end || *p != '{')
        return;
    for (p = skip_ws(p + 1, end); p < end && *p == '"';) {
        const char *k = p + 1, *kend = skip_string(p, end);
        if (kend == NULL)
            return;
        size_t klen = (size_t)(kend - 1 - k);
        p = skip_ws(kend, end);
        if (p >= end || *p != ':')
            return;
        const char *val = skip_ws(p + 1, end);
        if (klen == 8 && memcmp(k, "contents", 8) == 0 && v->contents == NULL) {
            v->contents = val; /* its text is only looked at from the start: no need to find its end */
            v->contents_len = (size_t)(end - val);
            if (v->url != NULL || usable_id(v))
                return; /* all that is needed: a (possibly long) passage is never scanned */
        }
        const char *vend = skip_value(val, end);
        if (vend == NULL)
            return;
        if (klen == 2 && memcmp(k, "id", 2) == 0 && v->id == NULL)
            v->id = val, v->id_len = (size_t)(vend - val);
        else if (klen == 3 && memcmp(k, "url", 3) == 0 && v->url == NULL)
            v->url = val, v->url_len = (size_t)(vend - val);
        if (v->contents != NULL && (v->url != NULL || usable_id(v)))
            return;
        p = skip_ws(vend, end);
        if (p >= end || *p != ',')
            return;
        p = skip_ws(p + 1, end);
    }
}

/* Whether the raw JSON string at `v` (up to `n` bytes, its end not known) holds no text: only
 * quotes, whitespace and their escapes up to its closing quote (the contents of a passage without
 * title and text is "\"\"\n"). Stops at the first character of text. */
static int blank_string(const char *v, size_t n)
{
    if (n < 2 || v[0] != '"')
        return 0;
    for (size_t i = 1; i < n; ++i) {
        if (v[i] == '"')
            return 1;
        if (v[i] == '\\' && i + 1 < n && (v[i + 1] == 'n' || v[i + 1] == 'r' || v[i + 1] == 't' || v[i + 1] == '"'))
            ++i;
        else if (v[i] != ' ')
            return 0;
    }
    return 0;
}

/* The hit's id: its "id" (unless null or ""), else its "url" (unless ""), else null. */
static void append_id(sg_buf_t *out, const doc_view_t *v, int comma)
{
    const char *id = "null";
    size_t n = 4;
    if (usable_id(v))
        id = v->id, n = v->id_len;
    else if (v->url != NULL && v->url_len > 2 && v->url[0] == '"')
        id = v->url, n = v->url_len;
    char *p = room(out, n + 1);
    if (comma)
        *p++ = ',';
    done(out, put(p, id, n));
}

/* The raw score written after hit `i` of a scored fragment (`,"score":S}`), or null. */
static void append_score(sg_buf_t *out, const sg_blob_t *b, uint32_t i, int comma)
{
    static const char prefix[] = ",\"score\":";
    const char *v = "null";
    size_t n = 4, at = (size_t)b->docs[i].off + b->docs[i].len;
    if (at + sizeof(prefix) - 1 < b->json_len && memcmp(b->json + at, prefix, sizeof(prefix) - 1) == 0) {
        const char *p = b->json + at + sizeof(prefix) - 1, *e = memchr(p, '}', b->json_len - (size_t)(p - b->json));
        if (e != NULL && e > p)
            v = p, n = (size_t)(e - p);
    }
    char *p = room(out, n + 1);
    if (comma)
        *p++ = ',';
    done(out, put(p, v, n));
}

/* `key` (a literal with its quotes and colon) and a number. */
#define APPEND_KV_U64(out, key, v) append_kv_u64((out), (key), sizeof(key) - 1, (v))
static void append_kv_u64(sg_buf_t *out, const char *key, size_t klen, uint64_t v)
{
    done(out, put_u64(put(room(out, klen + 20), key, klen), v));
}

/* `key` and a string known to need no escaping (route names, request ids, static names). */
#define APPEND_KV_PLAIN(out, key, v) append_kv_plain((out), (key), sizeof(key) - 1, (v))
static void append_kv_plain(sg_buf_t *out, const char *key, size_t klen, const char *v)
{
    size_t n = strlen(v);
    char *p = put(room(out, klen + n + 2), key, klen);
    *p++ = '"';
    p = put(p, v, n);
    *p++ = '"';
    done(out, p);
}

/* "hits", "ids", "scores", "empty", "docs" of one answered query. */
static void append_answer(sg_buf_t *out, uint32_t fields, const sg_blob_t *b)
{
    if (fields & SG_TRACE_F_HITS)
        APPEND_KV_U64(out, ",\"hits\":", b->n_hits);
    int empty = b->n_hits > 0;
    if (fields & (SG_TRACE_F_IDS | SG_TRACE_F_EMPTY)) {
        if (fields & SG_TRACE_F_IDS)
            sg_buf_append(out, ",\"ids\":[", 8);
        for (uint32_t i = 0; i < b->n_hits; ++i) {
            doc_view_t v;
            view_doc(b->json + b->docs[i].off, b->docs[i].len, &v);
            if (empty && v.contents != NULL && !blank_string(v.contents, v.contents_len))
                empty = 0;
            if (fields & SG_TRACE_F_IDS)
                append_id(out, &v, i != 0);
        }
        if (fields & SG_TRACE_F_IDS)
            sg_buf_appendc(out, ']');
    }
    if (fields & SG_TRACE_F_SCORES) {
        sg_buf_append(out, ",\"scores\":[", 11);
        for (uint32_t i = 0; i < b->n_hits; ++i)
            append_score(out, b, i, i != 0);
        sg_buf_appendc(out, ']');
    }
    if (fields & SG_TRACE_F_EMPTY)
        sg_buf_appends(out, empty ? ",\"empty\":true" : ",\"empty\":false");
    if (fields & SG_TRACE_F_DOCS) {
        sg_buf_append(out, ",\"docs\":[", 9);
        for (uint32_t i = 0; i < b->n_hits; ++i) {
            if (i != 0)
                sg_buf_appendc(out, ',');
            sg_buf_append(out, b->json + b->docs[i].off, b->docs[i].len);
        }
        sg_buf_appendc(out, ']');
    }
}

/* The query's text or hash ("query", "query_hash"). */
static void append_query(sg_buf_t *out, uint32_t fields, const rec_query_t *q)
{
    if (fields & SG_TRACE_F_QUERY) {
        sg_buf_appends(out, ",\"query\":");
        sg_buf_append_json_string(out, q->text, q->len);
    }
    if (fields & SG_TRACE_F_QUERY_HASH) {
        unsigned char d[SHA256_DIGEST_LENGTH];
        SHA256((const unsigned char *)q->text, q->len, d);
        static const char hex[] = "0123456789abcdef";
        char h[16];
        for (int i = 0; i < 8; ++i) {
            h[2 * i] = hex[d[i] >> 4];
            h[2 * i + 1] = hex[d[i] & 15];
        }
        sg_buf_appends(out, ",\"query_hash\":\"");
        sg_buf_append(out, h, sizeof(h));
        sg_buf_appendc(out, '"');
    }
}

/* The arrival time of a record as ISO 8601 UTC with milliseconds. `offset_us` turns the monotonic
 * clock into wall-clock time (taken once per writer pass); the date and time of day are formatted
 * once per second. */
static const char *iso_time(uint64_t start_us, int64_t offset_us)
{
    static char when[40];
    static int64_t when_sec = -1;
    int64_t wall_us = (int64_t)start_us + offset_us, sec = wall_us / 1000000;
    int ms = (int)(wall_us % 1000000 / 1000);
    if (sec != when_sec) {
        time_t t = (time_t)sec;
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
        when_sec = sec;
    }
    size_t n = strlen(when);
    when[n - 4] = (char)('0' + ms / 100);
    when[n - 3] = (char)('0' + ms / 10 % 10);
    when[n - 2] = (char)('0' + ms % 10);
    return when;
}

/* The parts of a record's lines, each a run of ",key:value" members: what precedes "i", what
 * follows it up to the query, and what ends every line. Formatted once per record. */
typedef struct st_parts_t {
    sg_buf_t head, mid, tail;
} parts_t;

static void format_parts(parts_t *pp, const rec_t *r, int64_t offset_us)
{
    uint32_t f = r->fields;
    pp->head.len = pp->mid.len = pp->tail.len = 0;
    if (f & SG_TRACE_F_TIME)
        APPEND_KV_PLAIN(&pp->head, ",\"time\":", iso_time(r->start_us, offset_us));
    if (f & SG_TRACE_F_REQUEST) {
        APPEND_KV_PLAIN(&pp->head, ",\"request\":", r->request_id);
        APPEND_KV_U64(&pp->mid, ",\"n\":", r->n);
    }
    if ((f & SG_TRACE_F_CLIENT) && plain(r->client)) {
        APPEND_KV_PLAIN(&pp->mid, ",\"client\":", r->client);
    } else if (f & SG_TRACE_F_CLIENT) {
        sg_buf_appends(&pp->mid, ",\"client\":");
        sg_buf_append_json_string(&pp->mid, r->client, strlen(r->client));
    }
    if (f & SG_TRACE_F_ROUTE)
        APPEND_KV_PLAIN(&pp->mid, ",\"route\":", r->route); /* route names are [A-Za-z0-9_-] */
    if (f & SG_TRACE_F_OP)
        sg_buf_appends(&pp->mid, r->is_access ? ",\"op\":\"access\"" : ",\"op\":\"retrieve\"");
    if (f & SG_TRACE_F_TOPK)
        APPEND_KV_U64(&pp->mid, ",\"topk\":", r->topk);
    if ((f & SG_TRACE_F_PARAMS) && r->params != NULL) {
        sg_buf_appends(&pp->mid, ",\"params\":");
        sg_buf_append_json_string(&pp->mid, r->params, strlen(r->params));
    }
    if (f & SG_TRACE_F_STATUS) {
        APPEND_KV_U64(&pp->tail, ",\"status\":", (uint64_t)r->status);
        if (r->error != NULL) {
            sg_buf_appends(&pp->tail, ",\"error\":");
            sg_buf_append_json_string(&pp->tail, r->error, strlen(r->error));
        }
    }
    if (f & SG_TRACE_F_MS) { /* milliseconds with 3 decimals */
        char frac[4] = {'.', (char)('0' + r->latency_us / 100 % 10), (char)('0' + r->latency_us / 10 % 10),
                        (char)('0' + r->latency_us % 10)};
        APPEND_KV_U64(&pp->tail, ",\"ms\":", r->latency_us / 1000);
        sg_buf_append(&pp->tail, frac, sizeof(frac));
    }
}

/* The members of distinct query `q` that every line asking it shares: the query and its answer. */
static void format_query(sg_buf_t *out, const rec_t *r, const rec_query_t *q)
{
    if (q->text != NULL)
        append_query(out, r->fields, q);
    if (q->blob != NULL)
        append_answer(out, r->fields, q->blob);
}

/* All lines of a record, in the request's order: the parts around "i", the query's members (made
 * once per distinct query), "cache" (a text repeated in the batch was answered by its first
 * occurrence: "batch"), the tail. Distinct queries are numbered in the order of their first
 * occurrence, so a query whose number is not the next new one repeats one. */
static void format_record(sg_buf_t *out, const rec_t *r, int64_t offset_us)
{
    static parts_t pp;         /* the writer thread's scratch space */
    static sg_buf_t qs;        /* each distinct query's members, back to back */
    static size_t *qoff, qcap; /* where each starts in qs (n_distinct + 1 entries) */
    format_parts(&pp, r, offset_us);
    if (qcap < (size_t)r->n_distinct + 1)
        qoff = sg_mem_realloc(qoff, (qcap = (size_t)r->n_distinct + 1) * sizeof(*qoff));
    qs.len = 0;
    uint32_t next_new = 0;
    for (uint32_t i = 0; i < r->n; ++i) {
        uint32_t d = r->slot[i];
        int repeat = d != next_new;
        if (!repeat) {
            qoff[d] = qs.len;
            format_query(&qs, r, &r->q[d]);
            qoff[++next_new] = qs.len;
        }
        const rec_query_t *q = &r->q[d];
        const char *cache = repeat ? "batch" : source_names[q->source < SG_SRC_COUNT ? q->source : 0];
        int fb = q->source == SG_SRC_FALLBACK && r->fallback != NULL;
        size_t qlen = qoff[d + 1] - qoff[d];
        char *p = room(out, pp.head.len + pp.mid.len + pp.tail.len + qlen + 64 + (fb ? strlen(r->fallback) : 0)), *start = p;
        p = put(p, pp.head.base, pp.head.len);
        if (r->fields & SG_TRACE_F_REQUEST)
            p = put_u64(put(p, ",\"i\":", 5), i);
        p = put(p, pp.mid.base, pp.mid.len);
        if (qlen != 0)
            p = put(p, qs.base + qoff[d], qlen);
        if (r->fields & SG_TRACE_F_CACHE) {
            p = put(p, ",\"cache\":\"", 10);
            p = put(p, cache, strlen(cache));
            *p++ = '"';
            if (fb) {
                p = put(p, ",\"fallback\":\"", 13);
                p = put(p, r->fallback, strlen(r->fallback));
                *p++ = '"';
            }
        }
        p = put(p, pp.tail.base, pp.tail.len);
        if (p == start)
            *p++ = ',';
        *start = '{';
        done(out, put(p, "}\n", 2));
    }
}

/* ---- the writer thread ---- */

static void warn(sg_trace_sink_t *s, const char *what, int err)
{
    uint64_t now = sg_now_ms();
    if (s->warned_ms != 0 && now - s->warned_ms < 10000)
        return;
    s->warned_ms = now;
    SG_LOG(SG_LL_WARN, "trace", "%s: %s: %s (lines are counted in searchgate_trace_failed_lines_total)", s->path, what,
           strerror(err));
}

static int open_file(sg_trace_sink_t *s, char *err, size_t err_size)
{
    int fd = open(s->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd < 0) {
        snprintf(err, err_size, "cannot open %s: %s", s->path, strerror(errno));
        return -1;
    }
    struct stat st;
    s->size = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    s->opened_s = sg_wall_time();
    s->fd = fd;
    return 0;
}

/* Writes everything, waiting while a pipe is full; gives up only while stopping, after STOP_GRACE_MS. */
static int write_all(int fd, const char *p, size_t n)
{
    uint64_t give_up = 0;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            give_up = 0;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN)
            return -1;
        if (atomic_load(&trace_writer.stop)) {
            if (give_up == 0)
                give_up = sg_now_ms() + STOP_GRACE_MS;
            else if (sg_now_ms() >= give_up) {
                errno = EAGAIN;
                return -1;
            }
        }
        struct pollfd pfd = {fd, POLLOUT, 0};
        poll(&pfd, 1, 100);
    }
    return 0;
}

static void flush_out(sg_trace_sink_t *s)
{
    if (s->out.len == 0)
        return;
    char err[300];
    if (s->fd < 0)
        open_file(s, err, sizeof(err)); /* a failed open or rotation: try again */
    if (s->fd >= 0 && write_all(s->fd, s->out.base, s->out.len) == 0) {
        s->size += s->out.len;
        sg_counter_add(s->m_lines, s->out_lines);
    } else {
        warn(s, "cannot write", errno);
        sg_counter_add(s->m_failed, s->out_lines);
    }
    s->out.len = 0;
    s->out_lines = 0;
}

static int rotated_name(const char *base, const char *name)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || name[n] != '.')
        return 0;
    for (int i = 1; i <= 8; ++i)
        if (name[n + i] < '0' || name[n + i] > '9')
            return 0;
    return name[n + 9] == 'T';
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Deletes the oldest rotated files of `s` beyond its `keep`. Their names sort by time. */
static void prune(sg_trace_sink_t *s)
{
    char *dcopy = sg_strdup(s->path), *bcopy = sg_strdup(s->path);
    const char *dir = dirname(dcopy), *base = basename(bcopy);
    DIR *d = opendir(dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        if (!rotated_name(base, e->d_name))
            continue;
        if (n == cap)
            names = sg_mem_realloc(names, (cap = cap * 2 + 16) * sizeof(*names));
        names[n++] = sg_strdup(e->d_name);
    }
    if (d != NULL)
        closedir(d);
    qsort(names, n, sizeof(*names), cmp_str);
    for (size_t i = 0; i < n; ++i) {
        if (i + s->w.keep < n) {
            sg_buf_t p = {0};
            sg_buf_appendf(&p, "%s/%s", dir, names[i]);
            if (unlink(p.base) != 0)
                warn(s, "cannot delete an old rotated file", errno);
            sg_buf_free(&p);
        }
        free(names[i]);
    }
    free(names);
    free(dcopy);
    free(bcopy);
}

/* Renames the file to <path>.<UTC time of rotation> and starts a new one. */
static void rotate(sg_trace_sink_t *s)
{
    flush_out(s);
    double now = sg_wall_time();
    time_t sec = (time_t)now;
    struct tm tm;
    gmtime_r(&sec, &tm);
    char stamp[32];
    size_t k = strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
    snprintf(stamp + k, sizeof(stamp) - k, ".%03d", (int)((now - (double)sec) * 1000.0) % 1000);
    sg_buf_t to = {0};
    sg_buf_appendf(&to, "%s.%s", s->path, stamp);
    for (int i = 1; access(to.base, F_OK) == 0 && i < 1000; ++i) {
        to.len = 0;
        sg_buf_appendf(&to, "%s.%s-%d", s->path, stamp, i);
    }
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    if (rename(s->path, to.base) != 0)
        warn(s, "cannot rename for rotation", errno);
    sg_buf_free(&to);
    char err[300];
    if (open_file(s, err, sizeof(err)) != 0)
        warn(s, "cannot open after rotation", errno);
    sg_counter_add(s->m_rotations, 1);
    if (s->w.keep != 0)
        prune(s);
}

static void reopen(sg_trace_sink_t *s)
{
    flush_out(s);
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    char err[300];
    if (open_file(s, err, sizeof(err)) != 0)
        warn(s, "cannot reopen", errno);
    sg_counter_add(s->m_reopens, 1);
}

/* Writes what `s` has queued; returns whether there was anything. */
static int drain(sg_trace_sink_t *s)
{
    pthread_mutex_lock(&s->mu);
    s->w = s->set;
    pthread_mutex_unlock(&s->mu);
    const sink_settings_t *c = &s->w;
    if (c->rotate_s != 0 && s->size > 0 && sg_wall_time() - s->opened_s >= (double)c->rotate_s)
        rotate(s);
    pthread_mutex_lock(&s->mu);
    rec_t *r = s->head;
    uint64_t taken = s->queued;
    s->head = s->tail = NULL;
    s->queued = 0;
    s->kicked = 0;
    pthread_mutex_unlock(&s->mu);
    sg_gauge_set(s->m_buffered, (int64_t)taken);
    int any = r != NULL;
    int64_t offset_us = (int64_t)(sg_wall_time() * 1e6) - (int64_t)sg_now_us();
    while (r != NULL) {
        rec_t *next = r->next;
        format_record(&s->out, r, offset_us);
        s->out_lines += r->n;
        rec_free(r);
        r = next;
        if (c->rotate_bytes != 0 && s->size + s->out.len >= c->rotate_bytes) {
            flush_out(s);
            rotate(s);
        } else if (s->out.len >= (1u << 20)) {
            flush_out(s);
        }
    }
    flush_out(s);
    return any;
}

static void sink_free(sg_trace_sink_t *s);

/* One pass over the sinks (a snapshot: a reload may add some meanwhile); then the retired ones --
 * no config writes to them any more -- are written out, closed and freed. */
static int writer_pass(int reopening)
{
    pthread_mutex_lock(&trace_writer.mu);
    size_t n = trace_writer.n;
    sg_trace_sink_t **snap = sg_mem_alloc((n > 0 ? n : 1) * sizeof(*snap));
    memcpy(snap, trace_writer.sinks, n * sizeof(*snap));
    pthread_mutex_unlock(&trace_writer.mu);
    int busy = 0;
    for (size_t i = 0; i < n; ++i) {
        if (reopening)
            reopen(snap[i]);
        busy |= drain(snap[i]);
    }
    size_t k = 0;
    pthread_mutex_lock(&trace_writer.mu);
    for (size_t i = 0; i < trace_writer.n; ++i) {
        if (trace_writer.sinks[i]->refs == 0)
            snap[k++] = trace_writer.sinks[i];
        else
            trace_writer.sinks[i - k] = trace_writer.sinks[i];
    }
    trace_writer.n -= k;
    pthread_mutex_unlock(&trace_writer.mu);
    for (size_t i = 0; i < k; ++i) {
        drain(snap[i]);
        sink_free(snap[i]);
    }
    free(snap);
    return busy;
}

static void *writer_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&trace_writer.mu);
        if (!atomic_load(&trace_writer.stop) && !atomic_load(&trace_writer.kick) && !atomic_load(&trace_writer.reopen)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += WRITER_PERIOD_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec += 1;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&trace_writer.cv, &trace_writer.mu, &ts);
        }
        atomic_store(&trace_writer.kick, 0);
        pthread_mutex_unlock(&trace_writer.mu);
        int stopping = atomic_load(&trace_writer.stop);
        int busy = writer_pass(atomic_exchange(&trace_writer.reopen, 0));
        if (stopping && !busy)
            break;
    }
    return NULL;
}

/* ---- start and stop ---- */

/* --check: the file can be written (it exists and is writable, or its directory is). */
static int check_writable(const sg_trace_conf_t *t, char *err, size_t err_size)
{
    if (access(t->path, F_OK) == 0) {
        if (access(t->path, W_OK) == 0)
            return 0;
    } else {
        char *copy = sg_strdup(t->path);
        int ok = access(dirname(copy), W_OK | X_OK) == 0;
        free(copy);
        if (ok)
            return 0;
    }
    snprintf(err, err_size, "%s.path: cannot write %s: %s", t->where, t->path, strerror(errno));
    return -1;
}

static void settings_of(sink_settings_t *out, const sg_trace_conf_t *t)
{
    *out = (sink_settings_t){t->rotate_bytes, t->rotate_s, t->keep, t->buffer_bytes};
}

static sg_trace_sink_t *sink_new(const sg_trace_conf_t *t)
{
    sg_trace_sink_t *s = sg_mem_calloc(1, sizeof(*s));
    s->path = sg_strdup(t->path);
    settings_of(&s->set, t);
    s->w = s->set;
    s->fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    sg_buf_t l = {0};
    sg_buf_appends(&l, "trace=\"");
    for (const char *p = t->path; *p != '\0'; ++p) {
        if (*p == '"' || *p == '\\')
            sg_buf_appendc(&l, '\\');
        sg_buf_appendc(&l, *p == '\n' ? '_' : *p);
    }
    sg_buf_appendc(&l, '"');
    s->m_lines = sg_metrics_counter("searchgate_trace_lines_total", "Query lines written to each trace file.", l.base);
    s->m_dropped = sg_metrics_counter("searchgate_trace_dropped_lines_total",
                                      "Query lines dropped because the trace file's buffer (buffer_bytes) was full.", l.base);
    s->m_failed = sg_metrics_counter("searchgate_trace_failed_lines_total",
                                     "Query lines lost because the trace file could not be opened or written.", l.base);
    s->m_rotations = sg_metrics_counter("searchgate_trace_rotations_total", "Trace files rotated (size or age).", l.base);
    s->m_reopens =
        sg_metrics_counter("searchgate_trace_reopens_total", "Trace files reopened (SIGUSR1, or a configuration reload).", l.base);
    s->m_buffered = sg_metrics_gauge("searchgate_trace_buffered_bytes",
                                     "Bytes the writer found buffered for each trace file at its last pass.", l.base);
    sg_buf_free(&l);
    return s;
}

static void sink_free(sg_trace_sink_t *s)
{
    for (rec_t *r = s->head, *next; r != NULL; r = next) {
        next = r->next;
        rec_free(r);
    }
    if (s->fd >= 0)
        close(s->fd);
    sg_buf_free(&s->out);
    pthread_mutex_destroy(&s->mu);
    free(s->path);
    free(s);
}

/* Points `t` at the sink of its file: the one an earlier config opened (still open, or retired but
 * not yet freed), else a new one, opened now. */
static int sink_attach(sg_trace_conf_t *t, char *err, size_t err_size)
{
    pthread_mutex_lock(&trace_writer.mu);
    for (size_t j = 0; j < trace_writer.n; ++j)
        if (strcmp(trace_writer.sinks[j]->path, t->path) == 0) {
            ++trace_writer.sinks[j]->refs;
            t->sink = trace_writer.sinks[j];
            pthread_mutex_unlock(&trace_writer.mu);
            return 0;
        }
    pthread_mutex_unlock(&trace_writer.mu);
    sg_trace_sink_t *s = sink_new(t);
    char why[400];
    if (open_file(s, why, sizeof(why)) != 0) {
        snprintf(err, err_size, "%s.path: %s", t->where, why);
        sink_free(s);
        return -1;
    }
    s->refs = 1;
    pthread_mutex_lock(&trace_writer.mu);
    if (trace_writer.n == trace_writer.cap) {
        trace_writer.cap = trace_writer.cap * 2 + 4;
        trace_writer.sinks = sg_mem_realloc(trace_writer.sinks, trace_writer.cap * sizeof(*trace_writer.sinks));
    }
    trace_writer.sinks[trace_writer.n++] = s;
    pthread_mutex_unlock(&trace_writer.mu);
    t->sink = s;
    SG_LOG(SG_LL_INFO, "trace", "%s: tracing %.4g%% of the requests to %s", t->where, 100.0 * t->sample, t->path);
    return 0;
}

int sg_trace_configure(sg_config_t *cfg, int check_only, char *err, size_t err_size)
{
    for (size_t i = 0; check_only && i < cfg->n_traces; ++i)
        if (check_writable(cfg->traces[i], err, err_size) != 0)
            return -1;
    if (check_only || cfg->n_traces == 0)
        return 0;
    for (size_t i = 0; i < cfg->n_traces; ++i)
        if (sink_attach(cfg->traces[i], err, err_size) != 0) {
            sg_trace_unconfigure(cfg);
            return -1;
        }
    if (!trace_writer.running) {
        atomic_store(&trace_writer.stop, 0);
        pthread_create(&trace_writer.tid, NULL, writer_main, NULL);
        pthread_setname_np(trace_writer.tid, "sg-trace");
        trace_writer.running = 1;
    }
    return 0;
}

void sg_trace_publish(sg_config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_traces; ++i) {
        sg_trace_conf_t *t = cfg->traces[i];
        if (t->sink == NULL)
            continue;
        pthread_mutex_lock(&t->sink->mu);
        settings_of(&t->sink->set, t);
        pthread_mutex_unlock(&t->sink->mu);
    }
}

void sg_trace_unconfigure(sg_config_t *cfg)
{
    int retired = 0;
    pthread_mutex_lock(&trace_writer.mu);
    for (size_t i = 0; i < cfg->n_traces; ++i) {
        sg_trace_conf_t *t = cfg->traces[i];
        if (t->sink != NULL)
            retired |= --t->sink->refs == 0;
        t->sink = NULL;
    }
    pthread_mutex_unlock(&trace_writer.mu);
    if (retired && trace_writer.running)
        kick_writer(); /* it writes out and frees the retired files */
}

void sg_trace_stop(void)
{
    if (trace_writer.running) {
        pthread_mutex_lock(&trace_writer.mu);
        atomic_store(&trace_writer.stop, 1);
        pthread_cond_signal(&trace_writer.cv);
        pthread_mutex_unlock(&trace_writer.mu);
        pthread_join(trace_writer.tid, NULL);
        trace_writer.running = 0;
    }
    for (size_t i = 0; i < trace_writer.n; ++i) { /* what a config still uses (an aborted start-up) */
        drain(trace_writer.sinks[i]);
        sink_free(trace_writer.sinks[i]);
    }
    free(trace_writer.sinks);
    trace_writer.sinks = NULL;
    trace_writer.n = trace_writer.cap = 0;
}

void sg_trace_reopen(void)
{
    if (!trace_writer.running)
        return;
    pthread_mutex_lock(&trace_writer.mu);
    atomic_store(&trace_writer.reopen, 1);
    pthread_cond_signal(&trace_writer.cv);
    pthread_mutex_unlock(&trace_writer.mu);
}
