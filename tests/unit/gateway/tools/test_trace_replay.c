/*
 * Unit tests: gateway/tools/trace_replay.c, `searchgate-trace replay` (sg__tool_replay) against a
 * small HTTP server of the test's own (a thread on a loopback port that records each request body
 * and answers by rules on the queries, so every answer is known): the exact bodies sent (recorded
 * batches, topk, search_params rebuilt from the canonical "params" text, --route as "backend",
 * --batch single, --params none), the exact lines written (time and ms checked for form, then
 * left out), failures (an error answer's type, a non-JSON error, a short "result", no server),
 * the counts on stderr and the exit codes, and the bad arguments' messages.
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
#include <strings.h>
#include <sys/socket.h>
#include "tool_test.h"
#include "common.h"
#include "trace_tool.h"

/* ---- the server ---- */

static int srv_fd = -1, srv_port;
static pthread_t srv_thread;
static atomic_int srv_stop;
static pthread_mutex_t srv_mu = PTHREAD_MUTEX_INITIALIZER;
static sg_buf_t srv_bodies; /* each request's body, one a line */

/* The answer to the body of a /retrieve request: "refuse" -> 429 with an error type, "oops" ->
 * 500 without JSON, "short" -> one result too few; else per query q a list: "blank..." one hit
 * whose text is blank, "bare..." a bare document (no "document"/"score"), else two hits: id q-1
 * (score 1.5) and one with no id but a url (no score). */
static void answer(const char *body, size_t len, sg_buf_t *resp, int *status)
{
    cJSON *doc = cJSON_ParseWithLength(body, len);
    const cJSON *qs = cJSON_GetObjectItemCaseSensitive(doc, "queries");
    int n = cJSON_GetArraySize(qs), shorten = 0;
    *status = 200;
    for (const cJSON *q = qs != NULL ? qs->child : NULL; q != NULL; q = q->next) {
        if (strcmp(q->valuestring, "refuse") == 0)
            *status = 429;
        else if (strcmp(q->valuestring, "oops") == 0)
            *status = 500;
        shorten |= strcmp(q->valuestring, "short") == 0;
    }
    if (*status == 429)
        sg_buf_appends(resp, "{\"error\":{\"type\":\"rate_limited\",\"message\":\"slow down\"}}");
    else if (*status == 500)
        sg_buf_appends(resp, "oops");
    else {
        sg_buf_appends(resp, "{\"result\":[");
        int i = 0;
        for (const cJSON *q = qs->child; q != NULL && i < n - shorten; q = q->next, ++i) {
            const char *t = q->valuestring;
            sg_buf_appends(resp, i != 0 ? ",[" : "[");
            if (strncmp(t, "blank", 5) == 0)
                sg_buf_appends(resp, "{\"document\":{\"id\":\"b\",\"contents\":\" \\n\\\"\\\"\"},\"score\":0.5}");
            else if (strncmp(t, "bare", 4) == 0)
                sg_buf_appends(resp, "{\"id\":7,\"contents\":\"bare text\"}");
            else {
                sg_buf_t id = {0}, url = {0};
                sg_buf_appendf(&id, "%s-1", t);
                sg_buf_appendf(&url, "u:%s", t);
                sg_buf_appends(resp, "{\"document\":{\"id\":");
                sg_buf_append_json_string(resp, id.base, id.len);
                sg_buf_appends(resp, ",\"contents\":\"text\"},\"score\":1.5},{\"document\":{\"id\":\"\",\"url\":");
                sg_buf_append_json_string(resp, url.base, url.len);
                sg_buf_appends(resp, ",\"contents\":\"x\"}}");
                sg_buf_free(&id);
                sg_buf_free(&url);
            }
            sg_buf_appendc(resp, ']');
        }
        sg_buf_appends(resp, "]}");
    }
    cJSON_Delete(doc);
}

static void serve_one(int fd)
{
    sg_buf_t in = {0};
    char chunk[4096];
    size_t head = 0, clen = 0;
    for (;;) { /* the head, then Content-Length bytes of body */
        char *end = in.base != NULL ? strstr(in.base, "\r\n\r\n") : NULL;
        if (end != NULL && head == 0) {
            head = (size_t)(end - in.base) + 4;
            for (char *h = in.base; h < end; h = strstr(h, "\r\n") + 2)
                if (strncasecmp(h, "content-length:", 15) == 0)
                    clen = strtoul(h + 15, NULL, 10);
        }
        if (head != 0 && in.len >= head + clen)
            break;
        ssize_t r = recv(fd, chunk, sizeof(chunk), 0);
        if (r <= 0) {
            sg_buf_free(&in);
            return;
        }
        sg_buf_append(&in, chunk, (size_t)r);
    }
    pthread_mutex_lock(&srv_mu);
    sg_buf_append(&srv_bodies, in.base + head, clen);
    sg_buf_appendc(&srv_bodies, '\n');
    pthread_mutex_unlock(&srv_mu);
    sg_buf_t body = {0}, out = {0};
    int status;
    answer(in.base + head, clen, &body, &status);
    sg_buf_appendf(&out,
                   "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nX-Searchgate-Provenance: route=wiki; cache=miss\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                   status, body.len);
    sg_buf_append(&out, body.base, body.len);
    for (size_t off = 0; off < out.len;) {
        ssize_t w = send(fd, out.base + off, out.len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    sg_buf_free(&in);
    sg_buf_free(&body);
    sg_buf_free(&out);
}

static void *serve(void *arg)
{
    (void)arg;
    while (!atomic_load(&srv_stop)) {
        struct pollfd p = {srv_fd, POLLIN, 0};
        if (poll(&p, 1, 20) != 1)
            continue;
        int c = accept(srv_fd, NULL, NULL);
        if (c < 0)
            continue;
        serve_one(c);
        close(c);
    }
    return NULL;
}

/* A loopback TCP socket on a free port (listening or not); its port in *port. */
static int loopback_socket(int *port, int listening)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || getsockname(fd, (struct sockaddr *)&a, &al) != 0 ||
        (listening && listen(fd, 16) != 0))
        abort();
    *port = ntohs(a.sin_port);
    return fd;
}

static int setup(void **state)
{
    (void)state;
    tool_dir_make();
    srv_fd = loopback_socket(&srv_port, 1);
    atomic_store(&srv_stop, 0);
    if (pthread_create(&srv_thread, NULL, serve, NULL) != 0)
        abort();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    atomic_store(&srv_stop, 1);
    pthread_join(srv_thread, NULL);
    close(srv_fd);
    sg_buf_free(&srv_bodies);
    tool_dir_remove();
    return 0;
}

/* The bodies the server received since the last call, one a line. */
static char *bodies(void)
{
    pthread_mutex_lock(&srv_mu);
    char *b = sg_strndup(srv_bodies.base != NULL ? srv_bodies.base : "", srv_bodies.len);
    srv_bodies.len = 0;
    pthread_mutex_unlock(&srv_mu);
    return b;
}

/* ---- the output ---- */

/* The output trace with each line's "time" (checked: 2026-01-02T03:04:05.678Z) and "ms" (a
 * number >= 0) left out, the lines as compact JSON. */
static char *without_time(const char *text)
{
    sg_buf_t b = {0};
    sg_buf_append(&b, "", 0);
    for (const char *p = text; *p != '\0';) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl); /* every line ends */
        cJSON *l = cJSON_ParseWithLength(p, (size_t)(nl - p));
        assert_non_null(l);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(l, "time"), *ms = cJSON_GetObjectItemCaseSensitive(l, "ms");
        assert_true(cJSON_IsString(t) && strlen(t->valuestring) == 24 && t->valuestring[10] == 'T' && t->valuestring[23] == 'Z');
        assert_true(cJSON_IsNumber(ms) && ms->valuedouble >= 0);
        assert_ptr_equal(l->child, t); /* the first member */
        cJSON_DeleteItemFromObjectCaseSensitive(l, "time");
        cJSON_DeleteItemFromObjectCaseSensitive(l, "ms");
        char *s = cJSON_PrintUnformatted(l);
        sg_buf_appends(&b, s);
        sg_buf_appendc(&b, '\n');
        free(s);
        cJSON_Delete(l);
        p = nl + 1;
    }
    return b.base;
}

static int replay(const char *const *args, char **out, char **err)
{
    return tool_run(sg__tool_replay, args, out, err);
}

#define TRACE                                                                                                                      \
    "{\"time\":\"t\",\"request\":\"r1\",\"i\":0,\"n\":2,\"client\":\"a\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":3,"       \
    "\"params\":\"nprobe=64,mode=fast,exact=true,w=-1.5e3\",\"query\":\"alpha\",\"hits\":0,\"ids\":[],\"status\":200}\n"           \
    "{\"request\":\"r1\",\"i\":1,\"n\":2,\"client\":\"a\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":3,"                      \
    "\"params\":\"nprobe=64,mode=fast,exact=true,w=-1.5e3\",\"query\":\"beta \\\"q\\\"\",\"status\":200}\n"                        \
    "{\"request\":\"r2\",\"op\":\"access\",\"query\":\"http://x\"}\n"                                                              \
    "{\"request\":\"r3\",\"i\":0,\"n\":1,\"op\":\"retrieve\",\"query_hash\":\"ab\"}\n"                                             \
    "not json\n"                                                                                                                   \
    "{\"request\":\"r4\",\"i\":0,\"n\":2,\"op\":\"retrieve\",\"params\":\"\",\"query\":\"blank one\"}\n"                           \
    "{\"request\":\"r4\",\"i\":1,\"n\":2,\"op\":\"retrieve\",\"params\":\"nprobe=8\",\"query\":\"bare\"}\n"

/* --route wiki, the recorded batches: r1's two queries together with their topk and parameters,
 * r4's two apart (different parameters), the /access line and the query without text skipped */
static void test_recorded(void **state)
{
    (void)state;
    tool_write("t.jsonl", TRACE);
    char url[64], trace[128], outp[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/retrieve", srv_port);
    snprintf(trace, sizeof(trace), "%s", tool_path("t.jsonl"));
    snprintf(outp, sizeof(outp), "%s", tool_path("out.jsonl"));
    const char *args[] = {"replay", trace, "--url", url, "--route", "wiki", "--out", outp, NULL};
    char *out, *err;
    assert_int_equal(replay(args, &out, &err), 0);
    assert_string_equal(out, "");
    char *b = bodies();
    assert_string_equal(b,
                        "{\"queries\":[\"alpha\",\"beta \\\"q\\\"\"],\"return_scores\":true,\"topk\":3,"
                        "\"search_params\":{\"nprobe\":64,\"mode\":\"fast\",\"exact\":true,\"w\":-1.5e3},\"backend\":\"wiki\"}\n"
                        "{\"queries\":[\"blank one\"],\"return_scores\":true,\"backend\":\"wiki\"}\n"
                        "{\"queries\":[\"bare\"],\"return_scores\":true,\"search_params\":{\"nprobe\":8},\"backend\":\"wiki\"}\n");
    free(b);
    char *text = tool_slurp(outp), *lines = without_time(text);
    assert_string_equal(
        lines,
        "{\"request\":\"replay-0\",\"i\":0,\"n\":2,\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":3,"
        "\"params\":\"nprobe=64,mode=fast,exact=true,w=-1.5e3\",\"query\":\"alpha\",\"hits\":2,\"ids\":[\"alpha-1\",\"u:alpha\"],"
        "\"scores\":[1.5,null],\"empty\":false,\"status\":200,\"provenance\":\"route=wiki; cache=miss\",\"replay_of\":\"r1#0\"}\n"
        "{\"request\":\"replay-0\",\"i\":1,\"n\":2,\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":3,"
        "\"params\":\"nprobe=64,mode=fast,exact=true,w=-1.5e3\",\"query\":\"beta \\\"q\\\"\",\"hits\":2,"
        "\"ids\":[\"beta \\\"q\\\"-1\",\"u:beta \\\"q\\\"\"],\"scores\":[1.5,null],\"empty\":false,\"status\":200,"
        "\"provenance\":\"route=wiki; cache=miss\",\"replay_of\":\"r1#1\"}\n"
        "{\"request\":\"replay-1\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\","
        "\"query\":\"blank one\",\"hits\":1,\"ids\":[\"b\"],\"scores\":[0.5],\"empty\":true,\"status\":200,"
        "\"provenance\":\"route=wiki; cache=miss\",\"replay_of\":\"r4#0\"}\n"
        "{\"request\":\"replay-2\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\","
        "\"params\":\"nprobe=8\",\"query\":\"bare\",\"hits\":1,\"ids\":[7],\"scores\":[null],\"empty\":false,\"status\":200,"
        "\"provenance\":\"route=wiki; cache=miss\",\"replay_of\":\"r4#1\"}\n");
    free(text);
    free(lines);
    const char *skipped = "searchgate-trace replay: 1 lines without \"query\" (a trace without the query field) are skipped\n"
                          "searchgate-trace replay: 4 queries in 3 requests, 0 failed, in ";
    assert_int_equal(strncmp(err, skipped, strlen(skipped)), 0);
    const char *tail = " s (1 /access lines skipped, 1 malformed)\n";
    assert_true(strlen(err) > strlen(tail));
    assert_string_equal(err + strlen(err) - strlen(tail), tail);
    free(out);
    free(err);
}

/* --batch single --params none, to standard output, under --rate: one query a request, no
 * search_params, no "backend" (no --route); the route comes from the answer's provenance */
static void test_single(void **state)
{
    (void)state;
    tool_write("t.jsonl", TRACE);
    char url[64], trace[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/retrieve", srv_port);
    snprintf(trace, sizeof(trace), "%s", tool_path("t.jsonl"));
    const char *args[] = {"replay", trace,    "--url", url,     "--batch", "single", "--params",
                          "none",   "--rate", "500/s", "--out", "-",       NULL};
    char *out, *err;
    assert_int_equal(replay(args, &out, &err), 0);
    char *b = bodies();
    assert_string_equal(b, "{\"queries\":[\"alpha\"],\"return_scores\":true,\"topk\":3}\n"
                           "{\"queries\":[\"beta \\\"q\\\"\"],\"return_scores\":true,\"topk\":3}\n"
                           "{\"queries\":[\"blank one\"],\"return_scores\":true}\n"
                           "{\"queries\":[\"bare\"],\"return_scores\":true}\n");
    free(b);
    char *lines = without_time(out);
    const char *want[] = {"replay-0\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":3,"
                          "\"query\":\"alpha\",",
                          "replay-1\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\",\"topk\":3,"
                          "\"query\":\"beta \\\"q\\\"\",",
                          "replay-2\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\","
                          "\"query\":\"blank one\",",
                          "replay-3\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\","
                          "\"query\":\"bare\","};
    const char *p = lines;
    for (size_t i = 0; i < 4; ++i) {
        assert_int_equal(strncmp(p, "{\"request\":\"", 12), 0);
        assert_int_equal(strncmp(p + 12, want[i], strlen(want[i])), 0);
        p = strchr(p, '\n') + 1;
    }
    assert_string_equal(p, "");
    assert_non_null(strstr(lines, "\"replay_of\":\"r1#1\"}\n"));
    assert_non_null(strstr(err, "4 queries in 4 requests, 0 failed"));
    free(lines);
    free(out);
    free(err);
}

/* --concurrency 3: every batch sent once and answered once, whatever the order */
static void test_concurrency(void **state)
{
    (void)state;
    sg_buf_t t = {0};
    for (int i = 0; i < 12; ++i)
        sg_buf_appendf(&t, "{\"request\":\"c%d\",\"i\":0,\"n\":1,\"query\":\"q%02d\"}\n", i, i);
    tool_write("c.jsonl", t.base);
    sg_buf_free(&t);
    char url[64], trace[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/retrieve", srv_port);
    snprintf(trace, sizeof(trace), "%s", tool_path("c.jsonl"));
    const char *args[] = {"replay", trace, "--url", url, "--concurrency", "3", "--timeout", "30", "--out", "-", NULL};
    char *out, *err;
    assert_int_equal(replay(args, &out, &err), 0);
    char *b = bodies();
    for (int i = 0; i < 12; ++i) {
        char q[64];
        snprintf(q, sizeof(q), "{\"queries\":[\"q%02d\"],\"return_scores\":true}\n", i);
        char *at = strstr(b, q);
        assert_non_null(at);
        assert_null(strstr(at + 1, q)); /* once */
        snprintf(q, sizeof(q), "\"query\":\"q%02d\",\"hits\":2,\"ids\":[\"q%02d-1\"", i, i);
        assert_non_null(strstr(out, q));
        snprintf(q, sizeof(q), "\"replay_of\":\"c%d#0\"}\n", i);
        assert_non_null(strstr(out, q));
    }
    assert_int_equal(strlen(b), 12 * strlen("{\"queries\":[\"q00\"],\"return_scores\":true}\n"));
    assert_non_null(strstr(err, "12 queries in 12 requests, 0 failed"));
    free(b);
    free(out);
    free(err);
}

/* the failures: an error answer (its type), one that is not JSON, a "result" one short (every
 * query of the request), no server; each a failed request, exit code 3 */
static void test_failures(void **state)
{
    (void)state;
    tool_write("f.jsonl", "{\"request\":\"f1\",\"i\":0,\"n\":1,\"query\":\"refuse\"}\n"
                          "{\"request\":\"f2\",\"i\":0,\"n\":1,\"query\":\"oops\"}\n"
                          "{\"request\":\"f3\",\"i\":0,\"n\":2,\"query\":\"short\"}\n"
                          "{\"request\":\"f3\",\"i\":1,\"n\":2,\"query\":\"fine\"}\n");
    char url[64], trace[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/retrieve", srv_port);
    snprintf(trace, sizeof(trace), "%s", tool_path("f.jsonl"));
    const char *args[] = {"replay", trace, "--url", url, "--out", "-", NULL};
    char *out, *err;
    assert_int_equal(replay(args, &out, &err), 3);
    free(bodies());
    char *lines = without_time(out);
#define FAIL_LINE(req, i, n, q, st, e, of)                                                                                         \
    "{\"request\":\"replay-" req "\",\"i\":" i ",\"n\":" n ",\"client\":\"replay\",\"route\":\"wiki\",\"op\":\"retrieve\","        \
    "\"query\":\"" q "\",\"status\":" st ",\"error\":\"" e "\",\"provenance\":\"route=wiki; cache=miss\",\"replay_of\":\"" of      \
    "\"}\n"
    assert_string_equal(lines, FAIL_LINE("0", "0", "1", "refuse", "429", "rate_limited", "f1#0")
                                   FAIL_LINE("1", "0", "1", "oops", "500", "http_error", "f2#0")
                                       FAIL_LINE("2", "0", "2", "short", "0", "bad_response", "f3#0")
                                           FAIL_LINE("2", "1", "2", "fine", "0", "bad_response", "f3#1"));
    assert_non_null(strstr(err, "searchgate-trace replay: 4 queries in 3 requests, 3 failed, in "));
    free(lines);
    free(out);
    free(err);

    /* nobody listening */
    int port, fd = loopback_socket(&port, 0);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/retrieve", port);
    const char *args2[] = {"replay", trace, "--url", url, "--out", "-", "--timeout", "5", NULL};
    assert_int_equal(replay(args2, &out, &err), 3);
    close(fd);
    lines = without_time(out);
    assert_string_equal(lines,
                        "{\"request\":\"replay-0\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"-\",\"op\":\"retrieve\","
                        "\"query\":\"refuse\",\"status\":0,\"error\":\"connection: Couldn't connect to server\","
                        "\"replay_of\":\"f1#0\"}\n"
                        "{\"request\":\"replay-1\",\"i\":0,\"n\":1,\"client\":\"replay\",\"route\":\"-\",\"op\":\"retrieve\","
                        "\"query\":\"oops\",\"status\":0,\"error\":\"connection: Couldn't connect to server\","
                        "\"replay_of\":\"f2#0\"}\n"
                        "{\"request\":\"replay-2\",\"i\":0,\"n\":2,\"client\":\"replay\",\"route\":\"-\",\"op\":\"retrieve\","
                        "\"query\":\"short\",\"status\":0,\"error\":\"connection: Couldn't connect to server\","
                        "\"replay_of\":\"f3#0\"}\n"
                        "{\"request\":\"replay-2\",\"i\":1,\"n\":2,\"client\":\"replay\",\"route\":\"-\",\"op\":\"retrieve\","
                        "\"query\":\"fine\",\"status\":0,\"error\":\"connection: Couldn't connect to server\","
                        "\"replay_of\":\"f3#1\"}\n");
    assert_non_null(strstr(err, "4 queries in 3 requests, 3 failed"));
    free(lines);
    free(out);
    free(err);
}

static void check_fails(const char *const *args, int rc, const char *want_err)
{
    tool_check_fails(sg__tool_replay, args, rc, want_err);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    const char *req = "searchgate-trace replay: TRACE, --url and --out are required (see --help)\n";
    check_fails((const char *const[]){"replay", NULL}, 2, req);
    check_fails((const char *const[]){"replay", "t", "--url", "u", NULL}, 2, req);
    check_fails((const char *const[]){"replay", "--url", "u", "--out", "o", NULL}, 2, req);
    check_fails((const char *const[]){"replay", "t", "--url", NULL}, 2, "searchgate-trace replay: --url needs a value\n");
    check_fails((const char *const[]){"replay", "t", "--bogus", "x", NULL}, 2,
                "searchgate-trace replay: bad option --bogus x (see --help)\n");
    const char *bad[][2] = {{"--rate", "0"},
                            {"--rate", "5/m"},
                            {"--rate", "inf"},
                            {"--rate", "-1"},
                            {"--concurrency", "0"},
                            {"--concurrency", "1025"},
                            {"--concurrency", "2x"},
                            {"--timeout", "0"},
                            {"--batch", "all"},
                            {"--params", "some"},
                            {"t2", "x"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        char want[128];
        snprintf(want, sizeof(want), "searchgate-trace replay: bad option %s %s (see --help)\n", bad[i][0], bad[i][1]);
        check_fails((const char *const[]){"replay", "t", "--url", "u", "--out", "o", bad[i][0], bad[i][1], NULL}, 2, want);
    }
    /* the trace cannot be read: 1, nothing sent */
    char missing[128], want[400], trace[128], outp[160];
    snprintf(missing, sizeof(missing), "%s", tool_path("missing.jsonl"));
    snprintf(want, sizeof(want), "searchgate-trace: cannot open %s: No such file or directory\n", missing);
    check_fails((const char *const[]){"replay", missing, "--url", "http://127.0.0.1:9/", "--out", "-", NULL}, 1, want);
    /* "params" that are not key=value text: 2, unless --params none */
    tool_write("p.jsonl", "{\"request\":\"p\",\"i\":0,\"query\":\"a\",\"params\":\"nprobe\"}\n"
                          "{\"request\":\"p\",\"i\":1,\"query\":\"b\",\"params\":\"=3\"}\n");
    snprintf(trace, sizeof(trace), "%s", tool_path("p.jsonl"));
    check_fails((const char *const[]){"replay", trace, "--url", "http://127.0.0.1:9/", "--out", "-", NULL}, 2,
                "searchgate-trace replay: 2 lines have \"params\" that are not key=value text (\"nprobe\"), so their "
                "search_params cannot be sent again; replay with --params none to send none\n");
    /* an --out that cannot be written: 1, nothing sent */
    snprintf(outp, sizeof(outp), "%s/no/out.jsonl", tool_dir);
    snprintf(want, sizeof(want), "searchgate-trace replay: cannot write %s: No such file or directory\n", outp);
    check_fails((const char *const[]){"replay", trace, "--url", "http://127.0.0.1:9/", "--params", "none", "--out", outp, NULL}, 1,
                want);
    char *b = bodies();
    assert_string_equal(b, "");
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded), cmocka_unit_test(test_single),        cmocka_unit_test(test_concurrency),
        cmocka_unit_test(test_failures), cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
