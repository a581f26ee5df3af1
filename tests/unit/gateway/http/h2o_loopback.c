/*
 * h2o_loopback.c -- an HTTP request without a socket (h2o_loopback.h). The connection is an
 * h2o_conn_t with callbacks of its own, the request one h2o_req_t whose output chain ends in
 * capture(); h2o's own handlers, filters and generators run unchanged in front of it.
 */
#include "h2o_loopback.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static socklen_t fill_addr(struct sockaddr *sa, uint16_t port)
{
    struct sockaddr_in *in = (struct sockaddr_in *)sa;
    memset(in, 0, sizeof(*in));
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    in->sin_port = htons(port);
    return sizeof(*in);
}

static socklen_t lb_sockname(h2o_conn_t *conn, struct sockaddr *sa)
{
    (void)conn;
    return fill_addr(sa, 8000);
}

static socklen_t lb_peername(h2o_conn_t *conn, struct sockaddr *sa)
{
    (void)conn;
    return fill_addr(sa, 55555);
}

static void append_body(lb_conn_t *c, const char *p, size_t n)
{
    if (c->body_len + n + 1 > c->body_cap) {
        size_t cap = c->body_cap * 2 > c->body_len + n + 1 ? c->body_cap * 2 : c->body_len + n + 1;
        char *b = realloc(c->body, cap);
        if (b == NULL)
            abort();
        c->body = b;
        c->body_cap = cap;
    }
    memcpy(c->body + c->body_len, p, n);
    c->body_len += n;
    c->body[c->body_len] = '\0';
}

/* The last output stream: keeps what reaches it. While the body goes on, the next part is asked
 * for on the loop's next round (the zero timeout), as a connection asks once it wrote a part. */
static void capture(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t bufcnt, h2o_send_state_t state)
{
    lb_conn_t *c = H2O_STRUCT_FROM_MEMBER(lb_conn_t, final, self);
    ++c->sends;
    for (size_t i = 0; i < bufcnt; ++i)
        append_body(c, bufs[i].base, bufs[i].len);
    if (h2o_send_state_is_in_progress(state))
        h2o_timeout_link(req->conn->ctx->loop, &req->conn->ctx->zero_timeout, &req->_timeout_entry);
    else
        c->complete = 1;
}

lb_conn_t *lb_create(h2o_context_t *ctx, h2o_hostconf_t **hosts)
{
    static const h2o_conn_callbacks_t callbacks = {.get_sockname = lb_sockname, .get_peername = lb_peername};
    struct timeval now;
    gettimeofday(&now, NULL);
    lb_conn_t *c = (lb_conn_t *)h2o_create_connection(sizeof(*c), ctx, hosts, now, &callbacks);
    memset(&c->final, 0, offsetof(lb_conn_t, req) - offsetof(lb_conn_t, final));
    h2o_init_request(&c->req, &c->super, NULL);
    c->final.do_send = capture;
    c->req._ostr_top = &c->final;
    c->req.version = 0x101;
    c->req.http1_is_persistent = 1;
    c->req.input.scheme = &H2O_URL_SCHEME_HTTP;
    append_body(c, "", 0);
    lb_request(c, "GET", "/");
    return c;
}

void lb_request(lb_conn_t *c, const char *method, const char *path)
{
    c->req.input.method = h2o_strdup(&c->req.pool, method, strlen(method));
    c->req.input.path = h2o_strdup(&c->req.pool, path, strlen(path));
}

void lb_header(lb_conn_t *c, const char *name, const char *value)
{
    size_t n = strlen(name);
    char *lc = h2o_mem_alloc_pool(&c->req.pool, n);
    for (size_t i = 0; i < n; ++i)
        lc[i] = (char)tolower((unsigned char)name[i]);
    h2o_iovec_t v = h2o_strdup(&c->req.pool, value, strlen(value));
    h2o_add_header_by_str(&c->req.pool, &c->req.headers, lc, n, 1, NULL, v.base, v.len);
}

void lb_body(lb_conn_t *c, const char *body, size_t len)
{
    c->req.entity = h2o_strdup(&c->req.pool, body, len);
}

void lb_authority(lb_conn_t *c, const char *authority)
{
    c->req.input.authority = h2o_strdup(&c->req.pool, authority, strlen(authority));
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int lb_run(lb_conn_t *c, void (*tick)(void *arg), void *arg, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    h2o_process_request(&c->req);
    while (!c->complete) {
        uint64_t now = now_ms();
        if (now >= end)
            return -1;
        h2o_evloop_run(c->super.ctx->loop, (int32_t)(end - now < 10 ? end - now : 10));
        if (tick != NULL)
            tick(arg);
    }
    return 0;
}

const char *lb_res_header(lb_conn_t *c, const char *name)
{
    ssize_t i = h2o_find_header_by_str(&c->req.res.headers, name, strlen(name), -1);
    if (i < 0)
        return NULL;
    h2o_iovec_t v = c->req.res.headers.entries[i].value;
    char *s = h2o_mem_alloc_pool(&c->req.pool, v.len + 1);
    memcpy(s, v.base, v.len);
    s[v.len] = '\0';
    return s;
}

void lb_destroy(lb_conn_t *c)
{
    h2o_dispose_request(&c->req);
    free(c->body);
    free(c);
}

typedef struct st_lb_handler_t {
    h2o_handler_t super;
    lb_handler_fn fn;
    void *data;
} lb_handler_t;

static int on_lb_req(h2o_handler_t *self, h2o_req_t *req)
{
    lb_handler_t *h = (lb_handler_t *)self;
    return h->fn(h->data, req);
}

void lb_register(h2o_hostconf_t *hostconf, const char *path, lb_handler_fn fn, void *data)
{
    h2o_pathconf_t *pc = h2o_config_register_path(hostconf, path, 0);
    lb_handler_t *h = (lb_handler_t *)h2o_create_handler(pc, sizeof(*h));
    h->super.on_req = on_lb_req;
    h->fn = fn;
    h->data = data;
}
