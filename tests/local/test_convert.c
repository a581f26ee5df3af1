/*
 * test_convert.c -- searchgate-index convert (backends/local/tools/convert.c), run as the real
 * binary on small generated Flat IP and L2 indexes (3,000 clustered 32-d vectors):
 *
 *   - the recall report: every recall@1/@3/@10 figure the tool records in OUT.sgmeta is recomputed
 *     here -- exact neighbours by brute force in double precision over the vectors this test made,
 *     approximate ones by searching the written index file (opened the way the server opens it:
 *     IVF lists memory-mapped) for each k as a route serving topk = k does (k results; with
 *     re-ranking k x F candidates, re-scored here from the exact vectors) -- and must be equal;
 *   - IVF-Flat with nprobe = nlist is exhaustive: its recall must be exactly 1;
 *   - what is refused, and how: an input that is not a Flat index, a Flat index of another metric,
 *     a missing file, an existing output without --force, a bad factory string; no temporary file
 *     is ever left behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "faiss_ext.h"
#include "faissidx.h"
#include "testutil.h"

#include <math.h>
#include <sys/wait.h>

#define N 3000
#define D 32
#define KM 10

static char *dir;
static float *vec_ip, *vec_l2; /* N x D, as written */

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double gauss(uint64_t *s)
{
    double u = ((double)(rng(s) >> 11) + 0.5) / 9007199254740992.0, v = ((double)(rng(s) >> 11) + 0.5) / 9007199254740992.0;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* 40 clusters; unit vectors for IP, raw for L2 */
static float *make_vectors(int normalise, uint64_t seed)
{
    float *c = malloc(40 * D * sizeof(float)), *x = malloc((size_t)N * D * sizeof(float));
    for (int i = 0; i < 40 * D; ++i)
        c[i] = (float)gauss(&seed);
    for (int r = 0; r < N; ++r) {
        int k = (int)(rng(&seed) % 40);
        double n = 0;
        for (int j = 0; j < D; ++j) {
            x[r * D + j] = c[k * D + j] + 0.35f * (float)gauss(&seed);
            n += (double)x[r * D + j] * x[r * D + j];
        }
        if (normalise)
            for (int j = 0; j < D; ++j)
                x[r * D + j] = (float)(x[r * D + j] / sqrt(n));
    }
    free(c);
    return x;
}

static char *write_flat(const char *name, const float *x, int metric)
{
    char *p = tu_path(dir, name);
    void *ix;
    char err[512];
    assert_int_equal(sg_fidx_create("Flat", D, metric, &ix, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_add(ix, N, x, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_write(ix, p, err, sizeof(err)), 0);
    sg_fidx_free(ix);
    return p;
}

/* Runs the convert binary; returns its exit status, its stderr in *errout (malloc'ed). */
static int run_convert(char **errout, ...)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = SG_CONVERT_BIN;
    va_list ap;
    va_start(ap, errout);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 38)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    char *errpath = tu_path(dir, "stderr.txt");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *e = freopen(errpath, "w", stderr);
        FILE *o = freopen("/dev/null", "w", stdout);
        (void)e, (void)o;
        execv(SG_CONVERT_BIN, (char *const *)argv);
        _exit(127);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    *errout = tu_read_file(errpath, NULL);
    unlink(errpath);
    free(errpath);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void assert_no_temp_files(void)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.") != NULL)
            fail_msg("temporary file left behind: %s", e->d_name);
    closedir(d);
}

typedef struct {
    double s;
    int64_t l;
} sc_t;

static int cmp_sc(const void *a, const void *b)
{
    const sc_t *x = a, *y = b;
    if (x->s != y->s)
        return x->s > y->s ? -1 : 1;
    return x->l < y->l ? -1 : x->l > y->l;
}

/* larger is better: inner product, or minus the squared L2 distance */
static double exact(const float *q, const float *x, int metric)
{
    double s = 0;
    for (int j = 0; j < D; ++j) {
        if (metric == SG_FIDX_L2) {
            double t = (double)q[j] - x[j];
            s -= t * t;
        } else {
            s += (double)q[j] * x[j];
        }
    }
    return s;
}

/* Recomputes every point of OUT.sgmeta and compares it with what the tool recorded. */
static void check_report(const char *out, const float *x, int metric, int expect_points)
{
    char mp[4200];
    snprintf(mp, sizeof(mp), "%s.sgmeta", out);
    char *text = tu_read_file(mp, NULL);
    assert_non_null(text);
    cJSON *m = cJSON_Parse(text);
    free(text);
    assert_non_null(m);
    const cJSON *rows = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "eval"), "rows");
    const cJSON *rec = cJSON_GetObjectItem(m, "recall");
    assert_true(cJSON_IsArray(rows) && cJSON_IsArray(rec));
    assert_int_equal(cJSON_GetArraySize(rec), expect_points);
    assert_string_equal(cJSON_GetObjectItem(m, "metric")->valuestring, metric == SG_FIDX_L2 ? "l2" : "inner_product");
    int nq = cJSON_GetArraySize(rows);
    assert_true(nq > 50);
    /* exact neighbours, the query's own row left out */
    int64_t *self = malloc((size_t)nq * sizeof(int64_t)), *gt = malloc((size_t)nq * KM * sizeof(int64_t));
    sc_t *all = malloc(N * sizeof(sc_t));
    float *qv = malloc((size_t)nq * D * sizeof(float));
    for (int i = 0; i < nq; ++i) {
        self[i] = (int64_t)cJSON_GetArrayItem(rows, i)->valuedouble;
        assert_true(self[i] >= 0 && self[i] < N);
        memcpy(qv + (size_t)i * D, x + self[i] * D, D * sizeof(float));
        int n = 0;
        for (int r = 0; r < N; ++r)
            if (r != self[i])
                all[n++] = (sc_t){exact(qv + (size_t)i * D, x + (size_t)r * D, metric), r};
        qsort(all, (size_t)n, sizeof(sc_t), cmp_sc);
        for (int k = 0; k < KM; ++k)
            gt[i * KM + k] = all[k].l;
    }
    /* the written index, opened as the server opens it */
    sg_fidx_t ix;
    char err[512];
    assert_int_equal(sg_fidx_open(out, NULL, &ix, err, sizeof(err)), 0);
    if (ix.info.kind == SG_FEXT_IVF)
        assert_int_equal(ix.info.lists_mapped, 1);
    const char *param = ix.info.kind == SG_FEXT_IVF ? "nprobe" : ix.info.kind == SG_FEXT_HNSW ? "efSearch" : NULL;
    if (ix.info.kind == SG_FEXT_HNSW) { /* as the tool measured: the index's own efSearch at the largest value swept */
        int mx = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, rec) if (cJSON_GetObjectItem(e, "efSearch")->valueint > mx) mx =
            cJSON_GetObjectItem(e, "efSearch")->valueint;
        sg_fext_set_ef_search(ix.index, mx);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, rec)
    {
        int v = param != NULL ? cJSON_GetObjectItem(e, param)->valueint : 0;
        int rr = cJSON_GetObjectItem(e, "rerank")->valueint;
        double hit[3] = {0, 0, 0};
        const int ks[3] = {1, 3, 10};
        /* each k as a route serving topk = k searches it: k results (k x rerank candidates, re-scored
         * exactly); a held-out row fetches one more result (k x rerank + 1 candidates) and drops itself */
        for (int t = 0; t < 3; ++t) {
            int kq = ks[t] + 1, kc = rr > 0 ? ks[t] * rr + 1 : kq;
            float *dist = malloc((size_t)nq * (size_t)kc * sizeof(float));
            int64_t *lab = malloc((size_t)nq * (size_t)kc * sizeof(int64_t));
            assert_int_equal(sg_fext_search(ix.index, nq, qv, kc, dist, lab, ix.info.kind == SG_FEXT_IVF ? v : 0,
                                            ix.info.kind == SG_FEXT_HNSW ? v : 0, err, sizeof(err)),
                             0);
            for (int i = 0; i < nq; ++i) {
                int64_t *c = lab + (size_t)i * kc;
                if (rr > 0) { /* re-rank here: exact scores of the candidates, best kq kept */
                    sc_t cs[400];
                    int n = 0;
                    for (int j = 0; j < kc; ++j)
                        if (c[j] >= 0)
                            cs[n++] = (sc_t){exact(qv + (size_t)i * D, x + c[j] * D, metric), c[j]};
                    qsort(cs, (size_t)n, sizeof(sc_t), cmp_sc);
                    for (int j = 0; j < kq; ++j)
                        c[j] = j < n ? cs[j].l : -1;
                }
                int64_t res[KM];
                int n = 0;
                for (int j = 0; j < kq && n < ks[t]; ++j)
                    if (c[j] != self[i])
                        res[n++] = c[j];
                int h = 0;
                for (int a = 0; a < n; ++a)
                    for (int b = 0; b < ks[t]; ++b)
                        if (res[a] >= 0 && res[a] == gt[i * KM + b]) {
                            ++h;
                            break;
                        }
                hit[t] += (double)h / ks[t];
            }
            free(dist);
            free(lab);
        }
        const char *names[3] = {"recall@1", "recall@3", "recall@10"};
        for (int t = 0; t < 3; ++t) {
            double want = hit[t] / nq, got = cJSON_GetObjectItem(e, names[t])->valuedouble;
            if (fabs(want - got) > 1e-12)
                fail_msg("%s %s=%d rerank %d: the tool recorded %.6f, brute force gives %.6f", out, param ? param : "-", v, rr, got,
                         want);
        }
        assert_true(cJSON_GetObjectItem(e, "qps")->valuedouble > 0);
    }
    sg_fidx_close(&ix);
    cJSON_Delete(m);
    free(self);
    free(gt);
    free(all);
    free(qv);
}

static double recorded(const char *out, const char *param, int value, int rerank, const char *which)
{
    char mp[4200];
    snprintf(mp, sizeof(mp), "%s.sgmeta", out);
    char *text = tu_read_file(mp, NULL);
    cJSON *m = cJSON_Parse(text);
    free(text);
    double r = -1;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(m, "recall")) if (cJSON_GetObjectItem(e, param)->valueint == value &&
                                                                cJSON_GetObjectItem(e, "rerank")->valueint == rerank) r =
        cJSON_GetObjectItem(e, which)->valuedouble;
    cJSON_Delete(m);
    return r;
}

static int setup(void **state)
{
    (void)state;
    dir = tu_mkdtemp();
    vec_ip = make_vectors(1, 7);
    vec_l2 = make_vectors(0, 11);
    return dir == NULL;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(dir);
    free(dir);
    free(vec_ip);
    free(vec_l2);
    return 0;
}

static void test_report_ip(void **state)
{
    (void)state;
    char *flat = write_flat("flat_ip.index", vec_ip, SG_FIDX_IP), *out = tu_path(dir, "ivfsq.index");
    char *e = NULL;
    int rc = run_convert(&e, flat, out, "--factory", "IVF16,SQ8", "--eval", "200", "--nprobe", "1,2,4,16", "--threads", "2", NULL);
    if (rc != 0)
        fail_msg("convert failed (%d): %s", rc, e);
    assert_non_null(strstr(e, "rows/s")); /* the progress line */
    free(e);
    check_report(out, vec_ip, SG_FIDX_IP, 4);
    free(out);
    out = tu_path(dir, "ivfpq.index");
    rc = run_convert(&e, flat, out, "--factory", "IVF16,PQ8", "--eval", "200", "--nprobe", "1,4", "--rerank", "4", NULL);
    if (rc != 0)
        fail_msg("convert failed (%d): %s", rc, e);
    assert_non_null(strstr(e, "standard PQ"));
    free(e);
    check_report(out, vec_ip, SG_FIDX_IP, 4);
    /* re-ranking from exact vectors can only help here */
    assert_true(recorded(out, "nprobe", 4, 4, "recall@10") >= recorded(out, "nprobe", 4, 0, "recall@10"));
    free(out);
    out = tu_path(dir, "hnsw.index");
    rc = run_convert(&e, flat, out, "--factory", "HNSW16", "--eval", "150", "--ef-search", "4,32", NULL);
    if (rc != 0)
        fail_msg("convert failed (%d): %s", rc, e);
    free(e);
    check_report(out, vec_ip, SG_FIDX_IP, 2);
    free(out);
    out = tu_path(dir, "hnswsq.index");
    rc = run_convert(&e, flat, out, "--factory", "HNSW16,SQ8", "--eval", "150", "--ef-search", "16", NULL);
    if (rc != 0)
        fail_msg("convert failed (%d): %s", rc, e);
    free(e);
    check_report(out, vec_ip, SG_FIDX_IP, 1);
    free(out);
    assert_no_temp_files();
    free(flat);
}

static void test_report_l2(void **state)
{
    (void)state;
    char *flat = write_flat("flat_l2.index", vec_l2, SG_FIDX_L2), *out = tu_path(dir, "ivfflat_l2.index");
    char *e = NULL;
    int rc = run_convert(&e, flat, out, "--factory", "IVF16,Flat", "--eval", "200", "--nprobe", "1,16", NULL);
    if (rc != 0)
        fail_msg("convert failed (%d): %s", rc, e);
    free(e);
    check_report(out, vec_l2, SG_FIDX_L2, 2);
    /* nprobe = nlist scans every list: exact */
    assert_true(recorded(out, "nprobe", 16, 0, "recall@10") == 1.0);
    assert_true(recorded(out, "nprobe", 16, 0, "recall@1") == 1.0);
    free(out);
    out = tu_path(dir, "ivfpq_l2.index");
    rc = run_convert(&e, flat, out, "--factory", "IVF16,PQ8", "--eval", "120", "--nprobe", "16", "--rerank", "2", NULL);
    if (rc != 0)
        fail_msg("convert failed (%d): %s", rc, e);
    free(e);
    check_report(out, vec_l2, SG_FIDX_L2, 2);
    free(out);
    assert_no_temp_files();
    free(flat);
}

static void test_refusals(void **state)
{
    (void)state;
    char *flat = write_flat("flat_r.index", vec_ip, SG_FIDX_IP), *out = tu_path(dir, "r.index");
    char *e = NULL;
    /* a first conversion, whose output is then fed back in */
    assert_int_equal(run_convert(&e, flat, out, "--factory", "IVF8,Flat", "--eval", "0", NULL), 0);
    free(e);
    char *out2 = tu_path(dir, "r2.index");
    assert_int_equal(run_convert(&e, out, out2, "--factory", "IVF8,SQ8", NULL), 1);
    assert_non_null(strstr(e, "is not a FAISS Flat index"));
    free(e);
    assert_int_equal(access(out2, F_OK), -1);
    /* an existing output is not replaced without --force */
    assert_int_equal(run_convert(&e, flat, out, "--factory", "IVF8,Flat", "--eval", "0", NULL), 1);
    assert_non_null(strstr(e, "exists"));
    free(e);
    assert_int_equal(run_convert(&e, flat, out, "--factory", "IVF8,Flat", "--eval", "0", "--force", NULL), 0);
    free(e);
    /* the input itself as output */
    assert_int_equal(run_convert(&e, flat, flat, "--factory", "IVF8,Flat", "--force", NULL), 1);
    assert_non_null(strstr(e, "input file itself"));
    free(e);
    /* a missing input; a bad factory string; a bad option value */
    char *missing = tu_path(dir, "missing.index");
    assert_int_equal(run_convert(&e, missing, out2, "--factory", "IVF8,Flat", NULL), 1);
    assert_non_null(strstr(e, "cannot open"));
    free(e);
    assert_int_equal(run_convert(&e, flat, out2, "--factory", "NoSuchThing42", NULL), 1);
    assert_non_null(strstr(e, "NoSuchThing42"));
    free(e);
    assert_int_equal(run_convert(&e, flat, out2, "--factory", "IVF8,Flat", "--eval", "x", NULL), 2);
    free(e);
    assert_int_equal(access(out2, F_OK), -1);
    /* a Flat index of another metric (L1: IxFl, metric_type 2, with its metric_arg) */
    char *l1 = tu_path(dir, "flat_l1.index");
    size_t hdr = 49, sz = hdr + (size_t)4 * D * 10;
    unsigned char *b = calloc(1, sz);
    int32_t d32 = D, metric = 2;
    int64_t nt = 10, dummy = 1 << 20;
    uint64_t nf = 10 * D;
    float marg = 0;
    memcpy(b, "IxFl", 4);
    memcpy(b + 4, &d32, 4);
    memcpy(b + 8, &nt, 8);
    memcpy(b + 16, &dummy, 8);
    memcpy(b + 24, &dummy, 8);
    b[32] = 1;
    memcpy(b + 33, &metric, 4);
    memcpy(b + 37, &marg, 4);
    memcpy(b + 41, &nf, 8);
    assert_int_equal(tu_write_file(l1, b, sz), 0);
    free(b);
    assert_int_equal(run_convert(&e, l1, out2, "--factory", "IVF2,Flat", NULL), 1);
    assert_non_null(strstr(e, "metric other than inner product or L2"));
    free(e);
    /* a file that is no index at all */
    char *txt = tu_path(dir, "notes.txt");
    assert_int_equal(tu_write_file(txt, "hello, world\n", 13), 0);
    assert_int_equal(run_convert(&e, txt, out2, "--factory", "IVF2,Flat", NULL), 1);
    assert_non_null(strstr(e, "is not a FAISS Flat index"));
    free(e);
    assert_no_temp_files();
    free(txt);
    free(l1);
    free(missing);
    free(out2);
    free(out);
    free(flat);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_report_ip), cmocka_unit_test(test_report_l2),
                                       cmocka_unit_test(test_refusals)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
