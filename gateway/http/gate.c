/*
 * gate.c -- accepting connections and judging requests on their headers (gate.h).
 *
 * Accepting. The loop accepts with accept4() itself rather than h2o_evloop_socket_accept(), which
 * returns NULL for every failure alike: out of file descriptors (EMFILE, ENFILE) the listener stays
 * readable, and a level-triggered loop that retries at once spins a core doing nothing. The gate
 * stops polling the listener for PAUSE_MS instead, counts and logs it (at most one line per loop
 * every PAUSE_LOG_MS, naming RLIMIT_NOFILE), and tries again; meanwhile new connections wait in the
 * kernel's listen backlog and are served once connections close. A loop accepts on each of the
 * server's listeners (every `listen` entry: TCP sockets of its own, a Unix domain socket shared by
 * dup()); a connection is judged by its listener's rules (its allowed_hosts and allowed_origins,
 * whether its address is loopback, a wildcard, an interface's or a Unix socket, its h2c), and h2o
 * gets it with that listener's own host list, by which later requests find the listener again.
 *
 * The first request of a connection. A new socket is created with H2O_SOCKET_FLAG_DONT_READ: h2o
 * only reports readiness and the gate recv()s the head itself, at most h2o's own H2O_MAX_REQLEN,
 * parsing it with picohttpparser as h2o will. A head that fails a check (judge()) is answered here
 * -- 401/403, and 413 when Content-Length is over limits.max_body_bytes -- without reading its body:
 * the answer says Connection: close, the write side is shut, and what the client still sends is
 * read into a scratch buffer and dropped (nothing is kept), up to its declared length when that is
 * at most twice the limit and for at most LINGER_MS, so a client that writes its whole body before
 * reading (most do) gets the answer rather than a reset. A head that passes, with a Content-Length
 * body, has that body read here too, into the socket's own input buffer, so that a body shorter
 * than announced gets a JSON 408 when listen.read_timeout_ms runs out (h2o would close without a
 * word). Then the socket goes to h2o (h2o_accept), which finds the whole request already buffered.
 * Heads h2o must answer itself (malformed, too long, chunked, Expect, an HTTP/2 preface) are handed
 * over as they are.
 */
#include "gate.h"
#include "http_common.h"
#include "gen.h"
#include "clients.h"
#include "json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* picohttpparser, the request parser h2o runs: libh2o exports it, but its header is not installed */
struct phr_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len, const char **path, size_t *path_len,
                      int *minor_version, struct phr_header *headers, size_t *num_headers, size_t last_len);

#define READ_CHUNK 16384
#define READ_ROUNDS 64     /* recv()s per readiness report before other sockets get a turn */
#define LINGER_MS 5000     /* longest a refused connection is written to and drained */
#define PAUSE_MS 100       /* accepting pauses this long when no file descriptor is left */
#define PAUSE_LOG_MS 10000 /* at most one line about it per loop this often */
#define ECHO_MAX 96        /* bytes of a refused Host or Origin quoted back */

enum { REASON_KEY, REASON_HOST, REASON_ORIGIN, REASON_TOO_LARGE, REASON_READ_TIMEOUT, N_REASONS };
static const char *const reason_names[N_REASONS] = {"key", "host", "origin", "too_large", "read_timeout"};
enum { FD_EMFILE, FD_ENFILE, FD_OTHER, N_FD_ERRORS };
static const char *const fd_error_names[N_FD_ERRORS] = {"EMFILE", "ENFILE", "other"};

/* One listener's door, in s->listeners order (server.h: s->gate). */
struct st_sg_gate_listener_t {
    const sg_listen_conf_t *conf;
    int is_unix;
    int enforce_host;      /* Host must be a loopback name, the listen address or in its allowed_hosts */
    int trust_listen_host; /* the listen address is not a wildcard: a Host naming it is the gateway's own */
    /* the NULL-terminated host lists h2o_accept() gives its HTTP/1 and HTTP/2 connections: arrays of
     * their own (holding the one hostconf of each h2o configuration), so req->conn->hosts tells which
     * listener a request came through (sg_gate_check_request) */
    h2o_hostconf_t *hosts[2];
    h2o_hostconf_t *h2c_hosts[2];
};

/* A loop's listener socket's data: which listener it is. */
typedef struct st_accepting_t {
    sg_gate_loop_t *gl;
    const sg_gate_listener_t *via;
} accepting_t;

/* registered once by sg_gate_init(); the loops only add */
static struct {
    sg_counter_t *refused[N_REASONS];
    sg_counter_t *accept_paused[N_FD_ERRORS];
} gate_metrics;

struct st_sg_gate_loop_t {
    sg_loop_t *loop;
    h2o_linklist_t conns;     /* gate_conn_t not handed to h2o yet */
    sg_timer_t resume;        /* accepting again after a pause */
    uint64_t paused_since_ms; /* 0 when accepting */
    uint64_t last_log_ms;
    uint64_t unlogged_pauses;
    int stopped;
    accepting_t *accepting; /* one per listener */
};

enum { G_HEAD, G_BODY, G_WRITE, G_LINGER };

typedef struct st_gate_conn_t {
    sg_loop_t *loop;
    const sg_gate_listener_t *via; /* the listener it came through */
    h2o_socket_t *sock;
    h2o_linklist_t link;
    sg_timer_t timer;    /* the read timeout, then the linger deadline */
    int state;           /* G_* */
    size_t want;         /* G_BODY: head + Content-Length, the bytes that make the whole request */
    uint64_t drain_left; /* G_LINGER: bytes the client may still send that are read and dropped */
    sg_buf_t out;        /* G_WRITE: the refusal */
    int http2;           /* opens with the HTTP/2 preface or asks for Upgrade: h2c */
} gate_conn_t;

/* What the checks look at, from a raw head or from an h2o request. */
typedef struct st_gate_head_t {
    h2o_iovec_t method, path; /* path: the query is ignored */
    h2o_iovec_t host;         /* Host (HTTP/2: :authority); base NULL when absent */
    h2o_iovec_t origin;       /* the first Origin; base NULL when absent */
    int origins_differ;       /* several Origin headers that disagree */
    h2o_iovec_t key;          /* the presented API key; base NULL when none */
    const char *key_why;      /* non-NULL: the headers present two different keys */
} gate_head_t;

/* How the body of a raw head is framed, as h2o will read it. */
typedef struct st_framing_t {
    size_t content_length; /* the first Content-Length; SIZE_MAX when absent or malformed */
    int has_cl, chunked, expect;
    int upgrade_h2c; /* Upgrade: h2c */
} framing_t;

typedef struct st_verdict_t {
    int status;        /* 0: the request goes on */
    int reason;        /* REASON_* */
    const char *type;  /* the error type of the JSON body */
    int authenticated; /* a valid key was presented, or none is required */
    char msg[384];
} verdict_t;

/* ---- the checks ---- */

/* The host of a Host value: the port removed (an IPv6 literal keeps its brackets), and a trailing
 * dot ("localhost.") too. */
static h2o_iovec_t host_part(h2o_iovec_t hp)
{
    if (hp.len > 0 && hp.base[0] == '[') {
        const char *close = memchr(hp.base, ']', hp.len);
        hp.len = close != NULL ? (size_t)(close - hp.base) + 1 : hp.len;
    } else {
        const char *colon = memchr(hp.base, ':', hp.len);
        hp.len = colon != NULL ? (size_t)(colon - hp.base) : hp.len;
    }
    if (hp.len > 1 && hp.base[hp.len - 1] == '.')
        --hp.len;
    return hp;
}

/* localhost, 127.0.0.0/8, [::1] and [::ffff:127.x.y.z]. */
static int is_loopback_host(h2o_iovec_t h)
{
    char tmp[64];
    if (h2o_lcstris(h.base, h.len, H2O_STRLIT("localhost")))
        return 1;
    if (h.len < 3 || h.len >= sizeof(tmp))
        return 0;
    if (h.base[0] == '[') {
        memcpy(tmp, h.base + 1, h.len - 2);
        tmp[h.len - 2] = '\0';
        struct in6_addr a6;
        if (h.base[h.len - 1] != ']' || inet_pton(AF_INET6, tmp, &a6) != 1)
            return 0;
        return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
    }
    memcpy(tmp, h.base, h.len);
    tmp[h.len] = '\0';
    struct in_addr a4;
    return inet_pton(AF_INET, tmp, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* `pattern` (lower case, from listen.allowed_hosts): a name, "*.suffix" or "*". */
static int host_matches(const char *pattern, h2o_iovec_t h)
{
    size_t pl = strlen(pattern);
    if (pl == 1 && pattern[0] == '*')
        return 1;
    if (pl > 2 && pattern[0] == '*' && pattern[1] == '.')
        return h.len > pl - 1 && h2o_lcstris(h.base + h.len - (pl - 1), pl - 1, pattern + 1, pl - 1);
    return h2o_lcstris(h.base, h.len, pattern, pl);
}

/* A Host the listener answers to: a loopback name or address, the address it listens on (when not
 * a wildcard), or one of its allowed_hosts. */
static int host_trusted(const sg_gate_listener_t *via, h2o_iovec_t hostport)
{
    const sg_listen_conf_t *lc = via->conf;
    h2o_iovec_t h = host_part(hostport);
    if (is_loopback_host(h))
        return 1;
    if (via->trust_listen_host && strlen(lc->host) == h.len && strncasecmp(lc->host, h.base, h.len) == 0)
        return 1;
    for (size_t i = 0; i < lc->n_allowed_hosts; ++i)
        if (host_matches(lc->allowed_hosts[i], h))
            return 1;
    return 0;
}

/* Listed in the listener's allowed_origins, or the request's own origin: scheme://Host, with a
 * Host the listener answers to (a rebound name is not, so a page on it is not same-origin here). */
static int origin_allowed(const sg_gate_listener_t *via, h2o_iovec_t origin, h2o_iovec_t host)
{
    const sg_listen_conf_t *lc = via->conf;
    for (size_t i = 0; i < lc->n_allowed_origins; ++i) {
        const char *o = lc->allowed_origins[i];
        if (strcmp(o, "*") == 0 || h2o_lcstris(origin.base, origin.len, o, strlen(o)))
            return 1;
    }
    size_t skip = origin.len > 7 && strncasecmp(origin.base, "http://", 7) == 0    ? 7
                  : origin.len > 8 && strncasecmp(origin.base, "https://", 8) == 0 ? 8
                                                                                   : 0;
    if (skip == 0 || host.base == NULL)
        return 0;
    return origin.len - skip == host.len && strncasecmp(origin.base + skip, host.base, host.len) == 0 && host_trusted(via, host);
}

/* GET or HEAD of a route that needs no key: /health (probes) and /dashboard (a page without data). */
static int open_route(h2o_iovec_t method, h2o_iovec_t path)
{
    if (!h2o_memis(method.base, method.len, H2O_STRLIT("GET")) && !h2o_memis(method.base, method.len, H2O_STRLIT("HEAD")))
        return 0;
    const char *q = memchr(path.base, '?', path.len);
    size_t n = q != NULL ? (size_t)(q - path.base) : path.len;
    return h2o_memis(path.base, n, H2O_STRLIT("/health")) || h2o_memis(path.base, n, H2O_STRLIT("/dashboard"));
}

/* Printable ASCII of a header value, for quoting it in a message. */
static void quote(char *dst, size_t size, h2o_iovec_t v)
{
    size_t n = v.len < size - 1 ? v.len : size - 1;
    for (size_t i = 0; i < n; ++i)
        dst[i] = v.base[i] >= 0x20 && v.base[i] < 0x7f && v.base[i] != '"' ? v.base[i] : '?';
    dst[n] = '\0';
}

/* Host, then Origin, then the key: 403 or 401 in `v`, or v->status 0. Nothing in an answer depends
 * on the route the request names. */
static void deny(verdict_t *v, int status, int reason, const char *type)
{
    v->status = status;
    v->reason = reason;
    v->type = type;
}

/* `g`: the configuration generation the request is judged by (its keys); `via`: the listener it
 * came through, whose Host and Origin rules are the start-up config's (s->cfg). */
static void judge(const sg_gate_listener_t *via, const sg_gen_t *g, const gate_head_t *h, verdict_t *v)
{
    const sg_config_t *cfg = g->cfg;
    char q[ECHO_MAX];
    memset(v, 0, sizeof(*v));
    v->authenticated = !cfg->clients.require_key;
    if (via->enforce_host && h->host.base != NULL && !host_trusted(via, h->host)) {
        quote(q, sizeof(q), h->host);
        snprintf(v->msg, sizeof(v->msg),
                 "Host \"%s\" is not served here: requests must name a loopback host (localhost, 127.0.0.1, [::1])%s or one of "
                 "%s.allowed_hosts (a guard against DNS rebinding)",
                 q, via->trust_listen_host ? ", the listen address" : "", via->conf->where);
        deny(v, 403, REASON_HOST, "forbidden");
        return;
    }
    if (h->origin.base != NULL && (h->origins_differ || !origin_allowed(via, h->origin, h->host))) {
        quote(q, sizeof(q), h->origin);
        snprintf(v->msg, sizeof(v->msg),
                 "Origin \"%s\" is not allowed: requests from web pages of other origins are refused unless %s.allowed_origins "
                 "lists the origin",
                 q, via->conf->where);
        deny(v, 403, REASON_ORIGIN, "forbidden");
        return;
    }
    if (!cfg->clients.require_key)
        return;
    const char *why = h->key_why;
    if (why == NULL)
        v->authenticated = sg_clients_key_valid(g->clients, h->key.base, h->key.len, &why);
    if (!v->authenticated && !open_route(h->method, h->path)) {
        snprintf(v->msg, sizeof(v->msg), "%s", why);
        deny(v, 401, REASON_KEY, "unauthorized");
    }
}

/* The path without its query. */
static h2o_iovec_t path_only(h2o_iovec_t path)
{
    const char *q = memchr(path.base, '?', path.len);
    return h2o_iovec_init(path.base, q != NULL ? (size_t)(q - path.base) : path.len);
}

/* The error body: JSON-RPC's shape (id null: the message was not read) on the MCP endpoints, as
 * they answer their own errors, the gateway's everywhere else. The shape follows the path alone,
 * whether MCP is on or not, so it tells nothing of the configuration. */
static void error_body(sg_buf_t *b, h2o_iovec_t path, int status, const char *type, const char *msg)
{
    h2o_iovec_t p = path_only(path);
    if (!h2o_memis(p.base, p.len, H2O_STRLIT("/mcp")) && !h2o_memis(p.base, p.len, H2O_STRLIT("/sse")) &&
        !h2o_memis(p.base, p.len, H2O_STRLIT("/messages"))) {
        sg_json_error_body(b, status, type, msg);
        return;
    }
    sg_jw_t w;
    sg_jw_init(&w, b);
    sg_jw_obj(&w);
    sg_jw_kstr(&w, "jsonrpc", "2.0");
    sg_jw_key(&w, "id");
    sg_jw_null(&w);
    sg_jw_key(&w, "error");
    sg_jw_obj(&w);
    sg_jw_ki64(&w, "code", -32600); /* Invalid Request */
    sg_jw_kstr(&w, "message", msg);
    sg_jw_end(&w);
    sg_jw_end(&w);
}

static void count(const sg_server_t *s, h2o_iovec_t path, int status, int reason)
{
    sg_counter_add(s->http_requests[sg_ops_route_index(path_only(path))][sg_code_index(status)], 1);
    sg_counter_add(gate_metrics.refused[reason], 1);
}

/* ---- a raw head ---- */

/* Fills `h` and `f` from the parsed headers the way h2o reads them: the last Host, the first
 * Content-Length unless a Transfer-Encoding is present, the API key headers folded together. */
static void read_headers(const struct phr_header *hd, size_t n, gate_head_t *h, framing_t *f)
{
    for (size_t i = 0; i < n; ++i) {
        if (hd[i].name == NULL) /* a folded continuation line */
            continue;
        h2o_iovec_t v = h2o_iovec_init(hd[i].value, hd[i].value_len);
        if (h2o_lcstris(hd[i].name, hd[i].name_len, H2O_STRLIT("host"))) {
            h->host = v;
        } else if (h2o_lcstris(hd[i].name, hd[i].name_len, H2O_STRLIT("origin"))) {
            if (h->origin.base == NULL)
                h->origin = v;
            else if (!h2o_memis(h->origin.base, h->origin.len, v.base, v.len))
                h->origins_differ = 1;
        } else if (h2o_lcstris(hd[i].name, hd[i].name_len, H2O_STRLIT("content-length"))) {
            if (!f->has_cl)
                f->content_length = h2o_strtosize(v.base, v.len);
            f->has_cl = 1;
        } else if (h2o_lcstris(hd[i].name, hd[i].name_len, H2O_STRLIT("transfer-encoding"))) {
            f->chunked = 1;
        } else if (h2o_lcstris(hd[i].name, hd[i].name_len, H2O_STRLIT("expect"))) {
            f->expect = 1;
        } else if (h2o_lcstris(hd[i].name, hd[i].name_len, H2O_STRLIT("upgrade"))) {
            f->upgrade_h2c |= h2o_contains_token(v.base, v.len, H2O_STRLIT("h2c"), ',');
        } else if (h->key_why == NULL) {
            sg_clients_key_header(hd[i].name, hd[i].name_len, v, &h->key, &h->key_why);
        }
    }
}

/* -2 incomplete, -1 malformed, else the length of the head. */
static int parse_head(const char *buf, size_t len, size_t last_len, gate_head_t *h, framing_t *f)
{
    struct phr_header hd[H2O_MAX_HEADERS];
    size_t n = H2O_MAX_HEADERS;
    int minor;
    memset(h, 0, sizeof(*h));
    memset(f, 0, sizeof(*f));
    f->content_length = SIZE_MAX;
    int r = phr_parse_request(buf, len, (const char **)&h->method.base, &h->method.len, (const char **)&h->path.base, &h->path.len,
                              &minor, hd, &n, last_len);
    if (r > 0)
        read_headers(hd, n, h, f);
    return r;
}

/* ---- a connection at the gate ---- */

static void conn_free(gate_conn_t *g)
{
    sg_timer_stop(&g->loop->timers, &g->timer);
    h2o_linklist_unlink(&g->link);
    sg_buf_free(&g->out);
    free(g);
}

static void conn_close(gate_conn_t *g)
{
    h2o_socket_t *sock = g->sock;
    conn_free(g);
    h2o_socket_close(sock);
}

/* The request is h2o's from here: it finds whatever the gate read in the socket's input. An
 * HTTP/2 connection (on a listener with h2c) goes to the loop's HTTP/2 context, whose body limit
 * is listen's h2c_max_body_bytes (server.c, configure_h2o); the HTTP/1 context never upgrades. The
 * connection gets its listener's host list, which marks it as that listener's. */
static void pass(gate_conn_t *g)
{
    h2o_socket_t *sock = g->sock;
    sg_loop_t *l = g->loop;
    const sg_gate_listener_t *via = g->via;
    int http2 = g->http2 && l->has_h2c && via->conf->h2c;
    conn_free(g);
    h2o_socket_read_stop(sock);
    h2o_socket_dont_read(sock, 0);
    sock->data = NULL;
    h2o_accept_ctx_t actx = http2 ? l->h2c_accept_ctx : l->accept_ctx; /* h2o_accept() keeps no pointer to it */
    actx.hosts = http2 ? (h2o_hostconf_t **)via->h2c_hosts : (h2o_hostconf_t **)via->hosts;
    h2o_accept(&actx, sock);
}

/* Reads at most `max` bytes more into the socket's input. Returns the count, 0 when nothing is
 * waiting, -1 at the end of the stream or on an error. */
static ssize_t read_some(h2o_socket_t *sock, size_t max)
{
    h2o_iovec_t buf = h2o_buffer_reserve(&sock->input, max < READ_CHUNK ? max : READ_CHUNK);
    if (buf.base == NULL)
        return -1;
    ssize_t r;
    while ((r = recv(h2o_socket_get_fd(sock), buf.base, buf.len < max ? buf.len : max, 0)) == -1 && errno == EINTR)
        ;
    if (r > 0) {
        sock->input->size += (size_t)r;
        return r;
    }
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
}

static void on_timeout(sg_timer_t *t);
static void on_read(h2o_socket_t *sock, const char *err);

static void on_written(h2o_socket_t *sock, const char *err)
{
    gate_conn_t *g = sock->data;
    if (err != NULL || g->drain_left == 0) {
        conn_close(g);
        return;
    }
    shutdown(h2o_socket_get_fd(sock), SHUT_WR); /* the answer is complete: the client sees the end of it */
    g->state = G_LINGER;
    h2o_socket_read_start(sock, on_read);
}

/* Answers with a JSON error, Connection: close, and drains `drain` bytes the client may still send. */
static void refuse(gate_conn_t *g, h2o_iovec_t path, int status, const char *type, const char *msg, int head_only, uint64_t drain)
{
    sg_buf_t body = {0};
    error_body(&body, path, status, type, msg);
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    sg_buf_appendf(&g->out,
                   "HTTP/1.1 %d %s\r\nDate: %s\r\nConnection: close\r\nContent-Length: %zu\r\nServer: searchgate/" SG_VERSION
                   "\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n%s\r\n",
                   status, sg_http_reason(status), date, body.len,
                   status == 401 ? "WWW-Authenticate: Bearer realm=\"searchgate\"\r\n" : "");
    if (!head_only)
        sg_buf_append(&g->out, body.base, body.len);
    sg_buf_free(&body);
    h2o_buffer_consume(&g->sock->input, g->sock->input->size);
    h2o_socket_read_stop(g->sock);
    g->state = G_WRITE;
    g->drain_left = drain;
    sg_timer_start(&g->loop->timers, &g->timer, sg_now_ms() + LINGER_MS, on_timeout);
    h2o_iovec_t iov = h2o_iovec_init(g->out.base, g->out.len);
    h2o_socket_write(g->sock, &iov, 1, on_written);
}

/* What a refused client may still send, to be read and dropped: the rest of a declared body of at
 * most twice limits.max_body_bytes (h2o's own bound), a chunked body up to that bound. */
static uint64_t drain_budget(const sg_server_t *s, const framing_t *f, size_t body_read)
{
    uint64_t cap = 2 * (uint64_t)s->cfg->limits.max_body_bytes;
    if (f->chunked)
        return cap;
    if (!f->has_cl || f->content_length == SIZE_MAX || f->content_length > cap)
        return 0;
    return f->content_length > body_read ? f->content_length - body_read : 0;
}

static int is_head_method(h2o_iovec_t m)
{
    return h2o_memis(m.base, m.len, H2O_STRLIT("HEAD"));
}

/* A complete head: judged, then refused, handed to h2o, or its body read here first. */
static void on_head(gate_conn_t *g, size_t head_len, const gate_head_t *h, const framing_t *f)
{
    const sg_server_t *s = g->loop->server;
    size_t body_read = g->sock->input->size - head_len;
    g->http2 = f->upgrade_h2c;
    verdict_t v;
    sg_loop_refresh_gen(g->loop); /* keys removed by a reload are refused from the next request on */
    judge(g->via, g->loop->gen, h, &v);
    if (v.status != 0) {
        count(s, h->path, v.status, v.reason);
        refuse(g, h->path, v.status, v.type, v.msg, is_head_method(h->method), drain_budget(s, f, body_read));
        return;
    }
    if (f->chunked || !f->has_cl || f->content_length == SIZE_MAX || f->expect || f->content_length <= body_read) {
        pass(g); /* no body, a complete one, or one h2o reads or refuses itself */
        return;
    }
    if (f->content_length > s->cfg->limits.max_body_bytes) {
        char msg[200];
        snprintf(msg, sizeof(msg), "request body of %zu bytes (Content-Length) is over limits.max_body_bytes (%zu bytes)",
                 f->content_length, s->cfg->limits.max_body_bytes);
        count(s, h->path, 413, REASON_TOO_LARGE);
        refuse(g, h->path, 413, "too_large", msg, 0, drain_budget(s, f, body_read));
        return;
    }
    g->state = G_BODY;
    g->want = head_len + f->content_length;
}

static void read_head(gate_conn_t *g)
{
    h2o_socket_t *sock = g->sock;
    for (int i = 0; i < READ_ROUNDS; ++i) {
        size_t have = sock->input->size;
        if (have >= H2O_MAX_REQLEN) { /* over h2o's limit for a head: h2o answers 400 */
            pass(g);
            return;
        }
        ssize_t r = read_some(sock, H2O_MAX_REQLEN - have);
        if (r <= 0) {
            if (r < 0)
                conn_close(g);
            return;
        }
        gate_head_t h;
        framing_t f;
        int len = parse_head(sock->input->bytes, sock->input->size, have, &h, &f);
        if (len == -1) { /* h2o answers it: a 400, or HTTP/2 after its connection preface */
            static const char preface[] = "PRI * HTTP/2.0\r\n";
            g->http2 = sock->input->size >= sizeof(preface) - 1 && memcmp(sock->input->bytes, preface, sizeof(preface) - 1) == 0;
            pass(g);
            return;
        }
        if (len > 0) { /* `g` may be gone after this: handed to h2o */
            on_head(g, (size_t)len, &h, &f);
            return;
        }
    }
}

static void read_body(gate_conn_t *g)
{
    for (int i = 0; i < READ_ROUNDS && g->sock->input->size < g->want; ++i) {
        ssize_t r = read_some(g->sock, g->want - g->sock->input->size);
        if (r < 0) {
            conn_close(g);
            return;
        }
        if (r == 0)
            return;
    }
    if (g->sock->input->size >= g->want)
        pass(g);
}

static void drain(gate_conn_t *g)
{
    char scratch[READ_CHUNK];
    for (int i = 0; i < READ_ROUNDS; ++i) {
        size_t want = g->drain_left < sizeof(scratch) ? (size_t)g->drain_left : sizeof(scratch);
        ssize_t r = recv(h2o_socket_get_fd(g->sock), scratch, want, 0);
        if (r > 0 && (g->drain_left -= (uint64_t)r) > 0)
            continue;
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        conn_close(g); /* all of it read, the end of the stream, or an error */
        return;
    }
}

static void on_read(h2o_socket_t *sock, const char *err)
{
    gate_conn_t *g = sock->data;
    if (err != NULL) {
        conn_close(g);
        return;
    }
    switch (g->state) {
    case G_HEAD:
        read_head(g);
        break;
    case G_BODY:
        read_body(g);
        break;
    case G_LINGER:
        drain(g);
        break;
    default: /* G_WRITE: reading is stopped */
        break;
    }
}

static void on_timeout(sg_timer_t *t)
{
    gate_conn_t *g = H2O_STRUCT_FROM_MEMBER(gate_conn_t, timer, t);
    if (g->state != G_BODY) { /* no request yet (as h2o, closed without a word), or a refusal done with */
        conn_close(g);
        return;
    }
    const sg_server_t *s = g->loop->server;
    char msg[200];
    snprintf(msg, sizeof(msg), "the request body was not received in full within listen.read_timeout_ms (%u ms)",
             s->cfg->listen_common.read_timeout_ms);
    h2o_iovec_t path = h2o_iovec_init(NULL, 0); /* the head was parsed and is gone: find the path again */
    gate_head_t h;
    framing_t f;
    if (parse_head(g->sock->input->bytes, g->sock->input->size, 0, &h, &f) > 0)
        path = h.path;
    count(s, path, 408, REASON_READ_TIMEOUT);
    refuse(g, path, 408, "request_timeout", msg, 0, 0);
}

static void conn_open(sg_loop_t *l, const sg_gate_listener_t *via, int fd)
{
    int on = 1;
    if (!via->is_unix)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    gate_conn_t *g = sg_mem_calloc(1, sizeof(*g));
    g->loop = l;
    g->via = via;
    g->state = G_HEAD;
    g->sock = h2o_evloop_socket_create(l->loop, fd, H2O_SOCKET_FLAG_IS_ACCEPTED_CONNECTION | H2O_SOCKET_FLAG_DONT_READ);
    g->sock->data = g;
    h2o_linklist_insert(&l->gate->conns, &g->link);
    sg_timer_start(&l->timers, &g->timer, sg_now_ms() + l->server->cfg->listen_common.read_timeout_ms, on_timeout);
    h2o_socket_read_start(g->sock, on_read);
}

/* ---- accepting ---- */

static void on_accept(h2o_socket_t *listener, const char *err);

static void on_resume(sg_timer_t *t)
{
    sg_gate_loop_t *gl = H2O_STRUCT_FROM_MEMBER(sg_gate_loop_t, resume, t);
    sg_loop_t *l = gl->loop;
    for (size_t i = 0; !gl->stopped && i < l->server->n_listeners; ++i)
        if (l->listeners[i] != NULL)
            h2o_socket_read_start(l->listeners[i], on_accept);
}

static void pause_accepting(sg_loop_t *l, int e)
{
    sg_gate_loop_t *gl = l->gate;
    uint64_t now = sg_now_ms();
    int which = e == EMFILE ? FD_EMFILE : e == ENFILE ? FD_ENFILE : FD_OTHER;
    sg_counter_add(gate_metrics.accept_paused[which], 1);
    for (size_t i = 0; i < l->server->n_listeners; ++i) /* the descriptors are the process's: no listener could accept */
        h2o_socket_read_stop(l->listeners[i]);
    if (gl->paused_since_ms == 0)
        gl->paused_since_ms = now;
    ++gl->unlogged_pauses;
    if (gl->last_log_ms == 0 || now - gl->last_log_ms >= PAUSE_LOG_MS) {
        struct rlimit rl = {0, 0};
        getrlimit(RLIMIT_NOFILE, &rl);
        SG_LOG(SG_LL_WARN, "accept",
               "loop %d: accept() failed: %s (RLIMIT_NOFILE %llu): not accepting for %d ms at a time, new connections wait in the "
               "listen backlog (%llu pauses since the last line)",
               l->id, strerror(e), (unsigned long long)rl.rlim_cur, PAUSE_MS, (unsigned long long)gl->unlogged_pauses);
        gl->last_log_ms = now;
        gl->unlogged_pauses = 0;
    }
    sg_timer_start(&l->timers, &gl->resume, now + PAUSE_MS, on_resume);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    const accepting_t *acc = listener->data;
    sg_loop_t *l = acc->gl->loop;
    if (err != NULL)
        return;
    for (int i = 0; i < 64; ++i) { /* accept a burst, then give other events a turn */
        int fd = accept4(h2o_socket_get_fd(listener), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (l->gate->paused_since_ms != 0) {
                SG_LOG(SG_LL_INFO, "accept", "loop %d: accepting again after %.1f s short of file descriptors", l->id,
                       (double)(sg_now_ms() - l->gate->paused_since_ms) / 1000.0);
                l->gate->paused_since_ms = 0;
            }
            conn_open(l, acc->via, fd);
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == EPERM)
            continue; /* that connection is gone; the next may be fine */
        pause_accepting(l, errno);
        return;
    }
}

/* ---- life cycle ---- */

void sg_gate_init(sg_server_t *s)
{
    s->gate = sg_mem_calloc(s->n_listeners, sizeof(*s->gate));
    for (size_t i = 0; i < s->n_listeners; ++i) {
        sg_gate_listener_t *via = &s->gate[i];
        const sg_listener_t *li = &s->listeners[i];
        via->conf = li->conf;
        via->is_unix = li->kind == SG_LISTEN_UNIX;
        /* bound to loopback: only loopback names reach it legitimately; elsewhere (a wildcard,
         * an interface, a Unix domain socket, whose clients may send any Host) the names clients
         * use are unknown unless listed, and a listed one turns the check on */
        via->enforce_host = li->kind == SG_LISTEN_LOOPBACK || li->conf->n_allowed_hosts > 0;
        via->trust_listen_host = li->kind == SG_LISTEN_OTHER;
        via->hosts[0] = s->h2o.hosts[0];
        via->h2c_hosts[0] = s->cfg->listen_common.any_h2c ? s->h2o_h2c.hosts[0] : NULL;
    }
    for (int i = 0; i < N_REASONS; ++i) {
        char l[48];
        snprintf(l, sizeof(l), "reason=\"%s\"", reason_names[i]);
        gate_metrics.refused[i] =
            sg_metrics_counter("searchgate_http_refused_total",
                               "Requests refused before routing: on their headers (key, host, origin; too_large by "
                               "Content-Length) or because their body stopped short (read_timeout).",
                               l);
    }
    for (int i = 0; i < N_FD_ERRORS; ++i) {
        char l[48];
        snprintf(l, sizeof(l), "errno=\"%s\"", fd_error_names[i]);
        gate_metrics.accept_paused[i] =
            sg_metrics_counter("searchgate_accept_paused_total",
                               "Times accept() failed for want of a file descriptor (or kernel memory) and the "
                               "listener was paused for 100 ms.",
                               l);
    }
}

void sg_gate_dispose(sg_server_t *s)
{
    free(s->gate);
    s->gate = NULL;
}

void sg_gate_start_loop(sg_loop_t *l)
{
    sg_gate_loop_t *gl = sg_mem_calloc(1, sizeof(*gl));
    const sg_server_t *s = l->server;
    l->gate = gl;
    gl->loop = l;
    h2o_linklist_init_anchor(&gl->conns);
    gl->accepting = sg_mem_calloc(s->n_listeners, sizeof(*gl->accepting));
    for (size_t i = 0; i < s->n_listeners; ++i) {
        gl->accepting[i].gl = gl;
        gl->accepting[i].via = &s->gate[i];
        l->listeners[i]->data = &gl->accepting[i];
        h2o_socket_read_start(l->listeners[i], on_accept);
    }
}

void sg_gate_stop_loop(sg_loop_t *l)
{
    sg_gate_loop_t *gl = l->gate;
    gl->stopped = 1;
    sg_timer_stop(&l->timers, &gl->resume);
    for (size_t i = 0; i < l->server->n_listeners; ++i)
        if (l->listeners[i] != NULL)
            h2o_socket_read_stop(l->listeners[i]);
    /* a connection still waiting for its first request is idle: it closes, as h2o closes idle
     * keep-alive connections; a body being read or a refusal being written finishes (its timer
     * bounds it) */
    for (h2o_linklist_t *n = gl->conns.next, *next; n != &gl->conns; n = next) {
        next = n->next;
        gate_conn_t *g = H2O_STRUCT_FROM_MEMBER(gate_conn_t, link, n);
        if (g->state == G_HEAD)
            conn_close(g);
    }
}

int sg_gate_busy(sg_loop_t *l)
{
    return !h2o_linklist_is_empty(&l->gate->conns);
}

void sg_gate_dispose_loop(sg_loop_t *l)
{
    sg_gate_loop_t *gl = l->gate;
    while (!h2o_linklist_is_empty(&gl->conns))
        conn_close(H2O_STRUCT_FROM_MEMBER(gate_conn_t, link, gl->conns.next));
    free(gl->accepting);
    free(gl);
    l->gate = NULL;
}

/* ---- the handler's check ---- */

/* The listener a request's connection came through: its host list is that listener's (pass()). */
static const sg_gate_listener_t *listener_of(const sg_server_t *s, h2o_req_t *req)
{
    for (size_t i = 0; i < s->n_listeners; ++i)
        if (req->conn->hosts == s->gate[i].hosts || req->conn->hosts == s->gate[i].h2c_hosts)
            return &s->gate[i];
    return &s->gate[0]; /* not reached: every connection is handed to h2o by pass() */
}

int sg_gate_check_request(sg_loop_t *l, h2o_req_t *req)
{
    const sg_server_t *s = l->server;
    gate_head_t h = {.method = req->method, .path = req->path_normalized};
    /* h2o puts its default authority in place of a missing Host */
    if (req->input.authority.base != req->hostconf->authority.hostport.base)
        h.host = req->input.authority;
    for (ssize_t i = -1; (i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("origin"), i)) >= 0;) {
        h2o_iovec_t v = req->headers.entries[i].value;
        if (h.origin.base == NULL)
            h.origin = v;
        else if (!h2o_memis(h.origin.base, h.origin.len, v.base, v.len))
            h.origins_differ = 1;
    }
    sg_clients_presented_key(req, &h.key, &h.key_why);
    verdict_t v;
    judge(listener_of(s, req), l->gen, &h, &v);
    if (!v.authenticated) /* the next request on this connection passes the gate again */
        req->http1_is_persistent = 0;
    if (v.status == 0)
        return 0;
    req->http1_is_persistent = 0;
    count(s, h.path, v.status, v.reason);
    if (v.status == 401)
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL, H2O_STRLIT("Bearer realm=\"searchgate\""));
    sg_buf_t body = {0};
    error_body(&body, h.path, v.status, v.type, v.msg);
    sg_send_json(req, v.status, body.base, body.len);
    sg_buf_free(&body);
    return 1;
}
