/*
 * mcp.c -- the MCP transports: JSON-RPC 2.0 messages over POST /mcp (streamable HTTP, answered as
 * application/json or as a short text/event-stream per the client's Accept), DELETE /mcp (ends a
 * session), and the older HTTP+SSE pair: GET /sse opens a stream whose first event names
 * /messages?session_id=..., and POST /messages answers 202 and sends its replies on that stream.
 *
 * Sessions are cheap records (id, protocol version, the client that opened it) in one table shared
 * by the loops, bounded by mcp.max_sessions (least recently used first out) and mcp.session_idle_s.
 * No tool depends on a session: a POST /mcp without Mcp-Session-Id is served statelessly unless
 * mcp.require_session is on, because verl opens a fresh session for every call. A session is bound
 * to the client (API key, trusted X-Client-Id or address) that opened it; another client presenting
 * its id gets the same 404 as for an unknown id.
 *
 * An SSE stream lives on the loop of its GET. A reply produced on another loop (its POST /messages
 * arrived on another connection) travels there as an h2o_multithread message, looked up by session
 * id under the table's mutex when it arrives; a stream is only freed on its own loop.
 *
 * Bounds. Tool results are built whole (at most limits.max_response_bytes each), so what an answer
 * holds is counted in the process's response budget (respond.h) from the moment an item is
 * answered until its last byte is written: a POST's answer goes out through sg_respond_buffer(),
 * and an SSE stream charges what it buffers for its reader. Both are under the write timeout
 * (limits.write_timeout_ms): a reader that takes no bytes of what waits for it is disconnected,
 * and a stream holds at most STREAM_MAX_BUFFER bytes beside what h2o is writing.
 */
#include "mcp.h"
#include "mcp_impl.h"
#include "http_common.h"
#include "clients.h"
#include "gen.h"
#include "json.h"
#include "hmap.h"
#include "respond.h"
#include "status.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define SID_LEN 32                   /* hex digits of a 128-bit random session id */
#define STREAM_MAX_BUFFER (8u << 20) /* bytes an SSE stream may hold for a client that does not read */
#define DEFAULT_VERSION "2025-03-26" /* no header, no session: the version the spec says to assume */
#define LEGACY_VERSION "2024-11-05"  /* the HTTP+SSE transport's version until initialize says otherwise */

static const char *const versions[] = {"2025-06-18", "2025-03-26", "2024-11-05", NULL}; /* newest first */

int sg_mcp_version_supported(const char *v, size_t len)
{
    for (int i = 0; versions[i] != NULL; ++i)
        if (strlen(versions[i]) == len && memcmp(versions[i], v, len) == 0)
            return 1;
    return 0;
}

const char *sg_mcp_negotiate(const char *requested)
{
    for (int i = 0; versions[i] != NULL; ++i)
        if (requested != NULL && strcmp(versions[i], requested) == 0)
            return versions[i];
    return versions[0];
}

/* JSON-RPC batches came with 2025-03-26 and left with 2025-06-18 (the versions are dates). */
static int version_allows_batch(const char *v)
{
    return strcmp(v, "2025-06-18") < 0;
}

/* ---- Accept ---- */

static int iv_ieq(const char *p, size_t n, const char *s)
{
    return strlen(s) == n && strncasecmp(p, s, n) == 0;
}

static void trim(const char **p, const char **end)
{
    while (*p < *end && (**p == ' ' || **p == '\t'))
        ++*p;
    while (*end > *p && ((*end)[-1] == ' ' || (*end)[-1] == '\t'))
        --*end;
}

int sg_mcp_accept(const char *a, size_t len)
{
    if (a == NULL || len == 0)
        return 1;
    /* for each of the two types: the q of the most specific range that matches it */
    double q[2] = {0, 0};
    int spec[2] = {0, 0};
    const char *p = a, *end = a + len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p)), *stop = comma != NULL ? comma : end;
        const char *semi = memchr(p, ';', (size_t)(stop - p)), *mb = p, *me = semi != NULL ? semi : stop;
        trim(&mb, &me);
        double qv = 1;
        for (const char *s = semi; s != NULL && s < stop;) {
            const char *ps = s + 1, *next = memchr(ps, ';', (size_t)(stop - ps)), *pe = next != NULL ? next : stop;
            trim(&ps, &pe);
            if (pe - ps >= 2 && (ps[0] == 'q' || ps[0] == 'Q') && ps[1] == '=') {
                char tmp[16];
                size_t n = (size_t)(pe - ps - 2) < sizeof(tmp) - 1 ? (size_t)(pe - ps - 2) : sizeof(tmp) - 1;
                memcpy(tmp, ps + 2, n);
                tmp[n] = '\0';
                char *e;
                qv = strtod(tmp, &e);
                if (e == tmp || qv < 0 || qv > 1)
                    qv = 0;
            }
            s = next;
        }
        size_t ml = (size_t)(me - mb);
        static const char *const exact[2] = {"application/json", "text/event-stream"};
        static const char *const wild[2] = {"application/*", "text/*"};
        for (int t = 0; t < 2; ++t) {
            int sp = iv_ieq(mb, ml, exact[t]) ? 3 : iv_ieq(mb, ml, wild[t]) ? 2 : iv_ieq(mb, ml, "*/*") ? 1 : 0;
            if (sp > spec[t] || (sp == spec[t] && sp > 0 && qv > q[t])) {
                spec[t] = sp;
                q[t] = qv;
            }
        }
        p = stop + 1;
    }
    if (q[0] <= 0 && q[1] <= 0)
        return 0;
    return q[1] > q[0] ? 2 : 1;
}

/* ---- metrics ---- */

enum { EP_MCP, EP_SSE, EP_MESSAGES, EP_COUNT };
static const char *const ep_names[EP_COUNT] = {"mcp", "sse", "messages"};
static const int http_codes[] = {200, 202, 400, 401, 404, 405, 406, 413, 415, 503, 0};
#define N_HTTP_CODES (sizeof(http_codes) / sizeof(http_codes[0]))
enum { M_INITIALIZE, M_PING, M_TOOLS_LIST, M_TOOLS_CALL, M_NOTIFICATION, M_OTHER, M_COUNT };
static const char *const method_names[M_COUNT] = {"initialize", "ping", "tools/list", "tools/call", "notification", "other"};
static const int rpc_codes[] = {SG_MCP_PARSE_ERROR,    SG_MCP_INVALID_REQUEST, SG_MCP_METHOD_NOT_FOUND,
                                SG_MCP_INVALID_PARAMS, SG_MCP_INTERNAL_ERROR,  SG_MCP_SESSION_NOT_FOUND};
#define N_RPC_CODES (sizeof(rpc_codes) / sizeof(rpc_codes[0]))
enum { END_DELETED, END_IDLE, END_EVICTED, END_STREAM_CLOSED, END_COUNT };
static const char *const end_names[END_COUNT] = {"deleted", "idle", "evicted", "stream_closed"};

static struct {
    sg_counter_t *http[EP_COUNT][N_HTTP_CODES];
    sg_counter_t *methods[M_COUNT];
    sg_counter_t *errors[N_RPC_CODES];
    sg_counter_t *ended[END_COUNT];
    sg_counter_t *dropped; /* replies for an SSE stream that was gone */
    sg_gauge_t *sessions, *streams;
} mcp_metrics;

static void count_http(int ep, int status)
{
    size_t i = 0;
    while (http_codes[i] != 0 && http_codes[i] != status)
        ++i;
    sg_counter_add(mcp_metrics.http[ep][i], 1);
}

/* ---- sessions ---- */

typedef struct st_mcp_stream_t mcp_stream_t;
typedef struct st_mcp_session_t mcp_session_t;
struct st_mcp_session_t {
    char id[SID_LEN + 1];
    char version[16];
    char *client_id;
    uint64_t last_ms;
    int legacy;              /* opened by GET /sse: lives as long as its stream */
    int stream_loop;         /* the loop that owns `stream`, -1 when none */
    mcp_stream_t *stream;    /* freed only by its loop, which clears this under the mutex first */
    uint64_t hash;           /* of the id */
    h2o_linklist_t lru_link; /* in mcp_sessions.lru: most recently used first */
};

static struct {
    pthread_mutex_t mu;
    int ready;
    sg_hmap_t index;    /* id -> session */
    h2o_linklist_t lru; /* anchor: lru.next is the most recently used session, lru.prev the coldest */
    size_t max;
    uint64_t idle_ms;
} mcp_sessions;

static int session_eq(const void *item, const void *key, size_t key_len, const void *ud)
{
    (void)ud;
    return key_len == SID_LEN && memcmp(((const mcp_session_t *)item)->id, key, SID_LEN) == 0;
}

static mcp_session_t *session_of(h2o_linklist_t *link)
{
    return H2O_STRUCT_FROM_MEMBER(mcp_session_t, lru_link, link);
}

static void lru_front(mcp_session_t *s)
{
    h2o_linklist_insert(mcp_sessions.lru.next, &s->lru_link);
}

static mcp_session_t *find_locked(const char *id, size_t len)
{
    if (len != SID_LEN)
        return NULL;
    return sg_hmap_find(&mcp_sessions.index, sg_hmap_hash(id, len), id, len);
}

static void remove_locked(mcp_session_t *s, int why)
{
    sg_hmap_remove(&mcp_sessions.index, s->hash, s);
    h2o_linklist_unlink(&s->lru_link);
    sg_gauge_add(mcp_metrics.sessions, -1);
    sg_counter_add(mcp_metrics.ended[why], 1);
    free(s->client_id);
    free(s);
}

static int idle_locked(const mcp_session_t *s, uint64_t now)
{
    return s->stream == NULL && now - s->last_ms > mcp_sessions.idle_ms;
}

/* Ends idle sessions from the cold end; a session with a stream is kept warm by its keep-alives. */
static void expire_locked(uint64_t now)
{
    while (!h2o_linklist_is_empty(&mcp_sessions.lru) && idle_locked(session_of(mcp_sessions.lru.prev), now))
        remove_locked(session_of(mcp_sessions.lru.prev), END_IDLE);
}

/* Creates a session (an HTTP+SSE one when `stream` is given, owned by loop `stream_loop`); NULL
 * when the table is full of sessions with open streams. */
static mcp_session_t *create_session(const char *client_id, const char *version, mcp_stream_t *stream, int stream_loop,
                                     char sid[SID_LEN + 1])
{
    unsigned char rnd[SID_LEN / 2];
    if (RAND_bytes(rnd, sizeof(rnd)) != 1)
        abort(); /* no randomness: session ids would be guessable */
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(rnd); ++i) {
        sid[2 * i] = hex[rnd[i] >> 4];
        sid[2 * i + 1] = hex[rnd[i] & 15];
    }
    sid[SID_LEN] = '\0';
    uint64_t now = sg_now_ms();
    pthread_mutex_lock(&mcp_sessions.mu);
    expire_locked(now);
    while (sg_hmap_size(&mcp_sessions.index) >= mcp_sessions.max) { /* the least recently used session without a stream goes */
        h2o_linklist_t *victim = mcp_sessions.lru.prev;
        while (victim != &mcp_sessions.lru && session_of(victim)->stream != NULL)
            victim = victim->prev;
        if (victim == &mcp_sessions.lru) {
            pthread_mutex_unlock(&mcp_sessions.mu);
            return NULL;
        }
        remove_locked(session_of(victim), END_EVICTED);
    }
    mcp_session_t *s = sg_mem_calloc(1, sizeof(*s));
    memcpy(s->id, sid, SID_LEN + 1);
    snprintf(s->version, sizeof(s->version), "%s", version);
    s->client_id = sg_strdup(client_id);
    s->last_ms = now;
    s->legacy = stream != NULL;
    s->stream = stream;
    s->stream_loop = stream != NULL ? stream_loop : -1;
    s->hash = sg_hmap_hash(sid, SID_LEN);
    sg_hmap_insert(&mcp_sessions.index, s->hash, s);
    lru_front(s);
    sg_gauge_add(mcp_metrics.sessions, 1);
    pthread_mutex_unlock(&mcp_sessions.mu);
    return s;
}

/* Looks a session up for `client` and marks it used; copies its version. Returns 0, or -1 when it
 * is unknown, expired, of the other transport, or opened by another client. */
static int use_session(const char *id, size_t len, const sg_client_t *client, int legacy, char version[16])
{
    uint64_t now = sg_now_ms();
    pthread_mutex_lock(&mcp_sessions.mu);
    mcp_session_t *s = find_locked(id, len);
    if (s != NULL && idle_locked(s, now)) {
        remove_locked(s, END_IDLE);
        s = NULL;
    }
    int ok = s != NULL && s->legacy == legacy && strcmp(s->client_id, client->id) == 0;
    if (ok) {
        s->last_ms = now;
        h2o_linklist_unlink(&s->lru_link);
        lru_front(s);
        if (version != NULL)
            memcpy(version, s->version, sizeof(s->version));
    }
    pthread_mutex_unlock(&mcp_sessions.mu);
    return ok ? 0 : -1;
}

static void set_session_version(const char *id, const char *version)
{
    pthread_mutex_lock(&mcp_sessions.mu);
    mcp_session_t *s = find_locked(id, strlen(id));
    if (s != NULL)
        snprintf(s->version, sizeof(s->version), "%s", version);
    pthread_mutex_unlock(&mcp_sessions.mu);
}

/* ---- per-loop state and SSE streams ---- */

struct st_sg_mcp_loop_t {
    h2o_multithread_receiver_t replies; /* mcp_msg_t: replies for streams of this loop */
    h2o_linklist_t streams;
    int stopping;
};

struct st_mcp_stream_t {
    h2o_generator_t gen;
    h2o_req_t *req;
    sg_loop_t *loop;
    char sid[SID_LEN + 1];
    sg_buf_t inflight, pending;
    uint64_t charged;       /* of the response budget: the two buffers' memory */
    sg_write_watch_t watch; /* the write timeout while h2o holds `inflight` */
    int sending;            /* h2o holds `inflight` until proceed */
    int closing;            /* end after what is buffered */
    int closed;             /* the final send went out, or h2o stopped the response */
    sg_timer_t keepalive;
    h2o_linklist_t link;
};

typedef struct st_mcp_msg_t {
    h2o_multithread_message_t super;
    char sid[SID_LEN + 1];
    size_t len;
    char data[];
} mcp_msg_t;

/* Keeps the stream's charge to the response budget equal to the memory of its two buffers. */
static void stream_account(mcp_stream_t *st)
{
    uint64_t want = st->inflight.cap + st->pending.cap;
    sg_server_t *s = st->loop->server;
    if (want > st->charged)
        sg_respond_grow(s, want - st->charged);
    else
        sg_respond_release(s, st->charged - want);
    st->charged = want;
}

static void stream_flush(mcp_stream_t *st)
{
    if (st->closed || st->sending)
        return;
    if (st->pending.len == 0 && !st->closing) {
        sg_respond_watch_idle(&st->watch); /* nothing waits for the reader */
        return;
    }
    sg_buf_t t = st->inflight;
    st->inflight = st->pending;
    st->pending = t;
    st->pending.len = 0;
    h2o_iovec_t iov = h2o_iovec_init(st->inflight.base, st->inflight.len);
    st->sending = 1;
    if (st->closing)
        st->closed = 1;
    st->watch.sent += iov.len;
    sg_respond_watch_progress(&st->watch); /* until h2o took it (proceed) */
    h2o_send(st->req, &iov, iov.len != 0 ? 1 : 0, st->closed ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
}

static void stream_close(mcp_stream_t *st)
{
    st->closing = 1;
    stream_flush(st);
}

static void stream_write(mcp_stream_t *st, const char *data, size_t len)
{
    if (st->closed || st->closing)
        return;
    if (st->pending.len + len > STREAM_MAX_BUFFER) {
        SG_LOG(SG_LL_WARN, "mcp", "SSE stream of session %.8s... closed: the client does not read its replies", st->sid);
        st->pending.len = 0;
        stream_close(st);
        return;
    }
    sg_buf_append(&st->pending, data, len);
    stream_account(st);
    stream_flush(st);
}

/* One SSE event; JSON has raw CR/LF only as insignificant whitespace, which becomes spaces so
 * the event is one data line. */
static void append_event(sg_buf_t *out, const char *event, const char *data, size_t len)
{
    sg_buf_appendf(out, "event: %s\ndata: ", event);
    size_t at = out->len;
    sg_buf_append(out, data, len);
    for (size_t i = at; i < out->len; ++i)
        if (out->base[i] == '\n' || out->base[i] == '\r')
            out->base[i] = ' ';
    sg_buf_appends(out, "\n\n");
}

static void on_stream_proceed(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    mcp_stream_t *st = H2O_STRUCT_FROM_MEMBER(mcp_stream_t, gen, g);
    st->sending = 0;
    st->inflight.len = 0;
    if (st->inflight.cap > 4096) { /* what a burst of replies grew is not kept for an idle stream */
        sg_buf_free(&st->inflight);
        stream_account(st);
    }
    sg_respond_watch_progress(&st->watch); /* the reader took it */
    stream_flush(st);
}

static void on_stream_stop(h2o_generator_t *g, h2o_req_t *req)
{
    (void)req;
    mcp_stream_t *st = H2O_STRUCT_FROM_MEMBER(mcp_stream_t, gen, g);
    st->closed = 1;
}

/* The stream's request is freed: the session it carried ends with it. */
static void on_stream_dispose(void *p)
{
    mcp_stream_t *st = p;
    pthread_mutex_lock(&mcp_sessions.mu);
    mcp_session_t *s = find_locked(st->sid, SID_LEN);
    if (s != NULL && s->stream == st)
        remove_locked(s, END_STREAM_CLOSED);
    pthread_mutex_unlock(&mcp_sessions.mu);
    if (h2o_linklist_is_linked(&st->link))
        h2o_linklist_unlink(&st->link);
    sg_timer_stop(&st->loop->timers, &st->keepalive);
    sg_respond_watch_idle(&st->watch);
    sg_gauge_add(mcp_metrics.streams, -1);
    sg_buf_free(&st->inflight);
    sg_buf_free(&st->pending);
    stream_account(st);
}

static void on_keepalive(sg_timer_t *t)
{
    mcp_stream_t *st = H2O_STRUCT_FROM_MEMBER(mcp_stream_t, keepalive, t);
    if (st->closed || st->closing)
        return;
    /* a comment line: keeps proxies from timing the stream out and finds clients that went away */
    if (!st->sending && st->pending.len == 0)
        stream_write(st, ": keepalive\n\n", 13);
    pthread_mutex_lock(&mcp_sessions.mu);
    mcp_session_t *s = find_locked(st->sid, SID_LEN);
    if (s != NULL && s->stream == st)
        s->last_ms = sg_now_ms();
    pthread_mutex_unlock(&mcp_sessions.mu);
    sg_timer_start(&st->loop->timers, &st->keepalive, sg_now_ms() + (uint64_t)st->loop->server->cfg->mcp.sse_keepalive_s * 1000,
                   on_keepalive);
}

/* Sends one reply to the SSE stream of a legacy session, wherever the stream lives. */
static void deliver(sg_loop_t *from, const char *sid, const char *json, size_t len)
{
    pthread_mutex_lock(&mcp_sessions.mu);
    mcp_session_t *s = find_locked(sid, SID_LEN);
    int target = s != NULL && s->stream != NULL ? s->stream_loop : -1;
    mcp_stream_t *local = target == from->id ? s->stream : NULL;
    pthread_mutex_unlock(&mcp_sessions.mu);
    if (target < 0) {
        sg_counter_add(mcp_metrics.dropped, 1);
        return;
    }
    sg_buf_t ev = {0};
    append_event(&ev, "message", json, len);
    if (local != NULL) { /* streams are freed only on their own loop: this one */
        stream_write(local, ev.base, ev.len);
    } else {
        mcp_msg_t *m = sg_mem_calloc(1, sizeof(*m) + ev.len);
        memcpy(m->sid, sid, SID_LEN + 1);
        m->len = ev.len;
        memcpy(m->data, ev.base, ev.len);
        h2o_multithread_send_message(&from->server->loops[target].mcp->replies, &m->super);
    }
    sg_buf_free(&ev);
}

static void on_replies(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    sg_mcp_loop_t *ml = H2O_STRUCT_FROM_MEMBER(sg_mcp_loop_t, replies, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        mcp_msg_t *m = H2O_STRUCT_FROM_MEMBER(mcp_msg_t, super.link, messages->next);
        h2o_linklist_unlink(&m->super.link);
        pthread_mutex_lock(&mcp_sessions.mu);
        mcp_session_t *s = find_locked(m->sid, SID_LEN);
        mcp_stream_t *st = s != NULL && s->stream != NULL && s->stream->loop->mcp == ml ? s->stream : NULL;
        pthread_mutex_unlock(&mcp_sessions.mu);
        if (st != NULL)
            stream_write(st, m->data, m->len);
        else
            sg_counter_add(mcp_metrics.dropped, 1);
        free(m);
    }
}

/* ---- responses ---- */

static void send_http(h2o_req_t *req, int ep, int status, const char *ctype, const char *body, size_t len)
{
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    sg_send_body(req, status, ctype, body, len);
    count_http(ep, status);
}

static void count_rpc_error(int code)
{
    for (size_t i = 0; i < N_RPC_CODES; ++i)
        if (rpc_codes[i] == code)
            sg_counter_add(mcp_metrics.errors[i], 1);
}

/* {"jsonrpc":"2.0","id":ID, then the caller's member and the closing brace; `id` is JSON text (NULL: null) */
static void open_reply(sg_jw_t *w, sg_buf_t *b, const char *id)
{
    sg_jw_init(w, b);
    sg_jw_obj(w);
    sg_jw_kstr(w, "jsonrpc", "2.0");
    sg_jw_key(w, "id");
    if (id != NULL)
        sg_jw_raw(w, id, strlen(id));
    else
        sg_jw_null(w);
}

static void append_error(sg_buf_t *b, const char *id, int code, const char *msg)
{
    sg_jw_t w;
    open_reply(&w, b, id);
    sg_jw_key(&w, "error");
    sg_jw_obj(&w);
    sg_jw_ki64(&w, "code", code);
    sg_jw_kstr(&w, "message", msg);
    sg_jw_end(&w);
    sg_jw_end(&w);
    count_rpc_error(code);
}

/* An HTTP-level refusal with a JSON-RPC error body (id null: the message was not read). */
static void http_error(h2o_req_t *req, int ep, int status, int code, const char *msg)
{
    sg_buf_t b = {0};
    append_error(&b, NULL, code, msg);
    if (status == 401) { /* the connection ends with it: a next request meets the connection gate (gate.c) */
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer realm=\"searchgate\""));
        req->http1_is_persistent = 0;
    }
    send_http(req, ep, status, "application/json", b.base, b.len);
    sg_buf_free(&b);
}

static sg_server_t *item_server(const sg_mcp_item_t *item);

/* An item's answer is held until its POST is answered: charged to the response budget. */
static void item_account(sg_mcp_item_t *item)
{
    sg_server_t *s = item_server(item);
    sg_respond_release(s, item->charged);
    item->charged = item->out.cap;
    sg_respond_grow(s, item->charged);
}

void sg__mcp_item_result(sg_mcp_item_t *item, const char *result, size_t len)
{
    item->out.len = 0;
    sg_jw_t w;
    open_reply(&w, &item->out, item->id);
    sg_jw_key(&w, "result");
    sg_jw_raw(&w, result, len);
    sg_jw_end(&w);
    item_account(item);
}

void sg__mcp_item_error(sg_mcp_item_t *item, int code, const char *message)
{
    item->out.len = 0;
    item->invalid = code == SG_MCP_INVALID_REQUEST;
    append_error(&item->out, item->id, code, message);
    item_account(item);
}

/* ---- one POST: its messages and its answer ---- */

enum { REPLY_JSON = 1, REPLY_SSE = 2, REPLY_STREAM = 3 };

typedef struct st_sg_mcp_post_t {
    sg_loop_t *loop;
    h2o_req_t *req; /* NULL once answered (REPLY_STREAM) or gone */
    struct st_sg_mcp_post_t **slot;
    sg_gen_t *gen; /* the configuration generation of its client and of the tools it calls (referenced) */
    sg_client_t *client;
    int reply;
    int batch;
    int processing; /* the synchronous pass over the messages is running */
    int ep;
    char version[16];
    char sid[SID_LEN + 1];     /* REPLY_STREAM: the legacy session its replies go to */
    char new_sid[SID_LEN + 1]; /* a session initialize opened, for the Mcp-Session-Id header */
    uint32_t n, n_pending;
    sg_mcp_item_t *items;
} sg_mcp_post_t;

static sg_server_t *item_server(const sg_mcp_item_t *item)
{
    return item->post->loop->server;
}

static void post_free(sg_mcp_post_t *p)
{
    if (p->slot != NULL)
        *p->slot = NULL;
    for (uint32_t i = 0; i < p->n; ++i) {
        free(p->items[i].id);
        sg_buf_free(&p->items[i].out);
        sg_respond_release(p->loop->server, p->items[i].charged);
    }
    free(p->items);
    sg_clients_release(p->client);
    sg_gen_release(p->gen);
    free(p);
}

static void post_respond(sg_mcp_post_t *p)
{
    h2o_req_t *req = p->req;
    if (req == NULL)
        return;
    p->req = NULL;
    if (p->slot != NULL) {
        *p->slot = NULL;
        p->slot = NULL;
    }
    if (!p->batch && p->items[0].invalid) { /* a body that is not one valid request: the POST itself fails */
        send_http(req, p->ep, 400, "application/json", p->items[0].out.base, p->items[0].out.len);
        return;
    }
    if (p->reply == REPLY_STREAM) {
        send_http(req, p->ep, 202, NULL, NULL, 0);
        return;
    }
    if (p->new_sid[0] != '\0')
        h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("mcp-session-id"), 0, NULL, p->new_sid, SID_LEN);
    sg_buf_t b = {0};
    uint32_t answered = 0;
    for (uint32_t i = 0; i < p->n; ++i) {
        sg_mcp_item_t *it = &p->items[i];
        if (it->out.len == 0)
            continue;
        if (p->reply == REPLY_SSE) {
            append_event(&b, "message", it->out.base, it->out.len);
        } else {
            if (answered != 0 || p->batch)
                sg_buf_appendc(&b, answered == 0 ? '[' : ',');
            sg_buf_append(&b, it->out.base, it->out.len);
        }
        sg_buf_free(&it->out); /* copied: the answer's buffer holds it now */
        sg_respond_release(p->loop->server, it->charged);
        it->charged = 0;
        ++answered;
    }
    if (answered == 0) { /* only notifications and responses */
        send_http(req, p->ep, 202, NULL, NULL, 0);
    } else {
        if (p->batch && p->reply != REPLY_SSE)
            sg_buf_appendc(&b, ']');
        /* written window by window under the write timeout, its memory in the response budget */
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
        count_http(p->ep, 200);
        sg_respond_buffer(req, 200, p->reply == REPLY_SSE ? "text/event-stream" : "application/json", &b);
    }
    sg_buf_free(&b);
}

void sg__mcp_item_done(sg_mcp_item_t *item)
{
    sg_mcp_post_t *p = item->post;
    item->pending = 0;
    item->call = NULL;
    if (p->reply == REPLY_STREAM && item->out.len != 0)
        deliver(p->loop, p->sid, item->out.base, item->out.len);
    if (--p->n_pending == 0 && !p->processing) {
        post_respond(p);
        post_free(p);
    }
}

/* The client of a streamable POST went away before its answer: its tool calls are cancelled. */
static void on_post_dispose(void *arg)
{
    sg_mcp_post_t **slot = arg, *p = *slot;
    if (p == NULL)
        return;
    p->slot = NULL;
    p->req = NULL;
    for (uint32_t i = 0; i < p->n; ++i)
        if (p->items[i].pending) {
            sg__mcp_tools_cancel(&p->items[i]);
            p->items[i].pending = 0;
        }
    post_free(p);
}

/* The id of a request as JSON text: a string or an integer (MCP forbids null); NULL when invalid. */
static char *id_text(const cJSON *id)
{
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    if (cJSON_IsString(id)) {
        sg_jw_str(&w, id->valuestring);
    } else if (cJSON_IsNumber(id) && id->valuedouble == (double)(int64_t)id->valuedouble && id->valuedouble <= 9007199254740992.0 &&
               id->valuedouble >= -9007199254740992.0) {
        sg_jw_i64(&w, (int64_t)id->valuedouble);
    } else {
        return NULL;
    }
    return b.base;
}

static void on_initialize(sg_mcp_post_t *p, sg_mcp_item_t *it, const cJSON *params)
{
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(params, "protocolVersion");
    if (!cJSON_IsObject(params) || !cJSON_IsString(pv)) {
        sg__mcp_item_error(it, SG_MCP_INVALID_PARAMS, "initialize: params.protocolVersion (a string) is required");
        return;
    }
    if (p->batch) {
        sg__mcp_item_error(it, SG_MCP_INVALID_REQUEST, "initialize must not be part of a JSON-RPC batch");
        return;
    }
    const char *v = sg_mcp_negotiate(pv->valuestring);
    if (p->reply == REPLY_STREAM) {
        set_session_version(p->sid, v);
    } else if (p->new_sid[0] == '\0') {
        if (create_session(p->client->id, v, NULL, -1, p->new_sid) == NULL) {
            p->new_sid[0] = '\0';
            sg__mcp_item_error(it, SG_MCP_INTERNAL_ERROR, "no session can be opened now (mcp.max_sessions reached); retry later");
            return;
        }
    }
    snprintf(p->version, sizeof(p->version), "%s", v);
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_obj(&w);
    sg_jw_kstr(&w, "protocolVersion", v);
    sg_jw_key(&w, "capabilities");
    sg_jw_obj(&w);
    sg_jw_key(&w, "tools");
    sg_jw_obj(&w);
    sg_jw_kbool(&w, "listChanged", 0);
    sg_jw_end(&w);
    sg_jw_end(&w);
    sg_jw_key(&w, "serverInfo");
    sg_jw_obj(&w);
    sg_jw_kstr(&w, "name", "searchgate");
    sg_jw_kstr(&w, "title", "searchgate retrieval gateway");
    sg_jw_kstr(&w, "version", SG_VERSION);
    sg_jw_end(&w);
    sg_jw_kstr(&w, "instructions",
               "Search tools over the gateway's routes: call search (or search_<route>) with query or queries "
               "and an optional topk; access (or access_<route>) reads pages by URL where a route has a page "
               "store.");
    sg_jw_end(&w);
    sg__mcp_item_result(it, b.base, b.len);
    sg_buf_free(&b);
}

/* Handles one message of the body; the answer (if any) lands in `it`. */
static void handle_message(sg_mcp_post_t *p, sg_mcp_item_t *it, const cJSON *msg)
{
    it->post = p;
    if (!cJSON_IsObject(msg)) {
        it->id = sg_strdup("null");
        sg__mcp_item_error(it, SG_MCP_INVALID_REQUEST, "a JSON-RPC message must be an object");
        return;
    }
    const cJSON *jv = cJSON_GetObjectItemCaseSensitive(msg, "jsonrpc");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(msg, "params");
    if (id != NULL) {
        it->id = id_text(id);
        if (it->id == NULL) {
            it->id = sg_strdup("null");
            sg__mcp_item_error(it, SG_MCP_INVALID_REQUEST, "id must be a string or an integer");
            return;
        }
    }
    if (!cJSON_IsString(jv) || strcmp(jv->valuestring, "2.0") != 0) {
        if (it->id == NULL)
            it->id = sg_strdup("null");
        sg__mcp_item_error(it, SG_MCP_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
        return;
    }
    if (method == NULL) {
        if (id != NULL &&
            (cJSON_GetObjectItemCaseSensitive(msg, "result") != NULL || cJSON_GetObjectItemCaseSensitive(msg, "error") != NULL)) {
            free(it->id); /* a response from the client: this server sends no requests, nothing to answer */
            it->id = NULL;
            return;
        }
        if (it->id == NULL)
            it->id = sg_strdup("null");
        sg__mcp_item_error(it, SG_MCP_INVALID_REQUEST, "a request needs a method");
        return;
    }
    if (!cJSON_IsString(method) || (params != NULL && !cJSON_IsObject(params))) {
        if (it->id == NULL)
            it->id = sg_strdup("null");
        sg__mcp_item_error(it, SG_MCP_INVALID_REQUEST,
                           !cJSON_IsString(method) ? "method must be a string" : "params must be an object");
        return;
    }
    const char *m = method->valuestring;
    if (id == NULL) { /* a notification: never answered (initialized, cancelled, progress ...) */
        sg_counter_add(mcp_metrics.methods[M_NOTIFICATION], 1);
        return;
    }
    if (strcmp(m, "initialize") == 0) {
        sg_counter_add(mcp_metrics.methods[M_INITIALIZE], 1);
        on_initialize(p, it, params);
    } else if (strcmp(m, "ping") == 0) {
        sg_counter_add(mcp_metrics.methods[M_PING], 1);
        sg__mcp_item_result(it, "{}", 2);
    } else if (strcmp(m, "tools/list") == 0) {
        sg_counter_add(mcp_metrics.methods[M_TOOLS_LIST], 1);
        size_t len;
        const char *list = sg__mcp_tools_list(p->gen, &len);
        sg__mcp_item_result(it, list, len);
    } else if (strcmp(m, "tools/call") == 0) {
        sg_counter_add(mcp_metrics.methods[M_TOOLS_CALL], 1);
        ++p->n_pending;
        it->pending = 1;
        if (sg__mcp_tools_call(it, p->loop, p->gen, p->client, params) == 0) {
            it->pending = 0;
            --p->n_pending;
        } else {
            it->async = 1; /* its reply goes out from sg__mcp_item_done(), perhaps already did */
        }
    } else {
        sg_counter_add(mcp_metrics.methods[M_OTHER], 1);
        char msg2[160];
        snprintf(msg2, sizeof(msg2), "method not found: %.100s", m);
        sg__mcp_item_error(it, SG_MCP_METHOD_NOT_FOUND, msg2);
    }
}

/* Runs every message of a parsed body, then answers now or when the last tool call finishes. */
static void run_post(sg_mcp_post_t *p, const cJSON *root)
{
    p->batch = cJSON_IsArray(root);
    p->n = p->batch ? (uint32_t)cJSON_GetArraySize(root) : 1;
    p->items = sg_mem_calloc(p->n, sizeof(*p->items));
    p->processing = 1;
    uint32_t i = 0;
    for (const cJSON *m = p->batch ? root->child : root; m != NULL && i < p->n; m = p->batch ? m->next : NULL, ++i) {
        handle_message(p, &p->items[i], m);
        if (p->reply == REPLY_STREAM && !p->items[i].async && p->items[i].out.len != 0 && (p->batch || !p->items[i].invalid))
            deliver(p->loop, p->sid, p->items[i].out.base, p->items[i].out.len);
    }
    p->processing = 0;
    if (p->reply == REPLY_STREAM)
        post_respond(p); /* 202 now; the replies go to the stream */
    if (p->n_pending == 0) {
        post_respond(p);
        post_free(p);
        return;
    }
    if (p->req != NULL) { /* the client may leave while tool calls run */
        p->slot = h2o_mem_alloc_shared(&p->req->pool, sizeof(*p->slot), on_post_dispose);
        *p->slot = p;
    }
}

/* ---- the routes ---- */

/* Checks Content-Type and the body's size and parses it. NULL when it answered an error. */
static cJSON *read_body(h2o_req_t *req, int ep)
{
    size_t max_body = sg_loop_of(req)->server->cfg->limits.max_body_bytes;
    h2o_iovec_t ct = sg_http_header(req, H2O_STRLIT("content-type"));
    if (ct.base != NULL) {
        const char *semi = memchr(ct.base, ';', ct.len), *b = ct.base, *e = semi != NULL ? semi : ct.base + ct.len;
        trim(&b, &e);
        if (!iv_ieq(b, (size_t)(e - b), "application/json")) {
            http_error(req, ep, 415, SG_MCP_INVALID_REQUEST, "Content-Type must be application/json");
            return NULL;
        }
    }
    size_t len = req->entity.base != NULL ? req->entity.len : 0;
    if (len > max_body) {
        char msg[160];
        snprintf(msg, sizeof(msg), "request body of %zu bytes is over limits.max_body_bytes (%zu)", len, max_body);
        http_error(req, ep, 413, SG_MCP_INVALID_REQUEST, msg);
        return NULL;
    }
    sg_counter_add(sg_loop_of(req)->server->body_bytes_parsed, len);
    size_t bad_at = 0;
    const char *why = "the body is empty";
    long at = len > 0 ? sg_json_validate(req->entity.base, len, &bad_at, &why) : -1;
    cJSON *root = at >= 0 ? cJSON_ParseWithLength(req->entity.base + at, len - (size_t)at) : NULL;
    if (root == NULL) {
        char msg[240];
        snprintf(msg, sizeof(msg), "parse error: %s (byte %zu)", why, bad_at);
        http_error(req, ep, 400, SG_MCP_PARSE_ERROR, msg);
        return NULL;
    }
    return root;
}

static sg_mcp_post_t *new_post(sg_loop_t *loop, h2o_req_t *req, sg_client_t *client, int reply, int ep)
{
    sg_mcp_post_t *p = sg_mem_calloc(1, sizeof(*p));
    p->loop = loop;
    p->req = req;
    p->gen = sg_gen_ref(loop->gen); /* the one `client` was identified with */
    p->client = client;
    p->reply = reply;
    p->ep = ep;
    return p;
}

static void on_mcp_post(sg_loop_t *loop, h2o_req_t *req)
{
    const char *why = NULL;
    sg_client_t *client = sg_clients_identify_request(loop->gen->clients, req, &why);
    if (client == NULL) {
        http_error(req, EP_MCP, 401, SG_MCP_INVALID_REQUEST, why);
        return;
    }
    h2o_iovec_t acc = sg_http_header(req, H2O_STRLIT("accept"));
    int fmt = sg_mcp_accept(acc.base, acc.len);
    h2o_iovec_t pv = sg_http_header(req, H2O_STRLIT("mcp-protocol-version"));
    h2o_iovec_t sid = sg_http_header(req, H2O_STRLIT("mcp-session-id"));
    char version[16] = DEFAULT_VERSION;
    cJSON *root = NULL;
    if (fmt == 0) {
        http_error(req, EP_MCP, 406, SG_MCP_INVALID_REQUEST,
                   "Not Acceptable: the client must accept application/json or text/event-stream");
        goto out;
    }
    if (pv.base != NULL && !sg_mcp_version_supported(pv.base, pv.len)) {
        char msg[200];
        snprintf(msg, sizeof(msg), "unsupported MCP-Protocol-Version \"%.*s\" (supported: 2025-06-18, 2025-03-26, 2024-11-05)",
                 (int)(pv.len > 32 ? 32 : pv.len), pv.base);
        http_error(req, EP_MCP, 400, SG_MCP_INVALID_REQUEST, msg);
        goto out;
    }
    if ((root = read_body(req, EP_MCP)) == NULL)
        goto out;
    const cJSON *first = cJSON_IsArray(root) ? root->child : root;
    const cJSON *fm = cJSON_IsObject(first) ? cJSON_GetObjectItemCaseSensitive(first, "method") : NULL;
    int is_init = !cJSON_IsArray(root) && cJSON_IsString(fm) && strcmp(fm->valuestring, "initialize") == 0;
    if (!is_init) {
        if (sid.base != NULL) {
            if (use_session(sid.base, sid.len, client, 0, version) != 0) {
                http_error(req, EP_MCP, 404, SG_MCP_SESSION_NOT_FOUND,
                           "session not found (unknown, ended or expired): send a new initialize without Mcp-Session-Id");
                goto out;
            }
        } else if (loop->server->cfg->mcp.require_session) {
            http_error(req, EP_MCP, 400, SG_MCP_INVALID_REQUEST, "Mcp-Session-Id header is required (mcp.require_session is on)");
            goto out;
        }
    }
    if (pv.base != NULL)
        snprintf(version, sizeof(version), "%.*s", (int)pv.len, pv.base);
    if (cJSON_IsArray(root)) {
        char msg[200];
        const char *err = NULL;
        if (cJSON_GetArraySize(root) == 0) {
            err = "an empty JSON-RPC batch is not a request";
        } else if (!version_allows_batch(version)) {
            snprintf(msg, sizeof(msg), "JSON-RPC batches are not part of protocol version %s", version);
            err = msg;
        }
        if (err != NULL) {
            http_error(req, EP_MCP, 400, SG_MCP_INVALID_REQUEST, err);
            goto out;
        }
    } else if (!cJSON_IsObject(root) || cJSON_GetObjectItemCaseSensitive(root, "jsonrpc") == NULL ||
               (cJSON_GetObjectItemCaseSensitive(root, "method") == NULL && cJSON_GetObjectItemCaseSensitive(root, "id") == NULL)) {
        http_error(req, EP_MCP, 400, SG_MCP_INVALID_REQUEST, "the body is not a JSON-RPC message");
        goto out;
    }
    sg_mcp_post_t *p = new_post(loop, req, client, fmt == 2 ? REPLY_SSE : REPLY_JSON, EP_MCP);
    client = NULL;
    snprintf(p->version, sizeof(p->version), "%s", version);
    run_post(p, root);
out:
    cJSON_Delete(root);
    sg_clients_release(client);
}

static void on_mcp_delete(sg_loop_t *loop, h2o_req_t *req)
{
    const char *why = NULL;
    sg_client_t *client = sg_clients_identify_request(loop->gen->clients, req, &why);
    if (client == NULL) {
        http_error(req, EP_MCP, 401, SG_MCP_INVALID_REQUEST, why);
        return;
    }
    h2o_iovec_t sid = sg_http_header(req, H2O_STRLIT("mcp-session-id"));
    if (sid.base == NULL) {
        http_error(req, EP_MCP, 400, SG_MCP_INVALID_REQUEST, "DELETE /mcp needs the Mcp-Session-Id header");
    } else {
        pthread_mutex_lock(&mcp_sessions.mu);
        mcp_session_t *s = find_locked(sid.base, sid.len);
        int ok = s != NULL && !s->legacy && strcmp(s->client_id, client->id) == 0;
        if (ok)
            remove_locked(s, END_DELETED);
        pthread_mutex_unlock(&mcp_sessions.mu);
        if (ok)
            send_http(req, EP_MCP, 200, NULL, NULL, 0);
        else
            http_error(req, EP_MCP, 404, SG_MCP_SESSION_NOT_FOUND, "session not found (unknown, ended or expired)");
    }
    sg_clients_release(client);
}

static void on_sse_get(sg_loop_t *loop, h2o_req_t *req)
{
    const char *why = NULL;
    sg_client_t *client = sg_clients_identify_request(loop->gen->clients, req, &why);
    if (client == NULL) {
        http_error(req, EP_SSE, 401, SG_MCP_INVALID_REQUEST, why);
        return;
    }
    if (loop->mcp->stopping) {
        http_error(req, EP_SSE, 503, SG_MCP_INTERNAL_ERROR, "the gateway is shutting down");
        sg_clients_release(client);
        return;
    }
    /* the stream first (freed with the request, whatever happens), then its session, which points
     * at it from the moment it exists */
    mcp_stream_t *st = h2o_mem_alloc_shared(&req->pool, sizeof(*st), on_stream_dispose);
    memset(st, 0, sizeof(*st));
    st->gen.proceed = on_stream_proceed;
    st->gen.stop = on_stream_stop;
    st->req = req;
    st->loop = loop;
    sg_respond_watch_init(&st->watch, req, "an SSE stream");
    h2o_linklist_insert(&loop->mcp->streams, &st->link);
    sg_gauge_add(mcp_metrics.streams, 1);
    mcp_session_t *s = create_session(client->id, LEGACY_VERSION, st, loop->id, st->sid);
    sg_clients_release(client);
    if (s == NULL) {
        st->closed = 1;
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL, H2O_STRLIT("5"));
        http_error(req, EP_SSE, 503, SG_MCP_INTERNAL_ERROR, "too many open SSE streams (mcp.max_sessions); retry later");
        return;
    }
    req->res.status = 200;
    req->res.reason = sg_http_reason(200);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("text/event-stream"));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-accel-buffering"), 0, NULL, H2O_STRLIT("no"));
    count_http(EP_SSE, 200);
    h2o_start_response(req, &st->gen);
    sg_buf_t ev = {0};
    sg_buf_appendf(&ev, "event: endpoint\ndata: /messages?session_id=%s\n\n", st->sid);
    stream_write(st, ev.base, ev.len);
    sg_buf_free(&ev);
    sg_timer_start(&loop->timers, &st->keepalive, sg_now_ms() + (uint64_t)loop->server->cfg->mcp.sse_keepalive_s * 1000,
                   on_keepalive);
}

static void on_messages_post(sg_loop_t *loop, h2o_req_t *req)
{
    const char *why = NULL;
    sg_client_t *client = sg_clients_identify_request(loop->gen->clients, req, &why);
    if (client == NULL) {
        http_error(req, EP_MESSAGES, 401, SG_MCP_INVALID_REQUEST, why);
        return;
    }
    cJSON *root = NULL;
    h2o_iovec_t sid = sg_http_query_param(req, "session_id"), pv = sg_http_header(req, H2O_STRLIT("mcp-protocol-version"));
    char version[16];
    if (sid.base == NULL || sid.len == 0) {
        http_error(req, EP_MESSAGES, 400, SG_MCP_INVALID_REQUEST,
                   "POST /messages needs ?session_id= (the endpoint event of GET /sse names it)");
        goto out;
    }
    if (use_session(sid.base, sid.len, client, 1, version) != 0) {
        http_error(req, EP_MESSAGES, 404, SG_MCP_SESSION_NOT_FOUND,
                   "session not found (unknown or its SSE stream is closed): open GET /sse again");
        goto out;
    }
    if ((root = read_body(req, EP_MESSAGES)) == NULL)
        goto out;
    if (pv.base != NULL) {
        if (!sg_mcp_version_supported(pv.base, pv.len)) {
            http_error(req, EP_MESSAGES, 400, SG_MCP_INVALID_REQUEST, "unsupported MCP-Protocol-Version");
            goto out;
        }
        snprintf(version, sizeof(version), "%.*s", (int)pv.len, pv.base);
    }
    if (cJSON_IsArray(root) && (cJSON_GetArraySize(root) == 0 || !version_allows_batch(version))) {
        http_error(req, EP_MESSAGES, 400, SG_MCP_INVALID_REQUEST,
                   cJSON_GetArraySize(root) == 0 ? "an empty JSON-RPC batch is not a request"
                                                 : "JSON-RPC batches are not part of the session's protocol version");
        goto out;
    }
    sg_mcp_post_t *p = new_post(loop, req, client, REPLY_STREAM, EP_MESSAGES);
    client = NULL;
    memcpy(p->sid, sid.base, SID_LEN);
    p->sid[SID_LEN] = '\0';
    memcpy(p->version, version, sizeof(version));
    run_post(p, root);
out:
    cJSON_Delete(root);
    sg_clients_release(client);
}

static void method_not_allowed(h2o_req_t *req, int ep, const char *allow)
{
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, allow, strlen(allow));
    char msg[120];
    snprintf(msg, sizeof(msg), "method %.*s is not allowed here; use %s", (int)(req->method.len > 16 ? 16 : req->method.len),
             req->method.base, allow);
    http_error(req, ep, 405, SG_MCP_INVALID_REQUEST, msg);
}

static int is_method(h2o_req_t *req, const char *m, size_t len)
{
    return h2o_memis(req->method.base, req->method.len, m, len);
}

int sg_mcp_serve_mcp(sg_loop_t *loop, h2o_req_t *req)
{
    if (!loop->server->cfg->mcp.enabled)
        return 0;
    if (is_method(req, H2O_STRLIT("POST")))
        on_mcp_post(loop, req);
    else if (is_method(req, H2O_STRLIT("DELETE")))
        on_mcp_delete(loop, req);
    else /* GET: this server starts no messages of its own, so it offers no stream there (allowed by the spec) */
        method_not_allowed(req, EP_MCP, "POST, DELETE");
    return 1;
}

int sg_mcp_serve_sse(sg_loop_t *loop, h2o_req_t *req)
{
    if (!loop->server->cfg->mcp.enabled)
        return 0;
    if (is_method(req, H2O_STRLIT("GET")))
        on_sse_get(loop, req);
    else
        method_not_allowed(req, EP_SSE, "GET");
    return 1;
}

int sg_mcp_serve_messages(sg_loop_t *loop, h2o_req_t *req)
{
    if (!loop->server->cfg->mcp.enabled)
        return 0;
    if (is_method(req, H2O_STRLIT("POST")))
        on_messages_post(loop, req);
    else
        method_not_allowed(req, EP_MESSAGES, "POST");
    return 1;
}

/* ---- life cycle ---- */

void sg_mcp_init(sg_server_t *s)
{
    const sg_config_t *cfg = s->cfg;
    if (!cfg->mcp.enabled)
        return;
    pthread_mutex_init(&mcp_sessions.mu, NULL);
    mcp_sessions.max = cfg->mcp.max_sessions;
    mcp_sessions.idle_ms = (uint64_t)cfg->mcp.session_idle_s * 1000;
    sg_hmap_init(&mcp_sessions.index, session_eq, NULL, 1024); /* grows with the sessions, up to mcp.max_sessions */
    mcp_sessions.ready = 1;
    h2o_linklist_init_anchor(&mcp_sessions.lru);
    for (int e = 0; e < EP_COUNT; ++e)
        for (size_t c = 0; c < N_HTTP_CODES; ++c) {
            char l[64];
            if (http_codes[c] != 0)
                snprintf(l, sizeof(l), "endpoint=\"%s\",code=\"%d\"", ep_names[e], http_codes[c]);
            else
                snprintf(l, sizeof(l), "endpoint=\"%s\",code=\"other\"", ep_names[e]);
            mcp_metrics.http[e][c] =
                sg_metrics_counter("searchgate_mcp_http_requests_total", "HTTP requests to the MCP endpoints, by status.", l);
        }
    for (int i = 0; i < M_COUNT; ++i) {
        char l[64];
        snprintf(l, sizeof(l), "method=\"%s\"", method_names[i]);
        mcp_metrics.methods[i] =
            sg_metrics_counter("searchgate_mcp_messages_total",
                               "JSON-RPC messages received by the MCP endpoints, by method (other: unknown methods).", l);
    }
    for (size_t i = 0; i < N_RPC_CODES; ++i) {
        char l[64];
        snprintf(l, sizeof(l), "code=\"%d\"", rpc_codes[i]);
        mcp_metrics.errors[i] = sg_metrics_counter("searchgate_mcp_errors_total", "JSON-RPC error responses, by error code.", l);
    }
    for (int i = 0; i < END_COUNT; ++i) {
        char l[64];
        snprintf(l, sizeof(l), "reason=\"%s\"", end_names[i]);
        mcp_metrics.ended[i] = sg_metrics_counter("searchgate_mcp_sessions_ended_total", "MCP sessions ended, by reason.", l);
    }
    mcp_metrics.dropped = sg_metrics_counter("searchgate_mcp_replies_dropped_total",
                                             "Replies for an HTTP+SSE session whose stream had closed before they were ready.", "");
    mcp_metrics.sessions = sg_metrics_gauge("searchgate_mcp_sessions", "Open MCP sessions (both transports).", "");
    mcp_metrics.streams = sg_metrics_gauge("searchgate_mcp_sse_streams", "Open GET /sse event streams.", "");
}

void sg_mcp_dispose(void)
{
    if (!mcp_sessions.ready)
        return;
    while (!h2o_linklist_is_empty(&mcp_sessions.lru))
        remove_locked(session_of(mcp_sessions.lru.next), END_DELETED);
    sg_hmap_dispose(&mcp_sessions.index);
    mcp_sessions.ready = 0;
    pthread_mutex_destroy(&mcp_sessions.mu);
}

void sg_mcp_init_loop(sg_loop_t *loop)
{
    if (!loop->server->cfg->mcp.enabled)
        return;
    loop->mcp = sg_mem_calloc(1, sizeof(*loop->mcp));
    h2o_linklist_init_anchor(&loop->mcp->streams);
    h2o_multithread_register_receiver(loop->ctx.queue, &loop->mcp->replies, on_replies);
}

void sg_mcp_stop_loop(sg_loop_t *loop)
{
    if (loop->mcp == NULL)
        return;
    loop->mcp->stopping = 1;
    /* each stream's session ends now (no reply is routed to it any more), then the stream ends
     * with a final empty chunk so the client sees a clean close */
    for (h2o_linklist_t *n = loop->mcp->streams.next, *next; n != &loop->mcp->streams; n = next) {
        next = n->next; /* the final send may free the stream */
        mcp_stream_t *st = H2O_STRUCT_FROM_MEMBER(mcp_stream_t, link, n);
        pthread_mutex_lock(&mcp_sessions.mu);
        mcp_session_t *s = find_locked(st->sid, SID_LEN);
        if (s != NULL && s->stream == st)
            remove_locked(s, END_STREAM_CLOSED);
        pthread_mutex_unlock(&mcp_sessions.mu);
        sg_timer_stop(&loop->timers, &st->keepalive);
        stream_close(st);
    }
}

void sg_mcp_dispose_loop(sg_loop_t *loop)
{
    if (loop->mcp == NULL)
        return;
    h2o_multithread_receiver_t *r = &loop->mcp->replies;
    if (!h2o_linklist_is_empty(&r->_messages)) /* replies that arrived after the loop's last run */
        on_replies(r, &r->_messages);
    h2o_multithread_unregister_receiver(loop->ctx.queue, r);
    free(loop->mcp);
    loop->mcp = NULL;
}
