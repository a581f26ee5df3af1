/*
 * test_faiss.c -- the FAISS C API glue: indexes of several kinds (Flat IP, Flat L2, HNSW, IVF,
 * IVF-PQ) written with the C API, read back with sg_fidx_open, checked for dimension and metric,
 * and searched against a brute-force search done here (exact for Flat, recall for the ANN kinds,
 * with search parameters applied); label -1 when k exceeds the index; corrupt files and bad
 * parameters fail with messages naming the file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "faissidx.h"
#include "testutil.h"

#include <math.h>

enum { D = 32, N = 2000, Q = 50, K = 5 };

static char *tmpdir;
static float *base, *queries;

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xFFFFFF) / (float)0x1000000 - 0.5f;
}

static void normalize(float *v)
{
    double n = 0;
    for (int i = 0; i < D; ++i)
        n += (double)v[i] * v[i];
    n = sqrt(n);
    for (int i = 0; i < D; ++i)
        v[i] = (float)(v[i] / n);
}

static int setup(void **state)
{
    (void)state;
    tmpdir = tu_mkdtemp();
    base = malloc(sizeof(float) * N * D);
    queries = malloc(sizeof(float) * Q * D);
    uint64_t s = 42;
    /* clustered data so that IVF/PQ behave like on real embeddings */
    float centers[16][D];
    for (int c = 0; c < 16; ++c)
        for (int i = 0; i < D; ++i)
            centers[c][i] = frand(&s) * 4;
    for (int r = 0; r < N; ++r) {
        for (int i = 0; i < D; ++i)
            base[r * D + i] = centers[r % 16][i] + frand(&s);
        normalize(base + r * D);
    }
    for (int q = 0; q < Q; ++q) {
        for (int i = 0; i < D; ++i)
            queries[q * D + i] = centers[(q * 7) % 16][i] + frand(&s);
        normalize(queries + q * D);
    }
    sg_fidx_set_blas_threshold(1);
    return tmpdir == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(tmpdir);
    free(tmpdir);
    free(base);
    free(queries);
    return 0;
}

/* exact top-K labels of query q (descending IP, or ascending L2) */
static void brute(int q, int l2, int64_t *out, float *dist)
{
    float best[K];
    for (int k = 0; k < K; ++k) {
        best[k] = l2 ? INFINITY : -INFINITY;
        out[k] = -1;
    }
    for (int r = 0; r < N; ++r) {
        double ip = 0, d2 = 0;
        for (int i = 0; i < D; ++i) {
            ip += (double)queries[q * D + i] * base[r * D + i];
            double d = (double)queries[q * D + i] - base[r * D + i];
            d2 += d * d;
        }
        float v = (float)(l2 ? d2 : ip);
        int pos = K;
        while (pos > 0 && (l2 ? v < best[pos - 1] : v > best[pos - 1]))
            --pos;
        if (pos == K)
            continue;
        for (int k = K - 1; k > pos; --k) {
            best[k] = best[k - 1];
            out[k] = out[k - 1];
        }
        best[pos] = v;
        out[pos] = r;
    }
    memcpy(dist, best, sizeof(best));
}

static char *build(const char *name, const char *factory, int metric)
{
    void *ix;
    char err[512];
    int rc = sg_fidx_create(factory, D, metric, &ix, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(sg_fidx_train(ix, N, base, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_add(ix, N, base, err, sizeof(err)), 0);
    char *p = tu_path(tmpdir, name);
    assert_int_equal(sg_fidx_write(ix, p, err, sizeof(err)), 0);
    sg_fidx_free(ix);
    return p;
}

/* searches all queries; returns recall@K against brute force, checks exactness when asked */
static double check(const char *path, const char *params, int l2, int exact)
{
    sg_fidx_t ix;
    char err[512];
    int rc = sg_fidx_open(path, params, &ix, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(ix.dim, D);
    assert_int_equal(ix.ntotal, N);
    assert_int_equal(ix.metric, l2 ? SG_FIDX_L2 : SG_FIDX_IP);
    float dist[Q * K];
    int64_t lab[Q * K];
    assert_int_equal(sg_fidx_search(&ix, Q, queries, K, dist, lab, err, sizeof(err)), 0);
    int hit = 0;
    for (int q = 0; q < Q; ++q) {
        int64_t want[K];
        float wd[K];
        brute(q, l2, want, wd);
        for (int k = 0; k < K; ++k) {
            for (int m = 0; m < K; ++m)
                if (lab[q * K + k] == want[m])
                    ++hit;
            if (exact) {
                assert_true(fabsf(dist[q * K + k] - wd[k]) < 1e-4f);
                if (lab[q * K + k] != want[k]) /* only a near-tie may swap */
                    assert_true(fabsf(wd[k] - dist[q * K + k]) < 1e-4f);
            }
        }
    }
    /* one query at a time gives the same answers as the batch */
    float d1[K];
    int64_t l1[K];
    assert_int_equal(sg_fidx_search(&ix, 1, queries + 3 * D, K, d1, l1, err, sizeof(err)), 0);
    assert_memory_equal(l1, lab + 3 * K, sizeof(l1));
    sg_fidx_close(&ix);
    return (double)hit / (Q * K);
}

static void test_flat(void **state)
{
    (void)state;
    char *ip = build("flat_ip.index", "Flat", SG_FIDX_IP), *l2 = build("flat_l2.index", "Flat", SG_FIDX_L2);
    assert_true(check(ip, NULL, 0, 1) > 0.99);
    assert_true(check(l2, "", 1, 1) > 0.99);
    sg_fidx_t ix;
    char err[512];
    assert_int_equal(sg_fidx_open(ip, NULL, &ix, err, sizeof(err)), 0);
    assert_string_equal(ix.fourcc, "IxFI");
    assert_string_equal(sg_fidx_metric_name(&ix), "inner_product");
    /* k larger than the index: the extra labels are -1 */
    float d[N + 3];
    int64_t l[N + 3];
    assert_int_equal(sg_fidx_search(&ix, 1, queries, N + 3, d, l, err, sizeof(err)), 0);
    assert_true(l[N - 1] >= 0 && l[N] == -1 && l[N + 2] == -1);
    sg_fidx_close(&ix);
    assert_int_equal(sg_fidx_open(l2, NULL, &ix, err, sizeof(err)), 0);
    assert_string_equal(ix.fourcc, "IxF2");
    sg_fidx_close(&ix);
    free(ip);
    free(l2);
}

static void test_ann_kinds(void **state)
{
    (void)state;
    char *h = build("hnsw.index", "HNSW16", SG_FIDX_IP);
    double r = check(h, "efSearch=128", 0, 0);
    fprintf(stderr, "HNSW16 efSearch=128 recall@%d %.3f\n", K, r);
    assert_true(r >= 0.9);
    char *ivf = build("ivf.index", "IVF16,Flat", SG_FIDX_IP);
    double r1 = check(ivf, "nprobe=1", 0, 0), r16 = check(ivf, "nprobe=16", 0, 1);
    fprintf(stderr, "IVF16,Flat recall@%d nprobe=1 %.3f, nprobe=16 %.3f\n", K, r1, r16);
    assert_true(r16 > 0.99 && r1 <= r16);
    char *pq = build("ivfpq.index", "IVF16,PQ8np", SG_FIDX_L2);
    r = check(pq, "nprobe=16", 1, 0);
    fprintf(stderr, "IVF16,PQ8np recall@%d %.3f\n", K, r);
    assert_true(r >= 0.3); /* 8-byte codes of 32-d vectors: approximate by design */
    free(h);
    free(ivf);
    free(pq);
}

static void test_errors(void **state)
{
    (void)state;
    sg_fidx_t ix;
    char err[512];
    assert_int_equal(sg_fidx_open("/nonexistent/e5_Flat.index", NULL, &ix, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "/nonexistent/e5_Flat.index: cannot open"));
    char *p = tu_path(tmpdir, "garbage.index");
    assert_int_equal(tu_write_file(p, "this is not an index at all", 27), 0);
    assert_int_equal(sg_fidx_open(p, NULL, &ix, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "garbage.index: not a readable FAISS index"));
    assert_null(strchr(err, '\n'));
    free(p);
    /* a Flat index cut short */
    char *full = build("cut.index", "Flat", SG_FIDX_IP);
    assert_int_equal(truncate(full, 45 + 4 * D * 10), 0);
    assert_int_equal(sg_fidx_open(full, NULL, &ix, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cut.index: the FAISS Flat index header describes 2000 vectors of dimension 32 (256045 bytes) "
                                "but the file has 1325 bytes (truncated or corrupt)"));
    fprintf(stderr, "truncated index: %s\n", err);
    /* header fields that cannot be right */
    assert_int_equal(truncate(full, 20), 0);
    assert_int_equal(sg_fidx_open(full, NULL, &ix, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cut.index: truncated FAISS Flat index (20 bytes)"));
    unsigned char hdr[53] = "IxFI";
    int32_t dd = -3;
    memcpy(hdr + 4, &dd, 4);
    assert_int_equal(tu_write_file(full, hdr, sizeof(hdr)), 0);
    assert_int_equal(sg_fidx_open(full, NULL, &ix, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cut.index: corrupt FAISS Flat index header (dimension -3"));
    free(full);
    /* parameters the index does not have */
    char *flat = build("params.index", "Flat", SG_FIDX_IP);
    assert_int_equal(sg_fidx_open(flat, "nprobe=4", &ix, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "params.index: cannot apply search parameters"));
    free(flat);
    void *bad;
    assert_int_equal(sg_fidx_create("NoSuchIndex99", D, SG_FIDX_IP, &bad, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "NoSuchIndex99"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat),
        cmocka_unit_test(test_ann_kinds),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
