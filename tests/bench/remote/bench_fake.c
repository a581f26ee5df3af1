/*
 * bench_fake.c -- an upstream that answers instantly, for the remote-backend benchmark: one
 * epoll thread, HTTP/1.1 keep-alive, canned replies shaped like the real services:
 *   POST /search                                   serper.dev: 3 organic results
 *   GET  /collections/<c>                          Qdrant collection info (vector size from argv)
 *   POST /collections/<c>/points/query/batch       Qdrant: one result (3 points) per "query" in the body
 *   POST /retrieve                                 Search-R1 server: one list (3 docs) per query
 * It parses just enough HTTP to frame requests (Content-Length bodies). Not a test.
 *
 * usage: bench_fake PORT [DIM]
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    int fd;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_len, out_off, out_cap;
} conn_t;

static int dim = 64;

static void out_append(conn_t *c, const char *p, size_t n)
{
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap != 0 ? c->out_cap : 4096;
        while (cap < c->out_len + n)
            cap *= 2;
        c->out = realloc(c->out, cap);
        if (c->out == NULL)
            abort();
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
}

static void respond(conn_t *c, const char *body, size_t n)
{
    char head[160];
    int h = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n", n);
    out_append(c, head, (size_t)h);
    out_append(c, body, n);
}

static size_t count(const char *hay, size_t n, const char *needle)
{
    size_t k = 0, l = strlen(needle);
    for (const char *p = hay; (p = memmem(p, n - (size_t)(p - hay), needle, l)) != NULL; p += l)
        ++k;
    return k;
}

static const char serper_reply[] =
    "{\"searchParameters\":{\"q\":\"q\",\"gl\":\"us\",\"hl\":\"en\",\"type\":\"search\",\"num\":3},\"organic\":["
    "{\"title\":\"Hamlet - Wikipedia\",\"link\":\"https://en.wikipedia.org/wiki/Hamlet\",\"snippet\":\"The Tragedy of Hamlet, "
    "Prince of Denmark, often shortened to Hamlet, is a tragedy written by William Shakespeare ... between 1599 and 1601.\","
    "\"position\":1},"
    "{\"title\":\"Hamlet | Folger Shakespeare Library\",\"link\":\"https://www.folger.edu/hamlet\",\"snippet\":\"Hamlet is "
    "Shakespeare's most popular, and most puzzling, play. It follows the form of a revenge tragedy.\",\"position\":2},"
    "{\"title\":\"Hamlet: Study Guide\",\"link\":\"https://example.org/hamlet\",\"snippet\":\"A summary of the plot, the "
    "characters and the themes of the play ... more\",\"position\":3}],\"credits\":1}";

static const char doc[] = "{\"id\":\"0\",\"contents\":\"\\\"Hamlet\\\"\\nHamlet is a tragedy written by William Shakespeare "
                          "sometime between 1599 and 1601. It is Shakespeare's longest play.\",\"url\":\"\"}";

static void handle(conn_t *c, const char *method, const char *path, const char *body, size_t blen)
{
    static char buf[1 << 20];
    size_t n = 0;
    if (strcmp(path, "/search") == 0) {
        respond(c, serper_reply, sizeof(serper_reply) - 1);
    } else if (strncmp(path, "/collections/", 13) == 0 && strcmp(method, "GET") == 0) {
        n = (size_t)snprintf(
            buf, sizeof(buf),
            "{\"result\":{\"status\":\"green\",\"points_count\":3,\"config\":{\"params\":{\"vectors\":{\"size\":%d,"
            "\"distance\":\"Cosine\"}}}},\"status\":\"ok\",\"time\":0}",
            dim);
        respond(c, buf, n);
    } else if (strncmp(path, "/collections/", 13) == 0) {
        size_t q = count(body, blen, "\"query\"");
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "{\"result\":[");
        for (size_t i = 0; i < q && n + 2048 < sizeof(buf); ++i)
            n += (size_t)snprintf(buf + n, sizeof(buf) - n,
                                  "%s{\"points\":[{\"id\":0,\"version\":1,\"score\":0.9,\"payload\":%s},"
                                  "{\"id\":1,\"version\":1,\"score\":0.8,\"payload\":%s},{\"id\":2,\"version\":1,\"score\":0.7,"
                                  "\"payload\":%s}]}",
                                  i != 0 ? "," : "", doc, doc, doc);
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "],\"status\":\"ok\",\"time\":0.0001}");
        respond(c, buf, n);
    } else if (strcmp(path, "/retrieve") == 0) {
        const char *qs = memmem(body, blen, "\"queries\":[", 11);
        size_t q = 0;
        if (qs != NULL && qs[11] != ']') { /* queries are plain strings: count the commas between them */
            q = 1;
            for (const char *p = qs + 11; p < body + blen && *p != ']'; ++p) {
                if (*p == '\\')
                    ++p;
                else if (*p == ',')
                    ++q;
            }
        }
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "{\"result\":[");
        for (size_t i = 0; i < q && n + 2048 < sizeof(buf); ++i)
            n += (size_t)snprintf(buf + n, sizeof(buf) - n,
                                  "%s[{\"document\":%s,\"score\":0.9},{\"document\":%s,\"score\":0.8},"
                                  "{\"document\":%s,\"score\":0.7}]",
                                  i != 0 ? "," : "", doc, doc, doc);
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "]}");
        respond(c, buf, n);
    } else {
        const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";
        out_append(c, nf, sizeof(nf) - 1);
    }
}

/* Frames and answers every complete request in the input buffer. */
static void process(conn_t *c)
{
    size_t off = 0;
    for (;;) {
        char *start = c->in + off;
        size_t avail = c->in_len - off;
        char *end = memmem(start, avail, "\r\n\r\n", 4);
        if (end == NULL)
            break;
        size_t head = (size_t)(end - start) + 4;
        size_t clen = 0;
        for (char *p = start; p < end; ++p) {
            if ((*p == 'C' || *p == 'c') && strncasecmp(p, "Content-Length:", 15) == 0) {
                clen = strtoul(p + 15, NULL, 10);
                break;
            }
        }
        if (avail < head + clen)
            break;
        char method[8] = "", path[512] = "";
        sscanf(start, "%7s %511s", method, path);
        handle(c, method, path, start + head, clen);
        off += head + clen;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

static int flush_out(conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (w < 0)
            return errno == EAGAIN ? 0 : -1;
        c->out_off += (size_t)w;
    }
    c->out_off = c->out_len = 0;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [DIM]\n", argv[0]);
        return 2;
    }
    if (argc > 2)
        dim = (int)strtol(argv[2], NULL, 10);
    signal(SIGPIPE, SIG_IGN);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)strtol(argv[1], NULL, 10)), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 1024) != 0) {
        perror("bench_fake: bind/listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    fprintf(stderr, "bench_fake: listening on 127.0.0.1:%s (vector size %d)\n", argv[1], dim);
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; ++i) {
            conn_t *c = evs[i].data.ptr;
            if (c == NULL) {
                int fd;
                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                    conn_t *nc = calloc(1, sizeof(*nc));
                    if (nc == NULL)
                        abort();
                    nc->fd = fd;
                    struct epoll_event e = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
                }
                continue;
            }
            int dead = 0;
            for (;;) {
                if (c->in_cap - c->in_len < 65536) {
                    c->in_cap = c->in_cap != 0 ? c->in_cap * 2 : 131072;
                    c->in = realloc(c->in, c->in_cap);
                    if (c->in == NULL)
                        abort();
                }
                ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
                if (r > 0) {
                    c->in_len += (size_t)r;
                    continue;
                }
                if (r == 0 || errno != EAGAIN)
                    dead = 1;
                break;
            }
            process(c);
            if (!dead && flush_out(c) != 0)
                dead = 1;
            if (!dead && c->out_len != 0) { /* rare: the socket buffer is full; finish blocking */
                int fl = fcntl(c->fd, F_GETFL);
                fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK);
                dead = flush_out(c) != 0;
                fcntl(c->fd, F_SETFL, fl);
            }
            if (dead) {
                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                free(c->in);
                free(c->out);
                free(c);
            }
        }
    }
}
