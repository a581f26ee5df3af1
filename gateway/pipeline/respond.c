/*
 * respond.c -- the bounds of answers (respond.h): the process's response budget (its set-up; the
 * counters themselves are inline in respond.h) and the streaming writer.
 *
 * Why stream: an answer is a splice of result blobs ({"result":[` blob `,` blob ... `]}), and
 * the same blob may appear many times (a batch that repeats one query). Building the body whole
 * costs its full size in memory for as long as the client takes to read it; the writer instead
 * keeps references on the blobs (charged once each to the budget) and one window of
 * SG_RESPOND_WINDOW bytes, refilled each time h2o's generator is asked to proceed. The output is
 * byte for byte what building it whole gave, and its Content-Length is known before the first
 * byte (sg_respond_size).
 *
 * A body built whole (MCP's answers) goes through the same writer: taken over, charged to the
 * budget, handed to h2o in windows without a copy, freed with the request.
 *
 * Slow readers: h2o 2.2.5 has no timeout while a response is being written (HTTP/1 clears its
 * request timer once the request is read; HTTP/2 arms its idle timer only without open streams).
 * A write watch (sg_write_watch_t) keeps one of its own on the loop's timer heap while bytes wait
 * for the reader: for the writer from its first window until the request is disposed, for an SSE
 * stream while h2o holds one of its buffers. Progress is a proceed (a window taken) or, between
 * two, the socket's send queue shrinking (TIOCOUTQ: the reader took bytes of it), checked four
 * times per limits.write_timeout_ms -- so a reader slower than a window per timeout is not cut
 * for being idle, one that takes nothing is. A slow but steady reader would still hold its
 * answer's blobs for as long as it likes (a 30 MiB answer at 1 KB/s: 8 hours of the budget), so
 * an answer (not an event stream, which waits for events) also has a minimum average rate,
 * limits.min_write_bytes_per_s, as Kestrel's MinResponseDataRate: after a grace of
 * write_timeout_ms from its first byte, its reader must have taken rate x (elapsed - grace)
 * bytes (handed to h2o less the socket's send queue). When nothing moved for the whole timeout,
 * or the reader is behind that rate, the watch shuts the connection's socket down, and h2o's own
 * error path then closes the connection and disposes the request, which frees the writer (or
 * the stream).
 */
#include "respond.h"
#include "gen.h"
#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

void sg_respond_init(sg_server_t *s)
{
    sg_response_budget_t *rb = &s->responses;
    atomic_init(&rb->held, 0);
    rb->m_held = sg_metrics_gauge("searchgate_response_bytes_held",
                                  "Response memory held by queries and answers in progress (result blobs and output windows).", "");
    sg_respond_set_limit(s, s->cfg->limits.max_response_bytes_inflight);
    rb->m_refused = sg_metrics_counter("searchgate_response_budget_refused_total",
                                       "Requests answered 503 because the response memory budget stayed full.", "");
    rb->m_waited = sg_metrics_counter("searchgate_response_budget_waits_total",
                                      "Requests that waited for room in the response memory budget.", "");
    rb->m_too_large_estimate =
        sg_metrics_counter("searchgate_response_too_large_total",
                           "Requests answered 413 because their answer exceeds limits.max_response_bytes.", "stage=\"estimate\"");
    rb->m_too_large_exact =
        sg_metrics_counter("searchgate_response_too_large_total",
                           "Requests answered 413 because their answer exceeds limits.max_response_bytes.", "stage=\"exact\"");
    static const char cuts[] = "Connections closed because the reader of an answer or stream took no bytes for "
                               "limits.write_timeout_ms (idle) or, after that grace, took an answer slower than "
                               "limits.min_write_bytes_per_s (slow).";
    rb->m_write_timeouts = sg_metrics_counter("searchgate_response_write_timeouts_total", cuts, "reason=\"idle\"");
    rb->m_write_slow = sg_metrics_counter("searchgate_response_write_timeouts_total", cuts, "reason=\"slow\"");
    rb->m_streamed = sg_metrics_counter("searchgate_response_streamed_total", "Answers written in more than one window.", "");
}

void sg_respond_set_limit(sg_server_t *s, uint64_t limit)
{
    atomic_store_explicit(&s->responses.limit, limit, memory_order_relaxed);
    sg_gauge_set(sg_metrics_gauge("searchgate_response_bytes_limit", "limits.max_response_bytes_inflight.", ""), (int64_t)limit);
}

uint64_t sg_respond_size(sg_blob_t *const *blobs, uint32_t n, int shape)
{
    uint64_t total = sg_respond_envelope(n);
    for (uint32_t i = 0; i < n; ++i)
        total += sg_blob_shape_len(blobs[i], shape);
    return total;
}

/* The 413 message of an answer over its bound: "<kind> <name>: the answer <how> <bytes> bytes<detail>, ...". */
static void too_large(const sg_respond_bound_t *b, const char *how, uint64_t bytes, const char *detail, char *msg, size_t msg_size)
{
    snprintf(msg, msg_size,
             "%s %s: the answer %s %llu bytes%s, over limits.max_response_bytes (%llu): ask for fewer queries or a smaller topk",
             b->kind, b->name, how, (unsigned long long)bytes, detail, (unsigned long long)b->max);
}

void sg__respond_over_estimate(sg_server_t *s, const sg_respond_bound_t *b, uint64_t low, uint32_t n, const char *unit,
                               uint64_t per, uint32_t doc, const char *note, char *msg, size_t msg_size)
{
    sg_counter_add(s->responses.m_too_large_estimate, 1);
    char detail[200];
    snprintf(detail, sizeof(detail), " (%u queries x %s %llu x ~%u bytes per document%s)", n, unit, (unsigned long long)per,
             doc / 2, note);
    too_large(b, "would be at least about", low, detail, msg, msg_size);
}

void sg__respond_over_exact(sg_server_t *s, const sg_respond_bound_t *b, uint64_t bytes, uint32_t pending, uint32_t distinct,
                            char *msg, size_t msg_size)
{
    sg_counter_add(s->responses.m_too_large_exact, 1);
    char detail[96] = "";
    if (pending != 0)
        snprintf(detail, sizeof(detail), " with %u of %u distinct queries still to come", pending, distinct);
    too_large(b, pending != 0 ? "is already" : "is", bytes, detail, msg, msg_size);
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (sg_blob_t *const *)a, y = (uintptr_t) * (sg_blob_t *const *)b;
    return x < y ? -1 : x > y;
}

uint64_t sg_respond_blob_bytes(sg_blob_t *const *blobs, uint32_t n)
{
    if (n == 0)
        return 0;
    sg_blob_t **sorted = sg_mem_alloc(n * sizeof(*sorted));
    memcpy(sorted, blobs, n * sizeof(*sorted));
    qsort(sorted, n, sizeof(*sorted), cmp_ptr);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; ++i)
        if (i == 0 || sorted[i] != sorted[i - 1])
            total += sg_blob_footprint(sorted[i]);
    free(sorted);
    return total;
}

/* ---- the write timeout ---- */

/* One log line per this many ms for each reason of a cut; the others are counted in it. */
#define CUT_LOG_MS 10000

enum { CUT_IDLE, CUT_SLOW };

static sg_log_every_t cut_log[2];

static void on_write_check(sg_timer_t *t);

static void arm_check(sg_write_watch_t *w, uint64_t now)
{
    uint32_t timeout = w->loop->gen->cfg->limits.write_timeout_ms;
    sg_timer_start(&w->loop->timers, &w->timer, now + (timeout >= 4 ? timeout / 4 : 1), on_write_check);
}

static h2o_socket_t *socket_of(h2o_req_t *req)
{
    h2o_conn_t *conn = req->conn;
    return conn->callbacks->get_socket != NULL ? conn->callbacks->get_socket(conn) : NULL;
}

/* The bytes of an answer its reader has taken: those handed to h2o, less what the kernel still
 * holds in the socket's send queue when the connection carries this answer alone (HTTP/1). */
static uint64_t bytes_taken(const sg_write_watch_t *w)
{
    uint64_t queued = w->outq > 0 && w->req->version < 0x200 ? (uint64_t)w->outq : 0;
    return w->sent > queued ? w->sent - queued : 0;
}

/* The minimum rate (limits.min_write_bytes_per_s), for answers of known size only (an event
 * stream waits for events): after a grace of write_timeout_ms from the answer's first byte, the
 * reader must have taken rate x (elapsed - grace) bytes -- so an answer of N bytes holds its
 * memory for at most grace + N / rate. */
static int too_slow(const sg_write_watch_t *w, uint64_t now, uint32_t grace)
{
    uint32_t rate = w->loop->gen->cfg->limits.min_write_bytes_per_s;
    if (rate == 0 || w->total == 0 || w->start_ms == 0 || now - w->start_ms <= grace)
        return 0;
    return bytes_taken(w) < (uint64_t)rate * (now - w->start_ms - grace) / 1000;
}

/* Counts the cut and logs it, one line per CUT_LOG_MS for each reason (any loop). */
static void report_cut(sg_write_watch_t *w, int why, uint64_t now, uint32_t timeout)
{
    sg_response_budget_t *rb = &w->loop->server->responses;
    sg_counter_add(why == CUT_SLOW ? rb->m_write_slow : rb->m_write_timeouts, 1);
    uint64_t skipped;
    if (!sg_log_due(&cut_log[why], CUT_LOG_MS, now, &skipped))
        return;
    unsigned long long more = (unsigned long long)skipped;
    if (why == CUT_SLOW)
        SG_LOG(SG_LL_WARN, "http",
               "closing a connection whose reader takes less than limits.min_write_bytes_per_s (%u bytes/s): %llu of %llu bytes "
               "of %s taken in %llu ms (%llu more such since the last line)",
               w->loop->gen->cfg->limits.min_write_bytes_per_s, (unsigned long long)bytes_taken(w), (unsigned long long)w->total,
               w->what, (unsigned long long)(now - w->start_ms), more);
    else if (w->total != 0)
        SG_LOG(SG_LL_WARN, "http",
               "closing a connection whose reader took no bytes for %u ms (%llu of %llu bytes of %s sent; %llu more such since "
               "the last line)",
               timeout, (unsigned long long)w->sent, (unsigned long long)w->total, w->what, more);
    else
        SG_LOG(
            SG_LL_WARN, "http",
            "closing a connection whose reader took no bytes for %u ms (%s, %llu bytes sent; %llu more such since the last line)",
            timeout, w->what, (unsigned long long)w->sent, more);
}

static void on_write_check(sg_timer_t *t)
{
    sg_write_watch_t *w = H2O_STRUCT_FROM_MEMBER(sg_write_watch_t, timer, t);
    uint64_t now = sg_now_ms();
    uint32_t timeout = w->loop->gen->cfg->limits.write_timeout_ms;
    h2o_socket_t *sock = socket_of(w->req);
    int queued = 0;
    if (w->timed_out)
        return;
    if (sock != NULL && ioctl(h2o_socket_get_fd(sock), TIOCOUTQ, &queued) == 0) {
        if (w->outq >= 0 && queued < w->outq)
            w->progress_ms = now; /* the reader took bytes of what the kernel holds */
        w->outq = queued;
    }
    int why = now - w->progress_ms >= timeout ? CUT_IDLE : too_slow(w, now, timeout) ? CUT_SLOW : -1;
    if (why < 0) {
        arm_check(w, now);
        return;
    }
    w->timed_out = 1;
    report_cut(w, why, now, timeout);
    /* h2o finds the socket broken at its next read or write and closes the connection itself */
    if (sock != NULL)
        shutdown(h2o_socket_get_fd(sock), SHUT_RDWR);
}

void sg_respond_watch_init(sg_write_watch_t *w, h2o_req_t *req, const char *what)
{
    memset(w, 0, sizeof(*w));
    w->loop = sg_loop_of(req);
    w->req = req;
    w->what = what;
    w->outq = -1;
}

void sg_respond_watch_progress(sg_write_watch_t *w)
{
    uint64_t now = sg_now_ms();
    w->progress_ms = now;
    if (w->start_ms == 0)
        w->start_ms = now;
    w->outq = -1;
    /* a check already due stays due: a reader taking windows often must not push the rate's check away */
    if (!w->timed_out && !sg_timer_is_armed(&w->timer))
        arm_check(w, now);
}

void sg_respond_watch_idle(sg_write_watch_t *w)
{
    sg_timer_stop(&w->loop->timers, &w->timer);
}

/* ---- the writer ---- */

typedef struct st_stream_t {
    h2o_generator_t gen;
    h2o_req_t *req;
    sg_loop_t *loop;
    sg_blob_t **blobs; /* referenced until the last piece was copied out; then NULL */
    uint32_t n;
    int shape;
    /* the cursor: stage 0 is the prefix, 1 the pieces of blob `slot` (part 0 is its separator,
     * part p its blob's piece p - 1), 2 the suffix, 3 the end; `off` bytes of the current piece
     * are out already */
    int stage;
    uint32_t slot, part;
    size_t off;
    char *window;
    size_t cap;
    char *flat;                          /* sg_respond_buffer(): the whole body, handed out in windows */
    uint64_t total;                      /* = watch.total */
    uint64_t blob_charge, window_charge; /* what the writer holds of the budget */
    sg_write_watch_t watch;              /* the write timeout */
    int sending, again;
} stream_t;

/* The piece under the cursor; 0 when blob `slot` has no piece `part` (its end). */
static int current_piece(const stream_t *st, const char **p, size_t *len)
{
    switch (st->stage) {
    case 0:
        *p = "{\"result\":[";
        *len = 11;
        return 1;
    case 1:
        if (st->part == 0) {
            *p = ",";
            *len = st->slot != 0;
            return 1;
        }
        return sg_blob_piece(st->blobs[st->slot], st->shape, st->part - 1, p, len);
    case 2:
        *p = "]}";
        *len = 2;
        return 1;
    default:
        return 0;
    }
}

/* Moves the cursor past the current piece (`ended`: there was none: the blob is over). */
static void advance(stream_t *st, int ended)
{
    st->off = 0;
    if (st->stage == 1 && !ended) {
        ++st->part;
    } else if (st->stage == 1) {
        st->part = 0;
        if (++st->slot == st->n)
            st->stage = 2;
    } else {
        st->stage = st->stage == 0 && st->n > 0 ? 1 : st->stage == 0 ? 2 : 3;
    }
}

/* Fills the window from the cursor; returns the bytes written. */
static size_t fill(stream_t *st)
{
    size_t used = 0;
    while (used < st->cap && st->stage != 3) {
        const char *p;
        size_t len;
        if (!current_piece(st, &p, &len)) {
            advance(st, 1);
            continue;
        }
        size_t take = len - st->off < st->cap - used ? len - st->off : st->cap - used;
        memcpy(st->window + used, p + st->off, take);
        used += take;
        st->off += take;
        if (st->off == len)
            advance(st, 0);
    }
    return used;
}

static void release_blobs(stream_t *st)
{
    if (st->blobs == NULL)
        return;
    for (uint32_t i = 0; i < st->n; ++i)
        sg_blob_release(st->blobs[i]);
    free(st->blobs);
    st->blobs = NULL;
    sg_respond_release(st->loop->server, st->blob_charge);
    st->blob_charge = 0;
}

/* The next window: copied from the blobs into st->window, or a slice of the flat body. */
static h2o_iovec_t next_window(stream_t *st, int *final)
{
    if (st->flat != NULL) {
        uint64_t left = st->total - st->watch.sent;
        size_t n = left < SG_RESPOND_WINDOW ? (size_t)left : SG_RESPOND_WINDOW;
        h2o_iovec_t buf = h2o_iovec_init(st->flat + st->watch.sent, n);
        st->watch.sent += n;
        *final = st->watch.sent == st->total;
        return buf;
    }
    size_t n = fill(st);
    st->watch.sent += n;
    *final = st->stage == 3;
    if (*final)
        release_blobs(st); /* copied out: the window is all that is left */
    return h2o_iovec_init(st->window, n);
}

/* Hands h2o the next window (the last one with FINAL). h2o may ask for more from inside
 * h2o_send(): the loop, not recursion, answers that. */
static void send_next(stream_t *st)
{
    if (st->sending) {
        st->again = 1;
        return;
    }
    st->sending = 1;
    do {
        st->again = 0;
        int final;
        h2o_iovec_t buf = next_window(st, &final);
        sg_respond_watch_progress(&st->watch); /* until proceed (or, after the last window, the request's end) */
        h2o_send(st->req, &buf, 1, final ? H2O_SEND_STATE_FINAL : H2O_SEND_STATE_IN_PROGRESS);
        if (final)
            break;
    } while (st->again);
    st->sending = 0;
}

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
    (void)req;
    send_next(H2O_STRUCT_FROM_MEMBER(stream_t, gen, gen));
}

static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
    (void)gen, (void)req; /* the client went away: the request's disposal frees the writer */
}

/* The request is being freed (answer written, client gone, or connection closed). */
static void on_dispose(void *p)
{
    stream_t *st = p;
    sg_respond_watch_idle(&st->watch);
    release_blobs(st);
    free(st->window);
    free(st->flat);
    sg_respond_release(st->loop->server, st->window_charge);
}

static stream_t *stream_new(h2o_req_t *req, const char *what)
{
    stream_t *st = h2o_mem_alloc_shared(&req->pool, sizeof(*st), on_dispose);
    memset(st, 0, sizeof(*st));
    st->gen.proceed = on_proceed;
    st->gen.stop = on_stop;
    st->req = req;
    st->loop = sg_loop_of(req);
    sg_respond_watch_init(&st->watch, req, what);
    return st;
}

void sg_respond_blobs(h2o_req_t *req, sg_blob_t *const *blobs, uint32_t n, int shape)
{
    stream_t *st = stream_new(req, "an answer");
    sg_loop_t *loop = st->loop;
    st->n = n;
    st->shape = shape;
    st->total = st->watch.total = sg_respond_size(blobs, n, shape);
    st->cap = st->total < SG_RESPOND_WINDOW ? (size_t)st->total : SG_RESPOND_WINDOW;
    st->window = sg_mem_alloc(st->cap);
    st->blobs = sg_mem_alloc((n != 0 ? n : 1) * sizeof(*st->blobs));
    for (uint32_t i = 0; i < n; ++i)
        st->blobs[i] = sg_blob_ref(blobs[i]);
    st->blob_charge = sg_respond_blob_bytes(blobs, n);
    st->window_charge = st->cap;
    sg_respond_grow(loop->server, st->blob_charge + st->window_charge);
    if (st->total > st->cap)
        sg_counter_add(loop->server->responses.m_streamed, 1);
    req->res.status = 200;
    req->res.reason = sg_http_reason(200);
    req->res.content_length = (size_t)st->total;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/json"));
    h2o_start_response(req, &st->gen);
    send_next(st);
}

void sg_respond_buffer(h2o_req_t *req, int status, const char *content_type, sg_buf_t *body)
{
    stream_t *st = stream_new(req, "an answer");
    sg_loop_t *loop = st->loop;
    st->flat = body->base != NULL ? body->base : sg_mem_alloc(1);
    st->total = st->watch.total = body->len;
    st->window_charge = body->cap > body->len ? body->cap : body->len; /* the memory, not the text */
    *body = (sg_buf_t){0};
    sg_respond_grow(loop->server, st->window_charge);
    if (st->total > SG_RESPOND_WINDOW)
        sg_counter_add(loop->server->responses.m_streamed, 1);
    req->res.status = status;
    req->res.reason = sg_http_reason(status);
    req->res.content_length = (size_t)st->total;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type, strlen(content_type));
    h2o_start_response(req, &st->gen);
    send_next(st);
}
