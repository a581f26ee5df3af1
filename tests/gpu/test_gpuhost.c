/*
 * test_gpuhost.c -- the host-side half of the GPU path (backends/cuda/gpuhost.c, loader.c), on
 * any machine: fp16 conversion against the compiler's _Float16; the FAISS IndexFlat reader on
 * files written by FAISS itself (IP and L2, an odd dimension so rows are unaligned after the
 * 45-byte header) and on hand-made and damaged files; the shard planner; the memory plans and
 * search layouts (hand-computed figures and invariants over every call size); the forward-pass
 * splitter; the merge of per-shard top-k lists and the exact re-scoring against brute force; the
 * module loader's errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "faissidx.h"
#include "gpu.h"
#include "gpuhost.h"
#include "loader.h"
#include "../local/testutil.h"

#include <float.h>
#include <math.h>

static char *tmpdir;

static uint64_t rng = 0x1234567;

static uint32_t next_u32(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 32);
}

static float frand(void)
{
    return (float)(next_u32() >> 8) / 16777216.0f - 0.5f;
}

static int setup(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof(tmpl), "%s/sggpu-XXXXXX", base != NULL && base[0] != '\0' ? base : "/tmp");
    tmpdir = mkdtemp(tmpl) != NULL ? strdup(tmpl) : NULL;
    return tmpdir != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(tmpdir);
    free(tmpdir);
    return 0;
}

/* ---- fp16 ---- */

static uint16_t ref_f16(float f)
{
    _Float16 h = (_Float16)f; /* IEEE conversion by gcc: round to nearest even */
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}

static float ref_f32(uint16_t b)
{
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}

static void test_fp16_all_halves(void **state)
{
    (void)state;
    for (uint32_t b = 0; b < 65536; ++b) {
        float want = ref_f32((uint16_t)b), got = sg_gpu_f16_to_f32((uint16_t)b);
        if (isnan(want)) {
            assert_true(isnan(got));
            continue;
        }
        assert_memory_equal(&want, &got, sizeof(float));
        /* and back: every half is exactly representable */
        assert_int_equal(sg_gpu_f32_to_f16(got), b);
    }
}

static void test_fp16_rounding(void **state)
{
    (void)state;
    const float edge[] = {0.0f,
                          -0.0f,
                          1.0f,
                          1.0f + 0x1p-11f,   /* tie, rounds to even: 1.0 */
                          1.0f + 0x1.8p-10f, /* tie, rounds up */
                          65504.0f,          /* largest half */
                          65519.996f,        /* just below the tie: 65504 */
                          65520.0f,          /* tie: infinity */
                          1e9f,              /* overflow */
                          0x1p-24f,          /* smallest subnormal */
                          0x1p-25f,          /* tie with zero: zero */
                          0x1.000002p-25f,   /* just above: smallest subnormal */
                          0x1.8p-24f,        /* tie between 1 and 2 subnormal units: 2 */
                          0x1p-14f,          /* smallest normal */
                          0x1.ffcp-15f,      /* largest subnormal */
                          0x1.ffep-15f,      /* tie: rounds up into the smallest normal */
                          1e-30f,            /* underflow */
                          INFINITY,
                          -INFINITY,
                          3.14159265f,
                          -2.71828183f,
                          0.1f};
    for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); ++i)
        assert_int_equal(sg_gpu_f32_to_f16(edge[i]), ref_f16(edge[i]));
    assert_int_equal(sg_gpu_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(sg_gpu_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(sg_gpu_f32_to_f16(0x1p-25f), 0x0000);
    assert_true(isnan(sg_gpu_f16_to_f32(sg_gpu_f32_to_f16(NAN))));
    /* a sweep over float bit patterns: every exponent, many mantissas, both signs */
    for (uint64_t b = 0; b < 0x100000000ull; b += 4099) { /* ~1 M patterns */
        uint32_t bits = (uint32_t)b ^ (next_u32() & 0x3ffu);
        float f;
        memcpy(&f, &bits, 4);
        if (isnan(f))
            continue;
        if (sg_gpu_f32_to_f16(f) != ref_f16(f))
            fail_msg("f32 bits %08x: got %04x, want %04x", bits, sg_gpu_f32_to_f16(f), ref_f16(f));
    }
    float src[5] = {1, 2, 0.5f, -3, 1e5f};
    uint16_t dst[5];
    sg_gpu_f32_to_f16_n(src, dst, 5);
    for (int i = 0; i < 5; ++i)
        assert_int_equal(dst[i], ref_f16(src[i]));
}

/* ---- the FAISS IndexFlat reader ---- */

enum { FD = 37, FN = 300 };

static float *make_vectors(int n, int d)
{
    float *v = malloc(sizeof(float) * (size_t)n * (size_t)d);
    for (int i = 0; i < n * d; ++i)
        v[i] = frand();
    return v;
}

static char *write_faiss(const char *name, const char *factory, int metric, const float *x, int n, int d)
{
    char *path = tu_path(tmpdir, name);
    void *ix;
    char err[256];
    assert_int_equal(sg_fidx_create(factory, d, metric, &ix, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_train(ix, (size_t)n, x, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_add(ix, (size_t)n, x, err, sizeof(err)), 0);
    assert_int_equal(sg_fidx_write(ix, path, err, sizeof(err)), 0);
    sg_fidx_free(ix);
    return path;
}

static void test_flat_reader_faiss_files(void **state)
{
    (void)state;
    float *x = make_vectors(FN, FD);
    const struct {
        const char *name;
        int metric;
        const char *fourcc;
        int want;
    } cases[] = {{"ip.index", SG_FIDX_IP, "IxFI", SG_GPU_IP}, {"l2.index", SG_FIDX_L2, "IxF2", SG_GPU_L2}};
    for (size_t c = 0; c < 2; ++c) {
        char *path = write_faiss(cases[c].name, "Flat", cases[c].metric, x, FN, FD);
        char err[512], fcc[5];
        assert_int_equal(sg_gpu_flat_is_flat(path, fcc, err, sizeof(err)), 1);
        assert_string_equal(fcc, cases[c].fourcc);
        sg_gpu_flatfile_t ff;
        if (sg_gpu_flat_open(path, &ff, err, sizeof(err)) != 0)
            fail_msg("%s", err);
        assert_string_equal(ff.fourcc, cases[c].fourcc);
        assert_int_equal(ff.dim, FD);
        assert_int_equal(ff.ntotal, FN);
        assert_int_equal(ff.metric, cases[c].want);
        assert_int_equal(ff.data_offset, 45); /* docs/protocols.md, "Corpus and index files" */
        assert_int_equal(ff.file_size, 45 + (uint64_t)FN * FD * 4);
        /* row 1 starts at 45 + 148: not 4-byte aligned, so rows are copied, never cast */
        assert_int_not_equal(((uintptr_t)sg_gpu_flat_row_bytes(&ff, 1)) % 4, 0);
        float *back = malloc(sizeof(float) * FN * FD);
        sg_gpu_flat_rows(&ff, 0, FN, back);
        assert_memory_equal(back, x, sizeof(float) * FN * FD);
        sg_gpu_flat_rows(&ff, 123, 2, back);
        assert_memory_equal(back, x + 123 * FD, sizeof(float) * 2 * FD);
        sg_gpu_flat_advise(&ff, 1);
        sg_gpu_flat_advise(&ff, 0);
        free(back);
        sg_gpu_flat_close(&ff);
        assert_null(ff.map);
        free(path);
    }
    free(x);
}

static void expect_open_error(const char *path, const char *needle)
{
    sg_gpu_flatfile_t ff;
    char err[512];
    assert_int_equal(sg_gpu_flat_open(path, &ff, err, sizeof(err)), -1);
    if (strstr(err, needle) == NULL || strstr(err, path) == NULL)
        fail_msg("error \"%s\" does not name the file or lacks \"%s\"", err, needle);
    assert_null(ff.map);
}

/* a header as FAISS writes it, with a metric_arg when metric > 1 */
static size_t header(unsigned char *h, const char *fourcc, int32_t d, int64_t n, int32_t metric)
{
    int64_t dummy = 1 << 20;
    uint64_t nf = (uint64_t)n * (uint64_t)d;
    memcpy(h, fourcc, 4);
    memcpy(h + 4, &d, 4);
    memcpy(h + 8, &n, 8);
    memcpy(h + 16, &dummy, 8);
    memcpy(h + 24, &dummy, 8);
    h[32] = 1;
    memcpy(h + 33, &metric, 4);
    size_t pos = 37;
    if (metric > 1) {
        float arg = 0;
        memcpy(h + 37, &arg, 4);
        pos = 41;
    }
    memcpy(h + pos, &nf, 8);
    return pos + 8;
}

static char *write_handmade(const char *name, const char *fourcc, int32_t d, int64_t n, int32_t metric, const float *data,
                            long size_delta)
{
    unsigned char h[64];
    size_t hl = header(h, fourcc, d, n, metric);
    size_t body = (size_t)n * (size_t)d * 4;
    size_t total = (size_t)((long)(hl + body) + size_delta);
    unsigned char *buf = calloc(1, hl + body + 64);
    memcpy(buf, h, hl);
    if (data != NULL)
        memcpy(buf + hl, data, body);
    char *path = tu_path(tmpdir, name);
    assert_int_equal(tu_write_file(path, buf, total), 0);
    free(buf);
    return path;
}

static void test_flat_reader_errors(void **state)
{
    (void)state;
    float *x = make_vectors(10, 8);
    /* "IxFl" with metric 1 is an L2 flat index too */
    char *p = write_handmade("fl.index", "IxFl", 8, 10, 1, x, 0);
    sg_gpu_flatfile_t ff;
    char err[512];
    assert_int_equal(sg_gpu_flat_open(p, &ff, err, sizeof(err)), 0);
    assert_int_equal(ff.metric, SG_GPU_L2);
    assert_int_equal(ff.data_offset, 45);
    float row[8];
    sg_gpu_flat_rows(&ff, 9, 1, row);
    assert_memory_equal(row, x + 72, sizeof(row));
    sg_gpu_flat_close(&ff);
    free(p);
    /* metric_arg present (metric 2 = L1): the data would start at 49, but only IP/L2 are served */
    p = write_handmade("l1.index", "IxFl", 8, 10, 2, x, 0);
    expect_open_error(p, "metric type 2");
    free(p);
    p = write_handmade("trunc.index", "IxFI", 8, 10, 0, x, -1);
    expect_open_error(p, "truncated or corrupt");
    free(p);
    p = write_handmade("long.index", "IxFI", 8, 10, 0, x, 4);
    expect_open_error(p, "truncated or corrupt");
    free(p);
    p = write_handmade("short.index", "IxFI", 8, 10, 0, x, -(long)(45 + 320 - 20));
    expect_open_error(p, "truncated");
    free(p);
    p = write_handmade("mismatch.index", "IxFI", 8, 10, 1, x, 0);
    expect_open_error(p, "type IxFI with metric type 1");
    free(p);
    /* a header whose ntotal and n_floats disagree */
    unsigned char h[64];
    size_t hl = header(h, "IxF2", 8, 10, 1);
    uint64_t bad = 81;
    memcpy(h + 37, &bad, 8);
    p = tu_path(tmpdir, "nf.index");
    assert_int_equal(tu_write_file(p, h, hl), 0);
    expect_open_error(p, "corrupt FAISS IndexFlat header");
    free(p);
    /* another index type, written by FAISS */
    p = write_faiss("hnsw.index", "HNSW8", SG_FIDX_IP, x, 10, 8);
    char fcc[5];
    assert_int_equal(sg_gpu_flat_is_flat(p, fcc, err, sizeof(err)), 0);
    assert_string_equal(fcc, "IHNf");
    expect_open_error(p, "not a FAISS IndexFlat file (type \"IHNf\")");
    free(p);
    p = tu_path(tmpdir, "empty.index");
    assert_int_equal(tu_write_file(p, "", 0), 0);
    expect_open_error(p, "not a FAISS IndexFlat file");
    assert_int_equal(sg_gpu_flat_is_flat(p, fcc, err, sizeof(err)), 0);
    free(p);
    p = tu_path(tmpdir, "missing.index");
    expect_open_error(p, "cannot open");
    assert_int_equal(sg_gpu_flat_is_flat(p, fcc, err, sizeof(err)), -1);
    free(p);
    free(x);
}

/* ---- shards ---- */

static void test_shards(void **state)
{
    (void)state;
    int64_t st[8], cn[8];
    assert_int_equal(sg_gpu_plan_shards(10, 3, st, cn), 0);
    assert_int_equal(st[0], 0);
    assert_int_equal(cn[0], 4);
    assert_int_equal(st[1], 4);
    assert_int_equal(cn[1], 3);
    assert_int_equal(st[2], 7);
    assert_int_equal(cn[2], 3);
    assert_int_equal(sg_gpu_plan_shards(21015324, 8, st, cn), 0);
    for (int i = 0; i < 8; ++i)
        assert_true(cn[i] == 2626915 || cn[i] == 2626916);
    assert_int_equal(st[7] + cn[7], 21015324);
    assert_int_equal(sg_gpu_plan_shards(10, 0, st, cn), -1);
    for (int t = 0; t < 2000; ++t) {
        int64_t rows = next_u32() % 100000;
        int n = 1 + (int)(next_u32() % 8);
        assert_int_equal(sg_gpu_plan_shards(rows, n, st, cn), 0);
        int64_t at = 0, mn = INT64_MAX, mx = 0;
        for (int i = 0; i < n; ++i) {
            assert_int_equal(st[i], at);
            at += cn[i];
            mn = cn[i] < mn ? cn[i] : mn;
            mx = cn[i] > mx ? cn[i] : mx;
        }
        assert_int_equal(at, rows);
        assert_true(mx - mn <= 1);
    }
}

/* ---- memory plans ---- */

static void test_flat_plan_figures(void **state)
{
    (void)state;
    char err[256];
    sg_gpu_flat_plan_t p = {.rows = 100, .dim = 8, .metric = SG_GPU_IP, .max_queries = 4, .max_k = 3, .score_budget = 160};
    assert_int_equal(sg_gpu_flat_plan(&p, err, sizeof(err)), 0);
    assert_int_equal(p.tile, 10);
    assert_int_equal(p.score_entries, 40);
    sg_gpu_flat_layout_t l;
    sg_gpu_flat_layout(&p, 1, 3, &l); /* one query: tiles of 40 rows */
    assert_int_equal(l.tile, 40);
    assert_int_equal(l.n_tiles, 3);
    assert_int_equal(l.level1, 9);
    sg_gpu_flat_layout(&p, 3, 3, &l); /* 13 rows: 7 full tiles + 9 rows */
    assert_int_equal(l.tile, 13);
    assert_int_equal(l.n_tiles, 8);
    assert_int_equal(l.level1, 24);
    sg_gpu_flat_layout(&p, 4, 3, &l);
    assert_int_equal(l.tile, 10);
    assert_int_equal(l.level1, 30);
    assert_int_equal(p.cand_entries, 120); /* 4 queries x 30 */
    assert_int_equal(p.vec_bytes, 1600);
    assert_int_equal(p.norm_bytes, 0);
    assert_int_equal(p.score_bytes, 160);
    assert_int_equal(p.query_bytes, 192);
    assert_int_equal(p.cand_bytes, 1920);
    assert_int_equal(p.out_bytes, 96);
    assert_int_equal(p.stage_rows, 100);
    assert_int_equal(p.stage_bytes, 3200);
    assert_int_equal(p.total_bytes, 1600 + 160 + 192 + 1920 + 96 + 3200);
    assert_int_equal(p.pinned_bytes, 2 * 3200 + 128 + 96);
    p.metric = SG_GPU_L2;
    assert_int_equal(sg_gpu_flat_plan(&p, err, sizeof(err)), 0);
    assert_int_equal(p.norm_bytes, 400);
    /* Search-R1's index over 4 GPUs: 21,015,324 x 768 in fp16 is 32.3 GB in all */
    int64_t st[4], cn[4];
    sg_gpu_plan_shards(21015324, 4, st, cn);
    uint64_t vec = 0;
    for (int i = 0; i < 4; ++i) {
        sg_gpu_flat_plan_t q = {
            .rows = cn[i], .dim = 768, .metric = SG_GPU_IP, .max_queries = 512, .max_k = 10, .score_budget = (uint64_t)512 << 20};
        assert_int_equal(sg_gpu_flat_plan(&q, err, sizeof(err)), 0);
        assert_int_equal(q.tile, 262144);
        assert_true(q.total_bytes - q.vec_bytes < ((uint64_t)700 << 20)); /* buffers stay small */
        vec += q.vec_bytes;
    }
    assert_int_equal(vec, 21015324ull * 768 * 2);
    /* errors */
    const struct {
        int64_t rows;
        int dim;
        uint32_t q, k;
        const char *needle;
    } bad[] = {{0, 8, 1, 1, "1 to"},
               {(int64_t)INT32_MAX + 1, 8, 1, 1, "1 to"},
               {10, 0, 1, 1, "dimension"},
               {10, 8, 1, 0, "k 0"},
               {10, 8, 1, SG_GPU_MAX_K + 1, "k 1025"},
               {10, 8, 0, 1, "queries"},
               {10, 8, SG_GPU_MAX_QUERIES + 1, 1, "queries"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        sg_gpu_flat_plan_t b = {
            .rows = bad[i].rows, .dim = bad[i].dim, .max_queries = bad[i].q, .max_k = bad[i].k, .score_budget = 1024};
        assert_int_equal(sg_gpu_flat_plan(&b, err, sizeof(err)), -1);
        if (strstr(err, bad[i].needle) == NULL)
            fail_msg("\"%s\" lacks \"%s\"", err, bad[i].needle);
    }
}

/* every call size and k fits the planned buffers, and the tiles cover the shard exactly */
static void test_flat_layout_invariants(void **state)
{
    (void)state;
    char err[256];
    const int64_t rows_list[] = {1, 7, 32768, 32769, 100000, 1000003};
    const uint32_t q_list[] = {1, 3, 64, 512};
    const uint32_t k_list[] = {1, 10, 1024};
    const uint64_t budgets[] = {4096, (uint64_t)1 << 20, (uint64_t)512 << 20};
    for (size_t a = 0; a < 6; ++a)
        for (size_t b = 0; b < 4; ++b)
            for (size_t c = 0; c < 3; ++c)
                for (size_t e = 0; e < 3; ++e) {
                    sg_gpu_flat_plan_t p = {.rows = rows_list[a],
                                            .dim = 16,
                                            .metric = SG_GPU_IP,
                                            .max_queries = q_list[b],
                                            .max_k = k_list[c],
                                            .score_budget = budgets[e]};
                    assert_int_equal(sg_gpu_flat_plan(&p, err, sizeof(err)), 0);
                    for (uint32_t nq = 1; nq <= p.max_queries; nq += (nq < 8 ? 1 : 37)) {
                        for (uint32_t k = 1; k <= p.max_k; k = k * 4 + 1) {
                            sg_gpu_flat_layout_t l;
                            sg_gpu_flat_layout(&p, nq, k, &l);
                            assert_true(l.tile >= 1 && l.tile <= p.rows);
                            assert_true((int64_t)nq * l.tile <= p.score_entries);
                            assert_true(l.n_tiles * l.tile >= p.rows && (l.n_tiles - 1) * l.tile < p.rows);
                            assert_true((int64_t)nq * l.level1 <= p.cand_entries);
                            /* the reduction levels shrink: their outputs fit the same buffers */
                            int64_t n = l.level1;
                            while (sg_gpu_select_blocks(n) > 1) {
                                int64_t next = sg_gpu_select_blocks(n) * k;
                                assert_true(next < n);
                                n = next;
                            }
                        }
                    }
                }
}

static void test_encoder_plan(void **state)
{
    (void)state;
    char err[256];
    sg_gpu_enc_plan_t p = {.shape = {768, 12, 12, 3072, 30522, 512}, .max_len = 256, .max_tokens = 32768, .max_seqs = 512};
    assert_int_equal(sg_gpu_enc_plan(&p, err, sizeof(err)), 0);
    /* 110 M parameters: fp16 matrices, fp32 biases and LayerNorms (figures worked out by hand) */
    assert_int_equal(p.weight_bytes, 218025984ull);
    uint64_t P = 32768, h = 768, in = 3072, S = 512;
    uint64_t ws =
        P * 4 + S * 4 + P * h * 6 + P * in * 4 + P * 3 * h * 2 + 12 * P * 256 * 6 + P * h * 2 + P * h * 6 + P * in * 2 + S * h * 4;
    assert_int_equal(p.ws_bytes, ws);
    assert_int_equal(p.pinned_bytes, P * 4 + S * 4 + S * h * 4);
    const struct {
        sg_gpu_enc_shape_t s;
        uint32_t len, tok, seqs;
        const char *needle;
    } bad[] = {{{768, 12, 7, 3072, 30522, 512}, 256, 1024, 4, "multiple of the heads"},
               {{16384, 1, 1, 16, 10, 512}, 256, 1024, 4, "1 .. 8192"},
               {{64, 2, 4, 128, 100, 512}, 513, 1024, 4, "max length 513"},
               {{64, 2, 4, 128, 100, 512}, 256, 100, 4, "tokens per pass 100"},
               {{64, 2, 4, 128, 100, 512}, 256, 1024, 0, "sequences per pass 0"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        sg_gpu_enc_plan_t b = {.shape = bad[i].s, .max_len = bad[i].len, .max_tokens = bad[i].tok, .max_seqs = bad[i].seqs};
        assert_int_equal(sg_gpu_enc_plan(&b, err, sizeof(err)), -1);
        if (strstr(err, bad[i].needle) == NULL)
            fail_msg("\"%s\" lacks \"%s\"", err, bad[i].needle);
    }
}

static void test_encoder_passes(void **state)
{
    (void)state;
    const uint32_t lens[] = {5, 3, 9, 2, 2};
    uint32_t L;
    assert_int_equal(sg_gpu_enc_pass(lens, 5, 0, 3, 20, &L), 2);
    assert_int_equal(L, 5);
    assert_int_equal(sg_gpu_enc_pass(lens, 5, 2, 3, 20, &L), 2);
    assert_int_equal(L, 9);
    assert_int_equal(sg_gpu_enc_pass(lens, 5, 4, 3, 20, &L), 1);
    assert_int_equal(L, 2);
    assert_int_equal(sg_gpu_enc_pass(lens, 5, 0, 1, 100, &L), 1);
    assert_int_equal(sg_gpu_enc_pass(lens, 5, 0, 10, 100, &L), 5);
    assert_int_equal(L, 9);
    for (int t = 0; t < 500; ++t) {
        uint32_t ls[300];
        size_t n = 1 + next_u32() % 300;
        uint32_t max_len = 1 + next_u32() % 64, seqs = 1 + next_u32() % 40, tok = max_len + next_u32() % 500;
        for (size_t i = 0; i < n; ++i)
            ls[i] = 1 + next_u32() % max_len;
        size_t at = 0;
        while (at < n) {
            size_t b = sg_gpu_enc_pass(ls, n, at, seqs, tok, &L);
            assert_true(b >= 1 && b <= seqs && at + b <= n);
            uint32_t mx = 0;
            for (size_t i = at; i < at + b; ++i)
                mx = ls[i] > mx ? ls[i] : mx;
            assert_int_equal(L, mx);
            assert_true((uint64_t)b * L <= tok);
            /* maximal: one more sequence would break a limit */
            if (at + b < n && b < seqs) {
                uint32_t m2 = ls[at + b] > mx ? ls[at + b] : mx;
                assert_true((uint64_t)(b + 1) * m2 > tok);
            }
            at += b;
        }
    }
}

static void test_usable_and_format(void **state)
{
    (void)state;
    uint64_t g = (uint64_t)1 << 30;
    assert_int_equal(sg_gpu_usable(80 * g), 80 * g - ((uint64_t)384 << 20) - 80 * g / 50);
    assert_int_equal(sg_gpu_usable(100 << 20), 0);
    char b[32];
    assert_string_equal(sg_gpu_fmt_bytes(3 * g / 2, b, sizeof(b)), "1.50 GiB");
    assert_string_equal(sg_gpu_fmt_bytes(5 << 20, b, sizeof(b)), "5.0 MiB");
}

/* ---- merge, distances, re-scoring ---- */

typedef struct {
    float key;
    int64_t label;
} kl_t;

static int kl_cmp(const void *a, const void *b)
{
    const kl_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1;
    return x->label < y->label ? -1 : x->label > y->label;
}

static void test_merge(void **state)
{
    (void)state;
    enum { S = 3, K = 7, NQ = 40 };
    for (int trial = 0; trial < 50; ++trial) {
        float *keys[S];
        int32_t *labels[S];
        int64_t base[S] = {0, 1000, 2000};
        for (int s = 0; s < S; ++s) {
            keys[s] = malloc(sizeof(float) * NQ * K);
            labels[s] = malloc(sizeof(int32_t) * NQ * K);
            for (int q = 0; q < NQ; ++q) {
                int valid = (int)(next_u32() % (K + 1)); /* some shards have fewer than k */
                kl_t tmp[K];
                for (int i = 0; i < valid; ++i) {
                    tmp[i].key = (float)(next_u32() % 6) * 0.25f;                  /* many ties, also across shards */
                    tmp[i].label = (int64_t)i * 100 + (int64_t)(next_u32() % 100); /* distinct within a list */
                }
                qsort(tmp, (size_t)valid, sizeof(kl_t), kl_cmp);
                for (int i = 0; i < K; ++i) {
                    keys[s][q * K + i] = i < valid ? tmp[i].key : -INFINITY;
                    labels[s][q * K + i] = i < valid ? (int32_t)tmp[i].label : -1;
                }
            }
        }
        float ok[NQ * K];
        int64_t ol[NQ * K];
        sg_gpu_merge(S, (const float *const *)keys, (const int32_t *const *)labels, base, NQ, K, ok, ol);
        for (int q = 0; q < NQ; ++q) {
            kl_t all[S * K];
            int n = 0;
            for (int s = 0; s < S; ++s)
                for (int i = 0; i < K; ++i)
                    if (labels[s][q * K + i] >= 0) {
                        all[n].key = keys[s][q * K + i];
                        all[n].label = base[s] + labels[s][q * K + i];
                        ++n;
                    }
            qsort(all, (size_t)n, sizeof(kl_t), kl_cmp);
            for (int i = 0; i < K; ++i) {
                if (i < n) {
                    assert_true(ok[q * K + i] == all[i].key);
                    assert_int_equal(ol[q * K + i], all[i].label);
                } else {
                    assert_int_equal(ol[q * K + i], -1);
                    assert_true(isinf(ok[q * K + i]) && ok[q * K + i] < 0);
                }
            }
        }
        for (int s = 0; s < S; ++s) {
            free(keys[s]);
            free(labels[s]);
        }
    }
}

static void test_keys_to_dist(void **state)
{
    (void)state;
    enum { D = 5 };
    float q[2 * D], x[D];
    for (int i = 0; i < 2 * D; ++i)
        q[i] = frand();
    for (int i = 0; i < D; ++i)
        x[i] = frand();
    float keys[4];
    int64_t labels[4] = {3, -1, 3, 7};
    for (int r = 0; r < 2; ++r) {
        double dot = 0, xx = 0;
        for (int i = 0; i < D; ++i) {
            dot += (double)q[r * D + i] * x[i];
            xx += (double)x[i] * x[i];
        }
        keys[r * 2] = (float)(2 * dot - xx);
        keys[r * 2 + 1] = -INFINITY;
    }
    float dist[4];
    sg_gpu_keys_to_dist(SG_GPU_L2, q, D, 2, 2, keys, labels, dist);
    for (int r = 0; r < 2; ++r) {
        double want = 0;
        for (int i = 0; i < D; ++i)
            want += ((double)q[r * D + i] - x[i]) * ((double)q[r * D + i] - x[i]);
        assert_true(fabs(dist[r * 2] - want) < 1e-5);
    }
    assert_true(dist[1] == FLT_MAX);
    labels[3] = -1;
    sg_gpu_keys_to_dist(SG_GPU_IP, q, D, 2, 2, keys, labels, dist);
    assert_true(dist[0] == keys[0] && dist[2] == keys[2]);
    assert_true(dist[1] == -FLT_MAX && dist[3] == -FLT_MAX);
}

static void test_rescore(void **state)
{
    (void)state;
    enum { N = 500, D = 13, NQ = 6, KC = 20, K = 5 };
    float *x = make_vectors(N, D);
    float q[NQ * D];
    for (int i = 0; i < NQ * D; ++i)
        q[i] = frand();
    for (int metric = 0; metric < 2; ++metric) {
        char *path =
            write_faiss(metric == 0 ? "rs_ip.index" : "rs_l2.index", "Flat", metric == 0 ? SG_FIDX_IP : SG_FIDX_L2, x, N, D);
        sg_gpu_flatfile_t ff;
        char err[256];
        assert_int_equal(sg_gpu_flat_open(path, &ff, err, sizeof(err)), 0);
        int64_t cand[NQ * KC];
        for (int r = 0; r < NQ; ++r)
            for (int i = 0; i < KC; ++i)
                cand[r * KC + i] = i % 7 == 6 ? -1 : (int64_t)((next_u32() % (N / KC)) * KC + (uint32_t)i); /* distinct */
        float dist[NQ * K], row[D];
        int64_t lab[NQ * K];
        sg_gpu_rescore(&ff, q, NQ, cand, KC, K, dist, lab, row);
        for (int r = 0; r < NQ; ++r) {
            kl_t all[KC];
            int n = 0;
            for (int i = 0; i < KC; ++i) {
                int64_t l = cand[r * KC + i];
                if (l < 0)
                    continue;
                double s = 0;
                for (int j = 0; j < D; ++j)
                    s += metric == 0 ? (double)q[r * D + j] * x[l * D + j]
                                     : ((double)q[r * D + j] - x[l * D + j]) * ((double)q[r * D + j] - x[l * D + j]);
                all[n].key = (float)(metric == 0 ? s : -s); /* larger is better */
                all[n].label = l;
                ++n;
            }
            qsort(all, (size_t)n, sizeof(kl_t), kl_cmp);
            for (int i = 0; i < K; ++i) {
                assert_int_equal(lab[r * K + i], all[i].label);
                assert_true(fabsf(dist[r * K + i] - (metric == 0 ? all[i].key : -all[i].key)) < 1e-5f);
            }
        }
        /* fewer candidates than k: padded like FAISS */
        int64_t few[2] = {4, -1};
        float d2[3];
        int64_t l2[3];
        sg_gpu_rescore(&ff, q, 1, few, 2, 3, d2, l2, row);
        assert_int_equal(l2[0], 4);
        assert_int_equal(l2[1], -1);
        assert_int_equal(l2[2], -1);
        assert_true(d2[1] == (metric == 0 ? -FLT_MAX : FLT_MAX));
        sg_gpu_flat_close(&ff);
        free(path);
    }
    free(x);
}

/* ---- loader ---- */

static void test_loader_errors(void **state)
{
    (void)state;
    const sg_cuda_api *api;
    char err[512];
    char *missing = tu_path(tmpdir, "no-such-module.so");
    assert_int_equal(sg_gpu_module_load(missing, &api, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cannot load"));
    assert_non_null(strstr(err, missing));
    assert_null(api);
    free(missing);
    assert_int_equal(sg_gpu_module_load("libm.so.6", &api, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "does not export sg_cuda_entry"));
    char *def = sg_gpu_module_default_path((const void *)test_loader_errors);
    assert_non_null(def);
    size_t n = strlen(def), m = strlen("/" SG_CUDA_MODULE_FILE);
    assert_true(n > m);
    assert_string_equal(def + n - m, "/" SG_CUDA_MODULE_FILE);
    free(def);
}

/* The table only grows: a module from before device_error (1.0: the table ends at flat_search)
 * loads, and the backend's health treats it as unable to tell; a shorter table is refused. */
static void test_loader_table_sizes(void **state)
{
    (void)state;
    const sg_cuda_api *api;
    char err[512];
    assert_int_equal(sg_gpu_module_load(SG_FAKE_MODULES "/fake_module_v1_0.so", &api, err, sizeof(err)), 0);
    assert_int_equal(api->struct_size, SG_CUDA_API_MIN_SIZE);
    assert_false(SG_CUDA_API_HAS(api, device_error));
    assert_true(SG_CUDA_API_HAS(api, flat_search));
    sg_local_gpu_t g;
    memset(&g, 0, sizeof(g));
    g.api = api;
    g.n = 1;
    char detail[256] = "";
    assert_int_equal(sg_local_gpu_health(&g, detail, sizeof(detail)), SG_OK);
    assert_int_equal(sg_gpu_module_load(SG_FAKE_MODULES "/fake_module_short.so", &api, err, sizeof(err)), -1);
    char want[64];
    snprintf(want, sizeof(want), "(size %zu)", (size_t)SG_CUDA_API_MIN_SIZE - sizeof(void *));
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "or more"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_all_halves),
        cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_flat_reader_faiss_files),
        cmocka_unit_test(test_flat_reader_errors),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_flat_plan_figures),
        cmocka_unit_test(test_flat_layout_invariants),
        cmocka_unit_test(test_encoder_plan),
        cmocka_unit_test(test_encoder_passes),
        cmocka_unit_test(test_usable_and_format),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_keys_to_dist),
        cmocka_unit_test(test_rescore),
        cmocka_unit_test(test_loader_errors),
        cmocka_unit_test(test_loader_table_sizes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
