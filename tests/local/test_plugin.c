/*
 * test_plugin.c -- the local backend through its vtable with a small fake host (no gateway):
 * results against a brute-force search over the same embeddings, DOC splicing, the dynamic
 * batcher (calls gathered into one batch, a large call split), the bounded queue (SG_EOVERLOAD),
 * cancel, deadlines, destroy with pending work, /access, identity and start-up errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "e5.h"
#include "faissidx.h"
#include "local.h"
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <time.h>

#define MODEL SG_FIXTURES "/e5-tiny"
enum { ROWS = 300, DIM = 64 };

static char *tmpdir, *corpus_path, *index_path, *pages_path;
static float *row_emb;       /* ROWS x DIM, "passage: " + contents */
static sg_e5_model *brute_m; /* the query side of the brute-force search */
static sg_e5_workspace *brute_w;
static const sg_backend_vtable *vt;

/* ---- fake host ---- */

static pthread_mutex_t metric_mu = PTHREAD_MUTEX_INITIALIZER;
static double last_metric_value;
static const char *want_metric;

static void host_log(int level, const char *backend, const char *fmt, ...)
{
    if (getenv("SG_TEST_VERBOSE") == NULL && level > SG_LOG_WARN)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%d %s] ", level, backend);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static uint64_t host_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void host_metric(void *sink, const char *name, const char *help, int type, const char *labels, double value)
{
    (void)sink;
    (void)help;
    (void)type;
    (void)labels;
    if (want_metric != NULL && strcmp(name, want_metric) == 0)
        last_metric_value = value;
}

static const sg_host_api host = {sizeof(sg_host_api), SG_BACKEND_ABI_MINOR, host_log, host_now_ms, host_metric, NULL, NULL, NULL};

static double metric(sg_backend *b, const char *name)
{
    pthread_mutex_lock(&metric_mu);
    want_metric = name;
    last_metric_value = -1;
    vt->stats(b, NULL);
    double v = last_metric_value;
    want_metric = NULL;
    pthread_mutex_unlock(&metric_mu);
    return v;
}

/* ---- completions ---- */

typedef struct call_t {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, calls, bad_docs;
    sg_status status;
    char detail[256];
    size_t n;
    int64_t rows[64][8]; /* row ids parsed from the docs' "id" */
    double scores[64][8];
    size_t n_hits[64];
    char *doc0; /* first doc of query 0 */
    sg_query q[256];
    sg_search s;
} call_t;

static void call_init(call_t *c, const char *const *texts, size_t n, uint32_t topk)
{
    memset(c, 0, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    for (size_t i = 0; i < n; ++i) {
        c->q[i].text = texts[i];
        c->q[i].len = strlen(texts[i]);
    }
    c->s.struct_size = sizeof(c->s);
    c->s.topk = topk;
    c->s.queries = c->q;
    c->s.n_queries = n;
    c->s.request_id = "test";
}

static void call_free(call_t *c)
{
    free(c->doc0);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

static void on_done(void *cb, const sg_result *r)
{
    call_t *c = cb;
    pthread_mutex_lock(&c->mu);
    c->calls++;
    c->status = r->status;
    snprintf(c->detail, sizeof(c->detail), "%s", r->detail != NULL ? r->detail : "");
    if (r->status == SG_OK) {
        c->n = r->n_queries;
        for (size_t q = 0; q < r->n_queries; ++q) {
            const sg_hits *h = &r->queries[q];
            if (q < 64)
                c->n_hits[q] = h->n_hits;
            for (size_t i = 0; i < h->n_hits && i < 8 && q < 64; ++i) {
                /* (no cmocka asserts here: this runs on a worker thread) */
                cJSON *d = cJSON_ParseWithLength(h->hits[i].doc, h->hits[i].doc_len);
                const cJSON *id = cJSON_GetObjectItem(d, "id");
                const cJSON *url = cJSON_GetObjectItem(d, "url");
                if (d == NULL || !cJSON_IsString(url)) /* every DOC is valid JSON with a string url */
                    c->bad_docs++;
                c->rows[q][i] = cJSON_IsString(id) ? strtoll(id->valuestring, NULL, 10) : -1;
                c->scores[q][i] = h->hits[i].score;
                cJSON_Delete(d);
                if (q == 0 && i == 0)
                    c->doc0 = strndup(h->hits[i].doc, h->hits[i].doc_len);
            }
        }
    }
    c->done = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static int call_wait(call_t *c, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->done)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
            break;
    int d = c->done;
    pthread_mutex_unlock(&c->mu);
    assert_int_equal(c->bad_docs, 0);
    return d;
}

/* ---- fixture data ---- */

static const char *words[] = {"river",   "mountain", "castle", "piano",  "rocket", "garden", "winter", "ocean",
                              "library", "dragon",   "coffee", "violin", "desert", "forest", "harbor", "comet"};

static char *row_text(int i)
{
    char *t = malloc(200);
    snprintf(t, 200, "\\\"Topic %d\\\"\\n%s %s %s story number %d", i, words[i % 16], words[(i / 16) % 16], words[(i * 7) % 16], i);
    return t;
}

static void build_fixture(void)
{
    corpus_path = tu_path(tmpdir, "corpus.jsonl");
    index_path = tu_path(tmpdir, "e5_Flat.index");
    pages_path = tu_path(tmpdir, "pages.jsonl");
    FILE *fp = fopen(corpus_path, "w");
    for (int i = 0; i < ROWS; ++i) {
        char *t = row_text(i);
        if (i % 10 == 3) /* some rows carry their own url */
            fprintf(fp, "{\"id\": \"%d\", \"contents\": \"%s\", \"url\": \"https://x/%d\"}\n", i, t, i);
        else
            fprintf(fp, "{\"id\": \"%d\", \"contents\": \"%s\"}\n", i, t);
        free(t);
    }
    fclose(fp);
    fp = fopen(pages_path, "w");
    fprintf(fp, "{\"url\": \"https://en.wikipedia.org/wiki/River\", \"contents\": \"River page\"}\n");
    fprintf(fp, "{\"url\": \"https://w/index.php?title=Castle\", \"contents\": \"Castle page\"}\n");
    fclose(fp);
    /* embeddings of the rows exactly as the index builder makes them */
    sg_e5_model *m;
    char err[512];
    assert_int_equal(sg_e5_load(MODEL, &m, err, sizeof(err)), 0);
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    row_emb = malloc(sizeof(float) * ROWS * DIM);
    for (int i = 0; i < ROWS; ++i) {
        char *t = row_text(i);
        /* decode the JSON escapes of the row text */
        char plain[200];
        size_t n = 0;
        for (const char *p = t; *p != '\0'; ++p) {
            if (*p == '\\') {
                ++p;
                plain[n++] = *p == 'n' ? '\n' : *p;
            } else {
                plain[n++] = *p;
            }
        }
        plain[n] = '\0';
        const char *tp = plain;
        assert_int_equal(sg_e5_encode(m, w, "passage: ", &tp, &n, 1, 256, row_emb + (size_t)i * DIM, err, sizeof(err)), 0);
        free(t);
    }
    void *ix;
    assert_int_equal(sg_fidx_create("Flat", DIM, SG_FIDX_IP, &ix, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_add(ix, ROWS, row_emb, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_write(ix, index_path, err, sizeof(err)), 0);
    sg_fidx_free(ix);
    sg_e5_workspace_free(w);
    sg_e5_free(m);
}

static int setup(void **state)
{
    (void)state;
    tmpdir = tu_mkdtemp();
    vt = sg__local_vtable();
    build_fixture();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(tmpdir);
    free(tmpdir);
    free(corpus_path);
    free(index_path);
    free(pages_path);
    free(row_emb);
    sg_e5_workspace_free(brute_w);
    sg_e5_free(brute_m);
    return 0;
}

static sg_backend *create(const char *extra, char *err, size_t err_size, sg_status *st)
{
    char cfg[2048];
    snprintf(cfg, sizeof(cfg), "{\"model\": \"%s\", \"index\": \"%s\", \"corpus\": \"%s\"%s%s}", MODEL, index_path, corpus_path,
             extra[0] != '\0' ? ", " : "", extra);
    sg_backend *b = NULL;
    *st = vt->create(&host, "local", tmpdir, cfg, strlen(cfg), &b, err, err_size);
    return b;
}

static sg_backend *create_ok(const char *extra)
{
    char err[1024] = "";
    sg_status st;
    sg_backend *b = create(extra, err, sizeof(err), &st);
    if (st != SG_OK)
        fprintf(stderr, "create: %s\n", err);
    assert_int_equal(st, SG_OK);
    return b;
}

/* brute force: top-k rows of a query by inner product */
static void brute(const char *q, int k, int64_t *rows, double *scores)
{
    char err[256];
    if (brute_m == NULL) {
        assert_int_equal(sg_e5_load(MODEL, &brute_m, err, sizeof(err)), 0);
        brute_w = sg_e5_workspace_new(brute_m);
    }
    float qe[DIM];
    size_t len = strlen(q);
    assert_int_equal(sg_e5_encode(brute_m, brute_w, "query: ", &q, &len, 1, 256, qe, err, sizeof(err)), 0);
    for (int i = 0; i < k; ++i) {
        rows[i] = -1;
        scores[i] = -INFINITY;
    }
    for (int r = 0; r < ROWS; ++r) {
        double s = 0;
        for (int d = 0; d < DIM; ++d)
            s += (double)qe[d] * row_emb[(size_t)r * DIM + d];
        int pos = k;
        while (pos > 0 && s > scores[pos - 1])
            --pos;
        if (pos == k)
            continue;
        for (int j = k - 1; j > pos; --j) {
            scores[j] = scores[j - 1];
            rows[j] = rows[j - 1];
        }
        scores[pos] = s;
        rows[pos] = r;
    }
}

static void expect_brute(const call_t *c, size_t qi, const char *text, int k)
{
    int64_t rows[8];
    double sc[8];
    brute(text, k, rows, sc);
    assert_int_equal(c->n_hits[qi], k);
    for (int i = 0; i < k; ++i) {
        assert_true(fabs(c->scores[qi][i] - sc[i]) < 1e-4);
        if (c->rows[qi][i] != rows[i]) /* a near-tie may swap */
            assert_true(fabs(sc[i] - c->scores[qi][i]) < 1e-4);
    }
}

static const char *qs[] = {"river castle story", "a piano in winter",   "dragon over the ocean", "coffee library",
                           "topic 42",           "violin desert comet", "harbor garden",         "mountain rocket"};
enum { NQS = sizeof(qs) / sizeof(qs[0]) };

static void test_search_matches_brute_force(void **state)
{
    (void)state;
    sg_backend *b = create_ok("\"workers\": 2, \"max_wait_ms\": 0");
    call_t c;
    call_init(&c, qs, NQS, 5);
    assert_int_equal(vt->search(b, &c.s, on_done, &c), SG_OK);
    assert_true(call_wait(&c, 10000));
    assert_int_equal(c.status, SG_OK);
    assert_int_equal(c.n, NQS);
    for (size_t i = 0; i < NQS; ++i)
        expect_brute(&c, i, qs[i], 5);
    /* the DOC is the corpus line spliced as is, plus "url" when the row has none */
    int64_t r0 = c.rows[0][0];
    char *t = row_text((int)r0);
    char want[512];
    if (r0 % 10 == 3)
        snprintf(want, sizeof(want), "{\"id\": \"%lld\", \"contents\": \"%s\", \"url\": \"https://x/%lld\"}", (long long)r0, t,
                 (long long)r0);
    else
        snprintf(want, sizeof(want), "{\"id\": \"%lld\", \"contents\": \"%s\",\"url\":\"\"}", (long long)r0, t);
    free(t);
    assert_string_equal(c.doc0, want);
    call_free(&c);
    /* topk larger than the corpus: -1 labels are dropped */
    call_t big;
    call_init(&big, qs, 1, ROWS + 5);
    assert_int_equal(vt->search(b, &big.s, on_done, &big), SG_OK);
    assert_true(call_wait(&big, 10000));
    assert_int_equal(big.status, SG_OK);
    assert_int_equal(big.n_hits[0], ROWS);
    call_free(&big);
    /* past max_topk: refused at once */
    call_t huge;
    call_init(&huge, qs, 1, 1001);
    assert_int_equal(vt->search(b, &huge.s, on_done, &huge), SG_ETOOBIG);
    assert_int_equal(huge.calls, 0);
    call_free(&huge);
    assert_non_null(strstr(vt->identity(b), "local:e5:"));
    char detail[64];
    assert_int_equal(vt->health(b, detail, sizeof(detail)), SG_OK);
    assert_true(metric(b, "local_corpus_rows") == ROWS);
    vt->destroy(b);
}

static void test_batches_gather_calls(void **state)
{
    (void)state;
    /* one worker that waits up to 300 ms for a batch of 64: 20 one-query calls become one batch */
    sg_backend *b = create_ok("\"workers\": 1, \"max_batch\": 64, \"max_wait_ms\": 300");
    enum { CALLS = 20 };
    call_t c[CALLS];
    char texts[CALLS][64];
    const char *tp[CALLS];
    for (int i = 0; i < CALLS; ++i) {
        snprintf(texts[i], sizeof(texts[i]), "%s story %d", words[i % 16], i);
        tp[i] = texts[i];
        call_init(&c[i], &tp[i], 1, 3);
        assert_int_equal(vt->search(b, &c[i].s, on_done, &c[i]), SG_OK);
    }
    for (int i = 0; i < CALLS; ++i) {
        assert_true(call_wait(&c[i], 10000));
        assert_int_equal(c[i].status, SG_OK);
        assert_int_equal(c[i].calls, 1);
        expect_brute(&c[i], 0, texts[i], 3); /* each call got its own results */
        call_free(&c[i]);
    }
    double batches = metric(b, "local_batches_total"), queries = metric(b, "local_batch_queries_total");
    fprintf(stderr, "%d calls -> %.0f batches of %.0f queries\n", CALLS, batches, queries);
    assert_true(queries == CALLS);
    assert_true(batches <= 2);
    vt->destroy(b);
}

/* One client sending one query at a time (each into an empty backend, on average fewer than 1.5
 * queries in it): each query starts at once instead of waiting max_wait_ms for others that will
 * not come. A call of several queries still waits (test_overload_cancel_deadline relies on it), as
 * does a query that arrives while another is in the backend (test_batches_gather_calls). */
static void test_lone_query_starts_at_once(void **state)
{
    (void)state;
    sg_backend *b = create_ok("\"workers\": 2, \"max_batch\": 64, \"max_wait_ms\": 5000");
    for (int i = 0; i < 4; ++i) {
        call_t c;
        const char *t = words[i];
        call_init(&c, &t, 1, 3);
        uint64_t t0 = host_now_ms();
        assert_int_equal(vt->search(b, &c.s, on_done, &c), SG_OK);
        assert_true(call_wait(&c, 20000));
        assert_int_equal(c.status, SG_OK);
        uint64_t took = host_now_ms() - t0;
        fprintf(stderr, "lone query %d: %llu ms\n", i, (unsigned long long)took);
        assert_true(took < 2500); /* before: 5000 ms, the whole max_wait_ms */
        expect_brute(&c, 0, t, 3);
        call_free(&c);
    }
    assert_true(metric(b, "local_batches_total") == 4);
    vt->destroy(b);
}

static void test_large_call_is_split(void **state)
{
    (void)state;
    sg_backend *b = create_ok("\"workers\": 2, \"max_batch\": 16, \"max_wait_ms\": 0");
    enum { N = 150 };
    static char texts[N][48];
    const char *tp[N];
    for (int i = 0; i < N; ++i) {
        snprintf(texts[i], sizeof(texts[i]), "%s %s %d", words[i % 16], words[(i * 3) % 16], i);
        tp[i] = texts[i];
    }
    call_t c;
    call_init(&c, tp, N, 3);
    assert_int_equal(vt->search(b, &c.s, on_done, &c), SG_OK);
    assert_true(call_wait(&c, 20000));
    assert_int_equal(c.status, SG_OK);
    assert_int_equal(c.n, N);
    for (int i = 0; i < 64; i += 9)
        expect_brute(&c, (size_t)i, texts[i], 3);
    double batches = metric(b, "local_batches_total");
    assert_true(batches >= 10); /* 150 / 16 */
    call_free(&c);
    vt->destroy(b);
}

static void test_overload_cancel_deadline(void **state)
{
    (void)state;
    /* the worker waits (up to 5 s) for a full batch, so queued queries stay queued */
    sg_backend *b = create_ok("\"workers\": 1, \"max_batch\": 64, \"max_wait_ms\": 5000, \"max_queue\": 10");
    call_t a, o, d;
    call_init(&a, qs, 8, 3);
    assert_int_equal(vt->search(b, &a.s, on_done, &a), SG_OK);
    call_init(&o, qs, 5, 3);
    assert_int_equal(vt->search(b, &o.s, on_done, &o), SG_EOVERLOAD); /* 8 + 5 > 10 */
    assert_true(metric(b, "local_rejected_total") == 1);
    assert_true(metric(b, "local_queued_queries") == 8);
    vt->cancel(b, &o); /* unknown cb_data: nothing happens */
    uint64_t t0 = host_now_ms();
    vt->cancel(b, &a);
    assert_true(call_wait(&a, 2000));
    assert_int_equal(a.status, SG_ECANCELED);
    assert_int_equal(a.calls, 1);
    assert_true(host_now_ms() - t0 < 1000);
    assert_true(metric(b, "local_queued_queries") == 0);
    /* a deadline that passes while queued: SG_ETIMEDOUT */
    call_init(&d, qs, 2, 3);
    d.s.deadline_ms = host_now_ms() + 50;
    vt->destroy(b);
    b = create_ok("\"workers\": 1, \"max_batch\": 64, \"max_wait_ms\": 300");
    assert_int_equal(vt->search(b, &d.s, on_done, &d), SG_OK);
    assert_true(call_wait(&d, 5000));
    assert_int_equal(d.status, SG_ETIMEDOUT);
    assert_non_null(strstr(d.detail, "deadline"));
    /* ABI 1.3: past start_by (the deadline less the route's floor) a queued call is not taken,
     * long before its deadline (issue 19, item 5) */
    call_t f;
    call_init(&f, qs, 2, 3);
    uint64_t t1 = host_now_ms();
    f.s.deadline_ms = t1 + 10000;
    f.s.start_by_ms = t1 + 50;
    assert_int_equal(vt->search(b, &f.s, on_done, &f), SG_OK);
    assert_true(call_wait(&f, 5000));
    assert_int_equal(f.status, SG_ETIMEDOUT);
    assert_non_null(strstr(f.detail, "too little of the deadline was left"));
    assert_true(host_now_ms() - t1 < 5000);
    /* the mean DOC size the gateway estimates answers from; no pages file, no page size */
    sg_limits lim = {.struct_size = sizeof(lim), .retries = -1};
    vt->limits(b, SG_OP_SEARCH, &lim);
    assert_true(lim.doc_bytes > 10 && lim.doc_bytes < 10000);
    assert_int_equal(lim.max_inflight, 0);
    sg_limits acc = {.struct_size = sizeof(acc), .retries = -1};
    vt->limits(b, SG_OP_ACCESS, &acc);
    assert_int_equal(acc.doc_bytes, 0);
    call_free(&a);
    call_free(&o);
    call_free(&d);
    call_free(&f);
    vt->destroy(b);
}

static void test_destroy_completes_pending(void **state)
{
    (void)state;
    sg_backend *b = create_ok("\"workers\": 1, \"max_batch\": 64, \"max_wait_ms\": 10000");
    call_t a, c2;
    call_init(&a, qs, 3, 3);
    call_init(&c2, qs + 3, 2, 3);
    assert_int_equal(vt->search(b, &a.s, on_done, &a), SG_OK);
    assert_int_equal(vt->search(b, &c2.s, on_done, &c2), SG_OK);
    vt->destroy(b); /* returns only after both completed */
    assert_int_equal(a.done, 1);
    assert_int_equal(a.status, SG_ECANCELED);
    assert_int_equal(c2.status, SG_ECANCELED);
    assert_int_equal(a.calls + c2.calls, 2);
    call_free(&a);
    call_free(&c2);
}

static void test_access(void **state)
{
    (void)state;
    char extra[1024];
    snprintf(extra, sizeof(extra), "\"pages\": \"%s\"", pages_path);
    sg_backend *b = create_ok(extra);
    const char *urls[] = {"https://en.wikipedia.org/wiki/River", "https://nowhere", "https://w/index.php/Castle"};
    call_t c;
    call_init(&c, urls, 3, 1);
    /* access docs have no "id": on_done parses "url" which pages have */
    assert_int_equal(vt->access(b, &c.s, on_done, &c), SG_OK);
    assert_true(call_wait(&c, 5000));
    assert_int_equal(c.status, SG_OK);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.n_hits[0], 1);
    assert_int_equal(c.n_hits[1], 0);
    assert_int_equal(c.n_hits[2], 1);
    assert_string_equal(c.doc0, "{\"url\": \"https://en.wikipedia.org/wiki/River\", \"contents\": \"River page\"}");
    call_free(&c);
    vt->destroy(b);
    /* without a pages file: a clear 503 */
    b = create_ok("");
    call_init(&c, urls, 1, 1);
    assert_int_equal(vt->access(b, &c.s, on_done, &c), SG_OK);
    assert_true(call_wait(&c, 5000));
    assert_int_equal(c.status, SG_EUNAVAIL);
    assert_non_null(strstr(c.detail, "no pages file"));
    call_free(&c);
    vt->destroy(b);
}

static void test_identity(void **state)
{
    (void)state;
    sg_backend *b = create_ok("");
    char *id1 = strdup(vt->identity(b));
    vt->destroy(b);
    b = create_ok("");
    assert_string_equal(vt->identity(b), id1); /* same data, same identity */
    vt->destroy(b);
    b = create_ok("\"query_prefix\": \"q: \"");
    assert_string_not_equal(vt->identity(b), id1);
    vt->destroy(b);
    /* a corpus edit (same row count) changes it */
    size_t len = 0;
    char *orig = tu_read_file(corpus_path, &len);
    assert_non_null(orig);
    char *mod = strdup(orig);
    char *at = strstr(mod, "story number 7\"");
    assert_non_null(at);
    at[13] = '8';
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
    assert_int_equal(tu_write_file(corpus_path, mod, len), 0);
    b = create_ok("");
    assert_string_not_equal(vt->identity(b), id1);
    vt->destroy(b);
    assert_int_equal(tu_write_file(corpus_path, orig, len), 0);
    free(orig);
    free(mod);
    free(id1);
}

static void expect_create_error(const char *cfg_extra, const char *want)
{
    char err[1024] = "";
    sg_status st;
    sg_backend *b = create(cfg_extra, err, sizeof(err), &st);
    if (st == SG_OK || strstr(err, want) == NULL)
        fprintf(stderr, "extra %s: status %d, err \"%s\", want \"%s\"\n", cfg_extra, st, err, want);
    assert_true(st != SG_OK);
    assert_null(b);
    assert_non_null(strstr(err, want));
}

static void test_create_errors(void **state)
{
    (void)state;
    expect_create_error("\"bogus\": 1", "bogus");
    expect_create_error("\"max_batch\": 0", "config.max_batch");
    expect_create_error("\"faiss_params\": \"nprobe=3\"", "cannot apply search parameters");
    char buf[1024];
    /* an index of another dimension */
    char *other = tu_path(tmpdir, "dim32.index");
    void *ix;
    char err[256];
    assert_int_equal(sg_fidx_create("Flat", 32, SG_FIDX_IP, &ix, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_write(ix, other, err, sizeof(err)), 0);
    sg_fidx_free(ix);
    char cfg[2048];
    snprintf(cfg, sizeof(cfg), "{\"model\": \"%s\", \"index\": \"%s\", \"corpus\": \"%s\"}", MODEL, other, corpus_path);
    sg_backend *b = NULL;
    sg_status st = vt->create(&host, "local", tmpdir, cfg, strlen(cfg), &b, buf, sizeof(buf));
    assert_true(st != SG_OK);
    assert_non_null(strstr(buf, "has dimension 32 but the model"));
    /* more vectors than corpus rows */
    char *small = tu_path(tmpdir, "small.jsonl");
    assert_int_equal(tu_write_file(small, "{\"id\": \"0\"}\n", 12), 0);
    snprintf(cfg, sizeof(cfg), "{\"model\": \"%s\", \"index\": \"%s\", \"corpus\": \"%s\"}", MODEL, index_path, small);
    st = vt->create(&host, "local", tmpdir, cfg, strlen(cfg), &b, buf, sizeof(buf));
    assert_true(st != SG_OK);
    assert_non_null(strstr(buf, "has 1 rows but the index"));
    /* a broken corpus line */
    assert_int_equal(tu_write_file(small, "{\"id\": \"0\"}\n{\"id\": 1\n", 22), 0);
    st = vt->create(&host, "local", tmpdir, cfg, strlen(cfg), &b, buf, sizeof(buf));
    assert_true(st != SG_OK);
    assert_non_null(strstr(buf, "small.jsonl:2: row 1 is not one JSON object"));
    /* a corrupt index file */
    char *bad = tu_path(tmpdir, "bad.index");
    assert_int_equal(tu_write_file(bad, "IxFI garbage", 12), 0);
    snprintf(cfg, sizeof(cfg), "{\"model\": \"%s\", \"index\": \"%s\", \"corpus\": \"%s\"}", MODEL, bad, corpus_path);
    st = vt->create(&host, "local", tmpdir, cfg, strlen(cfg), &b, buf, sizeof(buf));
    assert_true(st != SG_OK);
    assert_non_null(strstr(buf, "config.index: "));
    assert_non_null(strstr(buf, "bad.index: truncated FAISS Flat index (12 bytes)"));
    /* a file FAISS itself refuses */
    assert_int_equal(tu_write_file(bad, "not an index at all", 19), 0);
    st = vt->create(&host, "local", tmpdir, cfg, strlen(cfg), &b, buf, sizeof(buf));
    assert_true(st != SG_OK);
    assert_non_null(strstr(buf, "bad.index: not a readable FAISS index"));
    /* a missing model folder */
    snprintf(cfg, sizeof(cfg), "{\"model\": \"%s/nomodel\", \"index\": \"%s\", \"corpus\": \"%s\"}", tmpdir, index_path,
             corpus_path);
    st = vt->create(&host, "local", tmpdir, cfg, strlen(cfg), &b, buf, sizeof(buf));
    assert_true(st != SG_OK);
    assert_non_null(strstr(buf, "config.model: "));
    assert_non_null(strstr(buf, "nomodel/config.json: cannot open"));
    /* relative paths resolve against base_dir */
    snprintf(cfg, sizeof(cfg), "{\"model\": \"%s\", \"index\": \"e5_Flat.index\", \"corpus\": \"corpus.jsonl\"}", MODEL);
    st = vt->create(&host, "local", tmpdir, cfg, strlen(cfg), &b, buf, sizeof(buf));
    assert_int_equal(st, SG_OK);
    vt->destroy(b);
    free(bad);
    free(small);
    free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_matches_brute_force),
        cmocka_unit_test(test_batches_gather_calls),
        cmocka_unit_test(test_lone_query_starts_at_once),
        cmocka_unit_test(test_large_call_is_split),
        cmocka_unit_test(test_overload_cancel_deadline),
        cmocka_unit_test(test_destroy_completes_pending),
        cmocka_unit_test(test_access),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_create_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
