/*
 * test_safetensors.c -- the safetensors loader (F32/F16/BF16 values, alignment, bad headers,
 * truncated files) and the model loader's start-up errors (missing or mis-shaped tensors, config
 * mismatches), with F16/BF16 and "bert."-prefixed variants of the e5-tiny fixture written here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "e5.h"
#include "safetensors.h"
#include "testutil.h"

#include <math.h>

#define MODEL SG_FIXTURES "/e5-tiny"

static char *tmpdir;

static int setup(void **state)
{
    (void)state;
    tmpdir = tu_mkdtemp();
    return tmpdir == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rmtree(tmpdir);
    free(tmpdir);
    return 0;
}

static void test_dtypes(void **state)
{
    (void)state;
    const float vals[] = {1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604644775390625e-08f, 0.0f, -0.0f, INFINITY, 0.333251953125f};
    enum { N = sizeof(vals) / sizeof(vals[0]) };
    uint16_t h[N], b[N];
    for (int i = 0; i < N; ++i) {
        h[i] = tu_f32_to_f16(vals[i]);
        b[i] = tu_f32_to_bf16(vals[i]);
    }
    unsigned char odd[2] = {0x00, 0x3c}; /* one F16 1.0 so the next tensor starts 2-byte aligned */
    float f[N];
    memcpy(f, vals, sizeof(f));
    tu_tensor t[] = {
        {"half", "F16", 1, {N}, h, sizeof(h)},
        {"brain", "BF16", 1, {N}, b, sizeof(b)},
        {"odd", "F16", 1, {1}, odd, sizeof(odd)},
        {"single", "F32", 2, {3, 3}, f, sizeof(f)},
    };
    char *p = tu_path(tmpdir, "dtypes.safetensors");
    assert_int_equal(tu_write_safetensors(p, t, 4), 0);
    sg_st_file_t st;
    char err[256];
    assert_int_equal(sg_st_open(p, &st, err, sizeof(err)), 0);
    assert_int_equal(st.n_tensors, 4);
    float *owned;
    const sg_st_tensor_t *x = sg_st_find(&st, "half");
    assert_non_null(x);
    assert_int_equal(x->dtype, SG_ST_F16);
    const float *v = sg_st_as_f32(x, &owned, err, sizeof(err));
    assert_non_null(owned);
    for (int i = 0; i < N; ++i)
        assert_true(memcmp(&v[i], &vals[i], 4) == 0); /* all exactly representable, signs included */
    free(owned);
    x = sg_st_find(&st, "brain");
    v = sg_st_as_f32(x, &owned, err, sizeof(err));
    assert_true(v[0] == 1.0f && v[1] == -2.5f && v[7] == INFINITY && signbit(v[6]));
    assert_true(fabsf(v[2] - 65504.0f) <= 256.0f && fabsf(v[8] - 0.333251953125f) < 2e-3f);
    free(owned);
    /* an F32 tensor at a 2-byte aligned offset is copied, aligned ones are used in place */
    x = sg_st_find(&st, "single");
    assert_int_equal(x->ndim, 2);
    assert_int_equal(x->shape[1], 3);
    v = sg_st_as_f32(x, &owned, err, sizeof(err));
    assert_non_null(owned);
    assert_memory_equal(v, vals, sizeof(vals));
    free(owned);
    assert_null(sg_st_find(&st, "nope"));
    sg_st_close(&st);
    /* f16 specials */
    assert_true(isnan(sg_st_f16_to_f32(0x7e00)));
    assert_true(sg_st_f16_to_f32(0xfc00) == -INFINITY);
    assert_true(sg_st_f16_to_f32(0x0001) == 5.9604644775390625e-08f);
    assert_true(sg_st_f16_to_f32(0x03ff) == 6.097555160522461e-05f);
    free(p);
}

static void expect_open_error(const char *name, const void *data, size_t len, const char *want)
{
    char *p = tu_path(tmpdir, name);
    assert_int_equal(tu_write_file(p, data, len), 0);
    sg_st_file_t st;
    char err[512] = "";
    int rc = sg_st_open(p, &st, err, sizeof(err));
    if (rc == 0 || strstr(err, want) == NULL)
        fprintf(stderr, "%s: rc %d, err \"%s\", wanted \"%s\"\n", name, rc, err, want);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, name)); /* the message names the file */
    free(p);
}

static void header_file(const char *name, const char *json, size_t data_bytes, const char *want)
{
    size_t hl = strlen(json);
    size_t len = 8 + hl + data_bytes;
    unsigned char *buf = calloc(1, len);
    for (int i = 0; i < 8; ++i)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, json, hl);
    expect_open_error(name, buf, len, want);
    free(buf);
}

static void test_bad_headers(void **state)
{
    (void)state;
    expect_open_error("short.safetensors", "abc", 3, "too short");
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    expect_open_error("biglen.safetensors", big, sizeof(big), "bad safetensors header length");
    header_file("notjson.safetensors", "{\"a\": [1, 2", 0, "not a JSON object");
    header_file("array.safetensors", "[1, 2, 3]", 0, "not a JSON object");
    header_file("nodtype.safetensors", "{\"w\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", 8, "tensor w: header entry");
    header_file("unknown.safetensors", "{\"w\": {\"dtype\": \"Q4\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8,
                "tensor w: unknown dtype \"Q4\"");
    header_file("mismatch.safetensors", "{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
                "tensor w: 8 data bytes for 3 elements of F32");
    header_file("negshape.safetensors", "{\"w\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 8,
                "tensor w: shape[0]");
    header_file("past.safetensors", "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8,
                "tensor w: data_offsets [0, 16] outside the data area of 8 bytes");
    /* a real model file cut short */
    size_t len;
    char *whole = tu_read_file(MODEL "/model.safetensors", &len);
    assert_non_null(whole);
    expect_open_error("truncated.safetensors", whole, len - 1000, "truncated file?");
    expect_open_error("headonly.safetensors", whole, 100, "bad safetensors header length");
    free(whole);
    sg_st_file_t st;
    char err[256];
    assert_int_equal(sg_st_open("/nonexistent/x.safetensors", &st, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cannot open"));
}

/* ---- model variants written from the fixture ---- */

enum { KEEP = 0, TO_F16 = 1, TO_BF16 = 2, ROUND_F16 = 3, ROUND_BF16 = 4 };

/* Writes DIR with config.json (optionally replaced), vocab.txt and a model.safetensors derived
 * from the fixture: dtype conversion, a name prefix, one tensor dropped or transposed. */
static char *write_model(const char *dirname, int mode, const char *prefix, const char *drop, const char *transpose,
                         const char *config)
{
    char *dir = tu_path(tmpdir, dirname);
    mkdir(dir, 0700);
    size_t len;
    char *cfg = config != NULL ? strdup(config) : tu_read_file(MODEL "/config.json", &len);
    char *p = tu_path(dir, "config.json");
    assert_int_equal(tu_write_file(p, cfg, strlen(cfg)), 0);
    free(p);
    free(cfg);
    char *vocab = tu_read_file(MODEL "/vocab.txt", &len);
    p = tu_path(dir, "vocab.txt");
    assert_int_equal(tu_write_file(p, vocab, len), 0);
    free(p);
    free(vocab);
    sg_st_file_t st;
    char err[256];
    assert_int_equal(sg_st_open(MODEL "/model.safetensors", &st, err, sizeof(err)), 0);
    tu_tensor *t = calloc(st.n_tensors, sizeof(*t));
    char **names = calloc(st.n_tensors, sizeof(char *));
    void **bufs = calloc(st.n_tensors, sizeof(void *));
    size_t n = 0;
    for (size_t i = 0; i < st.n_tensors; ++i) {
        const sg_st_tensor_t *s = &st.tensors[i];
        if (drop != NULL && strcmp(s->name, drop) == 0)
            continue;
        float *own;
        const float *f = sg_st_as_f32(s, &own, err, sizeof(err));
        size_t nb = mode == TO_F16 || mode == TO_BF16 ? s->numel * 2 : s->numel * 4;
        void *buf = malloc(nb + 1);
        for (size_t k = 0; k < s->numel; ++k) {
            float x = f[k];
            if (mode == TO_F16)
                ((uint16_t *)buf)[k] = tu_f32_to_f16(x);
            else if (mode == TO_BF16)
                ((uint16_t *)buf)[k] = tu_f32_to_bf16(x);
            else if (mode == ROUND_F16)
                ((float *)buf)[k] = sg_st_f16_to_f32(tu_f32_to_f16(x));
            else if (mode == ROUND_BF16)
                ((float *)buf)[k] = sg_st_bf16_to_f32(tu_f32_to_bf16(x));
            else
                ((float *)buf)[k] = x;
        }
        free(own);
        size_t nl = strlen(s->name) + strlen(prefix) + 1;
        names[n] = malloc(nl);
        snprintf(names[n], nl, "%s%s", prefix, s->name);
        t[n].name = names[n];
        t[n].dtype = mode == TO_F16 ? "F16" : mode == TO_BF16 ? "BF16" : "F32";
        t[n].ndim = s->ndim;
        for (int d = 0; d < s->ndim; ++d)
            t[n].shape[d] = s->shape[d];
        if (transpose != NULL && strcmp(s->name, transpose) == 0) {
            t[n].shape[0] = s->shape[1];
            t[n].shape[1] = s->shape[0];
        }
        t[n].data = buf;
        t[n].nbytes = nb;
        bufs[n] = buf;
        ++n;
    }
    p = tu_path(dir, "model.safetensors");
    assert_int_equal(tu_write_safetensors(p, t, n), 0);
    free(p);
    for (size_t i = 0; i < n; ++i) {
        free(names[i]);
        free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(t);
    sg_st_close(&st);
    return dir;
}

static const char *texts[] = {"how much protein should a female eat", "Café Müller", "北京是中国的首都",
                              "The price is $1,234.56 (approx. 20% off)", ""};
enum { NT = sizeof(texts) / sizeof(texts[0]) };

static void encode_all(const char *dir, float *out)
{
    sg_e5_model *m;
    char err[512];
    int rc = sg_e5_load(dir, &m, err, sizeof(err));
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", dir, err);
    assert_int_equal(rc, 0);
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    size_t lens[NT];
    for (int i = 0; i < NT; ++i)
        lens[i] = strlen(texts[i]);
    assert_int_equal(sg_e5_encode(m, w, "query: ", texts, lens, NT, 256, out, err, sizeof(err)), 0);
    sg_e5_workspace_free(w);
    sg_e5_free(m);
}

static void test_half_models(void **state)
{
    (void)state;
    float ref[NT * 64], a[NT * 64], b[NT * 64];
    encode_all(MODEL, ref);
    /* an F16 file computes exactly what an F32 file of the F16-rounded weights computes */
    char *d1 = write_model("f16", TO_F16, "", NULL, NULL, NULL), *d2 = write_model("f16r", ROUND_F16, "", NULL, NULL, NULL);
    encode_all(d1, a);
    encode_all(d2, b);
    assert_memory_equal(a, b, sizeof(a));
    double mx = 0;
    for (int i = 0; i < NT * 64; ++i)
        mx = fmax(mx, fabs(a[i] - ref[i]));
    fprintf(stderr, "F16 weights vs F32: max abs diff %.3g\n", mx);
    assert_true(mx > 0 && mx < 0.05);
    free(d1);
    free(d2);
    d1 = write_model("bf16", TO_BF16, "", NULL, NULL, NULL);
    d2 = write_model("bf16r", ROUND_BF16, "", NULL, NULL, NULL);
    encode_all(d1, a);
    encode_all(d2, b);
    assert_memory_equal(a, b, sizeof(a));
    free(d1);
    free(d2);
    /* "bert."-prefixed names (a checkpoint saved from BertFor...) load too, with identical output */
    d1 = write_model("prefixed", KEEP, "bert.", NULL, NULL, NULL);
    encode_all(d1, a);
    assert_memory_equal(a, ref, sizeof(a));
    free(d1);
}

static void expect_load_error(const char *dir, const char *want)
{
    sg_e5_model *m = NULL;
    char err[512] = "";
    int rc = sg_e5_load(dir, &m, err, sizeof(err));
    if (rc == 0 || strstr(err, want) == NULL)
        fprintf(stderr, "%s: rc %d, err \"%s\", wanted \"%s\"\n", dir, rc, err, want);
    assert_int_equal(rc, -1);
    assert_null(m);
    assert_non_null(strstr(err, want));
}

static void test_model_errors(void **state)
{
    (void)state;
    char *d = write_model("missing", KEEP, "", "encoder.layer.1.output.dense.bias", NULL, NULL);
    expect_load_error(d, "tensor encoder.layer.1.output.dense.bias is missing");
    free(d);
    d = write_model("transposed", KEEP, "", NULL, "encoder.layer.0.intermediate.dense.weight", NULL);
    expect_load_error(d, "tensor encoder.layer.0.intermediate.dense.weight has shape [64, 128], config.json implies [128, 64]");
    free(d);
    size_t len;
    char *cfg = tu_read_file(MODEL "/config.json", &len);
    char *c1 = strdup(cfg);
    char *at = strstr(c1, "\"num_hidden_layers\": 2");
    assert_non_null(at);
    at[strlen("\"num_hidden_layers\": ")] = '1';
    d = write_model("fewer_layers", KEEP, "", NULL, NULL, c1);
    expect_load_error(d, "tensor encoder.layer.1.");
    free(d);
    at[strlen("\"num_hidden_layers\": ")] = '3';
    d = write_model("more_layers", KEEP, "", NULL, NULL, c1);
    expect_load_error(d, "tensor encoder.layer.2.attention.self.query.weight is missing");
    free(d);
    free(c1);
    c1 = strdup(cfg);
    at = strstr(c1, "\"gelu\"");
    assert_non_null(at);
    memcpy(at, "\"relu\"", 6);
    d = write_model("relu", KEEP, "", NULL, NULL, c1);
    expect_load_error(d, "\"hidden_act\" is relu");
    free(d);
    free(c1);
    c1 = strdup(cfg);
    at = strstr(c1, "\"hidden_size\": 64");
    memcpy(at, "\"hidden_size\": 66", 17);
    d = write_model("indivisible", KEEP, "", NULL, NULL, c1);
    expect_load_error(d, "\"hidden_size\" 66 is not a multiple of \"num_attention_heads\" 4");
    free(d);
    free(c1);
    d = write_model("badjson", KEEP, "", NULL, NULL, "{\"hidden_size\": ");
    expect_load_error(d, "config.json: not a JSON object");
    free(d);
    d = write_model("nokey", KEEP, "", NULL, NULL, "{\"hidden_size\": 64}");
    expect_load_error(d, "config.json: \"num_hidden_layers\" is missing");
    free(d);
    free(cfg);
    d = tu_path(tmpdir, "empty");
    mkdir(d, 0700);
    expect_load_error(d, "config.json: cannot open");
    free(d);
    /* a corrupt model file fails with the file named */
    d = write_model("corrupt", KEEP, "", NULL, NULL, NULL);
    char *p = tu_path(d, "model.safetensors");
    assert_int_equal(truncate(p, 5000), 0);
    expect_load_error(d, "model.safetensors: tensor ");
    free(p);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_half_models),
        cmocka_unit_test(test_model_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
