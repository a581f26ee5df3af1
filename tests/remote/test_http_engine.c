/*
 * test_http_engine.c -- the outbound HTTP engine (backends/common/http.c) against a small
 * in-process HTTP/1.1 server: keep-alive reuse, concurrency (the engine admits everything: the
 * in-flight/qps/queue caps are the gateway's, see tests/unit/gateway/pipeline/test_dispatch.c), deadlines and
 * timeouts, cancellation by tag, size limits, transport failures, Retry-After, submissions from
 * callbacks, and shutdown with transfers pending.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http.h"

/* ---- a tiny HTTP/1.1 server ---- */

#define MAX_CONNS 64

typedef struct {
    int lfd, port;
    int stop_pipe[2];
    pthread_t acceptor;
    pthread_t conns[MAX_CONNS];
    int fds[MAX_CONNS];
    atomic_int n_conns, requests, inflight, max_inflight;
    pthread_mutex_t mu;
} server_t;

static server_t srv;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* sleeps `ms` unless the server is stopping; returns 0 when stopped */
static int nap(int ms)
{
    struct pollfd p = {srv.stop_pipe[0], POLLIN, 0};
    return poll(&p, 1, ms) == 0;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void reply(int fd, int status, const char *extra, const char *body, size_t len)
{
    char head[256];
    int n = snprintf(head, sizeof(head), "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s\r\n", status,
                     len, extra);
    send_all(fd, head, (size_t)n);
    send_all(fd, body, len);
}

/* "/slow?ms=N" -> N */
static int ms_of(const char *path)
{
    const char *p = strstr(path, "ms=");
    return p != NULL ? (int)strtol(p + 3, NULL, 10) : 0;
}

static void *conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    size_t have = 0;
    for (;;) {
        char *end;
        while ((end = memmem(buf, have, "\r\n\r\n", 4)) == NULL) {
            struct pollfd p[2] = {{fd, POLLIN, 0}, {srv.stop_pipe[0], POLLIN, 0}};
            if (poll(p, 2, -1) <= 0 || (p[1].revents & POLLIN))
                goto out;
            ssize_t r = recv(fd, buf + have, sizeof(buf) - have - 1, 0);
            if (r <= 0)
                goto out;
            have += (size_t)r;
        }
        size_t head_len = (size_t)(end - buf) + 4;
        buf[head_len - 1] = '\0';
        size_t clen = 0;
        char *cl = strcasestr(buf, "Content-Length:");
        if (cl != NULL)
            clen = strtoul(cl + 15, NULL, 10);
        while (have < head_len + clen) {
            ssize_t r = recv(fd, buf + have, sizeof(buf) - have - 1, 0);
            if (r <= 0)
                goto out;
            have += (size_t)r;
        }
        char path[256] = "";
        sscanf(buf, "%*s %255s", path);
        int cur = atomic_fetch_add(&srv.inflight, 1) + 1;
        int m = atomic_load(&srv.max_inflight);
        while (cur > m && !atomic_compare_exchange_weak(&srv.max_inflight, &m, cur))
            ;
        atomic_fetch_add(&srv.requests, 1);
        int keep = 1;
        if (strncmp(path, "/slow", 5) == 0) {
            int ms = ms_of(path);
            if (!nap(ms))
                keep = 0;
            else
                reply(fd, 200, "", "{\"slow\":true}", 13);
        } else if (strcmp(path, "/echo") == 0) {
            reply(fd, 200, "", buf + head_len, clen);
        } else if (strcmp(path, "/big") == 0) {
            static char big[100000];
            memset(big, 'x', sizeof(big));
            reply(fd, 200, "", big, sizeof(big));
        } else if (strcmp(path, "/busy") == 0) {
            reply(fd, 503, "Retry-After: 3\r\n", "{\"message\":\"busy\"}", 18);
        } else if (strcmp(path, "/close") == 0) {
            keep = 0;
        } else {
            reply(fd, 200, "", "{\"ok\":true}", 11);
        }
        atomic_fetch_sub(&srv.inflight, 1);
        if (!keep)
            goto out;
        memmove(buf, buf + head_len + clen, have - head_len - clen);
        have -= head_len + clen;
    }
out:
    shutdown(fd, SHUT_RDWR);
    return NULL;
}

static void *accept_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = {{srv.lfd, POLLIN, 0}, {srv.stop_pipe[0], POLLIN, 0}};
        if (poll(p, 2, -1) <= 0 || (p[1].revents & POLLIN))
            return NULL;
        int fd = accept(srv.lfd, NULL, NULL);
        if (fd < 0)
            continue;
        int i = atomic_fetch_add(&srv.n_conns, 1);
        if (i >= MAX_CONNS) {
            close(fd);
            continue;
        }
        srv.fds[i] = fd;
        pthread_create(&srv.conns[i], NULL, conn_main, (void *)(intptr_t)fd);
    }
}

static void server_start(void)
{
    memset(&srv, 0, sizeof(srv));
    assert_int_equal(pipe(srv.stop_pipe), 0);
    srv.lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(srv.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(srv.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(srv.lfd, 128), 0);
    socklen_t l = sizeof(a);
    getsockname(srv.lfd, (struct sockaddr *)&a, &l);
    srv.port = ntohs(a.sin_port);
    pthread_create(&srv.acceptor, NULL, accept_main, NULL);
}

static void server_stop(void)
{
    assert_int_equal(write(srv.stop_pipe[1], "x", 1), 1);
    pthread_join(srv.acceptor, NULL);
    int n = atomic_load(&srv.n_conns);
    for (int i = 0; i < n && i < MAX_CONNS; ++i) {
        pthread_join(srv.conns[i], NULL);
        close(srv.fds[i]);
    }
    close(srv.lfd);
    close(srv.stop_pipe[0]);
    close(srv.stop_pipe[1]);
}

/* ---- completions ---- */

typedef struct {
    sg_http_err err;
    long status;
    int deadline;
    int32_t retry_after;
    char body[64];
    size_t body_len;
    uint64_t at_ms;
} done_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static done_t dones[64];
static int n_done;

static void on_done(void *ud, const sg_http_resp_t *r)
{
    done_t *d = ud;
    pthread_mutex_lock(&mu);
    d->err = r->err;
    d->status = r->status;
    d->deadline = r->deadline;
    d->retry_after = r->retry_after_s;
    d->body_len = r->body_len;
    snprintf(d->body, sizeof(d->body), "%.*s", (int)(r->body_len < 63 ? r->body_len : 63), r->body);
    d->at_ms = now_ms();
    ++n_done;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static int wait_done(int n, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    pthread_mutex_lock(&mu);
    while (n_done < n && now_ms() < end) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec += 1;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cv, &mu, &ts);
    }
    int got = n_done;
    pthread_mutex_unlock(&mu);
    return got;
}

static sg_http_conf_t conf(void)
{
    sg_http_conf_t c = {.connect_timeout_ms = 2000,
                        .timeout_ms = 10000,
                        .max_response_bytes = 1 << 20,
                        .tls_verify = 1,
                        .burst = 1,
                        .now_ms = now_ms,
                        .name = "test"};
    return c;
}

/* URLs live in a ring of buffers so a batch of requests can hold several at once */
static const char *u(const char *path)
{
    static char ring[32][128];
    static int next;
    char *url = ring[next++ % 32];
    snprintf(url, 128, "http://127.0.0.1:%d%s", srv.port, path);
    return url;
}

static sg_http_req_t get(const char *path, done_t *d)
{
    sg_http_req_t r = {.method = "GET", .url = u(path), .cb = on_done, .ud = d};
    return r;
}

static int setup(void **state)
{
    (void)state;
    memset(dones, 0, sizeof(dones));
    n_done = 0;
    server_start();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    server_stop();
    return 0;
}

static void test_roundtrip_and_keepalive(void **state)
{
    (void)state;
    sg_http_conf_t c = conf();
    sg_http_t *h = sg_http_new(&c, NULL, 0);
    assert_non_null(h);
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    char *body = strdup("{\"q\":\"hello\"}");
    sg_http_req_t r = {.method = "POST",
                       .url = u("/echo"),
                       .headers = hdrs,
                       .body = body,
                       .body_len = strlen(body),
                       .cb = on_done,
                       .ud = &dones[0]};
    assert_int_equal(sg_http_submit(h, &r, 1, NULL), 0);
    assert_int_equal(wait_done(1, 5000), 1);
    assert_int_equal(dones[0].err, SG_HTTP_OK);
    assert_int_equal(dones[0].status, 200);
    assert_string_equal(dones[0].body, "{\"q\":\"hello\"}");
    for (int i = 1; i <= 20; ++i) {
        sg_http_req_t g = get("/ok", &dones[i]);
        assert_int_equal(sg_http_submit(h, &g, 1, NULL), 0);
        assert_int_equal(wait_done(i + 1, 5000), i + 1);
        assert_int_equal(dones[i].status, 200);
    }
    sg_http_stats_t st;
    sg_http_stats(h, &st);
    assert_int_equal(st.connections, 1); /* one kept-alive connection for 21 requests */
    assert_int_equal(atomic_load(&srv.n_conns), 1);
    assert_int_equal(st.completed, 21);
    sg_http_free(h);
}

static void test_concurrency_and_caps(void **state)
{
    (void)state;
    sg_http_conf_t c = conf();
    sg_http_t *h = sg_http_new(&c, NULL, 0);
    sg_http_req_t rs[8];
    for (int i = 0; i < 8; ++i)
        rs[i] = (sg_http_req_t){.method = "GET", .url = u("/slow?ms=200"), .cb = on_done, .ud = &dones[i]};
    uint64_t t0 = now_ms();
    assert_int_equal(sg_http_submit(h, rs, 8, NULL), 0);
    assert_int_equal(wait_done(8, 5000), 8);
    assert_true(now_ms() - t0 < 1000);
    assert_true(atomic_load(&srv.max_inflight) >= 4);
    sg_http_free(h);

    /* the admission keys are the gateway's: with max_inflight 2, qps 20 (burst 1) and max_queue 2
     * in its settings the engine still sends all 6 at once */
    atomic_store(&srv.max_inflight, 0);
    c.max_inflight = 2;
    c.qps = 20;
    c.burst = 1;
    c.max_queue = 2;
    h = sg_http_new(&c, NULL, 0);
    for (int i = 0; i < 6; ++i)
        rs[i] = (sg_http_req_t){.method = "GET", .url = u("/slow?ms=300"), .cb = on_done, .ud = &dones[8 + i]};
    assert_int_equal(sg_http_submit(h, rs, 6, NULL), 0);
    assert_int_equal(wait_done(14, 5000), 14);
    assert_true(atomic_load(&srv.max_inflight) >= 4);
    sg_http_stats_t st;
    sg_http_stats(h, &st);
    assert_int_equal(st.started, 6);
    sg_http_free(h);
}

static void test_queue_deadline_and_delay(void **state)
{
    (void)state;
    sg_http_conf_t c = conf();
    c.on_cancel = SG_HTTP_CLOSE; /* a canceled transfer ends now (test_drain: the default) */
    sg_http_t *h = sg_http_new(&c, NULL, 0);
    /* a transfer waiting for its retry time (not_before) whose deadline passes expires unsent */
    sg_http_req_t slow = {.method = "GET", .url = u("/slow?ms=3000"), .tag = 42, .cb = on_done, .ud = &dones[0]};
    assert_int_equal(sg_http_submit(h, &slow, 1, NULL), 0);
    usleep(100 * 1000);
    uint64_t t0 = now_ms();
    sg_http_req_t late = {
        .method = "GET", .url = u("/ok"), .deadline_ms = t0 + 150, .not_before_ms = t0 + 2000, .cb = on_done, .ud = &dones[1]};
    assert_int_equal(sg_http_submit(h, &late, 1, NULL), 0);
    assert_int_equal(wait_done(1, 3000), 1);
    assert_int_equal(dones[1].err, SG_HTTP_ETIMEDOUT);
    assert_true(dones[1].deadline);
    assert_true(dones[1].at_ms - t0 >= 140 && dones[1].at_ms - t0 < 1000);
    assert_int_equal(atomic_load(&srv.requests), 1); /* never sent */
    /* cancel by tag ends the slow one now */
    t0 = now_ms();
    sg_http_cancel(h, 42);
    assert_int_equal(wait_done(2, 3000), 2);
    assert_int_equal(dones[0].err, SG_HTTP_ECANCELED);
    assert_true(now_ms() - t0 < 1000);
    /* not_before delays the start */
    t0 = now_ms();
    sg_http_req_t later = {.method = "GET", .url = u("/ok"), .not_before_ms = t0 + 200, .cb = on_done, .ud = &dones[2]};
    assert_int_equal(sg_http_submit(h, &later, 1, NULL), 0);
    assert_int_equal(wait_done(3, 3000), 3);
    assert_int_equal(dones[2].status, 200);
    assert_true(dones[2].at_ms - t0 >= 195);
    sg_http_free(h);
}

/* on_cancel "drain" (the default): a canceled or late transfer that was sent is read to its end
 * and completes with its answer, because the upstream works on it anyway (issue 19, item 5); one
 * not yet sent is canceled, and start_by bounds when a queued one may still start. */
static void test_drain(void **state)
{
    (void)state;
    sg_http_conf_t c = conf();
    sg_http_t *h = sg_http_new(&c, NULL, 0);
    uint64_t t0 = now_ms();
    sg_http_req_t rs[3] = {
        {.method = "GET", .url = u("/slow?ms=400"), .tag = 7, .cb = on_done, .ud = &dones[0]},
        {.method = "GET", .url = u("/slow?ms=400"), .deadline_ms = t0 + 100, .cb = on_done, .ud = &dones[1]},
        {.method = "GET", .url = u("/ok"), .tag = 7, .not_before_ms = t0 + 2000, .cb = on_done, .ud = &dones[2]}};
    assert_int_equal(sg_http_submit(h, rs, 3, NULL), 0);
    usleep(100 * 1000);
    sg_http_cancel(h, 7);
    assert_int_equal(wait_done(1, 3000), 1);
    assert_int_equal(dones[2].err, SG_HTTP_ECANCELED); /* not sent yet: dropped at once */
    assert_int_equal(wait_done(3, 3000), 3);
    assert_int_equal(dones[0].err, SG_HTTP_OK); /* sent: its answer was read */
    assert_int_equal(dones[0].status, 200);
    assert_int_equal(dones[1].err, SG_HTTP_OK); /* past its deadline: read all the same */
    assert_true(dones[0].at_ms - t0 >= 390 && dones[1].at_ms - t0 >= 390);
    sg_http_stats_t st;
    sg_http_stats(h, &st);
    assert_int_equal(st.drained, 1);
    assert_int_equal(st.started, 2);
    /* a transfer waiting for its retry time may start only until start_by */
    t0 = now_ms();
    sg_http_req_t late = {.method = "GET",
                          .url = u("/ok"),
                          .deadline_ms = t0 + 5000,
                          .start_by_ms = t0 + 150,
                          .not_before_ms = t0 + 1000,
                          .cb = on_done,
                          .ud = &dones[3]};
    assert_int_equal(sg_http_submit(h, &late, 1, NULL), 0);
    assert_int_equal(wait_done(4, 3000), 4);
    assert_int_equal(dones[3].err, SG_HTTP_ETIMEDOUT);
    assert_true(dones[3].at_ms - t0 >= 140 && dones[3].at_ms - t0 < 900);
    assert_int_equal(atomic_load(&srv.requests), 2);
    sg_http_free(h);
}

static void test_failures(void **state)
{
    (void)state;
    sg_http_conf_t c = conf();
    c.max_response_bytes = 10000;
    c.on_cancel = SG_HTTP_CLOSE; /* the deadline cuts a running transfer (test_drain: the default) */
    sg_http_t *h = sg_http_new(&c, NULL, 0);
    uint64_t t0 = now_ms();
    static const char *const paths[] = {"/big", "/slow?ms=3000", "/slow?ms=3000", "/close", "/busy"};
    for (int i = 0; i < 5; ++i) {
        sg_http_req_t one = get(paths[i], &dones[i]);
        if (i == 1)
            one.timeout_ms = 100;
        if (i == 2)
            one.deadline_ms = t0 + 150;
        assert_int_equal(sg_http_submit(h, &one, 1, NULL), 0);
    }
    assert_int_equal(wait_done(5, 5000), 5);
    assert_int_equal(dones[0].err, SG_HTTP_ETOOBIG);
    assert_int_equal(dones[1].err, SG_HTTP_ETIMEDOUT);
    assert_false(dones[1].deadline);
    assert_int_equal(dones[2].err, SG_HTTP_ETIMEDOUT);
    assert_true(dones[2].deadline);
    assert_int_equal(dones[3].err, SG_HTTP_EPROTO);
    assert_int_equal(dones[4].err, SG_HTTP_OK);
    assert_int_equal(dones[4].status, 503);
    assert_int_equal(dones[4].retry_after, 3);
    assert_string_equal(dones[4].body, "{\"message\":\"busy\"}");
    assert_true(now_ms() - t0 < 2000);
    /* nothing listens on the port we just closed */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    socklen_t l = sizeof(a);
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    char refused[64];
    snprintf(refused, sizeof(refused), "http://127.0.0.1:%d/", ntohs(a.sin_port));
    sg_http_req_t r = {.method = "GET", .url = refused, .cb = on_done, .ud = &dones[5]};
    assert_int_equal(sg_http_submit(h, &r, 1, NULL), 0);
    assert_int_equal(wait_done(6, 5000), 6);
    assert_int_equal(dones[5].err, SG_HTTP_ECONNECT);
    assert_int_equal(sg_http_err_status(SG_HTTP_ECONNECT), SG_EUNAVAIL);
    assert_int_equal(sg_http_err_status(SG_HTTP_ETIMEDOUT), SG_ETIMEDOUT);
    assert_int_equal(sg_http_err_status(SG_HTTP_EPROTO), SG_EUPSTREAM);
    sg_http_free(h);
}

/* a callback that chains a second request from the engine thread */
static sg_http_t *chain_h;
static void on_chain(void *ud, const sg_http_resp_t *r)
{
    (void)r;
    sg_http_req_t next = {.method = "GET", .url = u("/ok"), .cb = on_done, .ud = ud};
    assert_int_equal(sg_http_submit(chain_h, &next, 1, NULL), 0);
}

static void test_submit_from_callback_and_shutdown(void **state)
{
    (void)state;
    sg_http_conf_t c = conf();
    chain_h = sg_http_new(&c, NULL, 0);
    sg_http_req_t first = {.method = "GET", .url = u("/ok"), .cb = on_chain, .ud = &dones[0]};
    assert_int_equal(sg_http_submit(chain_h, &first, 1, NULL), 0);
    assert_int_equal(wait_done(1, 5000), 1);
    assert_int_equal(dones[0].status, 200);
    /* pending work at shutdown: 3 running, 2 waiting for their start time */
    sg_http_req_t rs[5];
    for (int i = 0; i < 3; ++i)
        rs[i] = (sg_http_req_t){.method = "GET", .url = u("/slow?ms=10000"), .cb = on_done, .ud = &dones[1 + i]};
    for (int i = 3; i < 5; ++i)
        rs[i] = (sg_http_req_t){
            .method = "GET", .url = u("/ok"), .not_before_ms = now_ms() + 10000, .cb = on_done, .ud = &dones[1 + i]};
    assert_int_equal(sg_http_submit(chain_h, rs, 5, NULL), 0);
    while (atomic_load(&srv.inflight) < 3)
        usleep(5000);
    uint64_t t0 = now_ms();
    sg_http_free(chain_h);
    assert_int_equal(wait_done(6, 0), 6); /* every callback ran before sg_http_free returned */
    for (int i = 1; i <= 5; ++i)
        assert_int_equal(dones[i].err, SG_HTTP_ECANCELED);
    assert_true(now_ms() - t0 < 2000);
}

static int job_results;
static sg_status job_status;
static void job_done(void *cb_data, const sg_result *res)
{
    (void)cb_data;
    ++job_results;
    job_status = res->status;
}

static void test_job_registry(void **state)
{
    (void)state;
    sg_http_jobs_t reg;
    sg_http_jobs_init(&reg);
    sg_http_job_t a, b;
    int cb_a, cb_b;
    pthread_mutex_lock(&reg.mu);
    sg_http_jobs_add_locked(&reg, &a, job_done, &cb_a);
    sg_http_jobs_add_locked(&reg, &b, job_done, &cb_b);
    pthread_mutex_unlock(&reg.mu);
    assert_true(a.tag != b.tag);
    assert_int_equal(sg_http_jobs_cancel(&reg, NULL, &cb_b), 1);
    assert_true(atomic_load(&b.canceled));
    assert_false(atomic_load(&a.canceled));
    assert_int_equal(sg_http_jobs_cancel(&reg, NULL, &reg), 0);
    assert_int_equal(sg_http_job_fail(&a, SG_EUPSTREAM, 0, "x %d", 1), 1);
    assert_int_equal(sg_http_job_fail(&a, SG_EUPSTREAM, 0, "again"), 0); /* done() exactly once */
    assert_int_equal(job_results, 1);
    assert_int_equal(job_status, SG_EUPSTREAM);
    assert_int_equal(sg_http_jobs_cancel(&reg, NULL, &cb_a), 0); /* finished jobs are not canceled */
    sg_http_jobs_remove(&reg, &a);
    sg_http_jobs_remove(&reg, &b);
    sg_http_jobs_remove(&reg, &b); /* idempotent */
    assert_int_equal(reg.n, 0);
    sg_http_jobs_dispose(&reg);
}

int main(void)
{
    sg_http_global_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip_and_keepalive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrency_and_caps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_deadline_and_delay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_submit_from_callback_and_shutdown, setup, teardown),
        cmocka_unit_test(test_job_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
