/*
 * test_xenc.c -- the BERT cross-encoder (xenc.h) against the goldens of tests/fixtures/xenc-tiny
 * and xenc-tiny-3labels (tests/backends/encoder/make_xenc_fixture.py: BertForSequenceClassification and
 * BertTokenizer followed in plain torch; tests/fixtures/README.md):
 *
 *   - pair token ids and types exactly, with both truncation rules;
 *   - logits within 1e-5 max abs, one pair at a time and each query's passages as one batch (and
 *     in small batches in reverse order);
 *   - the score CrossEncoder.predict gives: the raw logit with the Identity activation the fixture
 *     names (as the ms-marco cross-encoders do), the sigmoid without one, the softmax at the score
 *     label with three labels;
 *   - config.json and tokenizer_config.json read as transformers and CrossEncoder read them, with
 *     clear errors for what is not a supported cross-encoder;
 *   - the e5 encoder on the shared core is unchanged (test_e5.c checks its goldens).
 *
 * The team (sg_par) giving the same scores is in test_team.c, with the team.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "xenc.h"
#include "testutil.h"

#include <math.h>

#define MODEL SG_FIXTURES "/xenc-tiny"
#define MODEL3 SG_FIXTURES "/xenc-tiny-3labels"

typedef struct seg_t {
    int32_t ids[512];
    uint8_t types[512];
    int n;
    float logits[4];
} seg_t;

typedef struct golden_t {
    char *query, *passage;
    size_t qlen, plen;
    uint32_t max_length;
    char tag[64];
    seg_t fast, slow; /* slow: the fast values where the golden has no "slow" */
    int has_slow;
    int labels;
} golden_t;

static void read_seg(const cJSON *o, seg_t *s, int *labels)
{
    const cJSON *ids = cJSON_GetObjectItem(o, "input_ids"), *types = cJSON_GetObjectItem(o, "token_type_ids");
    const cJSON *logits = cJSON_GetObjectItem(o, "logits");
    s->n = cJSON_GetArraySize(ids);
    assert_true(s->n <= 512 && cJSON_GetArraySize(types) == s->n);
    int i = 0;
    for (const cJSON *it = ids->child; it != NULL; it = it->next)
        s->ids[i++] = (int32_t)it->valuedouble;
    i = 0;
    for (const cJSON *it = types->child; it != NULL; it = it->next)
        s->types[i++] = (uint8_t)it->valuedouble;
    *labels = cJSON_GetArraySize(logits);
    assert_true(*labels >= 1 && *labels <= 4);
    i = 0;
    for (const cJSON *it = logits->child; it != NULL; it = it->next)
        s->logits[i++] = (float)it->valuedouble;
}

static golden_t *load_golden(const char *path, size_t *n_out)
{
    size_t len;
    char *all = tu_read_file(path, &len);
    assert_non_null(all);
    golden_t *g = calloc(64, sizeof(*g));
    size_t n = 0;
    char *save = NULL;
    for (char *line = strtok_r(all, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        assert_true(n < 64);
        golden_t *c = &g[n++];
        c->query = tu_json_string_field(line, "query", &c->qlen);
        c->passage = tu_json_string_field(line, "passage", &c->plen);
        assert_non_null(c->query);
        assert_non_null(c->passage);
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        c->max_length = (uint32_t)cJSON_GetObjectItem(o, "max_length")->valuedouble;
        snprintf(c->tag, sizeof(c->tag), "%s", cJSON_GetObjectItem(o, "tag")->valuestring);
        read_seg(o, &c->fast, &c->labels);
        const cJSON *slow = cJSON_GetObjectItem(o, "slow");
        c->has_slow = slow != NULL;
        int l2;
        if (slow != NULL)
            read_seg(slow, &c->slow, &l2);
        else
            c->slow = c->fast;
        cJSON_Delete(o);
    }
    free(all);
    *n_out = n;
    return g;
}

static void free_golden(golden_t *g, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        free(g[i].query);
        free(g[i].passage);
    }
    free(g);
}

static sg_xenc_model *load(const char *dir)
{
    sg_xenc_model *m;
    char err[512];
    if (sg_xenc_load(dir, &m, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    return m;
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* ---- tokenisation ---- */

static void test_pair_tokens(void **state)
{
    (void)state;
    const char *dirs[] = {MODEL, MODEL3};
    for (int d = 0; d < 2; ++d) {
        sg_xenc_model *m = load(dirs[d]);
        char path[512];
        snprintf(path, sizeof(path), "%s/golden.jsonl", dirs[d]);
        size_t n;
        golden_t *g = load_golden(path, &n);
        assert_true(n >= (d == 0 ? 30 : 5));
        int differ = 0;
        for (int rule = SG_XENC_TRUNC_FAST; rule <= SG_XENC_TRUNC_SLOW; ++rule) {
            assert_int_equal(sg_xenc_set_truncation(m, rule), 0);
            assert_int_equal(sg_xenc_truncation(m), rule);
            for (size_t i = 0; i < n; ++i) {
                const seg_t *want = rule == SG_XENC_TRUNC_FAST ? &g[i].fast : &g[i].slow;
                int32_t ids[512];
                uint8_t types[512];
                int k = sg_xenc_tokenize(m, g[i].query, g[i].qlen, g[i].passage, g[i].plen, g[i].max_length, ids, types);
                if (k != want->n || memcmp(ids, want->ids, (size_t)k * sizeof(int32_t)) != 0 ||
                    memcmp(types, want->types, (size_t)k) != 0)
                    fail_msg("%s case %zu (%s), %s rule: %d ids, want %d", dirs[d], i, g[i].tag,
                             rule == SG_XENC_TRUNC_FAST ? "fast" : "slow", k, want->n);
                assert_true(k <= (int)g[i].max_length);
                differ += rule == SG_XENC_TRUNC_SLOW && g[i].has_slow;
            }
        }
        /* the goldens do exercise the cases where the two rules differ */
        assert_true(differ >= 2);
        /* types may be NULL; max_length below 3 is refused */
        int32_t ids[512];
        assert_int_equal(sg_xenc_tokenize(m, "a", 1, "b", 1, 512, ids, NULL), 5);
        assert_int_equal(sg_xenc_tokenize(m, "a", 1, "b", 1, 2, ids, NULL), -1);
        free_golden(g, n);
        sg_xenc_free(m);
    }
}

/* ---- scores ---- */

static double max_abs(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; ++i)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

static void test_scores_single(void **state)
{
    (void)state;
    sg_xenc_model *m = load(MODEL);
    assert_int_equal(sg_xenc_num_labels(m), 1);
    /* the fixture names Identity, as the ms-marco cross-encoders do: the score is the logit */
    assert_int_equal(sg_xenc_activation(m), SG_XENC_IDENTITY);
    sg_xenc_workspace *w = sg_xenc_workspace_new(m);
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n);
    char err[256];
    for (int rule = SG_XENC_TRUNC_FAST; rule <= SG_XENC_TRUNC_SLOW; ++rule) {
        assert_int_equal(sg_xenc_set_truncation(m, rule), 0);
        double worst = 0;
        for (size_t i = 0; i < n; ++i) {
            const seg_t *want = rule == SG_XENC_TRUNC_FAST ? &g[i].fast : &g[i].slow;
            const char *p = g[i].passage;
            float score = NAN, logit = NAN;
            assert_int_equal(
                sg_xenc_score(m, w, g[i].query, g[i].qlen, &p, &g[i].plen, 1, g[i].max_length, &score, err, sizeof(err)), 0);
            assert_int_equal(
                sg_xenc_logits(m, w, g[i].query, g[i].qlen, &p, &g[i].plen, 1, g[i].max_length, &logit, err, sizeof(err)), 0);
            double d = fmax(fabs((double)score - want->logits[0]), fabs((double)logit - want->logits[0]));
            if (d > 1e-5)
                fprintf(stderr, "case %zu (%s): %.7f, want %.7f\n", i, g[i].tag, score, want->logits[0]);
            worst = fmax(worst, d);
        }
        fprintf(stderr, "one pair at a time, %s truncation: worst abs diff %.3g\n", rule == SG_XENC_TRUNC_FAST ? "fast" : "slow",
                worst);
        assert_true(worst <= 1e-5);
    }
    free_golden(g, n);
    sg_xenc_workspace_free(w);
    sg_xenc_free(m);
}

/* Each query's passages (same max_length) as one call, as the gateway reranks one query's
 * candidates; then the largest group again in batches of 3, reversed. */
static void test_scores_batched(void **state)
{
    (void)state;
    sg_xenc_model *m = load(MODEL);
    sg_xenc_workspace *w = sg_xenc_workspace_new(m);
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n);
    char err[256];
    int *done = calloc(n, sizeof(int));
    size_t largest = 0, groups = 0;
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
        if (done[i])
            continue;
        const char *ps[64];
        size_t pls[64], idx[64], k = 0;
        for (size_t j = i; j < n; ++j) {
            if (!done[j] && g[j].qlen == g[i].qlen && memcmp(g[j].query, g[i].query, g[i].qlen) == 0 &&
                g[j].max_length == g[i].max_length) {
                done[j] = 1;
                ps[k] = g[j].passage;
                pls[k] = g[j].plen;
                idx[k++] = j;
            }
        }
        float scores[64];
        assert_int_equal(sg_xenc_score(m, w, g[i].query, g[i].qlen, ps, pls, k, g[i].max_length, scores, err, sizeof(err)), 0);
        for (size_t j = 0; j < k; ++j)
            worst = fmax(worst, fabs((double)scores[j] - g[idx[j]].fast.logits[0]));
        if (k > largest)
            largest = k;
        ++groups;
        if (k >= 10) {
            /* the same passages in batches of 3, in reverse order */
            const char *rp[64];
            size_t rl[64];
            float rs[64];
            for (size_t j = 0; j < k; ++j) {
                rp[j] = ps[k - 1 - j];
                rl[j] = pls[k - 1 - j];
            }
            for (size_t s = 0; s < k; s += 3) {
                size_t c = k - s < 3 ? k - s : 3;
                assert_int_equal(
                    sg_xenc_score(m, w, g[i].query, g[i].qlen, rp + s, rl + s, c, g[i].max_length, rs + s, err, sizeof(err)), 0);
            }
            for (size_t j = 0; j < k; ++j)
                worst = fmax(worst, fabs((double)rs[j] - g[idx[k - 1 - j]].fast.logits[0]));
        }
    }
    fprintf(stderr, "%zu queries as batches (largest %zu pairs): worst abs diff %.3g\n", groups, largest, worst);
    assert_true(largest >= 10 && groups < n);
    assert_true(worst <= 1e-5);
    /* NUL-terminated passages when plens is NULL; no pairs is not an error */
    const char *ps[2] = {g[0].passage, g[1].passage};
    float s2[2];
    assert_true(strlen(g[0].passage) == g[0].plen && strlen(g[1].passage) == g[1].plen);
    assert_int_equal(sg_xenc_score(m, w, g[0].query, g[0].qlen, ps, NULL, 2, g[0].max_length, s2, err, sizeof(err)), 0);
    assert_true(fabs((double)s2[1] - g[1].fast.logits[0]) <= 1e-5);
    assert_int_equal(sg_xenc_score(m, w, "q", 1, ps, NULL, 0, 512, s2, err, sizeof(err)), 0);
    free(done);
    free_golden(g, n);
    sg_xenc_workspace_free(w);
    sg_xenc_free(m);
}

static void test_three_labels(void **state)
{
    (void)state;
    sg_xenc_model *m = load(MODEL3);
    assert_int_equal(sg_xenc_num_labels(m), 3);
    /* no activation in config.json and more than one label: CrossEncoder uses Identity */
    assert_int_equal(sg_xenc_activation(m), SG_XENC_IDENTITY);
    assert_int_equal(sg_xenc_score_label(m), 1);
    sg_xenc_workspace *w = sg_xenc_workspace_new(m);
    size_t n;
    golden_t *g = load_golden(MODEL3 "/golden.jsonl", &n);
    char err[256];
    double worst = 0, worst_score = 0;
    for (size_t i = 0; i < n; ++i) {
        assert_int_equal(g[i].labels, 3);
        const char *p = g[i].passage;
        float logits[3], score;
        assert_int_equal(sg_xenc_logits(m, w, g[i].query, g[i].qlen, &p, &g[i].plen, 1, g[i].max_length, logits, err, sizeof(err)),
                         0);
        worst = fmax(worst, max_abs(logits, g[i].fast.logits, 3));
        /* the score: softmax over the logits, at label 1, then at label 2 */
        for (int label = 1; label <= 2; ++label) {
            assert_int_equal(sg_xenc_set_score_label(m, label), 0);
            assert_int_equal(
                sg_xenc_score(m, w, g[i].query, g[i].qlen, &p, &g[i].plen, 1, g[i].max_length, &score, err, sizeof(err)), 0);
            const float *l = g[i].fast.logits;
            double mx = fmax(l[0], fmax(l[1], l[2]));
            double want = exp(l[label] - mx) / (exp(l[0] - mx) + exp(l[1] - mx) + exp(l[2] - mx));
            worst_score = fmax(worst_score, fabs(score - want));
        }
        assert_int_equal(sg_xenc_set_score_label(m, 1), 0);
    }
    fprintf(stderr, "3 labels: logits worst abs diff %.3g, softmax scores %.3g\n", worst, worst_score);
    assert_true(worst <= 1e-5);
    assert_true(worst_score <= 1e-5);
    assert_int_equal(sg_xenc_set_score_label(m, 3), -1);
    assert_int_equal(sg_xenc_set_score_label(m, -1), -1);
    free_golden(g, n);
    sg_xenc_workspace_free(w);
    sg_xenc_free(m);
}

/* ---- config.json / tokenizer_config.json variants, in a copy of the fixture ---- */

/* A folder with the fixture's model and vocabulary (links) and the given config files (NULL: the
 * fixture's). */
static char *make_variant(const char *src, const char *config, const char *tokenizer_config)
{
    char *dir = tu_mkdtemp();
    assert_non_null(dir);
    const char *links[] = {"model.safetensors", "vocab.txt"};
    for (int i = 0; i < 2; ++i) {
        char *from = tu_path(src, links[i]), *to = tu_path(dir, links[i]);
        char *real = realpath(from, NULL);
        assert_non_null(real);
        assert_int_equal(symlink(real, to), 0);
        free(real);
        free(from);
        free(to);
    }
    const char *files[] = {"config.json", "tokenizer_config.json"};
    const char *texts[] = {config, tokenizer_config};
    for (int i = 0; i < 2; ++i) {
        char *to = tu_path(dir, files[i]);
        if (texts[i] != NULL) {
            assert_int_equal(tu_write_file(to, texts[i], strlen(texts[i])), 0);
        } else {
            char *from = tu_path(src, files[i]);
            size_t len;
            char *data = tu_read_file(from, &len);
            assert_non_null(data);
            assert_int_equal(tu_write_file(to, data, len), 0);
            free(data);
            free(from);
        }
        free(to);
    }
    return dir;
}

/* the fixture's config.json with `key` set to the JSON `value` (NULL: removed) */
static char *config_with(const char *src, const char *key, const char *value)
{
    char *path = tu_path(src, "config.json");
    char *text = tu_read_file(path, NULL);
    cJSON *o = cJSON_Parse(text);
    assert_non_null(o);
    cJSON_DeleteItemFromObjectCaseSensitive(o, key);
    if (value != NULL) {
        cJSON *v = cJSON_Parse(value);
        assert_non_null(v);
        cJSON_AddItemToObject(o, key, v);
    }
    char *out = cJSON_Print(o);
    cJSON_Delete(o);
    free(text);
    free(path);
    return out;
}

static void expect_load_error(const char *dir, const char *needle)
{
    sg_xenc_model *m = (sg_xenc_model *)1;
    char err[512] = "";
    assert_int_equal(sg_xenc_load(dir, &m, err, sizeof(err)), -1);
    assert_null(m);
    if (strstr(err, needle) == NULL)
        fail_msg("error \"%s\" does not mention \"%s\"", err, needle);
}

static void test_activation_from_config(void **state)
{
    (void)state;
    size_t n;
    golden_t *g = load_golden(MODEL "/golden.jsonl", &n);
    char err[256];
    /* no activation named: CrossEncoder's default for one label is Sigmoid; the sentence-transformers
     * v4 key; the short torch.nn name */
    struct {
        const char *key, *value;
        int want;
    } v[] = {
        {"sbert_ce_default_activation_function", NULL, SG_XENC_SIGMOID},
        {"sbert_ce_default_activation_function", "null", SG_XENC_SIGMOID},
        {"sbert_ce_default_activation_function", "\"torch.nn.Sigmoid\"", SG_XENC_SIGMOID},
        {"sbert_ce_default_activation_function", "\"torch.nn.modules.activation.Tanh\"", SG_XENC_TANH},
        {"sentence_transformers", "{\"activation_fn\": \"torch.nn.modules.activation.Sigmoid\", \"version\": \"4.0.1\"}",
         SG_XENC_SIGMOID},
    };
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); ++k) {
        char *cfg = config_with(MODEL, v[k].key, v[k].value);
        if (strcmp(v[k].key, "sentence_transformers") == 0) {
            /* the v4 key wins over the older one (Identity in the fixture) */
            assert_non_null(strstr(cfg, "linear.Identity"));
        }
        char *dir = make_variant(MODEL, cfg, NULL);
        sg_xenc_model *m = load(dir);
        assert_int_equal(sg_xenc_activation(m), v[k].want);
        sg_xenc_workspace *w = sg_xenc_workspace_new(m);
        for (size_t i = 0; i < 3; ++i) {
            const char *p = g[i].passage;
            float score;
            assert_int_equal(
                sg_xenc_score(m, w, g[i].query, g[i].qlen, &p, &g[i].plen, 1, g[i].max_length, &score, err, sizeof(err)), 0);
            double want = v[k].want == SG_XENC_SIGMOID ? sigmoid(g[i].fast.logits[0]) : tanh(g[i].fast.logits[0]);
            assert_true(fabs(score - want) <= 1e-5);
        }
        /* raw logits on request */
        assert_int_equal(sg_xenc_set_activation(m, SG_XENC_IDENTITY), 0);
        const char *p = g[0].passage;
        float score;
        assert_int_equal(sg_xenc_score(m, w, g[0].query, g[0].qlen, &p, &g[0].plen, 1, 512, &score, err, sizeof(err)), 0);
        assert_true(fabs(score - g[0].fast.logits[0]) <= 1e-5);
        assert_int_equal(sg_xenc_set_activation(m, 7), -1);
        sg_xenc_workspace_free(w);
        sg_xenc_free(m);
        tu_rmtree(dir);
        free(dir);
        free(cfg);
    }
    free_golden(g, n);
}

static void test_config_errors(void **state)
{
    (void)state;
    struct {
        const char *key, *value, *needle;
    } v[] = {
        {"sbert_ce_default_activation_function", "\"torch.nn.modules.activation.ReLU\"", "torch.nn.modules.activation.ReLU"},
        {"sbert_ce_default_activation_function", "\"os.system\"", "os.system"},
        {"architectures", "[\"BertModel\"]", "BertModel"},
        /* two labels: the classifier has one row */
        {"id2label", "{\"0\": \"no\", \"1\": \"yes\"}", "classifier.weight"},
        /* without id2label (removed below), num_labels counts: 3 != the classifier's 1 row */
        {"num_labels", "3", "classifier.weight"},
        {"type_vocab_size", "1", "token_type_embeddings"},
    };
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); ++k) {
        char *cfg = config_with(MODEL, v[k].key, v[k].value);
        if (strcmp(v[k].key, "num_labels") == 0) {
            cJSON *o = cJSON_Parse(cfg);
            cJSON_DeleteItemFromObjectCaseSensitive(o, "id2label");
            free(cfg);
            cfg = cJSON_Print(o);
            cJSON_Delete(o);
        }
        char *dir = make_variant(MODEL, cfg, NULL);
        expect_load_error(dir, v[k].needle);
        tu_rmtree(dir);
        free(dir);
        free(cfg);
    }
    /* with id2label (1 label), num_labels is ignored, as PretrainedConfig ignores it */
    {
        char *cfg = config_with(MODEL, "num_labels", "3");
        char *dir = make_variant(MODEL, cfg, NULL);
        sg_xenc_model *m = load(dir);
        assert_int_equal(sg_xenc_num_labels(m), 1);
        sg_xenc_free(m);
        tu_rmtree(dir);
        free(dir);
        free(cfg);
    }
    /* neither id2label nor num_labels: transformers' default of 2 labels */
    {
        char *cfg = config_with(MODEL, "id2label", NULL);
        char *dir = make_variant(MODEL, cfg, NULL);
        expect_load_error(dir, "[2, 8]");
        tu_rmtree(dir);
        free(dir);
        free(cfg);
    }
    /* an e5 model (a BertModel without a classifier): named so, or not named at all */
    expect_load_error(SG_FIXTURES "/e5-tiny", "BertModel");
    {
        char *cfg = config_with(SG_FIXTURES "/e5-tiny", "architectures", NULL);
        char *dir = make_variant(SG_FIXTURES "/e5-tiny", cfg, NULL);
        expect_load_error(dir, "classifier.weight is missing");
        tu_rmtree(dir);
        free(dir);
        free(cfg);
    }
    /* a cased tokenizer is not what this tokenizer computes */
    {
        char *dir = make_variant(MODEL, NULL, "{\"do_lower_case\": false, \"model_max_length\": 512}");
        expect_load_error(dir, "do_lower_case");
        tu_rmtree(dir);
        free(dir);
    }
    expect_load_error(SG_FIXTURES "/no-such-model", "no-such-model");
}

static void test_max_length_and_identity(void **state)
{
    (void)state;
    sg_xenc_model *m = load(MODEL);
    /* tokenizer_config.json says 512, as the ms-marco cross-encoders' */
    assert_int_equal(sg_xenc_default_max_length(m), 512);
    assert_int_equal(sg_xenc_max_length(m, 100000), 512);
    assert_int_equal(sg_xenc_max_length(m, 64), 64);
    /* every setting that changes a score changes the identity (cache keys) */
    char first[512];
    snprintf(first, sizeof(first), "%s", sg_xenc_identity(m));
    assert_non_null(strstr(first, "xenc:"));
    assert_int_equal(sg_xenc_set_activation(m, SG_XENC_SIGMOID), 0);
    assert_string_not_equal(first, sg_xenc_identity(m));
    assert_int_equal(sg_xenc_set_activation(m, SG_XENC_IDENTITY), 0);
    assert_string_equal(first, sg_xenc_identity(m));
    assert_int_equal(sg_xenc_set_truncation(m, SG_XENC_TRUNC_SLOW), 0);
    assert_string_not_equal(first, sg_xenc_identity(m));
    assert_int_equal(sg_xenc_set_truncation(m, 9), -1);
    sg_xenc_model *m3 = load(MODEL3);
    assert_string_not_equal(sg_xenc_identity(m3), first);
    char before[512];
    snprintf(before, sizeof(before), "%s", sg_xenc_identity(m3));
    assert_int_equal(sg_xenc_set_score_label(m3, 0), 0);
    assert_string_not_equal(before, sg_xenc_identity(m3));
    /* errors: max_length below 3, another model's workspace */
    sg_xenc_workspace *w = sg_xenc_workspace_new(m);
    char err[256];
    const char *p = "passage";
    float s;
    assert_int_equal(sg_xenc_score(m, w, "q", 1, &p, NULL, 1, 2, &s, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "max_length"));
    assert_int_equal(sg_xenc_score(m3, w, "q", 1, &p, NULL, 1, 512, &s, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "another model"));
    sg_xenc_workspace_free(w);
    sg_xenc_free(m3);
    sg_xenc_free(m);
    /* model_max_length: a smaller one is the default; transformers' "none" sentinel is not */
    const char *tc[] = {"{\"do_lower_case\": true, \"model_max_length\": 128}",
                        "{\"do_lower_case\": true, \"model_max_length\": 1000000000000000019884624838656}", "{}"};
    const uint32_t want[] = {128, 512, 512};
    for (int i = 0; i < 3; ++i) {
        char *dir = make_variant(MODEL, NULL, tc[i]);
        sg_xenc_model *v = load(dir);
        assert_int_equal(sg_xenc_default_max_length(v), want[i]);
        sg_xenc_free(v);
        tu_rmtree(dir);
        free(dir);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair_tokens),
        cmocka_unit_test(test_scores_single),
        cmocka_unit_test(test_scores_batched),
        cmocka_unit_test(test_three_labels),
        cmocka_unit_test(test_activation_from_config),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_max_length_and_identity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
