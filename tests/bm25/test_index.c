/*
 * test_index.c -- the bm25 index builder and reader (backends/bm25/builder.c, index.c) on small
 * corpora made here in a temporary directory: what is stored (DOC JSON bytes, counts, postings),
 * that spilling to many runs gives byte-identical files, builder errors that name file and line,
 * scoring against an independent BM25 computed here, and every kind of damaged or foreign index
 * file failing to open with a message that names the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "builder.h"
#include "format.h"
#include "index.h"

#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmpdir, name);
}

static void write_file(const char *name, const char *text)
{
    char p[512];
    path_of(p, sizeof(p), name);
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static char *read_whole(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    b[n] = '\0';
    *len = (size_t)n;
    return b;
}

static int build(const char *corpus, const char *out, size_t budget, char *err, size_t n)
{
    char c[512], o[512];
    path_of(c, sizeof(c), corpus);
    path_of(o, sizeof(o), out);
    sg_bm25_build_opts_t opts = {.corpus = c, .out_dir = o, .k1 = 0.9, .b = 0.4, .memory_budget = budget};
    sg_bm25_build_stats_t st;
    return sg_bm25_build(&opts, &st, err, n);
}

static int open_ix(sg_bm25_index_t *ix, const char *dir, int verify, char *err, size_t n)
{
    char p[512];
    path_of(p, sizeof(p), dir);
    return sg_bm25_index_open(ix, p, verify, 0, err, n);
}

/* A deterministic corpus of `n` documents over a small vocabulary (so terms repeat a lot). */
static void make_corpus(const char *name, int n, unsigned seed)
{
    static const char *const words[] = {"volcano", "lava",    "crater", "mountain", "river", "lake",   "city",     "capital",
                                        "france",  "paris",   "tokyo",  "japan",    "the",   "a",      "running",  "runs",
                                        "ran",     "quickly", "bridge", "ancient",  "roman", "empire", "zürich",   "東京",
                                        "3.14",    "can't",   "john's", "science",  "music", "theory", "volcanic", "eruption"};
    char p[512];
    path_of(p, sizeof(p), name);
    FILE *fp = fopen(p, "wb");
    assert_non_null(fp);
    unsigned s = seed;
    for (int d = 0; d < n; ++d) {
        fprintf(fp, "{\"id\": \"doc-%d\", \"contents\": \"\\\"Title %d\\\"\\n", d, d);
        int len = 1 + (int)((s >> 16) % 40);
        for (int w = 0; w < len; ++w) {
            s = s * 1103515245u + 12345u;
            fprintf(fp, "%s ", words[(s >> 16) % (sizeof(words) / sizeof(words[0]))]);
        }
        s = s * 1103515245u + 12345u;
        fprintf(fp, "\"}\n");
    }
    fclose(fp);
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb;
    (void)flag;
    (void)f;
    return remove(p);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/sg-bm25-test-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* ---- what is stored ---- */

static void test_docs_and_counts(void **state)
{
    (void)state;
    write_file("c1.jsonl", "{\"id\": \"a1\", \"contents\": \"\\\"Hamlet\\\"\\nHamlet is a tragedy by William Shakespeare.\", "
                           "\"url\": \"https://example.org/hamlet\"}\n"
                           "\n"
                           "{\"contents\": \"\\\"\\\"Quoted\\\"\\\"\\nTab\\there, quote \\\" and backslash \\\\ and \\u00e9 and "
                           "\\u0001.\\nSecond line.\", \"id\": 42}\n"
                           "{\"id\": \"x\", \"contents\": \"No newline at all\"}\n"
                           "{\"id\": \"p\", \"contents\": \"!!! ...\", \"extra\": [1, 2]}\n"
                           "{\"contents\": \"\\\"Paris\\\"\\nParis is the capital of France. Paris!\"}");
    char err[1024] = "";
    int r = build("c1.jsonl", "ix1", 64 << 20, err, sizeof(err));
    if (r != 0)
        fail_msg("build failed: %s", err);
    sg_bm25_index_t ix;
    assert_int_equal(open_ix(&ix, "ix1", SG_BM25_VERIFY_FULL, err, sizeof(err)), 0);
    assert_int_equal(ix.meta.n_docs, 5);
    assert_int_equal(ix.meta.n_scored_docs, 4); /* "!!! ..." has no token */
    assert_int_equal(ix.meta.stemmer, SG_BM25_STEM_PORTER);
    assert_true(ix.meta.k1 == 0.9 && ix.meta.b == 0.4);
    static const char *const want[] = {
        "{\"id\":\"a1\",\"title\":\"Hamlet\",\"text\":\"Hamlet is a tragedy by William "
        "Shakespeare.\",\"contents\":\"\\\"Hamlet\\\"\\nHamlet "
        "is a tragedy by William Shakespeare.\",\"url\":\"https://example.org/hamlet\"}",
        "{\"id\":\"42\",\"title\":\"Quoted\",\"text\":\"Tab\\there, quote \\\" and backslash \\\\ and é and \\u0001.\\nSecond "
        "line.\",\"contents\":\"\\\"\\\"Quoted\\\"\\\"\\nTab\\there, quote \\\" and backslash \\\\ and é and \\u0001.\\nSecond "
        "line.\",\"url\":\"\"}",
        "{\"id\":\"x\",\"title\":\"No newline at all\",\"text\":\"\",\"contents\":\"No newline at all\",\"url\":\"\"}",
        "{\"id\":\"p\",\"title\":\"!!! ...\",\"text\":\"\",\"contents\":\"!!! ...\",\"url\":\"\"}",
        "{\"id\":\"4\",\"title\":\"Paris\",\"text\":\"Paris is the capital of France. "
        "Paris!\",\"contents\":\"\\\"Paris\\\"\\nParis is "
        "the capital of France. Paris!\",\"url\":\"\"}",
    };
    for (int d = 0; d < 5; ++d) {
        const sg_bm25_docent_t *e = &ix.docent[d];
        if (e->len != strlen(want[d]) || memcmp(ix.docs + e->off, want[d], e->len) != 0)
            fail_msg("doc %d:\n got %.*s\nwant %s", d, (int)e->len, ix.docs + e->off, want[d]);
    }
    /* document lengths: tokens after stop words ("hamlet hamlet tragedi william shakespear" = 5) */
    assert_int_equal(ix.docent[0].ntokens, 5);
    assert_int_equal(ix.docent[3].ntokens, 0);
    assert_int_equal(ix.docent[4].ntokens, 5); /* paris paris capit franc paris */
    /* the dictionary: "paris" is in one document with tf 3 */
    int64_t t = sg_bm25_index_find(&ix, "pari", 4);
    assert_true(t >= 0);
    assert_int_equal(ix.terms[t].df, 1);
    const uint8_t *p = ix.postings + ix.terms[t].post_off, *end = ix.postings + ix.terms[t + 1].post_off;
    uint64_t v, tf;
    assert_int_equal(sg_bm25_get_varint(&p, end, &v), 0);
    assert_int_equal(v, 4u << 1); /* doc 4, tf != 1 */
    assert_int_equal(sg_bm25_get_varint(&p, end, &tf), 0);
    assert_int_equal(tf, 3);
    assert_true(p == end);
    assert_int_equal(sg_bm25_index_find(&ix, "hamlet", 6) >= 0, 1);
    assert_int_equal(sg_bm25_index_find(&ix, "the", 3), -1); /* a stop word */
    assert_int_equal(sg_bm25_index_find(&ix, "zzz", 3), -1);
    assert_int_equal(sg_bm25_index_find(&ix, "", 0), -1);
    sg_bm25_index_close(&ix);
}

static void test_runs_identical(void **state)
{
    (void)state;
    make_corpus("c2.jsonl", 3000, 7);
    char err[1024] = "";
    if (build("c2.jsonl", "one", 256 << 20, err, sizeof(err)) != 0 || build("c2.jsonl", "many", 16 << 10, err, sizeof(err)) != 0)
        fail_msg("build failed: %s", err);
    for (int k = 0; k < SG_BM25_NUM_FILES; ++k) {
        char a[512], b[512];
        snprintf(a, sizeof(a), "%s/one/%s", tmpdir, sg_bm25_file_names[k]);
        snprintf(b, sizeof(b), "%s/many/%s", tmpdir, sg_bm25_file_names[k]);
        size_t la, lb;
        char *x = read_whole(a, &la), *y = read_whole(b, &lb);
        assert_non_null(x);
        assert_non_null(y);
        if (la != lb || memcmp(x, y, la) != 0)
            fail_msg("%s differs between a one-run and a many-run build", sg_bm25_file_names[k]);
        free(x);
        free(y);
    }
    /* and no run or temporary file is left behind */
    char p[512];
    snprintf(p, sizeof(p), "%s/many/bm25.meta.tmp", tmpdir);
    assert_int_equal(access(p, F_OK), -1);
    snprintf(p, sizeof(p), "ls %s/many | grep -c tmp > /dev/null", tmpdir);
    assert_int_not_equal(system(p), 0);
}

/* An independent BM25 over the stored postings: score every document directly. */
static void test_scores(void **state)
{
    (void)state;
    make_corpus("c3.jsonl", 500, 99);
    char err[1024] = "";
    if (build("c3.jsonl", "ix3", 64 << 20, err, sizeof(err)) != 0)
        fail_msg("build failed: %s", err);
    sg_bm25_index_t ix;
    assert_int_equal(open_ix(&ix, "ix3", SG_BM25_VERIFY_FULL, err, sizeof(err)), 0);
    double k1 = 1.2, b = 0.75;
    float *norms = sg_bm25_norms(&ix, k1, b);
    sg_bm25_searcher_t *s = sg_bm25_searcher_new(&ix, norms);
    assert_non_null(s);
    const char *q = "Volcanic eruption of the lava volcano volcano in Zürich";
    sg_bm25_hit_t hits[600];
    sg_bm25_qstats_t st = {0};
    size_t n = sg_bm25_search(s, q, strlen(q), 600, hits, &st);
    assert_true(n > 10);
    /* expected: per document, sum over distinct query terms of qtf * idf * tf / (tf + norm) */
    sg_bm25_analyzer_t *an = sg_bm25_analyzer_new(SG_BM25_STEM_PORTER, SG_BM25_STOP_LUCENE);
    sg_bm25_tokens_t qt = {0}, dt = {0};
    size_t nq = sg_bm25_analyze(an, q, strlen(q), &qt);
    double *want = calloc(ix.meta.n_docs, sizeof(*want));
    size_t matching = 0;
    for (uint64_t d = 0; d < ix.meta.n_docs; ++d) {
        /* re-analyze the stored contents: the text between "contents":" and ","url" (no escapes in this corpus but \" and \n) */
        const char *doc = ix.docs + ix.docent[d].off;
        const char *c0 = strstr(doc, "\"contents\":\"") + 12, *c1 = strstr(c0, "\",\"url\"");
        char text[4096];
        size_t tl = 0;
        for (const char *x = c0; x < c1 && tl + 1 < sizeof(text); ++x) {
            if (*x == '\\') {
                ++x;
                text[tl++] = *x == 'n' ? '\n' : *x;
            } else {
                text[tl++] = *x;
            }
        }
        size_t nd = sg_bm25_analyze(an, text, tl, &dt);
        assert_int_equal(nd, ix.docent[d].ntokens);
        double dl = (double)nd, avgdl = (double)ix.meta.total_tokens / (double)ix.meta.n_scored_docs;
        for (size_t i = 0; i < nq; ++i) {
            const char *term = sg_bm25_token(&qt, i);
            int seen = 0;
            for (size_t j = 0; j < i; ++j)
                seen |= strcmp(sg_bm25_token(&qt, j), term) == 0;
            if (seen)
                continue;
            double qtf = 0, tf = 0, df = 0;
            for (size_t j = 0; j < nq; ++j)
                qtf += strcmp(sg_bm25_token(&qt, j), term) == 0;
            for (size_t j = 0; j < nd; ++j)
                tf += strcmp(sg_bm25_token(&dt, j), term) == 0;
            int64_t t = sg_bm25_index_find(&ix, term, strlen(term));
            if (t < 0 || tf == 0)
                continue;
            df = ix.terms[t].df;
            double N = (double)ix.meta.n_scored_docs;
            double idf = log(1 + (N - df + 0.5) / (df + 0.5));
            want[d] += qtf * idf * tf / (tf + k1 * (1 - b + b * dl / avgdl));
        }
        matching += want[d] > 0;
    }
    assert_int_equal(n, matching);
    for (size_t i = 0; i < n; ++i) {
        double w = want[hits[i].doc];
        if (fabs(w - hits[i].score) > 1e-5 * (w > 1 ? w : 1))
            fail_msg("rank %zu doc %u: score %.7f, expected %.7f", i, hits[i].doc, (double)hits[i].score, w);
        if (i > 0) /* order: score descending, then document number */
            assert_true(hits[i - 1].score > hits[i].score || (hits[i - 1].score == hits[i].score && hits[i - 1].doc < hits[i].doc));
    }
    /* top 3 is the head of the full ranking */
    sg_bm25_hit_t top[3];
    assert_int_equal(sg_bm25_search(s, q, strlen(q), 3, top, &st), 3);
    for (int i = 0; i < 3; ++i) {
        assert_int_equal(top[i].doc, hits[i].doc);
        assert_true(top[i].score == hits[i].score);
    }
    /* empty, punctuation-only and stop-word-only queries: no hits, not an error */
    assert_int_equal(sg_bm25_search(s, "", 0, 3, top, &st), 0);
    assert_int_equal(sg_bm25_search(s, "?!.,", 4, 3, top, &st), 0);
    assert_int_equal(sg_bm25_search(s, "the of a", 8, 3, top, &st), 0);
    assert_int_equal(sg_bm25_search(s, "unindexedword", 13, 3, top, &st), 0);
    assert_int_equal(st.corrupt, 0);
    free(want);
    sg_bm25_tokens_free(&qt);
    sg_bm25_tokens_free(&dt);
    sg_bm25_analyzer_free(an);
    sg_bm25_searcher_free(s);
    free(norms);
    sg_bm25_index_close(&ix);
}

static void test_builder_errors(void **state)
{
    (void)state;
    char err[1024];
    write_file("bad1.jsonl", "{\"id\": \"0\", \"contents\": \"ok\"}\n{\"id\": \"1\", \"contents\": \"broken\n");
    assert_int_equal(build("bad1.jsonl", "bad", 1 << 20, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "bad1.jsonl:2: not a JSON object"));
    write_file("bad2.jsonl", "{\"id\": \"0\", \"text\": \"no contents\"}\n");
    assert_int_equal(build("bad2.jsonl", "bad", 1 << 20, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "bad2.jsonl:1: expected a string \"contents\""));
    write_file("bad3.jsonl", "{\"id\": [1], \"contents\": \"x\"}\n");
    assert_int_equal(build("bad3.jsonl", "bad", 1 << 20, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "\"id\" must be a string or an integer"));
    assert_int_equal(build("missing.jsonl", "bad", 1 << 20, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "missing.jsonl: cannot open"));
    /* a failed build leaves no index behind */
    sg_bm25_index_t ix;
    assert_int_equal(open_ix(&ix, "bad", SG_BM25_VERIFY_HEADER, err, sizeof(err)), -1);
    /* an empty corpus is a valid, empty index */
    write_file("empty.jsonl", "\n\n");
    assert_int_equal(build("empty.jsonl", "empty", 1 << 20, err, sizeof(err)), 0);
    assert_int_equal(open_ix(&ix, "empty", SG_BM25_VERIFY_FULL, err, sizeof(err)), 0);
    assert_int_equal(ix.meta.n_docs, 0);
    float *norms = sg_bm25_norms(&ix, 0.9, 0.4);
    sg_bm25_searcher_t *s = sg_bm25_searcher_new(&ix, norms);
    sg_bm25_hit_t h[3];
    sg_bm25_qstats_t st = {0};
    assert_int_equal(sg_bm25_search(s, "anything", 8, 3, h, &st), 0);
    sg_bm25_searcher_free(s);
    free(norms);
    sg_bm25_index_close(&ix);
}

/* ---- damaged and foreign files ---- */

static void copy_index(const char *from, const char *to)
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf %s/%s && cp -r %s/%s %s/%s", tmpdir, to, tmpdir, from, tmpdir, to);
    assert_int_equal(system(cmd), 0);
}

static void patch(const char *dir, const char *file, long off, const void *bytes, size_t n)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s/%s", tmpdir, dir, file);
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    if (off < 0)
        off += lseek(fd, 0, SEEK_END);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    close(fd);
}

static void flip(const char *dir, const char *file, long off)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s/%s", tmpdir, dir, file);
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    if (off < 0)
        off += lseek(fd, 0, SEEK_END);
    unsigned char c;
    assert_int_equal(pread(fd, &c, 1, off), 1);
    c ^= 0x5a;
    assert_int_equal(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

/* Rewrites a file's header with a field changed and a valid header CRC. */
static void rewrite_header(const char *dir, const char *file, void (*edit)(sg_bm25_header_t *))
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s/%s", tmpdir, dir, file);
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    sg_bm25_header_t h;
    assert_int_equal(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    edit(&h);
    h.header_crc = sg_bm25_header_crc(&h);
    assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    close(fd);
}

static void bump_version(sg_bm25_header_t *h)
{
    h->version = SG_BM25_FORMAT_VERSION + 1;
}

static void expect_open_error(const char *dir, int verify, const char *file, const char *what)
{
    sg_bm25_index_t ix;
    char err[1024] = "";
    if (open_ix(&ix, dir, verify, err, sizeof(err)) == 0) {
        sg_bm25_index_close(&ix);
        fail_msg("%s: opened although %s should be rejected (%s)", dir, file, what);
    }
    if (strstr(err, file) == NULL || strstr(err, what) == NULL)
        fail_msg("%s: error does not name %s / %s: %s", dir, file, what, err);
}

static void test_corrupt_files(void **state)
{
    (void)state;
    make_corpus("c4.jsonl", 400, 3);
    make_corpus("c5.jsonl", 400, 4);
    char err[1024] = "";
    if (build("c4.jsonl", "good", 64 << 20, err, sizeof(err)) != 0 || build("c5.jsonl", "other", 64 << 20, err, sizeof(err)) != 0)
        fail_msg("build failed: %s", err);
    /* one flipped payload byte in any file: caught by the payload checksum */
    for (int k = 0; k < SG_BM25_NUM_FILES; ++k) {
        copy_index("good", "bad");
        flip("bad", sg_bm25_file_names[k], -3);
        expect_open_error("bad", SG_BM25_VERIFY_FULL, sg_bm25_file_names[k],
                          k == 0 ? "checksum mismatch" : "payload checksum mismatch");
    }
    /* a flipped header byte */
    copy_index("good", "bad");
    flip("bad", "terms.bin", 20);
    expect_open_error("bad", SG_BM25_VERIFY_HEADER, "terms.bin", "header checksum mismatch");
    /* another format version: named as such, with the remedy */
    copy_index("good", "bad");
    rewrite_header("bad", "postings.bin", bump_version);
    expect_open_error("bad", SG_BM25_VERIFY_HEADER, "postings.bin", "index format version 2, but this searchgate reads version 1");
    expect_open_error("bad", SG_BM25_VERIFY_HEADER, "postings.bin", "rebuild the index");
    /* not an index file at all */
    copy_index("good", "bad");
    patch("bad", "docs.idx", 0, "GARBAGE!", 8);
    expect_open_error("bad", SG_BM25_VERIFY_HEADER, "docs.idx", "bad magic");
    /* truncated */
    copy_index("good", "bad");
    {
        char p[512];
        snprintf(p, sizeof(p), "%s/bad/docs.bin", tmpdir);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(truncate(p, st.st_size - 1), 0);
        expect_open_error("bad", SG_BM25_VERIFY_HEADER, "docs.bin", "truncated");
        assert_int_equal(truncate(p, 10), 0);
        expect_open_error("bad", SG_BM25_VERIFY_HEADER, "docs.bin", "too short");
    }
    /* missing */
    copy_index("good", "bad");
    {
        char p[512];
        snprintf(p, sizeof(p), "%s/bad/terms.bin", tmpdir);
        assert_int_equal(unlink(p), 0);
        expect_open_error("bad", SG_BM25_VERIFY_HEADER, "terms.bin", "cannot open");
    }
    expect_open_error("nonexistent", SG_BM25_VERIFY_HEADER, "nonexistent", "cannot open the index directory");
    /* a file from another build of an index (each file is intact on its own) */
    copy_index("good", "bad");
    {
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "cp %s/other/postings.bin %s/bad/postings.bin", tmpdir, tmpdir);
        assert_int_equal(system(cmd), 0);
        expect_open_error("bad", SG_BM25_VERIFY_FULL, "postings.bin", "another build");
    }
    /* a file in the place of another */
    copy_index("good", "bad");
    {
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "cp %s/good/docs.idx %s/bad/docs.bin", tmpdir, tmpdir);
        assert_int_equal(system(cmd), 0);
        expect_open_error("bad", SG_BM25_VERIFY_HEADER, "docs.bin", "another kind of file");
    }
    /* an index built by another analyzer version: meta rewritten consistently, so only the version is wrong */
    copy_index("good", "bad");
    {
        char p[512];
        snprintf(p, sizeof(p), "%s/bad/bm25.meta", tmpdir);
        int fd = open(p, O_RDWR);
        sg_bm25_header_t h;
        sg_bm25_meta_t m;
        assert_int_equal(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
        assert_int_equal(pread(fd, &m, sizeof(m), sizeof(h)), (ssize_t)sizeof(m));
        m.analyzer_version += 1;
        h.payload_crc = sg_bm25_crc32(0, &m, sizeof(m));
        h.header_crc = sg_bm25_header_crc(&h);
        assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
        assert_int_equal(pwrite(fd, &m, sizeof(m), sizeof(h)), (ssize_t)sizeof(m));
        close(fd);
        expect_open_error("bad", SG_BM25_VERIFY_HEADER, "bm25.meta", "analyzer version");
    }
}

/* With only header checks, damaged postings must never crash a search: bounded decoding. */
static void test_damaged_postings_are_bounded(void **state)
{
    (void)state;
    make_corpus("c6.jsonl", 300, 11);
    char err[1024] = "";
    if (build("c6.jsonl", "good6", 64 << 20, err, sizeof(err)) != 0)
        fail_msg("build failed: %s", err);
    unsigned s = 12345;
    uint64_t corrupt = 0;
    for (int round = 0; round < 20; ++round) {
        copy_index("good6", "dmg");
        char p[512];
        snprintf(p, sizeof(p), "%s/dmg/postings.bin", tmpdir);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        for (int i = 0; i < 40; ++i) {
            s = s * 1103515245u + 12345u;
            long off = SG_BM25_HEADER_SIZE + (long)((s >> 8) % (unsigned)(st.st_size - SG_BM25_HEADER_SIZE));
            unsigned char c = (unsigned char)(s >> 3);
            patch("dmg", "postings.bin", off, &c, 1);
        }
        sg_bm25_index_t ix;
        assert_int_equal(open_ix(&ix, "dmg", SG_BM25_VERIFY_HEADER, err, sizeof(err)), 0);
        float *norms = sg_bm25_norms(&ix, 0.9, 0.4);
        sg_bm25_searcher_t *sr = sg_bm25_searcher_new(&ix, norms);
        sg_bm25_hit_t h[10];
        sg_bm25_qstats_t qs = {0};
        const char *q = "volcano lava crater mountain river lake city capital france paris tokyo japan running bridge";
        size_t n = sg_bm25_search(sr, q, strlen(q), 10, h, &qs);
        for (size_t i = 0; i < n; ++i)
            assert_true(h[i].doc < ix.meta.n_docs);
        corrupt += qs.corrupt;
        sg_bm25_searcher_free(sr);
        free(norms);
        sg_bm25_index_close(&ix);
        /* and the full check rejects it */
        expect_open_error("dmg", SG_BM25_VERIFY_FULL, "postings.bin", "payload checksum mismatch");
    }
    assert_true(corrupt > 0); /* the damage was seen, not silently decoded */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_docs_and_counts), cmocka_unit_test(test_runs_identical),
        cmocka_unit_test(test_scores),          cmocka_unit_test(test_builder_errors),
        cmocka_unit_test(test_corrupt_files),   cmocka_unit_test(test_damaged_postings_are_bounded),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
