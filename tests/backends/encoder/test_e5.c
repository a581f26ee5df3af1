/*
 * test_e5.c -- the e5 encoder against the fixtures made with Hugging Face transformers
 * (tests/fixtures/README.md): WordPiece ids of tokenizer_golden.jsonl exactly, and the e5-tiny
 * embeddings of e5-tiny/golden.jsonl within 1e-5 max abs, one text at a time and in batches of
 * mixed lengths (padding in the reference, packing here), plus the layer-0 hidden states of
 * debug_hidden_states.json through a one-layer view of the same model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "blas.h"
#include "e5.h"
#include "e5_internal.h"
#include "kern.h"
#include "wordpiece.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

#define MODEL SG_FIXTURES "/e5-tiny"

typedef struct golden_t {
    char *text;
    size_t len;
    int32_t ids[600];
    int n_ids;
    float emb[1024];
    int dim;
} golden_t;

static golden_t *load_golden(const char *path, size_t *n_out, int want_emb)
{
    size_t len;
    char *all = tu_read_file(path, &len);
    assert_non_null(all);
    golden_t *g = calloc(64, sizeof(*g));
    size_t n = 0;
    for (char *line = strtok(all, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        assert_true(n < 64);
        golden_t *c = &g[n++];
        c->text = tu_json_string_field(line, "text", &c->len);
        assert_non_null(c->text);
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        const cJSON *ids = cJSON_GetObjectItem(o, "input_ids");
        c->n_ids = cJSON_GetArraySize(ids);
        assert_true(c->n_ids <= 600);
        int i = 0;
        for (const cJSON *it = ids->child; it != NULL; it = it->next)
            c->ids[i++] = (int32_t)it->valuedouble;
        if (want_emb) {
            const cJSON *e = cJSON_GetObjectItem(o, "embedding");
            c->dim = cJSON_GetArraySize(e);
            i = 0;
            for (const cJSON *it = e->child; it != NULL; it = it->next)
                c->emb[i++] = (float)it->valuedouble;
        }
        cJSON_Delete(o);
    }
    free(all);
    *n_out = n;
    return g;
}

static void free_golden(golden_t *g, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        free(g[i].text);
    free(g);
}

/* Encodes the golden texts g[0..n) in one batch into out (n * 64 floats). */
static void encode_goldens(sg_e5_model *m, const golden_t *g, size_t n, float *out)
{
    const char *texts[64];
    size_t lens[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; ++i) {
        texts[i] = g[i].text;
        lens[i] = g[i].len;
    }
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    char err[256];
    assert_int_equal(sg_e5_encode(m, w, "query: ", texts, lens, n, 256, out, err, sizeof(err)), 0);
    sg_e5_workspace_free(w);
}

static void test_tokenizer_golden(void **state)
{
    (void)state;
    sg_wp_t *wp;
    char err[512];
    assert_int_equal(sg_wp_load(MODEL "/vocab.txt", &wp, err, sizeof(err)), 0);
    assert_int_equal(sg_wp_size(wp), 30522);
    size_t n;
    golden_t *g = load_golden(SG_FIXTURES "/tokenizer_golden.jsonl", &n, 0);
    assert_int_equal(n, 40);
    int32_t ids[256];
    int bad = 0;
    for (size_t i = 0; i < n; ++i) {
        int k = sg_wp_encode(wp, "query: ", g[i].text, g[i].len, 256, ids);
        int same = k == g[i].n_ids && memcmp(ids, g[i].ids, (size_t)k * sizeof(int32_t)) == 0;
        if (!same) {
            ++bad;
            fprintf(stderr, "case %zu: got %d ids, want %d:", i, k, g[i].n_ids);
            for (int j = 0; j < k && j < 40; ++j)
                fprintf(stderr, " %d", ids[j]);
            fprintf(stderr, "\n  want:");
            for (int j = 0; j < g[i].n_ids && j < 40; ++j)
                fprintf(stderr, " %d", g[i].ids[j]);
            fprintf(stderr, "\n");
        }
    }
    assert_int_equal(bad, 0);
    free_golden(g, n);
    sg_wp_free(wp);
}

static void test_tokenizer_edges(void **state)
{
    (void)state;
    sg_wp_t *wp;
    char err[512];
    assert_int_equal(sg_wp_load(MODEL "/vocab.txt", &wp, err, sizeof(err)), 0);
    int32_t ids[16];
    /* max_len 2: only the specials; max_len < 2 refused */
    assert_int_equal(sg_wp_encode(wp, "query: ", "hello", 5, 2, ids), 2);
    assert_int_equal(ids[0], 101);
    assert_int_equal(ids[1], 102);
    assert_int_equal(sg_wp_encode(wp, NULL, "hello", 5, 1, ids), -1);
    /* no text at all (nothing before, between or after special tokens): [CLS] [SEP] only */
    assert_int_equal(sg_wp_encode(wp, NULL, "", 0, 16, ids), 2);
    assert_int_equal(sg_wp_encode(wp, NULL, "\x01 \t", 3, 16, ids), 2);
    assert_int_equal(sg_wp_encode(wp, NULL, "[SEP]", 5, 16, ids), 3);
    assert_int_equal(ids[1], 102);
    /* a literal special token in the text is kept whole, as transformers does */
    int k = sg_wp_encode(wp, NULL, "a[SEP]b [MASK]", 14, 16, ids);
    assert_int_equal(k, 6); /* [CLS] a [SEP] b [MASK] [SEP] */
    assert_int_equal(ids[1], sg_wp_lookup(wp, "a", 1));
    assert_int_equal(ids[2], 102);
    assert_int_equal(ids[3], sg_wp_lookup(wp, "b", 1));
    assert_int_equal(ids[4], 103);
    /* an empty text without prefix, or one that cleaning empties: [CLS] [SEP] (an empty query
     * with query_prefix "") */
    assert_int_equal(sg_wp_encode(wp, NULL, "", 0, 16, ids), 2);
    assert_int_equal(sg_wp_encode(wp, NULL, "\x01", 1, 16, ids), 2);
    assert_int_equal(ids[1], 102);
    /* lower-case "[sep]" is ordinary text: "[", "sep", "]" */
    k = sg_wp_encode(wp, NULL, "[sep]", 5, 16, ids);
    assert_int_equal(k, 5);
    assert_int_equal(ids[1], sg_wp_lookup(wp, "[", 1));
    /* invalid UTF-8 is dropped like U+FFFD */
    k = sg_wp_encode(wp, NULL, "ab\xff\xfe cd", 7, 16, ids);
    int k2 = sg_wp_encode(wp, NULL, "ab cd", 5, 16, ids + 8);
    assert_int_equal(k, k2);
    /* a 101-character word is [UNK], a 100-character one is not */
    char w[102];
    memset(w, 'a', sizeof(w));
    assert_int_equal(sg_wp_encode(wp, NULL, w, 101, 4, ids), 3);
    assert_int_equal(ids[1], 100);
    assert_true(sg_wp_encode(wp, NULL, w, 100, 4, ids) == 4 && ids[1] != 100);
    /* final sigma: upper-case word-final sigma lower-cases to the final form */
    int32_t a[8], b[8];
    k = sg_wp_encode(wp, NULL, "\xce\x9f\xce\xa3", 4, 8, a);  /* ΟΣ */
    k2 = sg_wp_encode(wp, NULL, "\xce\xbf\xcf\x82", 4, 8, b); /* ος */
    assert_int_equal(k, k2);
    assert_memory_equal(a, b, (size_t)k * sizeof(int32_t));
    sg_wp_free(wp);
}

static sg_e5_model *load_model(void)
{
    sg_e5_model *m = NULL;
    char err[512];
    int rc = sg_e5_load(MODEL, &m, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "load: %s\n", err);
    assert_int_equal(rc, 0);
    return m;
}

static double max_abs(const float *a, const float *b, int n)
{
    double mx = 0;
    for (int i = 0; i < n; ++i)
        mx = fmax(mx, fabs((double)a[i] - (double)b[i]));
    return mx;
}

static void test_model_ids_match_tokenizer(void **state)
{
    (void)state;
    sg_e5_model *m = load_model();
    assert_int_equal(sg_e5_dim(m), 64);
    assert_non_null(strstr(sg_e5_identity(m), "e5:"));
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    int32_t ids[256];
    for (size_t i = 0; i < n; ++i) {
        int k = sg_e5_tokenize(m, "query: ", g[i].text, g[i].len, 256, ids);
        assert_int_equal(k, g[i].n_ids);
        assert_memory_equal(ids, g[i].ids, (size_t)k * sizeof(int32_t));
    }
    free_golden(g, n);
    sg_e5_free(m);
}

static void test_encoder_single(void **state)
{
    (void)state;
    sg_e5_model *m = load_model();
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    assert_int_equal(n, 40);
    double worst = 0;
    char err[256];
    for (size_t i = 0; i < n; ++i) {
        float out[64];
        const char *t = g[i].text;
        assert_int_equal(g[i].dim, 64);
        assert_int_equal(sg_e5_encode(m, w, "query: ", &t, &g[i].len, 1, 256, out, err, sizeof(err)), 0);
        double d = max_abs(out, g[i].emb, 64);
        if (d > 1e-5)
            fprintf(stderr, "case %zu: max abs diff %g\n", i, d);
        worst = fmax(worst, d);
    }
    fprintf(stderr, "single: worst max abs diff %.3g\n", worst);
    assert_true(worst <= 1e-5);
    free_golden(g, n);
    sg_e5_workspace_free(w);
    sg_e5_free(m);
}

static void test_encoder_batched(void **state)
{
    (void)state;
    sg_e5_model *m = load_model();
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    const char *texts[64];
    size_t lens[64];
    /* all 40 in one batch (lengths 4..256), then in reverse order in batches of 7 */
    for (size_t i = 0; i < n; ++i) {
        texts[i] = g[i].text;
        lens[i] = g[i].len;
    }
    float *out = calloc(n * 64, sizeof(float));
    char err[256];
    assert_int_equal(sg_e5_encode(m, w, "query: ", texts, lens, n, 256, out, err, sizeof(err)), 0);
    double worst = 0;
    for (size_t i = 0; i < n; ++i)
        worst = fmax(worst, max_abs(out + i * 64, g[i].emb, 64));
    fprintf(stderr, "batch of %zu: worst max abs diff %.3g\n", n, worst);
    assert_true(worst <= 1e-5);
    for (size_t i = 0; i < n; ++i) {
        texts[i] = g[n - 1 - i].text;
        lens[i] = g[n - 1 - i].len;
    }
    for (size_t s = 0; s < n; s += 7) {
        size_t k = n - s < 7 ? n - s : 7;
        assert_int_equal(sg_e5_encode(m, w, "query: ", texts + s, lens + s, k, 256, out + s * 64, err, sizeof(err)), 0);
    }
    worst = 0;
    for (size_t i = 0; i < n; ++i)
        worst = fmax(worst, max_abs(out + i * 64, g[n - 1 - i].emb, 64));
    fprintf(stderr, "reversed batches of 7: worst max abs diff %.3g\n", worst);
    assert_true(worst <= 1e-5);
    free(out);
    free_golden(g, n);
    sg_e5_workspace_free(w);
    sg_e5_free(m);
}

static void test_encoder_threads_share_model(void **state)
{
    (void)state;
    /* two workspaces over one model give identical results */
    sg_e5_model *m = load_model();
    sg_e5_workspace *w1 = sg_e5_workspace_new(m), *w2 = sg_e5_workspace_new(m);
    const char *t = "who wrote hamlet";
    size_t l = strlen(t);
    float a[64], b[64];
    char err[256];
    assert_int_equal(sg_e5_encode(m, w1, "query: ", &t, &l, 1, 256, a, err, sizeof(err)), 0);
    assert_int_equal(sg_e5_encode(m, w2, "query: ", &t, &l, 1, 256, b, err, sizeof(err)), 0);
    assert_memory_equal(a, b, sizeof(a));
    /* the embedding is unit length */
    double s = 0;
    for (int i = 0; i < 64; ++i)
        s += (double)a[i] * a[i];
    assert_true(fabs(s - 1.0) < 1e-5);
    /* a workspace of another model is refused */
    sg_e5_model *m2 = load_model();
    assert_int_equal(sg_e5_encode(m2, w1, "query: ", &t, &l, 1, 256, a, err, sizeof(err)), -1);
    sg_e5_free(m2);
    sg_e5_workspace_free(w1);
    sg_e5_workspace_free(w2);
    sg_e5_free(m);
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; ++i) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb);
}

/* precision bf16: the fixture queries keep cosine >= 0.999 to float32. The bf16 arithmetic is
 * checked with the reference kernel on every CPU; oneDNN's kernel, where this CPU runs it, must
 * agree with the reference (same operands, another summation order). */
static void test_encoder_bf16_fidelity(void **state)
{
    (void)state;
    sg_e5_model *f32 = load_model(), *ref = load_model(), *dnnl = load_model();
    char err[512];
    assert_int_equal(sg__e5_set_bf16_reference(ref, err, sizeof(err)), 0);
    assert_int_equal(sg_e5_precision(ref), SG_E5_BF16);
    assert_int_equal(sg_e5_precision(f32), SG_E5_FP32);
    assert_string_not_equal(sg_e5_identity(ref), sg_e5_identity(f32)); /* other cache keys */
    int have_dnnl = sg_e5_set_precision(dnnl, SG_E5_BF16, err, sizeof(err)) == 0;
    if (!have_dnnl) {
        fprintf(stderr, "bf16 through oneDNN not available here: %s\n", err);
        assert_true(strstr(err, "oneDNN") != NULL);
        assert_int_equal(sg_e5_precision(dnnl), SG_E5_FP32);
    }
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    float *a = calloc(n * 64, sizeof(float)), *b = calloc(n * 64, sizeof(float)), *c = calloc(n * 64, sizeof(float));
    encode_goldens(f32, g, n, a);
    encode_goldens(ref, g, n, b);
    double worst = 1, worst_dnnl = 1, diff = 0;
    for (size_t i = 0; i < n; ++i)
        worst = fmin(worst, cosine(a + i * 64, b + i * 64, 64));
    fprintf(stderr, "bf16 (reference kernel) vs float32 on %zu fixture queries: min cosine %.6f\n", n, worst);
    assert_true(worst >= 0.999);
    if (have_dnnl) {
        encode_goldens(dnnl, g, n, c);
        for (size_t i = 0; i < n; ++i) {
            worst_dnnl = fmin(worst_dnnl, cosine(a + i * 64, c + i * 64, 64));
            diff = fmax(diff, max_abs(b + i * 64, c + i * 64, 64));
        }
        fprintf(stderr, "bf16 (oneDNN) vs float32: min cosine %.6f; vs the reference kernel: max abs diff %.3g\n", worst_dnnl,
                diff);
        assert_true(worst_dnnl >= 0.999);
        assert_true(diff <= 2e-3);
    }
    free(a);
    free(b);
    free(c);
    free_golden(g, n);
    sg_e5_free(f32);
    sg_e5_free(ref);
    sg_e5_free(dnnl);
}

/* encoder_blas "onednn": the float32 products through oneDNN match the goldens like OpenBLAS's */
static void test_encoder_onednn_goldens(void **state)
{
    (void)state;
    sg_e5_model *m = load_model();
    char err[512];
    if (sg_e5_use_onednn(m, err, sizeof(err)) != 0) {
        fprintf(stderr, "oneDNN not usable here: %s\n", err);
        assert_non_null(strstr(err, "oneDNN"));
        sg_e5_free(m);
        skip();
    }
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    float *out = calloc(n * 64, sizeof(float));
    encode_goldens(m, g, n, out);
    double worst = 0;
    for (size_t i = 0; i < n; ++i)
        worst = fmax(worst, max_abs(out + i * 64, g[i].emb, 64));
    fprintf(stderr, "oneDNN float32: worst max abs diff %.3g\n", worst);
    assert_true(worst <= 1e-5);
    free(out);
    free_golden(g, n);
    sg_e5_free(m);
}

/* ---- the own kernels and int8 ---- */

/* the kernel sets of this CPU (SG_CPU_FEATURES applied, as at start-up) */
static uint32_t cpu_features(void)
{
    sg_cpu_t cpu;
    sg_cpu_read(&cpu);
    const char *mask = getenv("SG_CPU_FEATURES");
    char err[256];
    if (mask != NULL)
        assert_int_equal(sg_cpu_restrict(&cpu, mask, err, sizeof(err)), 0);
    return cpu.features;
}

/* encoder_blas "own": every float32 kernel set this CPU runs matches the goldens like OpenBLAS */
static void test_encoder_own_kernels_goldens(void **state)
{
    (void)state;
    uint32_t f = cpu_features();
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    float *out = calloc(n * 64, sizeof(float));
    for (int kern = SG_KERN_SCALAR; kern <= SG_KERN_AVX512; ++kern) {
        sg_e5_model *m = load_model();
        char err[512];
        int rc = sg_e5_use_kernels(m, kern, err, sizeof(err));
        assert_int_equal(rc, sg_kern_runs(kern, 0, f) ? 0 : -1);
        if (rc == 0) {
            assert_int_equal(sg_e5_kernel(m), kern);
            encode_goldens(m, g, n, out);
            double worst = 0;
            for (size_t i = 0; i < n; ++i)
                worst = fmax(worst, max_abs(out + i * 64, g[i].emb, 64));
            fprintf(stderr, "own %s float32 kernels: worst max abs diff %.3g\n", sg_kern_name(kern), worst);
            assert_true(worst <= 1e-5);
            assert_non_null(strstr(sg_e5_identity(m), "e5:"));
            assert_null(strstr(sg_e5_identity(m), ".int8")); /* float32: the cache identity stays */
        }
        sg_e5_free(m);
    }
    free(out);
    free_golden(g, n);
}

/* A plain C reference of the forward in double, with each linear layer as precision int8 defines
 * it (kern.h, e5.c) for a scheme (SG__E5_Q8_*): the input minus the product's centre mu (CENTRE),
 * rotated in blocks of 64 (ROTATE: signs D, then the Hadamard transform / 8, in float32 as kern.h
 * specifies it), quantised per token (|q| <= 127), for the FFN output with SPLIT also the rest
 * c - q1 s1 (a fused multiply-add) quantised again; the weight rows rotated alike and quantised
 * per output channel (|q| <= 127, or 63 with 7 bits), both rounded to nearest even; the
 * dequantised product plus b + W mu. With bits 0: plain float32 weights in double, adding each
 * product's input to `sums` (the calibration pass). */
typedef struct {
    const sg_e5_config *c;
    int bits;
    unsigned scheme;
    const sg_e5_model *m; /* its int8 centres */
    int layer;
    double *sums; /* bits 0: per layer, the column sums of the inputs of the four products */
    int record;   /* add this product's input to sums (Q, K and V share one input: counted once) */
} qref_t;

/* D of kern.h's rotation: -1 where bit 0 of murmur3's 32-bit finaliser of the position is set */
static float ref_sign(int k)
{
    uint32_t h = (uint32_t)k;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return (h & 1) ? -1.0f : 1.0f;
}

/* H_2n [a; b] = [H_n a + H_n b; H_n a - H_n b], recursively (the same sums as kern.h's stages) */
static void ref_hadamard(float *v, int n)
{
    if (n == 1)
        return;
    ref_hadamard(v, n / 2);
    ref_hadamard(v + n / 2, n / 2);
    for (int j = 0; j < n / 2; ++j) {
        float a = v[j], b = v[j + n / 2];
        v[j] = a + b;
        v[j + n / 2] = a - b;
    }
}

/* v (n floats) as the product sees it: minus mu (NULL: none), then rotated when asked and n % 64 == 0 */
static void ref_prepare(float *v, const float *mu, int n, int rotate)
{
    rotate = rotate && n % 64 == 0;
    for (int k = 0; k < n; ++k)
        v[k] = (mu != NULL ? v[k] - mu[k] : v[k]) * (rotate ? ref_sign(k) : 1.0f);
    for (int blk = 0; rotate && blk < n / 64; ++blk) {
        ref_hadamard(v + blk * 64, 64);
        for (int j = 0; j < 64; ++j)
            v[blk * 64 + j] *= 0.125f;
    }
}

/* rows of `n` floats quantised to +-levels per row and dequantised, into d; with `rest`, also what
 * the second term quantises: v - q * scale (one fused multiply-add in float32) */
static void ref_quantise(const float *v, int n, int levels, double *d, float *rest)
{
    float mx = 0;
    for (int k = 0; k < n; ++k)
        mx = fmaxf(mx, fabsf(v[k]));
    for (int k = 0; k < n; ++k) {
        float q = mx > 0 ? nearbyintf(v[k] * ((float)levels / mx)) : 0;
        d[k] = q * (double)(mx / (float)levels);
        if (rest != NULL)
            rest[k] = fmaf(-q, mx / (float)levels, v[k]);
    }
}

static void ref_linear(const qref_t *r, int which, const double *x, size_t t, int in, const float *w, const float *b, int out,
                       double *y)
{
    const float *mu = r->bits != 0 && (r->scheme & SG__E5_Q8_CENTRE) ? sg__e5_int8_centre(r->m, r->layer, which) : NULL;
    const int rotate = (r->scheme & SG__E5_Q8_ROTATE) != 0, split = (r->scheme & SG__E5_Q8_SPLIT_OUT) && which == 3;
    if (r->bits != 0 && (r->scheme & SG__E5_Q8_CENTRE))
        assert_non_null(mu);
    double *wd = malloc(sizeof(double) * (size_t)out * (size_t)in), *xd = malloc(sizeof(double) * (size_t)in);
    double *wmu = calloc((size_t)out, sizeof(double));
    float *v = malloc(sizeof(float) * (size_t)in), *rest = malloc(sizeof(float) * (size_t)in);
    double *xd2 = malloc(sizeof(double) * (size_t)in);
    for (int j = 0; j < out; ++j) {
        for (int k = 0; k < in; ++k) {
            v[k] = w[(size_t)j * in + k];
            wmu[j] += mu != NULL ? (double)v[k] * mu[k] : 0.0;
        }
        if (r->bits == 0) {
            for (int k = 0; k < in; ++k)
                wd[(size_t)j * in + k] = v[k];
            continue;
        }
        ref_prepare(v, NULL, in, rotate);
        ref_quantise(v, in, r->bits == 7 ? 63 : 127, wd + (size_t)j * in, NULL);
    }
    for (size_t i = 0; i < t; ++i) {
        for (int k = 0; k < in; ++k) {
            v[k] = (float)x[i * in + k];
            if (r->bits == 0)
                xd[k] = x[i * in + k];
            if (r->bits == 0 && r->record)
                r->sums[(size_t)r->layer * (3 * r->c->hidden + r->c->intermediate) + (size_t)which * r->c->hidden + k] +=
                    x[i * in + k];
        }
        if (r->bits != 0) {
            ref_prepare(v, mu, in, rotate);
            ref_quantise(v, in, 127, xd, split ? rest : NULL);
        }
        if (r->bits != 0 && split) {
            ref_quantise(rest, in, 127, xd2, NULL);
            for (int k = 0; k < in; ++k)
                xd[k] += xd2[k];
        }
        for (int j = 0; j < out; ++j) {
            double acc = 0;
            for (int k = 0; k < in; ++k)
                acc += xd[k] * wd[(size_t)j * in + k];
            y[i * out + j] = acc + b[j] + wmu[j];
        }
    }
    free(wd);
    free(xd);
    free(wmu);
    free(v);
    free(rest);
    free(xd2);
}

static void ref_layer_norm(double *x, const double *res, size_t t, int h, const float *g, const float *b, double eps)
{
    for (size_t i = 0; i < t; ++i) {
        double *row = x + i * h, mean = 0, var = 0;
        for (int j = 0; j < h; ++j)
            mean += (row[j] += res != NULL ? res[i * h + j] : 0);
        mean /= h;
        for (int j = 0; j < h; ++j)
            var += (row[j] - mean) * (row[j] - mean);
        double inv = 1.0 / sqrt(var / h + eps);
        for (int j = 0; j < h; ++j)
            row[j] = (row[j] - mean) * inv * g[j] + b[j];
    }
}

/* one sequence's embedding */
static void ref_forward(const sg_e5_model *m, qref_t *r, const int32_t *ids, int t, float *out)
{
    const sg_e5_config *c = r->c;
    const int h = c->hidden, dh = h / c->heads, in = c->intermediate;
    double *x = calloc((size_t)t * h, sizeof(double)), *q = calloc((size_t)t * h, sizeof(double)),
           *k = calloc((size_t)t * h, sizeof(double));
    double *v = calloc((size_t)t * h, sizeof(double)), *ctx = calloc((size_t)t * h, sizeof(double)),
           *tmp = calloc((size_t)t * h, sizeof(double));
    double *mid = calloc((size_t)t * in, sizeof(double)), *s = calloc((size_t)t, sizeof(double));
    sg_e5_embedding_weights e;
    sg_e5_get_embedding_weights(m, &e);
    for (int i = 0; i < t; ++i)
        for (int j = 0; j < h; ++j)
            x[i * h + j] = ((double)e.word[(size_t)ids[i] * h + j] + e.token_type[j]) + e.position[(size_t)i * h + j];
    ref_layer_norm(x, NULL, (size_t)t, h, e.ln_gamma, e.ln_beta, c->ln_eps);
    for (int l = 0; l < c->layers; ++l) {
        sg_e5_layer_weights L;
        assert_int_equal(sg_e5_get_layer_weights(m, l, &L), 0);
        r->layer = l;
        r->record = 1;
        ref_linear(r, 0, x, (size_t)t, h, L.q_w, L.q_b, h, q);
        r->record = 0;
        ref_linear(r, 0, x, (size_t)t, h, L.k_w, L.k_b, h, k);
        ref_linear(r, 0, x, (size_t)t, h, L.v_w, L.v_b, h, v);
        r->record = 1;
        for (int hd = 0; hd < c->heads; ++hd) {
            for (int a = 0; a < t; ++a) {
                double mx = -INFINITY, sum = 0;
                for (int b = 0; b < t; ++b) {
                    double d = 0;
                    for (int i = 0; i < dh; ++i)
                        d += q[a * h + hd * dh + i] * k[b * h + hd * dh + i];
                    s[b] = d / sqrt((double)dh);
                    mx = fmax(mx, s[b]);
                }
                for (int b = 0; b < t; ++b)
                    sum += (s[b] = exp(s[b] - mx));
                for (int i = 0; i < dh; ++i) {
                    double acc = 0;
                    for (int b = 0; b < t; ++b)
                        acc += s[b] / sum * v[b * h + hd * dh + i];
                    ctx[a * h + hd * dh + i] = acc;
                }
            }
        }
        ref_linear(r, 1, ctx, (size_t)t, h, L.attn_out_w, L.attn_out_b, h, tmp);
        ref_layer_norm(tmp, x, (size_t)t, h, L.attn_ln_gamma, L.attn_ln_beta, c->ln_eps);
        ref_linear(r, 2, tmp, (size_t)t, h, L.inter_w, L.inter_b, in, mid);
        for (int i = 0; i < t * in; ++i)
            mid[i] = 0.5 * mid[i] * (1.0 + erf(mid[i] / sqrt(2.0)));
        ref_linear(r, 3, mid, (size_t)t, in, L.out_w, L.out_b, h, x);
        ref_layer_norm(x, tmp, (size_t)t, h, L.out_ln_gamma, L.out_ln_beta, c->ln_eps);
    }
    double norm = 0;
    for (int j = 0; j < h; ++j) {
        double acc = 0;
        for (int i = 0; i < t; ++i)
            acc += x[i * h + j];
        tmp[j] = acc / t;
        norm += tmp[j] * tmp[j];
    }
    for (int j = 0; j < h; ++j)
        out[j] = (float)(tmp[j] / fmax(sqrt(norm), 1e-12));
    free(x);
    free(q);
    free(k);
    free(v);
    free(ctx);
    free(tmp);
    free(mid);
    free(s);
}

/* The centres the reference's float32 pass over the calibration texts gives (per layer 3 hidden +
 * intermediate floats, as sg__e5_int8_centre lays them out). */
static double *ref_centres(const sg_e5_model *m, const char *prefix)
{
    const sg_e5_config *c = sg_e5_get_config(m);
    size_t per = 3 * (size_t)c->hidden + (size_t)c->intermediate, n, tokens = 0;
    double *sums = calloc(per * (size_t)c->layers, sizeof(double));
    const char *const *texts = sg__e5_calib_texts(&n);
    assert_true(n >= 32);
    float out[64];
    for (size_t i = 0; i < n; ++i) {
        int32_t ids[128];
        int k = sg_e5_tokenize(m, prefix, texts[i], strlen(texts[i]), 128, ids);
        assert_true(k > 2);
        qref_t r = {c, 0, 0, NULL, 0, sums, 0};
        ref_forward(m, &r, ids, k, out);
        tokens += (size_t)k;
    }
    for (size_t i = 0; i < per * (size_t)c->layers; ++i)
        sums[i] /= (double)tokens;
    return sums;
}

/* precision int8 against the plain C reference, on every int8 kernel this CPU runs (and oneDNN's
 * where it loads and is exact), for 8- and 7-bit weights: the centres against the reference's
 * calibration, identical token ids, a bounded error, and a cosine to float32 that keeps the
 * retrieval's order */
static void test_encoder_int8_reference(void **state)
{
    (void)state;
    uint32_t f = cpu_features();
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    float *f32 = calloc(n * 64, sizeof(float)), *out = calloc(n * 64, sizeof(float)), *ref = calloc(n * 64, sizeof(float));
    sg_e5_model *base = load_model();
    encode_goldens(base, g, n, f32);
    const sg_e5_config *c = sg_e5_get_config(base);
    double *centres = ref_centres(base, "query: ");
    const int kerns[] = {SG_KERN_SCALAR, SG_KERN_AVX2, SG_KERN_VNNI, SG_E5_INT8_ONEDNN};
    static const struct {
        unsigned scheme;
        const char *letters;
    } schemes[] = {{SG__E5_Q8_DEFAULT, "cr"},
                   {0, ""},
                   {SG__E5_Q8_CENTRE, "c"},
                   {SG__E5_Q8_CENTRE | SG__E5_Q8_ROTATE | SG__E5_Q8_SPLIT_OUT, "crs"}};
    for (size_t si = 0; si < sizeof(schemes) / sizeof(schemes[0]); ++si) {
        const unsigned scheme = schemes[si].scheme;
        for (int bits = 8; bits >= 7; --bits) {
            for (size_t ki = 0; ki < sizeof(kerns) / sizeof(kerns[0]); ++ki) {
                sg_e5_model *m = load_model();
                char err[512], suffix[32];
                assert_null(sg__e5_int8_centre(m, 0, 0));
                int rc = scheme == SG__E5_Q8_DEFAULT ? sg_e5_set_int8(m, kerns[ki], bits, err, sizeof(err))
                                                     : sg__e5_set_int8_scheme(m, kerns[ki], bits, scheme, err, sizeof(err));
                if (kerns[ki] == SG_E5_INT8_ONEDNN) {
                    if (rc != 0) {
                        fprintf(stderr, "int8 through oneDNN not here: %s\n", err);
                        assert_non_null(strstr(err, "oneDNN"));
                    }
                } else {
                    assert_int_equal(rc, sg_kern_runs(kerns[ki], 1, f) ? 0 : -1);
                }
                if (rc != 0) {
                    sg_e5_free(m);
                    continue;
                }
                assert_int_equal(sg_e5_precision(m), SG_E5_INT8);
                snprintf(suffix, sizeof(suffix), ".int8%s%s", bits == 7 ? "w7" : "", schemes[si].letters);
                assert_string_equal(strrchr(sg_e5_identity(m), '.'), suffix);
                /* the centres: the reference's means, rounded to bfloat16 (8 significant bits) */
                double worst_mu = 0;
                if (!(scheme & SG__E5_Q8_CENTRE))
                    assert_null(sg__e5_int8_centre(m, 0, 0));
                for (int l = 0; (scheme & SG__E5_Q8_CENTRE) && l < c->layers; ++l) {
                    for (int p = 0; p < 4; ++p) {
                        const float *mu = sg__e5_int8_centre(m, l, p);
                        assert_non_null(mu);
                        const double *want = centres + (size_t)l * (3 * c->hidden + c->intermediate) + (size_t)p * c->hidden;
                        for (int k = 0; k < (p == 3 ? c->intermediate : c->hidden); ++k) {
                            double d = fabs(mu[k] - want[k]);
                            worst_mu = fmax(worst_mu, d);
                            assert_true(d <= fabs(want[k]) / 256 + 1e-6);
                        }
                    }
                }
                qref_t r = {c, bits, scheme, m, 0, NULL, 0};
                for (size_t i = 0; i < n; ++i)
                    ref_forward(base, &r, g[i].ids, g[i].n_ids, ref + i * 64);
                int32_t ids[256];
                for (size_t i = 0; i < n; ++i) { /* the same tokens whatever the precision */
                    int k = sg_e5_tokenize(m, "query: ", g[i].text, g[i].len, 256, ids);
                    assert_int_equal(k, g[i].n_ids);
                    assert_memory_equal(ids, g[i].ids, (size_t)k * sizeof(int32_t));
                }
                encode_goldens(m, g, n, out);
                /* float32 and double agree to ~1e-7 until an activation lands within that of a rounding
                 * edge (x.5 steps) on one side and not on the other: one step of one value, which moves
                 * that text's embedding by ~1e-3. Most texts meet no such edge and must agree exactly. A
                 * second term's steps are ~254 times finer (so its edges ~254 times denser, each moving
                 * an embedding by ~4e-6): "exactly" is then within 1e-4. */
                const double tol = (scheme & SG__E5_Q8_SPLIT_OUT) ? 1e-4 : 2e-5;
                double worst = 0, cos_min = 1;
                size_t exact = 0;
                for (size_t i = 0; i < n; ++i) {
                    double d = max_abs(out + i * 64, ref + i * 64, 64);
                    worst = fmax(worst, d);
                    exact += d <= tol;
                    cos_min = fmin(cos_min, cosine(out + i * 64, f32 + i * 64, 64));
                }
                char desc[200];
                fprintf(
                    stderr,
                    "%s: centres within %.3g of the reference's; vs the plain C reference: %zu of %zu texts within %.0e, max abs "
                    "%.3g; vs float32 min cosine %.6f\n",
                    sg_e5_engine(m, desc, sizeof(desc)), worst_mu, exact, n, tol, worst, cos_min);
                assert_true(exact >= n * 3 / 4);
                assert_true(worst <= 5e-3);
                if (scheme == 0) /* 0.99982 / 0.99907 here */
                    assert_true(cos_min >= (bits == 8 ? 0.9995 : 0.998));
                else if (!(scheme & SG__E5_Q8_ROTATE)) /* 0.99989 / 0.99945 */
                    assert_true(cos_min >= (bits == 8 ? 0.9997 : 0.999));
                else /* centred and rotated: 0.99991 / 0.99966 */
                    assert_true(cos_min >= (bits == 8 ? 0.9998 : 0.9995));
                sg_e5_free(m);
            }
        }
    }
    free(centres);
    sg_e5_free(base);
    free(f32);
    free(out);
    free(ref);
    free_golden(g, n);
}

/* What centring and rotation buy on the fixture (the 40 golden texts), for 8- and 7-bit weights:
 * the mean of 1 - cosine(int8, float32). Plain per-channel int8 (no centres, no rotation) gave
 * 1.07e-4 with 8-bit weights; centred and rotated 4.2e-5 / 1.2e-4. */
static void test_encoder_int8_quality(void **state)
{
    (void)state;
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    float *f32 = calloc(n * 64, sizeof(float)), *out = calloc(n * 64, sizeof(float));
    sg_e5_model *base = load_model();
    encode_goldens(base, g, n, f32);
    for (int bits = 8; bits >= 7; --bits) {
        sg_e5_model *m = load_model();
        char err[512];
        assert_int_equal(sg_e5_set_int8(m, SG_KERN_SCALAR, bits, err, sizeof(err)), 0);
        encode_goldens(m, g, n, out);
        double mean = 0;
        for (size_t i = 0; i < n; ++i)
            mean += (1 - cosine(out + i * 64, f32 + i * 64, 64)) / (double)n;
        fprintf(stderr, "int8, %d-bit weights, centred and rotated: mean 1 - cosine to float32 %.3g\n", bits, mean);
        assert_true(mean <= (bits == 8 ? 6e-5 : 2e-4));
        sg_e5_free(m);
    }
    sg_e5_free(base);
    free(f32);
    free(out);
    free_golden(g, n);
}

/* Switching a model from one int8 scheme to another calibrates in float32 (not through the
 * scheme it ran) and gives the embeddings a fresh model gets; the identity follows the scheme. */
static void test_encoder_int8_rescheme(void **state)
{
    (void)state;
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n, 1);
    float *a = calloc(n * 64, sizeof(float)), *b = calloc(n * 64, sizeof(float));
    char err[512];
    sg_e5_model *fresh = load_model(), *m = load_model();
    assert_int_equal(sg_e5_set_int8(fresh, SG_KERN_SCALAR, 8, err, sizeof(err)), 0);
    encode_goldens(fresh, g, n, a);
    assert_int_equal(sg__e5_set_int8_scheme(m, SG_KERN_SCALAR, 8, 0, err, sizeof(err)), 0);
    assert_string_equal(strrchr(sg_e5_identity(m), '.'), ".int8");
    assert_int_equal(sg_e5_set_int8(m, SG_KERN_SCALAR, 8, err, sizeof(err)), 0);
    assert_string_equal(strrchr(sg_e5_identity(m), '.'), ".int8cr");
    assert_null(strstr(sg_e5_identity(m), ".int8.int8")); /* one int8 suffix, the new scheme's */
    encode_goldens(m, g, n, b);
    for (int l = 0; l < sg_e5_get_config(m)->layers; ++l)
        for (int p = 0; p < 4; ++p)
            assert_memory_equal(sg__e5_int8_centre(m, l, p), sg__e5_int8_centre(fresh, l, p),
                                (size_t)(p == 3 ? sg_e5_get_config(m)->intermediate : sg_e5_get_config(m)->hidden) * sizeof(float));
    assert_memory_equal(a, b, n * 64 * sizeof(float));
    sg_e5_free(fresh);
    sg_e5_free(m);
    free(a);
    free(b);
    free_golden(g, n);
}

/* The calibration pass puts the route's query prefix before its texts (sg_e5_set_calibration_prefix):
 * the centres are the reference's for that prefix, not "query: "'s. */
static void test_encoder_int8_calibration_prefix(void **state)
{
    (void)state;
    sg_e5_model *m = load_model();
    const sg_e5_config *c = sg_e5_get_config(m);
    char err[512];
    double *want = ref_centres(m, "passage: "), *other = ref_centres(m, "query: ");
    assert_int_equal(sg_e5_set_calibration_prefix(m, "passage: "), 0);
    assert_int_equal(sg_e5_set_int8(m, SG_KERN_SCALAR, 8, err, sizeof(err)), 0);
    size_t differ = 0;
    for (int l = 0; l < c->layers; ++l) {
        for (int p = 0; p < 4; ++p) {
            const float *mu = sg__e5_int8_centre(m, l, p);
            size_t off = (size_t)l * (3 * c->hidden + c->intermediate) + (size_t)p * c->hidden;
            for (int k = 0; k < (p == 3 ? c->intermediate : c->hidden); ++k) {
                assert_true(fabs(mu[k] - want[off + k]) <= fabs(want[off + k]) / 256 + 1e-6);
                differ += fabs(mu[k] - other[off + k]) > fabs(other[off + k]) / 256 + 1e-6;
            }
        }
    }
    assert_true(differ > 0);
    free(want);
    free(other);
    sg_e5_free(m);
}

/* precision int8 picks its kernel from the CPU's features (SG_CPU_FEATURES hides some, as for the
 * BLAS): VNNI where present, else AVX2 with 7-bit weights, else plain C */
static void test_encoder_int8_choice(void **state)
{
    (void)state;
    const char *saved = getenv("SG_CPU_FEATURES");
    char *keep = saved != NULL ? strdup(saved) : NULL;
    static const struct {
        const char *mask;
        int kern;
        const char *suffix;
    } cases[] = {{"sse3", SG_KERN_SCALAR, ".int8cr"},
                 {"sse3,avx,fma,avx2", SG_KERN_AVX2, ".int8w7cr"},
                 {"sse3,avx,fma,avx2,avx512f,avx512bw,avx512dq,avx512vl", SG_KERN_AVX2, ".int8w7cr"},
                 {"sse3,avx,fma,avx2,avx512f,avx512bw,avx512dq,avx512vl,avx512_vnni", SG_KERN_VNNI, ".int8cr"}};
    uint32_t have = cpu_features();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        setenv("SG_CPU_FEATURES", cases[i].mask, 1);
        sg_e5_model *m = load_model();
        char err[512];
        assert_int_equal(sg_e5_set_precision(m, SG_E5_INT8, err, sizeof(err)), 0);
        int want = sg_kern_runs(cases[i].kern, 1, have) ? cases[i].kern : sg_kern_q8_best(have & sg_e5_features(m));
        assert_int_equal(sg_e5_kernel(m), want);
        const char *id = sg_e5_identity(m);
        assert_string_equal(strrchr(id, '.'), want == SG_KERN_AVX2 ? ".int8w7cr" : ".int8cr");
        (void)cases[i].suffix;
        sg_e5_free(m);
    }
    if (keep != NULL) {
        setenv("SG_CPU_FEATURES", keep, 1);
        free(keep);
    } else {
        unsetenv("SG_CPU_FEATURES");
    }
    /* bf16 and int8 exclude each other */
    sg_e5_model *m = load_model();
    char err[512];
    assert_int_equal(sg__e5_set_bf16_reference(m, err, sizeof(err)), 0);
    assert_int_equal(sg_e5_set_precision(m, SG_E5_INT8, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "bf16"));
    sg_e5_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_golden),
        cmocka_unit_test(test_tokenizer_edges),
        cmocka_unit_test(test_model_ids_match_tokenizer),
        cmocka_unit_test(test_encoder_single),
        cmocka_unit_test(test_encoder_batched),
        cmocka_unit_test(test_encoder_threads_share_model),
        cmocka_unit_test(test_encoder_bf16_fidelity),
        cmocka_unit_test(test_encoder_onednn_goldens),
        cmocka_unit_test(test_encoder_own_kernels_goldens),
        cmocka_unit_test(test_encoder_int8_reference),
        cmocka_unit_test(test_encoder_int8_quality),
        cmocka_unit_test(test_encoder_int8_rescheme),
        cmocka_unit_test(test_encoder_int8_calibration_prefix),
        cmocka_unit_test(test_encoder_int8_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
