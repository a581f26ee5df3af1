/*
 * xenc.c -- the cross-encoder of xenc.h: BertForSequenceClassification on the e5 encoder's BERT
 * core (e5.c: loading, the layers, the pooler head) plus what is its own here: config.json's labels
 * and activation, the pair tokenisation (wordpiece.c) and the classifier head.
 *
 * transformers' BertForSequenceClassification.forward is
 *     pooled = tanh(W_p h[CLS] + b_p)           BertPooler over the last hidden state
 *     logits = W_c dropout(pooled) + b_c        dropout is the identity at inference
 * and sentence-transformers' CrossEncoder.predict returns activation(logits) (one label: squeezed
 * to one score per pair). The pooler runs in e5.c over the packed batch; the classifier, a
 * num_labels x hidden product per pair, runs here with double accumulation.
 */
#include "xenc.h"
#include "e5_internal.h"
#include "wordpiece.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sg_xenc_model {
    sg_e5_model *bert;
    const float *cls_w, *cls_b; /* classifier: [labels, hidden], [labels] */
    int labels, hidden;
    int activation, score_label, truncation;
    uint32_t default_max_length;
    char identity[256];
};

struct sg_xenc_workspace {
    const sg_xenc_model *m;
    sg_e5_workspace *ew;
    int32_t *ids;
    uint8_t *types;
    size_t cap_ids;
    uint32_t *lens;
    float *pooled, *logits;
    size_t cap_pairs;
};

static const char *const activation_names[] = {"Identity", "Sigmoid", "Tanh"};

/* ---- loading ---- */

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p == NULL)
        abort();
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* The JSON object in `dir`/`name`; NULL with *missing set when the file does not exist, NULL with
 * `err` set when it cannot be read or is not an object. */
static cJSON *read_json(const char *dir, const char *name, int *missing, char *err, size_t err_size)
{
    char *path = join(dir, name);
    *missing = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        *missing = errno == ENOENT;
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        free(path);
        return NULL;
    }
    size_t len;
    char *buf = sg__e5_read_stream(fp, &len);
    int rd = ferror(fp);
    fclose(fp);
    cJSON *root = rd ? NULL : cJSON_ParseWithLength(buf != NULL ? buf : "", len);
    free(buf);
    if (!cJSON_IsObject(root)) {
        snprintf(err, err_size, "%s: %s", path, rd ? "read error" : "not a JSON object");
        cJSON_Delete(root);
        root = NULL;
    }
    free(path);
    return root;
}

/* "torch.nn.modules.activation.Sigmoid", "torch.nn.Sigmoid", ...: one of activation_names */
static int parse_activation(const char *s)
{
    if (strncmp(s, "torch.nn.", 9) != 0)
        return -1;
    const char *last = strrchr(s, '.') + 1;
    for (int i = 0; i < (int)(sizeof(activation_names) / sizeof(activation_names[0])); ++i)
        if (strcmp(last, activation_names[i]) == 0)
            return i;
    return -1;
}

static int read_head_config(sg_xenc_model *m, const char *dir, char *err, size_t err_size)
{
    int missing;
    cJSON *root = read_json(dir, "config.json", &missing, err, err_size);
    if (root == NULL)
        return -1;
    int rc = -1;
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (cJSON_IsArray(arch) && cJSON_GetArraySize(arch) > 0) {
        int ok = 0;
        const char *first = "?";
        for (const cJSON *a = arch->child; a != NULL; a = a->next) {
            if (!cJSON_IsString(a))
                continue;
            if (first[0] == '?')
                first = a->valuestring;
            size_t l = strlen(a->valuestring), sl = strlen("ForSequenceClassification");
            if (l >= sl && strcmp(a->valuestring + l - sl, "ForSequenceClassification") == 0)
                ok = 1;
        }
        if (!ok) {
            snprintf(err, err_size,
                     "%s/config.json: \"architectures\" names %.60s, not a cross-encoder (BertForSequenceClassification)", dir,
                     first);
            goto out;
        }
    }
    /* PretrainedConfig: num_labels = len(id2label), else the "num_labels" key, else 2 */
    const cJSON *id2label = cJSON_GetObjectItemCaseSensitive(root, "id2label");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(root, "num_labels");
    if (cJSON_IsObject(id2label)) {
        m->labels = cJSON_GetArraySize(id2label);
    } else if (nl != NULL && !cJSON_IsNull(nl)) {
        if (!cJSON_IsNumber(nl) || nl->valuedouble != (double)(int)nl->valuedouble) {
            snprintf(err, err_size, "%s/config.json: \"num_labels\" must be an integer", dir);
            goto out;
        }
        m->labels = (int)nl->valuedouble;
    } else {
        m->labels = 2;
    }
    if (m->labels < 1 || m->labels > 4096) {
        snprintf(err, err_size, "%s/config.json: %d labels (1 to 4096 supported)", dir, m->labels);
        goto out;
    }
    /* CrossEncoder: sentence_transformers.activation_fn (v4), else sbert_ce_default_activation_function,
     * else Sigmoid for one label and Identity for more */
    const cJSON *act = NULL;
    const char *key = NULL;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(root, "sentence_transformers");
    if (cJSON_IsObject(st) && (act = cJSON_GetObjectItemCaseSensitive(st, "activation_fn")) != NULL && !cJSON_IsNull(act))
        key = "sentence_transformers.activation_fn";
    else if ((act = cJSON_GetObjectItemCaseSensitive(root, "sbert_ce_default_activation_function")) != NULL && !cJSON_IsNull(act))
        key = "sbert_ce_default_activation_function";
    if (key != NULL) {
        m->activation = cJSON_IsString(act) ? parse_activation(act->valuestring) : -1;
        if (m->activation < 0) {
            snprintf(err, err_size,
                     "%s/config.json: \"%s\" is %.80s; supported: torch.nn.modules.linear.Identity, "
                     "torch.nn.modules.activation.Sigmoid, torch.nn.modules.activation.Tanh",
                     dir, key, cJSON_IsString(act) ? act->valuestring : "not a string");
            goto out;
        }
    } else {
        m->activation = m->labels == 1 ? SG_XENC_SIGMOID : SG_XENC_IDENTITY;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

/* tokenizer_config.json, when there: the tokenizer must be the uncased BERT one we implement */
static int read_tokenizer_config(sg_xenc_model *m, const char *dir, char *err, size_t err_size)
{
    int missing;
    char e2[512];
    uint32_t positions = (uint32_t)sg_e5_get_config(m->bert)->max_positions;
    m->default_max_length = positions;
    cJSON *root = read_json(dir, "tokenizer_config.json", &missing, e2, sizeof(e2));
    if (root == NULL) {
        if (missing)
            return 0;
        snprintf(err, err_size, "%s", e2);
        return -1;
    }
    int rc = -1;
    const cJSON *lower = cJSON_GetObjectItemCaseSensitive(root, "do_lower_case");
    const cJSON *accents = cJSON_GetObjectItemCaseSensitive(root, "strip_accents");
    const cJSON *cjk = cJSON_GetObjectItemCaseSensitive(root, "tokenize_chinese_chars");
    if (cJSON_IsFalse(lower) || cJSON_IsFalse(accents) || cJSON_IsFalse(cjk)) {
        snprintf(err, err_size,
                 "%s/tokenizer_config.json: \"%s\" is false; only the uncased BERT tokenizer (lower-casing, accent "
                 "stripping, CJK splitting) is supported",
                 dir,
                 cJSON_IsFalse(lower)     ? "do_lower_case"
                 : cJSON_IsFalse(accents) ? "strip_accents"
                                          : "tokenize_chinese_chars");
        goto out;
    }
    const cJSON *mml = cJSON_GetObjectItemCaseSensitive(root, "model_max_length");
    /* transformers writes a huge sentinel (1e30) when there is none */
    if (cJSON_IsNumber(mml) && mml->valuedouble >= 3 && mml->valuedouble < (double)positions)
        m->default_max_length = (uint32_t)mml->valuedouble;
    rc = 0;
out:
    cJSON_Delete(root);
    return rc;
}

static void make_identity(sg_xenc_model *m)
{
    snprintf(m->identity, sizeof(m->identity), "xenc:n%d.%s.l%d.%s:%s", m->labels, activation_names[m->activation],
             m->labels > 1 ? m->score_label : 0, m->truncation == SG_XENC_TRUNC_FAST ? "fast" : "slow", sg_e5_identity(m->bert));
}

int sg_xenc_load(const char *dir, sg_xenc_model **out, char *err, size_t err_size)
{
    *out = NULL;
    sg_xenc_model *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    char e2[512];
    if (sg_e5_load(dir, &m->bert, err, err_size) != 0 || read_head_config(m, dir, err, err_size) != 0 ||
        read_tokenizer_config(m, dir, err, err_size) != 0)
        goto fail;
    const sg_e5_config *c = sg_e5_get_config(m->bert);
    m->hidden = c->hidden;
    if (c->type_vocab < 2) {
        snprintf(err, err_size, "%s/config.json: \"type_vocab_size\" is %d; a cross-encoder needs token types 0 and 1", dir,
                 c->type_vocab);
        goto fail;
    }
    if (sg__e5_load_pooler(m->bert, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "%s (a cross-encoder scores the pooler output)", e2);
        goto fail;
    }
    if ((m->cls_w = sg__e5_tensor(m->bert, "classifier.weight", 2, m->labels, c->hidden, err, err_size)) == NULL ||
        (m->cls_b = sg__e5_tensor(m->bert, "classifier.bias", 1, m->labels, 0, err, err_size)) == NULL)
        goto fail;
    m->score_label = m->labels > 1 ? 1 : 0;
    m->truncation = SG_XENC_TRUNC_FAST;
    make_identity(m);
    *out = m;
    return 0;
fail:
    sg_xenc_free(m);
    return -1;
}

void sg_xenc_free(sg_xenc_model *m)
{
    if (m == NULL)
        return;
    sg_e5_free(m->bert);
    free(m);
}

/* ---- settings ---- */

int sg_xenc_num_labels(const sg_xenc_model *m)
{
    return m->labels;
}

uint32_t sg_xenc_default_max_length(const sg_xenc_model *m)
{
    return m->default_max_length;
}

uint32_t sg_xenc_max_length(const sg_xenc_model *m, uint32_t max_len)
{
    return sg_e5_max_length(m->bert, max_len);
}

const char *sg_xenc_identity(const sg_xenc_model *m)
{
    return m->identity;
}

int sg_xenc_activation(const sg_xenc_model *m)
{
    return m->activation;
}

int sg_xenc_set_activation(sg_xenc_model *m, int activation)
{
    if (activation < SG_XENC_IDENTITY || activation > SG_XENC_TANH)
        return -1;
    m->activation = activation;
    make_identity(m);
    return 0;
}

int sg_xenc_score_label(const sg_xenc_model *m)
{
    return m->score_label;
}

int sg_xenc_set_score_label(sg_xenc_model *m, int label)
{
    if (label < 0 || label >= m->labels)
        return -1;
    m->score_label = label;
    make_identity(m);
    return 0;
}

int sg_xenc_truncation(const sg_xenc_model *m)
{
    return m->truncation;
}

int sg_xenc_set_truncation(sg_xenc_model *m, int rule)
{
    if (rule != SG_XENC_TRUNC_FAST && rule != SG_XENC_TRUNC_SLOW)
        return -1;
    m->truncation = rule;
    make_identity(m);
    return 0;
}

int sg_xenc_set_precision(sg_xenc_model *m, int precision, char *err, size_t err_size)
{
    int rc = sg_e5_set_precision(m->bert, precision, err, err_size);
    make_identity(m);
    return rc;
}

int sg_xenc_use_onednn(sg_xenc_model *m, char *err, size_t err_size)
{
    return sg_e5_use_onednn(m->bert, err, err_size);
}

int sg_xenc_tokenize(const sg_xenc_model *m, const char *query, size_t qlen, const char *passage, size_t plen, uint32_t max_len,
                     int32_t *ids, uint8_t *types)
{
    return sg_wp_encode_pair(sg__e5_wordpiece(m->bert), query, qlen, passage, plen, sg_xenc_max_length(m, max_len),
                             m->truncation == SG_XENC_TRUNC_SLOW ? SG_WP_TRUNC_SLOW : SG_WP_TRUNC_FAST, ids, types);
}

/* ---- scoring ---- */

sg_xenc_workspace *sg_xenc_workspace_new(const sg_xenc_model *m)
{
    sg_xenc_workspace *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->m = m;
    w->ew = sg_e5_workspace_new(m->bert);
    if (w->ew == NULL) {
        free(w);
        return NULL;
    }
    return w;
}

void sg_xenc_workspace_free(sg_xenc_workspace *w)
{
    if (w == NULL)
        return;
    sg_e5_workspace_free(w->ew);
    free(w->ids);
    free(w->types);
    free(w->lens);
    free(w->pooled);
    free(w->logits);
    free(w);
}

void sg_xenc_workspace_set_par(sg_xenc_workspace *w, sg_par_t *par)
{
    sg_e5_workspace_set_par(w->ew, par);
}

static int reserve(sg_xenc_workspace *w, size_t n, size_t ids)
{
    if (ids > w->cap_ids) {
        int32_t *p = realloc(w->ids, ids * sizeof(*p) + 16);
        if (p == NULL)
            return -1;
        w->ids = p;
        uint8_t *t = realloc(w->types, ids + 16);
        if (t == NULL)
            return -1;
        w->types = t;
        w->cap_ids = ids;
    }
    if (n > w->cap_pairs) {
        uint32_t *l = realloc(w->lens, n * sizeof(*l) + 16);
        if (l == NULL)
            return -1;
        w->lens = l;
        float *p = realloc(w->pooled, n * (size_t)w->m->hidden * sizeof(*p) + 16);
        if (p == NULL)
            return -1;
        w->pooled = p;
        float *q = realloc(w->logits, n * (size_t)w->m->labels * sizeof(*q) + 16);
        if (q == NULL)
            return -1;
        w->logits = q;
        w->cap_pairs = n;
    }
    return 0;
}

/* Tokenises the pairs, runs the model and the classifier: n * labels logits into `logits` (NULL:
 * into w->logits). */
static int run(const sg_xenc_model *m, sg_xenc_workspace *w, const char *query, size_t qlen, const char *const *passages,
               const size_t *plens, size_t n, uint32_t max_len, float *logits, char *err, size_t err_size)
{
    if (w->m != m) {
        snprintf(err, err_size, "the workspace belongs to another model");
        return -1;
    }
    max_len = sg_xenc_max_length(m, max_len);
    if (max_len < 3) {
        snprintf(err, err_size, "max_length must be at least 3 ([CLS] query [SEP] passage [SEP])");
        return -1;
    }
    if (n == 0)
        return 0;
    if (reserve(w, n, n * (size_t)max_len) != 0)
        goto oom;
    if (logits == NULL)
        logits = w->logits;
    const sg_wp_t *wp = sg__e5_wordpiece(m->bert);
    int rule = m->truncation == SG_XENC_TRUNC_SLOW ? SG_WP_TRUNC_SLOW : SG_WP_TRUNC_FAST;
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        size_t pl = plens != NULL ? plens[i] : strlen(passages[i]);
        int k = sg_wp_encode_pair(wp, query, qlen, passages[i], pl, max_len, rule, w->ids + off, w->types + off);
        if (k < 0)
            goto oom;
        w->lens[i] = (uint32_t)k;
        off += (size_t)k;
    }
    if (sg__e5_forward(w->ew, w->ids, w->types, w->lens, n, SG__E5_HEAD_POOLER, w->pooled) != 0)
        goto oom;
    const int h = m->hidden;
    for (size_t i = 0; i < n; ++i) {
        const float *p = w->pooled + i * (size_t)h;
        for (int l = 0; l < m->labels; ++l) {
            const float *wl = m->cls_w + (size_t)l * (size_t)h;
            double acc = m->cls_b[l];
            for (int j = 0; j < h; ++j)
                acc += (double)wl[j] * p[j];
            logits[i * (size_t)m->labels + (size_t)l] = (float)acc;
        }
    }
    return 0;
oom:
    snprintf(err, err_size, "out of memory scoring %zu pairs", n);
    return -1;
}

int sg_xenc_logits(const sg_xenc_model *m, sg_xenc_workspace *w, const char *query, size_t qlen, const char *const *passages,
                   const size_t *plens, size_t n, uint32_t max_len, float *logits, char *err, size_t err_size)
{
    return run(m, w, query, qlen, passages, plens, n, max_len, logits, err, err_size);
}

static double activate(int activation, double x)
{
    switch (activation) {
    case SG_XENC_SIGMOID:
        return 1.0 / (1.0 + exp(-x));
    case SG_XENC_TANH:
        return tanh(x);
    default:
        return x;
    }
}

int sg_xenc_score(const sg_xenc_model *m, sg_xenc_workspace *w, const char *query, size_t qlen, const char *const *passages,
                  const size_t *plens, size_t n, uint32_t max_len, float *scores, char *err, size_t err_size)
{
    if (run(m, w, query, qlen, passages, plens, n, max_len, NULL, err, err_size) != 0)
        return -1;
    for (size_t i = 0; i < n; ++i) {
        const float *lg = w->logits + i * (size_t)m->labels;
        if (m->labels == 1) {
            scores[i] = (float)activate(m->activation, lg[0]);
            continue;
        }
        /* softmax over the activated logits, at score_label */
        double mx = -INFINITY, sum = 0;
        for (int l = 0; l < m->labels; ++l)
            mx = fmax(mx, activate(m->activation, lg[l]));
        for (int l = 0; l < m->labels; ++l)
            sum += exp(activate(m->activation, lg[l]) - mx);
        scores[i] = (float)(exp(activate(m->activation, lg[m->score_label]) - mx) / sum);
    }
    return 0;
}
