/*
 * e5.c -- the e5 encoder: a BERT model read straight from a Hugging Face folder and run on the
 * CPU with OpenBLAS sgemm (docs/protocols.md, "e5 query encoding").
 *
 * Load: config.json gives every dimension (nothing assumes e5-base); vocab.txt gives the
 * WordPiece vocabulary; model.safetensors is mmapped and each tensor is checked by name and
 * shape. F32 tensors are used in place; F16/BF16 tensors are converted to F32 once.
 *
 * Forward: the sequences of a batch are packed back to back (no padding rows): the dense layers
 * run as one sgemm over all tokens of the batch and attention runs per sequence and head over
 * that sequence's own tokens only. This computes exactly what BertModel computes for a padded
 * batch with its attention mask -- masked keys get weight exp(-inf) = 0 there -- without spending
 * work on padding. Then one of two heads: e5's mean pooling over each sequence's tokens and L2
 * normalisation (x / max(|x|, 1e-12), torch.nn.functional.normalize), or BertPooler's
 * tanh(dense(first token)) for the cross-encoder (xenc.c), whose pairs also bring token types.
 *
 * BLAS runs in the calling thread (the host keeps OpenBLAS single-threaded and parallelises
 * across workspaces).
 */
#include "e5.h"
#include "blas.h"
#include "e5_internal.h"
#include "kern.h"
#include "safetensors.h"
#include "wordpiece.h"

#include <cJSON.h>
#include <cblas.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* token budget of one forward pass; larger encode calls run in several passes */
#define PASS_TOKENS 2048

typedef struct st_lin_t {
    const float *w;     /* [out, in] row-major, as torch.nn.Linear stores it */
    const float *b;     /* [out] */
    const uint16_t *wb; /* precision bf16: w rounded to bfloat16 */
    const float *wr;    /* the reference bf16 kernel (tests): wb widened back to float */
} lin_t;

/* oneDNN's float32 GEMM (public API), its bf16 x bf16 -> f32 GEMM and its u8 x s8 -> s32 GEMM
 * (exported by libdnnl.so.2), all row-major */
typedef int (*f32_gemm_fn)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
typedef int (*bf16_gemm_fn)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t *a, int64_t lda,
                            const uint16_t *b, int64_t ldb, float beta, float *c, int64_t ldc);
typedef int (*q8_gemm_fn)(char transa, char transb, char offsetc, int64_t m, int64_t n, int64_t k, float alpha, const uint8_t *a,
                          int64_t lda, uint8_t ao, const int8_t *b, int64_t ldb, int8_t bo, float beta, int32_t *c, int64_t ldc,
                          const int32_t *co);

typedef struct st_ln_t {
    const float *g, *b;
} ln_t;

/* The four products of a layer, as the own kernels pack them (Q, K and V stacked into one). */
enum { P_QKV = 0, P_O = 1, P_INTER = 2, P_OUT = 3, N_PROD = 4 };

typedef struct st_layer_t {
    lin_t q, k, v, o, inter, out;
    ln_t ln_attn, ln_out;
    sg_kern_f32w_t pf[N_PROD]; /* engine ENG_OWN: packed float32 weights */
    sg_kern_q8w_t pq[N_PROD];  /* engine ENG_INT8: int8 weights */
} layer_t;

/* What runs the linear layers. */
enum {
    ENG_BLAS = 0, /* float32 or bf16 through OpenBLAS / oneDNN's GEMM calls (lin_t) */
    ENG_OWN = 1,  /* float32 through kern.h over packed weights */
    ENG_INT8 = 2  /* int8: kern.h's kernels or oneDNN's dnnl_gemm_u8s8s32 */
};

struct sg_e5_model {
    sg_e5_config cfg;
    sg_wp_t *wp;
    sg_st_file_t st;
    float **owned;
    size_t n_owned;
    const char *pfx; /* "bert." or "" before the BertModel tensor names */
    const float *word, *pos, *type;
    ln_t ln_emb;
    layer_t *layers;
    lin_t pooler; /* BertPooler's dense layer (sg__e5_load_pooler; w == NULL until then) */
    char identity[176];
    /* precision and engine */
    int precision;          /* SG_E5_FP32 / SG_E5_BF16 / SG_E5_INT8 */
    int engine;             /* ENG_* */
    int kern;               /* ENG_OWN / ENG_INT8: the kern.h kernel set (SG_E5_INT8_ONEDNN: oneDNN's int8 GEMM) */
    int kern_vec;           /* attention, GELU: SG_KERN_AVX512 / AVX2 / SCALAR */
    int fused_attention;    /* attention by sg_kern_attention (else two sgemm calls per sequence and head) */
    uint32_t features;      /* the CPU's SG_CPU_* features, SG_CPU_FEATURES applied */
    bf16_gemm_fn bf16_gemm; /* NULL with bf16: the reference kernel (round to bf16, then sgemm) */
    f32_gemm_fn f32_gemm;   /* float32 linear layers through oneDNN (NULL: OpenBLAS) */
    q8_gemm_fn q8_gemm;     /* int8 through oneDNN (kern SG_E5_INT8_ONEDNN) */
    void *dnnl;             /* dlopen handle of libdnnl */
    uint16_t *bf16_block;   /* every linear weight in bf16 */
    float *ref_block;       /* the reference kernel's widened copy */
    float *centre;          /* int8: per layer, each product's mean input over the calibration texts (centre_floats) */
    unsigned q8_scheme;     /* int8: SG__E5_Q8_* */
    char *calib_prefix;     /* int8: before each calibration text (NULL: "query: ") */
};

struct sg_e5_workspace {
    const sg_e5_model *m;
    sg_par_t *par; /* intra-batch parallelism (NULL: this thread only) */
    size_t cap_tokens, cap_scores, cap_ids, cap_rows;
    float *x, *tmp, *qkv, *ctx, *inter; /* qkv: [t][3 hidden], Q K V side by side */
    float *scores;                      /* attention scratch, cap_scores floats per slot of `par` */
    uint16_t *xb;                       /* precision bf16: the input of the current linear layer in bf16 ... */
    float *xr;                          /* ... or, with the reference kernel, rounded to bf16 and widened back */
    size_t cap_x16;
    sg_kern_q8x_t qx;  /* precision int8: the input of the current linear layer, quantised */
    sg_kern_q8x_t qx2; /* ... and its second term, when split */
    int32_t *acc2;     /* int8 through oneDNN, split: the second term's sums */
    size_t cap_acc2;
    size_t *rows;   /* per sequence of a pass: its first token row */
    size_t *order;  /* sequences of a pass, longest first (attention tasks) */
    unsigned slots; /* scores holds this many slots */
    int32_t *ids;   /* token ids of the current encode call */
    uint32_t *lens; /* per text: number of ids */
    size_t cap_texts;
    uint64_t tokens;               /* tokens run through the layers, ever */
    uint64_t step_ns[SG_E5_STEPS]; /* time in each step, ever (sg_e5_workspace_step_ns) */
    double *calib;                 /* int8 calibration only: per layer, the column sums of each product's input */
};

/* ---- helpers ---- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* step `step` ended now: its time is added to w's, and the next one starts */
static uint64_t lap(sg_e5_workspace *w, int step, uint64_t t0)
{
    uint64_t t1 = now_ns();
    w->step_ns[step] += t1 - t0;
    return t1;
}

uint64_t sg__e5_hash(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        h ^= v * 0x9E3779B97F4A7C15ull;
        h = (h << 27 | h >> 37) * 0xC2B2AE3D27D4EB4Full + 0x165667B19E3779F9ull;
    }
    for (; i < n; ++i)
        h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return h;
}

int sg__e5_fingerprint(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t err_size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, err_size, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    *size = (uint64_t)st.st_size;
    uint64_t h = sg__e5_hash(0x5e5e5e5eull, size, sizeof(*size));
    /* the first and last 64 KiB and 64 blocks of 4 KiB spread evenly in between */
    enum { EDGE = 65536, BLOCK = 4096, BLOCKS = 64 };
    unsigned char *buf = malloc(EDGE);
    if (buf == NULL)
        abort();
    uint64_t sz = *size;
    struct {
        uint64_t off, len;
    } parts[BLOCKS + 2];
    size_t np = 0;
    parts[np].off = 0;
    parts[np++].len = sz < EDGE ? sz : EDGE;
    if (sz > 2 * (uint64_t)EDGE) {
        for (int i = 1; i <= BLOCKS; ++i) {
            parts[np].off = (sz / (BLOCKS + 1)) * (uint64_t)i;
            parts[np].len = sz - parts[np].off < BLOCK ? sz - parts[np].off : BLOCK;
            ++np;
        }
    }
    if (sz > EDGE) {
        parts[np].off = sz - (sz < 2 * (uint64_t)EDGE ? sz - EDGE : EDGE);
        parts[np].len = sz - parts[np].off;
        ++np;
    }
    int rc = 0;
    for (size_t i = 0; i < np && rc == 0; ++i) {
        ssize_t r = pread(fd, buf, (size_t)parts[i].len, (off_t)parts[i].off);
        if (r < 0 || (uint64_t)r != parts[i].len) {
            snprintf(err, err_size, "%s: read error", path);
            rc = -1;
            break;
        }
        h = sg__e5_hash(h, buf, (size_t)r);
    }
    free(buf);
    close(fd);
    *hash = h;
    return rc;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p == NULL)
        abort();
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int cfg_int(const cJSON *root, const char *path, const char *key, int required, long def, long min, long max, long *out,
                   char *err, size_t err_size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (v == NULL || cJSON_IsNull(v)) {
        if (required) {
            snprintf(err, err_size, "%s: \"%s\" is missing", path, key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(long)v->valuedouble || v->valuedouble < (double)min ||
        v->valuedouble > (double)max) {
        snprintf(err, err_size, "%s: \"%s\" must be an integer in [%ld, %ld]", path, key, min, max);
        return -1;
    }
    *out = (long)v->valuedouble;
    return 0;
}

char *sg__e5_read_stream(FILE *fp, size_t *len)
{
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    char chunk[8192];
    while ((got = fread(chunk, 1, sizeof(chunk), fp)) > 0) {
        if (n + got > cap) {
            cap = (n + got) * 2;
            buf = realloc(buf, cap);
            if (buf == NULL)
                abort();
        }
        memcpy(buf + n, chunk, got);
        n += got;
    }
    *len = n;
    return buf;
}

static int read_config(const char *dir, sg_e5_config *cfg, uint64_t *hash, char *err, size_t err_size)
{
    char *path = join(dir, "config.json");
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    size_t len;
    char *buf = sg__e5_read_stream(fp, &len);
    fclose(fp);
    *hash = sg__e5_hash(0xc0f1ull, buf, len);
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    int rc = -1;
    long v;
    if (!cJSON_IsObject(root)) {
        snprintf(err, err_size, "%s: not a JSON object", path);
        goto out;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (mt != NULL && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "bert") != 0)) {
        snprintf(err, err_size, "%s: \"model_type\" is %s%.40s%s; only \"bert\" models are supported", path,
                 cJSON_IsString(mt) ? "\"" : "", cJSON_IsString(mt) ? mt->valuestring : "not a string",
                 cJSON_IsString(mt) ? "\"" : "");
        goto out;
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (act != NULL && (!cJSON_IsString(act) || strcmp(act->valuestring, "gelu") != 0)) {
        snprintf(err, err_size, "%s: \"hidden_act\" is %.40s; only \"gelu\" (exact erf GELU) is supported", path,
                 cJSON_IsString(act) ? act->valuestring : "not a string");
        goto out;
    }
    const cJSON *pet = cJSON_GetObjectItemCaseSensitive(root, "position_embedding_type");
    if (pet != NULL && !cJSON_IsNull(pet) && (!cJSON_IsString(pet) || strcmp(pet->valuestring, "absolute") != 0)) {
        snprintf(err, err_size, "%s: \"position_embedding_type\" is %.40s; only \"absolute\" is supported", path,
                 cJSON_IsString(pet) ? pet->valuestring : "not a string");
        goto out;
    }
    if (cfg_int(root, path, "hidden_size", 1, 0, 1, 65536, &v, err, err_size) != 0)
        goto out;
    cfg->hidden = (int)v;
    if (cfg_int(root, path, "num_hidden_layers", 1, 0, 0, 1024, &v, err, err_size) != 0)
        goto out;
    cfg->layers = (int)v;
    if (cfg_int(root, path, "num_attention_heads", 1, 0, 1, 1024, &v, err, err_size) != 0)
        goto out;
    cfg->heads = (int)v;
    if (cfg_int(root, path, "intermediate_size", 1, 0, 1, 1 << 20, &v, err, err_size) != 0)
        goto out;
    cfg->intermediate = (int)v;
    if (cfg_int(root, path, "vocab_size", 1, 0, 1, 1 << 24, &v, err, err_size) != 0)
        goto out;
    cfg->vocab = (int)v;
    if (cfg_int(root, path, "max_position_embeddings", 0, 512, 2, 1 << 20, &v, err, err_size) != 0)
        goto out;
    cfg->max_positions = (int)v;
    if (cfg_int(root, path, "type_vocab_size", 0, 2, 1, 1 << 16, &v, err, err_size) != 0)
        goto out;
    cfg->type_vocab = (int)v;
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(root, "layer_norm_eps");
    cfg->ln_eps = 1e-12;
    if (eps != NULL) {
        if (!cJSON_IsNumber(eps) || !(eps->valuedouble >= 0) || eps->valuedouble > 1) {
            snprintf(err, err_size, "%s: \"layer_norm_eps\" must be a number in [0, 1]", path);
            goto out;
        }
        cfg->ln_eps = eps->valuedouble;
    }
    if (cfg->hidden % cfg->heads != 0) {
        snprintf(err, err_size, "%s: \"hidden_size\" %d is not a multiple of \"num_attention_heads\" %d", path, cfg->hidden,
                 cfg->heads);
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(root);
    free(path);
    return rc;
}

/* Finds `name` (with the model's prefix), checks its shape, returns float32 data. */
static const float *tensor(sg_e5_model *m, const char *prefix, const char *name, const char *alt, int ndim, int64_t d0, int64_t d1,
                           char *err, size_t err_size)
{
    char full[256];
    snprintf(full, sizeof(full), "%s%s", prefix, name);
    const sg_st_tensor_t *t = sg_st_find(&m->st, full);
    if (t == NULL && alt != NULL) {
        char full2[256];
        snprintf(full2, sizeof(full2), "%s%s", prefix, alt);
        t = sg_st_find(&m->st, full2);
    }
    if (t == NULL) {
        snprintf(err, err_size, "model.safetensors: tensor %s is missing", full);
        return NULL;
    }
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        char got[96] = "", want[64];
        size_t n = 0;
        for (int i = 0; i < t->ndim && n + 24 < sizeof(got); ++i)
            n += (size_t)snprintf(got + n, sizeof(got) - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (ndim == 2)
            snprintf(want, sizeof(want), "%lld, %lld", (long long)d0, (long long)d1);
        else
            snprintf(want, sizeof(want), "%lld", (long long)d0);
        snprintf(err, err_size, "model.safetensors: tensor %s has shape [%s], config.json implies [%s]", t->name, got, want);
        return NULL;
    }
    float *owned = NULL;
    char e2[200];
    const float *p = sg_st_as_f32(t, &owned, e2, sizeof(e2));
    if (p == NULL) {
        snprintf(err, err_size, "model.safetensors: %s", e2);
        return NULL;
    }
    if (owned != NULL) {
        m->owned = realloc(m->owned, (m->n_owned + 1) * sizeof(*m->owned));
        if (m->owned == NULL)
            abort();
        m->owned[m->n_owned++] = owned;
    }
    return p;
}

static int lin(sg_e5_model *m, const char *pfx, const char *name, int out, int in, lin_t *l, char *err, size_t err_size)
{
    char n1[200], n2[200];
    snprintf(n1, sizeof(n1), "%s.weight", name);
    snprintf(n2, sizeof(n2), "%s.bias", name);
    l->w = tensor(m, pfx, n1, NULL, 2, out, in, err, err_size);
    if (l->w == NULL)
        return -1;
    l->b = tensor(m, pfx, n2, NULL, 1, out, 0, err, err_size);
    return l->b == NULL ? -1 : 0;
}

static int ln(sg_e5_model *m, const char *pfx, const char *name, int h, ln_t *l, char *err, size_t err_size)
{
    char n1[200], n2[200], a1[200], a2[200];
    snprintf(n1, sizeof(n1), "%s.weight", name);
    snprintf(n2, sizeof(n2), "%s.bias", name);
    snprintf(a1, sizeof(a1), "%s.gamma", name);
    snprintf(a2, sizeof(a2), "%s.beta", name);
    l->g = tensor(m, pfx, n1, a1, 1, h, 0, err, err_size);
    if (l->g == NULL)
        return -1;
    l->b = tensor(m, pfx, n2, a2, 1, h, 0, err, err_size);
    return l->b == NULL ? -1 : 0;
}

int sg_e5_load(const char *dir, sg_e5_model **out, char *err, size_t err_size)
{
    *out = NULL;
    sg_e5_model *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    uint64_t cfg_hash;
    char e2[512];
    char *vocab = join(dir, "vocab.txt"), *st = join(dir, "model.safetensors");
    int rc = -1;
    if (read_config(dir, &m->cfg, &cfg_hash, err, err_size) != 0)
        goto out;
    if (sg_wp_load(vocab, &m->wp, err, err_size) != 0)
        goto out;
    if (sg_wp_size(m->wp) > (size_t)m->cfg.vocab) {
        snprintf(err, err_size, "%s has %zu tokens but config.json \"vocab_size\" is %d", vocab, sg_wp_size(m->wp), m->cfg.vocab);
        goto out;
    }
    if (sg_st_open(st, &m->st, err, err_size) != 0)
        goto out;
    const sg_e5_config *c = &m->cfg;
    const char *pfx = sg_st_find(&m->st, "bert.embeddings.word_embeddings.weight") != NULL ? "bert." : "";
    m->pfx = pfx;
    if ((m->word = tensor(m, pfx, "embeddings.word_embeddings.weight", NULL, 2, c->vocab, c->hidden, err, err_size)) == NULL ||
        (m->pos = tensor(m, pfx, "embeddings.position_embeddings.weight", NULL, 2, c->max_positions, c->hidden, err, err_size)) ==
            NULL ||
        (m->type = tensor(m, pfx, "embeddings.token_type_embeddings.weight", NULL, 2, c->type_vocab, c->hidden, err, err_size)) ==
            NULL ||
        ln(m, pfx, "embeddings.LayerNorm", c->hidden, &m->ln_emb, err, err_size) != 0)
        goto out;
    m->layers = calloc((size_t)c->layers + 1, sizeof(*m->layers));
    if (m->layers == NULL)
        abort();
    for (int i = 0; i < c->layers; ++i) {
        layer_t *L = &m->layers[i];
        char b[160];
#define NAME(s) (snprintf(b, sizeof(b), "encoder.layer.%d.%s", i, s), b)
        if (lin(m, pfx, NAME("attention.self.query"), c->hidden, c->hidden, &L->q, err, err_size) != 0 ||
            lin(m, pfx, NAME("attention.self.key"), c->hidden, c->hidden, &L->k, err, err_size) != 0 ||
            lin(m, pfx, NAME("attention.self.value"), c->hidden, c->hidden, &L->v, err, err_size) != 0 ||
            lin(m, pfx, NAME("attention.output.dense"), c->hidden, c->hidden, &L->o, err, err_size) != 0 ||
            ln(m, pfx, NAME("attention.output.LayerNorm"), c->hidden, &L->ln_attn, err, err_size) != 0 ||
            lin(m, pfx, NAME("intermediate.dense"), c->intermediate, c->hidden, &L->inter, err, err_size) != 0 ||
            lin(m, pfx, NAME("output.dense"), c->hidden, c->intermediate, &L->out, err, err_size) != 0 ||
            ln(m, pfx, NAME("output.LayerNorm"), c->hidden, &L->ln_out, err, err_size) != 0)
            goto out;
#undef NAME
    }
    char extra[40];
    snprintf(extra, sizeof(extra), "encoder.layer.%d.", c->layers);
    for (size_t i = 0; i < m->st.n_tensors; ++i) {
        if (strncmp(m->st.tensors[i].name + strlen(pfx), extra, strlen(extra)) == 0 &&
            strncmp(m->st.tensors[i].name, pfx, strlen(pfx)) == 0) {
            snprintf(err, err_size, "model.safetensors: tensor %s exists but config.json \"num_hidden_layers\" is %d",
                     m->st.tensors[i].name, c->layers);
            goto out;
        }
    }
    uint64_t st_size, st_hash;
    if (sg__e5_fingerprint(st, &st_size, &st_hash, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "%s", e2);
        goto out;
    }
    snprintf(m->identity, sizeof(m->identity), "e5:h%d.l%d.st%llu-%016llx-%016llx.v%016llx.c%016llx", c->hidden, c->layers,
             (unsigned long long)st_size, (unsigned long long)m->st.header_hash, (unsigned long long)st_hash,
             (unsigned long long)sg_wp_hash(m->wp), (unsigned long long)cfg_hash);
    /* the CPU, as the kernels see it: SG_CPU_FEATURES may hide features (blas.h; an invalid list
     * only hides more) */
    sg_cpu_t cpu;
    sg_cpu_read(&cpu);
    const char *mask = getenv("SG_CPU_FEATURES");
    if (mask != NULL)
        (void)sg_cpu_restrict(&cpu, mask, e2, sizeof(e2));
    m->features = cpu.features;
    int vec = sg_kern_f32_best(m->features);
    m->kern_vec = vec == SG_KERN_NONE ? SG_KERN_SCALAR : vec;
    m->fused_attention = vec != SG_KERN_NONE;
    rc = 0;
out:
    free(vocab);
    free(st);
    if (rc != 0) {
        sg_e5_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void sg_e5_free(sg_e5_model *m)
{
    if (m == NULL)
        return;
    for (size_t i = 0; i < m->n_owned; ++i)
        free(m->owned[i]);
    free(m->owned);
    free(m->bf16_block);
    free(m->ref_block);
    free(m->centre);
    free(m->calib_prefix);
    for (int i = 0; m->layers != NULL && i < m->cfg.layers; ++i) {
        for (int p = 0; p < N_PROD; ++p) {
            sg_kern_f32_free(&m->layers[i].pf[p]);
            sg_kern_q8_free(&m->layers[i].pq[p]);
        }
    }
    if (m->dnnl != NULL)
        dlclose(m->dnnl);
    free(m->layers);
    sg_st_close(&m->st);
    sg_wp_free(m->wp);
    free(m);
}

int sg_e5_dim(const sg_e5_model *m)
{
    return m->cfg.hidden;
}

const char *sg_e5_identity(const sg_e5_model *m)
{
    return m->identity;
}

const sg_e5_config *sg_e5_get_config(const sg_e5_model *m)
{
    return &m->cfg;
}

uint32_t sg_e5_max_length(const sg_e5_model *m, uint32_t max_len)
{
    return max_len > (uint32_t)m->cfg.max_positions ? (uint32_t)m->cfg.max_positions : max_len;
}

int sg_e5_tokenize(const sg_e5_model *m, const char *prefix, const char *text, size_t len, uint32_t max_len, int32_t *ids)
{
    return sg_wp_encode(m->wp, prefix, text, len, max_len, ids);
}

/* ---- workspace ---- */

sg_e5_workspace *sg_e5_workspace_new(const sg_e5_model *m)
{
    sg_e5_workspace *w = calloc(1, sizeof(*w));
    if (w != NULL)
        w->m = m;
    return w;
}

void sg_e5_workspace_set_par(sg_e5_workspace *w, sg_par_t *par)
{
    w->par = par;
}

void sg_e5_workspace_free(sg_e5_workspace *w)
{
    if (w == NULL)
        return;
    free(w->rows);
    free(w->xb);
    free(w->xr);
    free(w->order);
    sg_kern_q8x_free(&w->qx);
    sg_kern_q8x_free(&w->qx2);
    free(w->acc2);
    free(w->x);
    free(w->tmp);
    free(w->qkv);
    free(w->ctx);
    free(w->inter);
    free(w->scores);
    free(w->ids);
    free(w->lens);
    free(w);
}

static int grow(float **p, size_t n)
{
    float *q = realloc(*p, n * sizeof(float) + 16);
    if (q == NULL)
        return -1;
    *p = q;
    return 0;
}

static int reserve_tokens(sg_e5_workspace *w, size_t t)
{
    if (t <= w->cap_tokens)
        return 0;
    const sg_e5_config *c = &w->m->cfg;
    size_t h = (size_t)c->hidden, in = (size_t)c->intermediate;
    if (grow(&w->x, t * h) || grow(&w->tmp, t * h) || grow(&w->qkv, 3 * t * h) || grow(&w->ctx, t * h) || grow(&w->inter, t * in))
        return -1;
    w->cap_tokens = t;
    return 0;
}

/* ---- forward ----
 *
 * Per layer: the Q, K and V products (into one buffer, [t][3 hidden]), attention per (sequence,
 * head), the output product with residual + LayerNorm, the intermediate product with GELU, the
 * output product with residual + LayerNorm. Each step is a set of independent tasks run through
 * sg_par_run (a team's threads claim them one by one, so a slow or preempted thread only delays
 * the tasks it holds).
 *
 * The linear layers run on one of three engines (model.engine):
 *   ENG_BLAS  OpenBLAS or oneDNN's sgemm (float32, bf16): a team splits each product into column
 *             slices (few tokens: each task reads its own part of the weights) or row slices (many);
 *             the library packs its operands inside every call.
 *   ENG_OWN   kern.h over weights packed at load (float32): tasks are tiles of rows x panels of
 *             16 columns; the bias and GELU are applied in the tiles' epilogue, and a task that
 *             holds whole rows applies the residual + LayerNorm to them while they are in cache.
 *   ENG_INT8  the same tiles over int8 weights, after the layer's input is quantised per row; or
 *             oneDNN's int8 GEMM on column / row slices, then the same epilogue.
 * The own kernels compute every output as one sum in k order, so a product gives the same bits
 * however a team cuts it; the BLAS engine's column slices may round differently from the whole
 * matrix (about 1e-7 in an embedding). Attention: kern.h's fused kernel (scores, softmax and the
 * sum over V in registers and a small scratch) on CPUs with AVX2 or AVX-512, else two sgemm calls
 * per sequence and head; its tasks go longest sequence first, so the long ones do not finish last. */

/* rows r0 .. r0+t of y[:, o0:o1] = x . W[o0:o1]^T + b[o0:o1], optionally followed by GELU (x and y
 * point at row 0; y's rows are ldy floats apart) */
static void linear_cols(const sg_e5_workspace *w, const lin_t *l, const float *x, size_t r0, size_t t, int in, size_t ldy, int o0,
                        int o1, float *y, int gelu)
{
    int cols = o1 - o0;
    if (cols <= 0 || t == 0)
        return;
    x += r0 * (size_t)in;
    y += r0 * ldy;
    for (size_t r = 0; r < t; ++r)
        memcpy(y + r * ldy + o0, l->b + o0, (size_t)cols * sizeof(float));
    const sg_e5_model *m = w->m;
    if (m->precision == SG_E5_BF16 && m->bf16_gemm != NULL)
        m->bf16_gemm('N', 'T', (int64_t)t, cols, in, 1.0f, w->xb + r0 * (size_t)in, in, l->wb + (size_t)o0 * (size_t)in, in, 1.0f,
                     y + o0, (int64_t)ldy);
    else if (m->precision == SG_E5_BF16)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)t, cols, in, 1.0f, w->xr + r0 * (size_t)in, in,
                    l->wr + (size_t)o0 * (size_t)in, in, 1.0f, y + o0, (blasint)ldy);
    else if (m->f32_gemm != NULL)
        m->f32_gemm('N', 'T', (int64_t)t, cols, in, 1.0f, x, in, l->w + (size_t)o0 * (size_t)in, in, 1.0f, y + o0, (int64_t)ldy);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)t, cols, in, 1.0f, x, in, l->w + (size_t)o0 * (size_t)in, in,
                    1.0f, y + o0, (blasint)ldy);
    if (gelu)
        for (size_t r = 0; r < t; ++r)
            sg_kern_gelu(m->kern_vec, y + r * ldy + o0, (size_t)cols);
}

/* up to three linear layers over the same input, each split into `chunks` column ranges */
typedef struct st_lin_job_t {
    const sg_e5_workspace *w;
    const lin_t *l[3];
    float *y[3];
    const float *x;
    size_t t, ldy;
    int in, out, chunks, gelu;
    int by_rows; /* split the rows (tokens) instead of the columns */
} lin_job_t;

static int chunk_edge(int out, int chunks, int c)
{
    /* multiples of 16 columns, so every slice starts on a SIMD/cache-friendly boundary */
    int e = (int)(((int64_t)out * c / chunks) & ~15);
    return c == chunks ? out : e;
}

static void lin_task(void *arg, size_t i, unsigned slot)
{
    (void)slot;
    lin_job_t *j = arg;
    int m = (int)(i / (size_t)j->chunks), c = (int)(i % (size_t)j->chunks);
    if (j->by_rows) {
        size_t r0 = j->t * (size_t)c / (size_t)j->chunks, r1 = j->t * (size_t)(c + 1) / (size_t)j->chunks;
        linear_cols(j->w, j->l[m], j->x, r0, r1 - r0, j->in, j->ldy, 0, j->out, j->y[m], j->gelu);
        return;
    }
    linear_cols(j->w, j->l[m], j->x, 0, j->t, j->in, j->ldy, chunk_edge(j->out, j->chunks, c), chunk_edge(j->out, j->chunks, c + 1),
                j->y[m], j->gelu);
}

static inline uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);         /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* precision bf16: the layer's input converted once for all its column slices */
static int convert_input(sg_e5_workspace *w, const float *x, size_t n)
{
    if (n > w->cap_x16) {
        uint16_t *b = realloc(w->xb, n * sizeof(*b) + 16);
        if (b == NULL)
            return -1;
        w->xb = b;
        if (w->m->bf16_gemm == NULL) {
            float *r = realloc(w->xr, n * sizeof(*r) + 16);
            if (r == NULL)
                return -1;
            w->xr = r;
        }
        w->cap_x16 = n;
    }
    for (size_t i = 0; i < n; ++i)
        w->xb[i] = to_bf16(x[i]);
    if (w->m->bf16_gemm == NULL)
        for (size_t i = 0; i < n; ++i)
            w->xr[i] = from_bf16(w->xb[i]);
    return 0;
}

/* The slices of a product through a BLAS: alone, the whole matrix; in a team, a slice per thread
 * and matrix (two per thread for a single matrix: slack for a slow or preempted helper). Many
 * tokens: slices of rows, so that each thread packs only its own rows of the input; few tokens:
 * slices of columns (never thinner than 64), so that each thread reads only its own part of the
 * weights, the bulk of the bytes then. */
static void blas_split(unsigned threads, int n_mats, size_t t, int out, int *chunks, int *by_rows)
{
    *chunks = threads == 1 ? 1 : (int)threads * (n_mats == 1 ? 2 : 1);
    *by_rows = threads > 1 && t >= (size_t)*chunks * 16;
    if (!*by_rows && *chunks > out / 64)
        *chunks = out / 64 > 0 ? out / 64 : 1;
}

static int linear_par(sg_e5_workspace *w, int n_mats, const lin_t *const *l, const float *x, size_t t, int in, int out,
                      float *const *y, size_t ldy, int gelu)
{
    if (w->m->precision == SG_E5_BF16 && convert_input(w, x, t * (size_t)in) != 0)
        return -1;
    int chunks, by_rows;
    blas_split(sg_par_threads(w->par), n_mats, t, out, &chunks, &by_rows);
    lin_job_t j = {w,
                   {l[0], n_mats > 1 ? l[1] : NULL, n_mats > 2 ? l[2] : NULL},
                   {y[0], n_mats > 1 ? y[1] : NULL, n_mats > 2 ? y[2] : NULL},
                   x,
                   t,
                   ldy,
                   in,
                   out,
                   chunks,
                   gelu,
                   by_rows};
    sg_par_run(w->par, (size_t)n_mats * (size_t)chunks, lin_task, &j);
    return 0;
}

/* x = LayerNorm(x + r) row by row (r may be NULL) */
static void layer_norm(float *x, const float *r, size_t t, int h, const ln_t *l, double eps)
{
    for (size_t i = 0; i < t; ++i) {
        float *row = x + i * (size_t)h;
        if (r != NULL) {
            const float *rr = r + i * (size_t)h;
            for (int j = 0; j < h; ++j)
                row[j] += rr[j];
        }
        double mean = 0, var = 0;
        for (int j = 0; j < h; ++j)
            mean += row[j];
        mean /= h;
        for (int j = 0; j < h; ++j) {
            double d = row[j] - mean;
            var += d * d;
        }
        var /= h;
        double inv = 1.0 / sqrt(var + eps);
        for (int j = 0; j < h; ++j)
            row[j] = (float)((row[j] - mean) * inv) * l->g[j] + l->b[j];
    }
}

typedef struct st_ln_job_t {
    float *x;
    const float *r;
    size_t t, per;
    int h;
    const ln_t *l;
    double eps;
} ln_job_t;

static void ln_task(void *arg, size_t i, unsigned slot)
{
    (void)slot;
    ln_job_t *j = arg;
    size_t r0 = i * j->per, r1 = r0 + j->per < j->t ? r0 + j->per : j->t;
    if (r0 < r1)
        layer_norm(j->x + r0 * (size_t)j->h, j->r != NULL ? j->r + r0 * (size_t)j->h : NULL, r1 - r0, j->h, j->l, j->eps);
}

static void layer_norm_par(sg_e5_workspace *w, float *x, const float *r, size_t t, int h, const ln_t *l, double eps)
{
    unsigned threads = sg_par_threads(w->par);
    if (threads == 1 || t < 32) { /* a few rows: the hand-off would cost more than the work */
        layer_norm(x, r, t, h, l, eps);
        return;
    }
    size_t per = (t + threads - 1) / threads;
    ln_job_t j = {x, r, t, per, h, l, eps};
    sg_par_run(w->par, (t + per - 1) / per, ln_task, &j);
}

/* ---- the own kernels' products ---- */

#define TILE_ROWS 6             /* the kernels' row tile: row slices are multiples of it */
#define BLOCK_BYTES (256 << 10) /* input rows of one pass over a task's panels: about half an L2 */

typedef struct st_prod_t {
    sg_e5_workspace *w;
    const void *pw;   /* sg_kern_f32w_t (ENG_OWN) or sg_kern_q8w_t (ENG_INT8) */
    const float *x;   /* the input, `in` floats a row (ENG_OWN) */
    int in, np, gelu; /* inputs, panels of the output */
    float *y;         /* the output, ldy floats a row (= its columns) */
    size_t ldy, t;
    const float *res; /* y = LayerNorm(y + res) after the product when ln != NULL */
    const ln_t *ln;
    double eps;
    size_t rows_per, rchunks, block; /* rows per task, row slices, rows per pass over the panels */
    int pchunks;                     /* panel slices */
    int split;                       /* int8: the input in two terms (w->qx, then w->qx2 added) */
} prod_t;

/* panel slice edges: multiples of 4 panels (the AVX-512 tiles' width) when the slices are wide */
static int panel_edge(int np, int chunks, int c)
{
    if (c >= chunks)
        return np;
    int e = (int)((int64_t)np * c / chunks);
    return np >= 4 * chunks ? e & ~3 : e;
}

static void prod_task(void *arg, size_t i, unsigned slot)
{
    (void)slot;
    prod_t *p = arg;
    const sg_e5_model *m = p->w->m;
    size_t rc = i / (size_t)p->pchunks;
    int pc = (int)(i % (size_t)p->pchunks);
    size_t r0 = rc * p->rows_per, r1 = r0 + p->rows_per < p->t ? r0 + p->rows_per : p->t;
    int p0 = panel_edge(p->np, p->pchunks, pc), p1 = panel_edge(p->np, p->pchunks, pc + 1);
    for (size_t a = r0; a < r1; a += p->block) {
        size_t b = a + p->block < r1 ? a + p->block : r1;
        if (m->engine != ENG_INT8) {
            sg_kern_f32_tile(m->kern, p->pw, p->x, (size_t)p->in, a, b, p0, p1, p->y, p->ldy, p->gelu);
        } else {
            if (p->split) /* an input in two int8 terms: the first, then the second added to it */
                sg_kern_q8_tile(m->kern, p->pw, &p->w->qx, a, b, p0, p1, p->y, p->ldy, 0);
            sg_kern_q8_tile(m->kern, p->pw, p->split ? &p->w->qx2 : &p->w->qx, a, b, p0, p1, p->y, p->ldy,
                            (p->split ? SG_KERN_Q8_ADD : 0) | (p->gelu ? SG_KERN_Q8_GELU : 0));
        }
        if (p->ln != NULL && p->pchunks == 1) /* whole rows: residual + LayerNorm while they are in cache */
            layer_norm(p->y + a * p->ldy, p->res + a * p->ldy, b - a, (int)p->ldy, p->ln, p->eps);
    }
}

/* How a team cuts a product into tasks: about four per thread, so that the dynamic claiming evens
 * out uneven threads. Whole rows (LayerNorm fused) when the input outweighs the weights (each
 * row slice reads every weight) and there are rows enough; column slices alone, as thin as one
 * panel, for a few rows (up to 4 row tiles: a lone query's product is bound by reading its
 * weights, and a slice crossed with row slices would read them twice); else slices of 4 panels
 * (the AVX-512 tile's width), thinner or crossed with row slices when that leaves too few tasks. */
static void plan_product(prod_t *p, unsigned threads, size_t w_bytes, size_t x_row_bytes)
{
    size_t block = BLOCK_BYTES / (x_row_bytes > 0 ? x_row_bytes : 1);
    p->block = block < TILE_ROWS ? TILE_ROWS : block / TILE_ROWS * TILE_ROWS;
    p->rchunks = 1;
    p->pchunks = 1;
    p->rows_per = p->t;
    if (threads <= 1 || p->t == 0)
        return;
    size_t want = 4 * (size_t)threads, rblocks = (p->t + TILE_ROWS - 1) / TILE_ROWS;
    if (p->t * x_row_bytes >= w_bytes && rblocks >= want) {
        p->rchunks = want;
    } else if (p->t <= 4 * TILE_ROWS) { /* a few rows: the weights' bytes decide, so each is read once */
        p->pchunks = want < (size_t)p->np ? (int)want : p->np;
    } else {
        size_t pc = p->np / 4 > 0 ? (size_t)p->np / 4 : 1;
        if (pc > want)
            pc = want;
        size_t rc = (want + pc - 1) / pc;
        if (rc > rblocks)
            rc = rblocks;
        if (pc * rc < want) {
            pc = (want + rc - 1) / rc;
            if (pc > (size_t)p->np)
                pc = (size_t)p->np;
        }
        p->pchunks = (int)pc;
        p->rchunks = rc;
    }
    size_t per = (p->t + p->rchunks - 1) / p->rchunks;
    p->rows_per = (per + TILE_ROWS - 1) / TILE_ROWS * TILE_ROWS;
    p->rchunks = (p->t + p->rows_per - 1) / p->rows_per;
}

/* precision int8: the input of a product (minus its centre) quantised per row, by row slices in a team */
typedef struct st_quant_job_t {
    sg_e5_workspace *w;
    const float *x;
    const sg_kern_q8w_t *qw;
    int in, kern, split;
    size_t t, per;
} quant_job_t;

static void quant_task(void *arg, size_t i, unsigned slot)
{
    (void)slot;
    quant_job_t *j = arg;
    size_t r0 = i * j->per, r1 = r0 + j->per < j->t ? r0 + j->per : j->t;
    sg_kern_q8_quantize(j->kern, j->x, (size_t)j->in, j->in, j->qw, r0, r1, &j->w->qx, j->split ? &j->w->qx2 : NULL);
}

static int quantize_input(sg_e5_workspace *w, const sg_kern_q8w_t *qw, const float *x, size_t t, int in, int split)
{
    const sg_e5_model *m = w->m;
    if (sg_kern_q8x_reserve(&w->qx, t, in) != 0 || (split && sg_kern_q8x_reserve(&w->qx2, t, in) != 0))
        return -1;
    unsigned threads = sg_par_threads(w->par);
    quant_job_t j = {w, x, qw, in, m->kern == SG_E5_INT8_ONEDNN ? m->kern_vec : m->kern, split, t, t};
    if (threads > 1 && t >= 64)
        j.per = (t + threads - 1) / threads;
    sg_par_run(w->par, (t + j.per - 1) / j.per, quant_task, &j);
    return 0;
}

/* precision int8 through oneDNN: slices as for a BLAS, each dnnl_gemm_u8s8s32 into y's bytes,
 * then the kernels' epilogue */
typedef struct st_dnnl_q8_job_t {
    sg_e5_workspace *w;
    const sg_kern_q8w_t *qw;
    float *y;
    size_t t, ldy;
    int chunks, by_rows, gelu, split;
} dnnl_q8_job_t;

static void dnnl_q8_task(void *arg, size_t i, unsigned slot)
{
    (void)slot;
    dnnl_q8_job_t *j = arg;
    const sg_kern_q8x_t *qx = &j->w->qx;
    const sg_kern_q8w_t *qw = j->qw;
    int c = (int)i, j0 = 0, j1 = qw->n;
    size_t r0 = 0, r1 = j->t;
    if (j->by_rows) {
        r0 = j->t * (size_t)c / (size_t)j->chunks;
        r1 = j->t * (size_t)(c + 1) / (size_t)j->chunks;
    } else {
        j0 = chunk_edge(qw->n, j->chunks, c);
        j1 = chunk_edge(qw->n, j->chunks, c + 1);
    }
    if (r0 >= r1 || j0 >= j1)
        return;
    static const int32_t zero = 0;
    const unsigned gelu = j->gelu ? SG_KERN_Q8_GELU : 0;
    j->w->m->q8_gemm('N', 'T', 'F', (int64_t)(r1 - r0), j1 - j0, qx->kp, 1.0f, qx->u + r0 * (size_t)qx->kp, qx->kp, 0,
                     qw->rows + (size_t)j0 * (size_t)qx->kp, qx->kp, 0, 0.0f, (int32_t *)(void *)(j->y + r0 * j->ldy + j0),
                     (int64_t)j->ldy, &zero);
    sg_kern_q8_epilogue(qw, qx, r0, r1, j0, j1, NULL, 0, j->y, j->ldy, j->split ? 0 : gelu);
    if (!j->split)
        return;
    const sg_kern_q8x_t *qx2 = &j->w->qx2; /* the second term: its sums beside y, then added */
    j->w->m->q8_gemm('N', 'T', 'F', (int64_t)(r1 - r0), j1 - j0, qx->kp, 1.0f, qx2->u + r0 * (size_t)qx->kp, qx->kp, 0,
                     qw->rows + (size_t)j0 * (size_t)qx->kp, qx->kp, 0, 0.0f, j->w->acc2 + r0 * j->ldy + j0, (int64_t)j->ldy,
                     &zero);
    sg_kern_q8_epilogue(qw, qx2, r0, r1, j0, j1, j->w->acc2, j->ldy, j->y, j->ldy, SG_KERN_Q8_ADD | gelu);
}

/* int8: whether product `which` takes its input in two terms (the scheme's SPLIT_OUT: the FFN
 * output product's, whose input -- the GELU output -- is the hardest to quantise) */
static int q8_split(const sg_e5_model *m, int which, int in)
{
    return (m->q8_scheme & SG__E5_Q8_SPLIT_OUT) && which == P_OUT && in <= SG_KERN_Q8_SPLIT_MAX;
}

/* int8 centres: per layer the inputs of QKV (hidden), O (hidden), INTER (hidden), OUT (intermediate) */
static size_t centre_floats(const sg_e5_config *c)
{
    return 3 * (size_t)c->hidden + (size_t)c->intermediate;
}

static size_t centre_offset(const sg_e5_config *c, int layer, int which)
{
    return (size_t)layer * centre_floats(c) + (size_t)which * (size_t)c->hidden;
}

static void calib_add(double *sum, const float *x, size_t t, int in)
{
    for (size_t r = 0; r < t; ++r)
        for (int k = 0; k < in; ++k)
            sum[k] += x[r * (size_t)in + (size_t)k];
}

/* One product of layer L: y = x . W^T + b (GELU when asked), then y = LayerNorm(y + res) when
 * `ln` is not NULL. Returns 0, or -1 when out of memory. */
static int product(sg_e5_workspace *w, const layer_t *L, int which, const float *x, size_t t, int in, float *y, int out, int gelu,
                   const float *res, const ln_t *ln)
{
    const sg_e5_model *m = w->m;
    unsigned threads = sg_par_threads(w->par);
    int ln_done = 0;
    if (w->calib != NULL) /* int8 calibration: the input's column sums */
        calib_add(w->calib + centre_offset(&m->cfg, (int)(L - m->layers), which), x, t, in);
    if (m->engine == ENG_BLAS) {
        const int h = m->cfg.hidden;
        const lin_t *all[4][3] = {{&L->q, &L->k, &L->v}, {&L->o}, {&L->inter}, {&L->out}};
        float *const ys[3] = {y, y + h, y + 2 * h};
        if (linear_par(w, which == P_QKV ? 3 : 1, all[which], x, t, in, which == P_QKV ? h : out, ys, (size_t)out, gelu) != 0)
            return -1;
    } else if (m->engine == ENG_INT8 && m->kern == SG_E5_INT8_ONEDNN) {
        int split = q8_split(m, which, in);
        if (quantize_input(w, &L->pq[which], x, t, in, split) != 0)
            return -1;
        if (split && t * (size_t)out > w->cap_acc2) {
            int32_t *a = realloc(w->acc2, t * (size_t)out * sizeof(int32_t) + 16);
            if (a == NULL)
                return -1;
            w->acc2 = a;
            w->cap_acc2 = t * (size_t)out;
        }
        int chunks, by_rows;
        blas_split(threads, 1, t, out, &chunks, &by_rows);
        dnnl_q8_job_t j = {w, &L->pq[which], y, t, (size_t)out, chunks, by_rows, gelu, split};
        sg_par_run(w->par, (size_t)chunks, dnnl_q8_task, &j);
    } else {
        int q8 = m->engine == ENG_INT8, split = q8 && q8_split(m, which, in);
        if (q8 && quantize_input(w, &L->pq[which], x, t, in, split) != 0)
            return -1;
        prod_t p = {w,
                    q8 ? (const void *)&L->pq[which] : (const void *)&L->pf[which],
                    x,
                    in,
                    q8 ? L->pq[which].np : L->pf[which].np,
                    gelu,
                    y,
                    (size_t)out,
                    t,
                    res,
                    ln,
                    m->cfg.ln_eps,
                    0,
                    0,
                    0,
                    0,
                    split};
        size_t elem = q8 ? 1 : sizeof(float);
        plan_product(&p, threads, (size_t)out * (size_t)in * elem, (size_t)in * elem);
        sg_par_run(w->par, p.rchunks * (size_t)p.pchunks, prod_task, &p);
        ln_done = ln != NULL && p.pchunks == 1;
    }
    if (ln != NULL && !ln_done)
        layer_norm_par(w, y, res, t, out, ln, m->cfg.ln_eps);
    return 0;
}

typedef struct st_attn_job_t {
    sg_e5_workspace *w;
    const uint32_t *lens;
    int h, dh, heads;
    float scale;
} attn_job_t;

/* one (sequence, head), longest sequences first: softmax(q k^T * scale) v into ctx */
static void attn_task(void *arg, size_t i, unsigned slot)
{
    attn_job_t *j = arg;
    sg_e5_workspace *w = j->w;
    size_t s = w->order[i / (size_t)j->heads];
    int hd = (int)(i % (size_t)j->heads), h = j->h, dh = j->dh;
    const int ls = (int)j->lens[s];
    const size_t base = w->rows[s], ld = 3 * (size_t)h;
    const float *q = w->qkv + base * ld + (size_t)hd * (size_t)dh, *k = q + h, *v = q + 2 * h;
    float *ctx = w->ctx + base * (size_t)h + (size_t)hd * (size_t)dh;
    float *sc = w->scores + (size_t)slot * w->cap_scores;
    if (w->m->fused_attention) {
        sg_kern_attention(w->m->kern_vec, q, k, v, ld, ls, dh, j->scale, ctx, (size_t)h, sc);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ls, ls, dh, j->scale, q, (blasint)ld, k, (blasint)ld, 0.0f, sc, ls);
    for (int a = 0; a < ls; ++a) {
        float *row = sc + (size_t)a * (size_t)ls;
        float mx = row[0];
        for (int b = 1; b < ls; ++b)
            if (row[b] > mx)
                mx = row[b];
        float sum = 0;
        for (int b = 0; b < ls; ++b) {
            row[b] = expf(row[b] - mx);
            sum += row[b];
        }
        float inv = 1.0f / sum;
        for (int b = 0; b < ls; ++b)
            row[b] *= inv;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ls, dh, ls, 1.0f, sc, ls, v, (blasint)ld, 0.0f, ctx, h);
}

/* The pooler head: out[s] = tanh(W h[first token of s] + b), in float32 whatever the precision
 * (n x hidden x hidden: nothing next to the layers). */
static void pooler_head(sg_e5_workspace *w, size_t n, float *out)
{
    const sg_e5_model *m = w->m;
    const int h = m->cfg.hidden;
    for (size_t s = 0; s < n; ++s) {
        memcpy(w->tmp + s * (size_t)h, w->x + w->rows[s] * (size_t)h, (size_t)h * sizeof(float));
        memcpy(out + s * (size_t)h, m->pooler.b, (size_t)h * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, h, h, 1.0f, w->tmp, h, m->pooler.w, h, 1.0f, out, h);
    for (size_t i = 0; i < n * (size_t)h; ++i)
        out[i] = tanhf(out[i]);
}

/* The pass's bookkeeping: each sequence's first row, the sequences longest first, the scratch of
 * attention. Returns the pass's tokens, or 0 when out of memory. */
static size_t prepare_pass(sg_e5_workspace *w, const uint32_t *lens, size_t n)
{
    const sg_e5_config *c = &w->m->cfg;
    size_t t = 0;
    uint32_t max_l = 0;
    if (n > w->cap_rows) {
        size_t *r = realloc(w->rows, n * sizeof(*r) + 16), *o = r != NULL ? realloc(w->order, n * sizeof(*o) + 16) : NULL;
        if (r != NULL)
            w->rows = r;
        if (o == NULL)
            return 0;
        w->order = o;
        w->cap_rows = n;
    }
    for (size_t i = 0; i < n; ++i) {
        w->rows[i] = t;
        t += lens[i];
        if (lens[i] > max_l)
            max_l = lens[i];
        size_t j = i; /* insertion by length, longest first (ties: in order) */
        while (j > 0 && lens[w->order[j - 1]] < lens[i]) {
            w->order[j] = w->order[j - 1];
            --j;
        }
        w->order[j] = i;
    }
    if (reserve_tokens(w, t) != 0)
        return 0;
    unsigned slots = w->par != NULL && w->par->slots > 1 ? w->par->slots : 1;
    size_t need = sg_kern_attention_scratch((int)max_l, c->hidden / c->heads);
    if ((size_t)max_l * max_l > need)
        need = (size_t)max_l * max_l;
    if (need > w->cap_scores || slots > w->slots) {
        size_t per = need > w->cap_scores ? need : w->cap_scores;
        unsigned ns = slots > w->slots ? slots : w->slots;
        if (grow(&w->scores, per * ns) != 0)
            return 0;
        w->cap_scores = per;
        w->slots = ns;
    }
    return t;
}

/* Runs the model over `n` sequences packed back to back in `ids` (lens[i] each; token types in
 * `types`, NULL: all 0) and writes one vector of `hidden` floats per sequence to out[i * hidden]:
 * the e5 embedding (head SG__E5_HEAD_MEAN) or the pooler output (SG__E5_HEAD_POOLER). */
static int forward(sg_e5_workspace *w, const int32_t *ids, const uint8_t *types, const uint32_t *lens, size_t n, int head,
                   float *out)
{
    const sg_e5_model *m = w->m;
    const sg_e5_config *c = &m->cfg;
    const int h = c->hidden, dh = c->hidden / c->heads;
    uint64_t t0 = now_ns();
    size_t t = prepare_pass(w, lens, n);
    if (t == 0)
        return -1;
    /* embeddings: word + token type + position (in BertEmbeddings' order), then LayerNorm */
    size_t r = 0;
    for (size_t s = 0; s < n; ++s) {
        for (uint32_t p = 0; p < lens[s]; ++p, ++r) {
            const float *we = m->word + (size_t)ids[r] * (size_t)h;
            const float *te = m->type + (types != NULL ? (size_t)types[r] * (size_t)h : 0);
            const float *pe = m->pos + (size_t)p * (size_t)h;
            float *row = w->x + r * (size_t)h;
            for (int j = 0; j < h; ++j)
                row[j] = (we[j] + te[j]) + pe[j];
        }
    }
    layer_norm_par(w, w->x, NULL, t, h, &m->ln_emb, c->ln_eps);
    t0 = lap(w, SG_E5_STEP_EMBED, t0);
    attn_job_t aj = {w, lens, h, dh, c->heads, 1.0f / sqrtf((float)dh)};
    for (int li = 0; li < c->layers; ++li) {
        const layer_t *L = &m->layers[li];
        if (product(w, L, P_QKV, w->x, t, h, w->qkv, 3 * h, 0, NULL, NULL) != 0)
            return -1;
        t0 = lap(w, SG_E5_STEP_QKV, t0);
        sg_par_run(w->par, n * (size_t)c->heads, attn_task, &aj);
        t0 = lap(w, SG_E5_STEP_ATTENTION, t0);
        if (product(w, L, P_O, w->ctx, t, h, w->tmp, h, 0, w->x, &L->ln_attn) != 0)
            return -1;
        t0 = lap(w, SG_E5_STEP_O, t0);
        if (product(w, L, P_INTER, w->tmp, t, h, w->inter, c->intermediate, 1, NULL, NULL) != 0)
            return -1;
        t0 = lap(w, SG_E5_STEP_INTER, t0);
        if (product(w, L, P_OUT, w->inter, t, c->intermediate, w->x, h, 0, w->tmp, &L->ln_out) != 0)
            return -1;
        t0 = lap(w, SG_E5_STEP_OUT, t0);
    }
    w->tokens += t;
    if (head == SG__E5_HEAD_POOLER) {
        pooler_head(w, n, out);
        lap(w, SG_E5_STEP_POOL, t0);
        return 0;
    }
    /* mean pooling over each sequence, then L2 normalisation */
    r = 0;
    for (size_t s = 0; s < n; ++s) {
        float *o = out + s * (size_t)h;
        for (int j = 0; j < h; ++j) {
            double acc = 0;
            for (uint32_t p = 0; p < lens[s]; ++p)
                acc += w->x[(r + p) * (size_t)h + (size_t)j];
            o[j] = (float)(acc / lens[s]);
        }
        r += lens[s];
        double norm = 0;
        for (int j = 0; j < h; ++j)
            norm += (double)o[j] * o[j];
        norm = sqrt(norm);
        float inv = (float)(1.0 / (norm > 1e-12 ? norm : 1e-12));
        for (int j = 0; j < h; ++j)
            o[j] *= inv;
    }
    lap(w, SG_E5_STEP_POOL, t0);
    return 0;
}

int sg_e5_encode_ids(sg_e5_workspace *w, const int32_t *const *ids, const uint32_t *lens, size_t n, float *out, char *err,
                     size_t err_size)
{
    const sg_e5_model *m = w->m;
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) {
        if (lens[i] == 0 || lens[i] > (uint32_t)m->cfg.max_positions) {
            snprintf(err, err_size, "sequence %zu has %u tokens (1 to %d allowed)", i, lens[i], m->cfg.max_positions);
            return -1;
        }
        for (uint32_t j = 0; j < lens[i]; ++j) {
            if (ids[i][j] < 0 || ids[i][j] >= m->cfg.vocab) {
                snprintf(err, err_size, "sequence %zu: token id %d outside the vocabulary", i, ids[i][j]);
                return -1;
            }
        }
        total += lens[i];
    }
    if (total > w->cap_ids) {
        int32_t *p = realloc(w->ids, total * sizeof(*p) + 16);
        if (p == NULL)
            goto oom;
        w->ids = p;
        w->cap_ids = total;
    }
    if (n > w->cap_texts) {
        uint32_t *l = realloc(w->lens, n * sizeof(*l) + 16);
        if (l == NULL)
            goto oom;
        w->lens = l;
        w->cap_texts = n;
    }
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        memcpy(w->ids + off, ids[i], lens[i] * sizeof(int32_t));
        w->lens[i] = lens[i];
        off += lens[i];
    }
    if (sg__e5_forward(w, w->ids, NULL, w->lens, n, SG__E5_HEAD_MEAN, out) == 0)
        return 0;
oom:
    snprintf(err, err_size, "out of memory encoding %zu texts", n);
    return -1;
}

int sg__e5_forward(sg_e5_workspace *w, const int32_t *ids, const uint8_t *types, const uint32_t *lens, size_t n, int head,
                   float *out)
{
    if (head == SG__E5_HEAD_POOLER && w->m->pooler.w == NULL)
        return -1;
    /* passes of at most PASS_TOKENS tokens (one sequence may exceed it alone) */
    size_t i = 0;
    const size_t h = (size_t)w->m->cfg.hidden;
    while (i < n) {
        size_t j = i, tok = 0;
        while (j < n && (j == i || tok + lens[j] <= PASS_TOKENS))
            tok += lens[j++];
        if (forward(w, ids, types, lens + i, j - i, head, out + i * h) != 0)
            return -1;
        ids += tok;
        if (types != NULL)
            types += tok;
        i = j;
    }
    return 0;
}

int sg__e5_load_pooler(sg_e5_model *m, char *err, size_t err_size)
{
    if (m->pooler.w != NULL)
        return 0;
    lin_t l;
    if (lin(m, m->pfx, "pooler.dense", m->cfg.hidden, m->cfg.hidden, &l, err, err_size) != 0)
        return -1;
    m->pooler = l;
    return 0;
}

const float *sg__e5_tensor(sg_e5_model *m, const char *name, int ndim, int64_t d0, int64_t d1, char *err, size_t err_size)
{
    return tensor(m, "", name, NULL, ndim, d0, d1, err, err_size);
}

const char *sg__e5_prefix(const sg_e5_model *m)
{
    return m->pfx;
}

const sg_wp_t *sg__e5_wordpiece(const sg_e5_model *m)
{
    return m->wp;
}

int sg_e5_encode(const sg_e5_model *m, sg_e5_workspace *w, const char *prefix, const char *const *texts, const size_t *lens,
                 size_t n, uint32_t max_len, float *out, char *err, size_t err_size)
{
    if (w->m != m) {
        snprintf(err, err_size, "the workspace belongs to another model");
        return -1;
    }
    max_len = sg_e5_max_length(m, max_len);
    if (max_len < 2) {
        snprintf(err, err_size, "max_len must be at least 2");
        return -1;
    }
    if (n == 0)
        return 0;
    int32_t *buf = malloc(n * (size_t)max_len * sizeof(int32_t));
    int32_t **ptrs = malloc(n * sizeof(*ptrs));
    uint32_t *tl = malloc(n * sizeof(*tl));
    int rc = -1;
    if (buf == NULL || ptrs == NULL || tl == NULL) {
        snprintf(err, err_size, "out of memory tokenising %zu texts", n);
        goto out;
    }
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; ++i) {
        ptrs[i] = buf + i * (size_t)max_len;
        int k = sg_wp_encode(m->wp, prefix, texts[i], lens[i], max_len, ptrs[i]);
        if (k < 0) {
            snprintf(err, err_size, "out of memory tokenising text %zu", i);
            goto out;
        }
        tl[i] = (uint32_t)k;
    }
    lap(w, SG_E5_STEP_TOKENIZE, t0);
    rc = sg_e5_encode_ids(w, (const int32_t *const *)ptrs, tl, n, out, err, err_size);
out:
    free(buf);
    free(ptrs);
    free(tl);
    return rc;
}

void sg_e5_get_embedding_weights(const sg_e5_model *m, sg_e5_embedding_weights *out)
{
    out->word = m->word;
    out->position = m->pos;
    out->token_type = m->type;
    out->ln_gamma = m->ln_emb.g;
    out->ln_beta = m->ln_emb.b;
}

int sg_e5_get_layer_weights(const sg_e5_model *m, int layer, sg_e5_layer_weights *out)
{
    if (layer < 0 || layer >= m->cfg.layers)
        return -1;
    const layer_t *L = &m->layers[layer];
    *out = (sg_e5_layer_weights){L->q.w,       L->q.b,       L->k.w,     L->k.b,     L->v.w,   L->v.b,   L->o.w,      L->o.b,
                                 L->ln_attn.g, L->ln_attn.b, L->inter.w, L->inter.b, L->out.w, L->out.b, L->ln_out.g, L->ln_out.b};
    return 0;
}

/* ---- precision and engine ---- */

static void unpack_layers(sg_e5_model *m);

static lin_t *layer_lin(layer_t *L, int i)
{
    lin_t *all[6] = {&L->q, &L->k, &L->v, &L->o, &L->inter, &L->out};
    return all[i];
}

/* bf16 copies of every linear weight (and, for the reference kernel, their widened floats) */
static int make_bf16_weights(sg_e5_model *m, int reference)
{
    const sg_e5_config *c = &m->cfg;
    size_t per_layer = 4 * (size_t)c->hidden * (size_t)c->hidden + 2 * (size_t)c->hidden * (size_t)c->intermediate;
    size_t total = per_layer * (size_t)c->layers;
    m->bf16_block = malloc(total * sizeof(uint16_t) + 16);
    if (reference)
        m->ref_block = malloc(total * sizeof(float) + 16);
    if (m->bf16_block == NULL || (reference && m->ref_block == NULL))
        return -1;
    size_t off = 0;
    for (int li = 0; li < c->layers; ++li) {
        for (int i = 0; i < 6; ++i) {
            lin_t *l = layer_lin(&m->layers[li], i);
            size_t n = (i < 4 ? (size_t)c->hidden : (size_t)c->intermediate) * (size_t)c->hidden;
            uint16_t *wb = m->bf16_block + off;
            for (size_t k = 0; k < n; ++k)
                wb[k] = to_bf16(l->w[k]);
            l->wb = wb;
            if (reference) {
                float *wr = m->ref_block + off;
                for (size_t k = 0; k < n; ++k)
                    wr[k] = from_bf16(wb[k]);
                l->wr = wr;
            }
            off += n;
        }
    }
    return 0;
}

/* A small product through oneDNN checked against the same product of the rounded operands in
 * double: oneDNN must both run bf16 here and compute it. */
static int probe_dnnl(bf16_gemm_fn gemm, char *err, size_t err_size)
{
    enum { M = 5, N = 33, K = 70 };
    uint16_t a[M * K], b[N * K];
    float c[M * N];
    for (int i = 0; i < M * K; ++i)
        a[i] = to_bf16((float)((i * 37 % 101) - 50) / 64.0f);
    for (int i = 0; i < N * K; ++i)
        b[i] = to_bf16((float)((i * 53 % 97) - 48) / 32.0f);
    for (int i = 0; i < M * N; ++i)
        c[i] = 1.0f;
    int rc = gemm('N', 'T', M, N, K, 1.0f, a, K, b, K, 1.0f, c, N);
    if (rc != 0) {
        snprintf(err, err_size, "oneDNN cannot run bf16 matrix products on this CPU (dnnl_gemm_bf16bf16f32 returned %d)", rc);
        return -1;
    }
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            double want = 1.0;
            for (int k = 0; k < K; ++k)
                want += (double)from_bf16(a[i * K + k]) * from_bf16(b[j * K + k]);
            if (fabs(c[i * N + j] - want) > 1e-3 * (1.0 + fabs(want))) {
                snprintf(err, err_size, "oneDNN's bf16 product is wrong on this CPU (%g instead of %g)", c[i * N + j], want);
                return -1;
            }
        }
    }
    return 0;
}

static void *open_dnnl(sg_e5_model *m, char *err, size_t err_size)
{
    if (m->dnnl != NULL)
        return m->dnnl;
    m->dnnl = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (m->dnnl == NULL)
        snprintf(err, err_size, "oneDNN (libdnnl.so.2, Debian package libdnnl2) cannot be loaded: %s", dlerror());
    return m->dnnl;
}

int sg_e5_use_onednn(sg_e5_model *m, char *err, size_t err_size)
{
    void *h = open_dnnl(m, err, err_size);
    if (h == NULL)
        return -1;
    f32_gemm_fn gemm = (f32_gemm_fn)dlsym(h, "dnnl_sgemm");
    if (gemm == NULL) {
        snprintf(err, err_size, "this oneDNN has no dnnl_sgemm");
        return -1;
    }
    /* checked on a small product, like bf16 below */
    enum { M = 3, N = 17, K = 40 };
    float a[M * K], b[N * K], c[M * N];
    for (int i = 0; i < M * K; ++i)
        a[i] = (float)((i * 37 % 101) - 50) / 64.0f;
    for (int i = 0; i < N * K; ++i)
        b[i] = (float)((i * 53 % 97) - 48) / 32.0f;
    for (int i = 0; i < M * N; ++i)
        c[i] = 0.5f;
    int rc = gemm('N', 'T', M, N, K, 1.0f, a, K, b, K, 1.0f, c, N);
    for (int i = 0; i < M && rc == 0; ++i) {
        for (int j = 0; j < N; ++j) {
            double want = 0.5;
            for (int k = 0; k < K; ++k)
                want += (double)a[i * K + k] * b[j * K + k];
            if (fabs(c[i * N + j] - want) > 1e-4 * (1.0 + fabs(want)))
                rc = -1;
        }
    }
    if (rc != 0) {
        snprintf(err, err_size, "oneDNN's float32 product fails on this CPU (%d)", rc);
        return -1;
    }
    if (m->precision != SG_E5_FP32) {
        snprintf(err, err_size, "oneDNN's float32 products: the model runs in %s", m->precision == SG_E5_BF16 ? "bf16" : "int8");
        return -1;
    }
    unpack_layers(m);
    m->engine = ENG_BLAS;
    m->f32_gemm = gemm;
    return 0;
}

static int set_bf16(sg_e5_model *m, int reference, char *err, size_t err_size)
{
    if (m->precision == SG_E5_BF16)
        return 0;
    if (m->precision != SG_E5_FP32) {
        snprintf(err, err_size, "the model already runs in int8");
        return -1;
    }
    if (!reference) {
        void *h = open_dnnl(m, err, err_size);
        if (h == NULL)
            return -1;
        bf16_gemm_fn gemm = (bf16_gemm_fn)dlsym(h, "dnnl_gemm_bf16bf16f32");
        if (gemm == NULL) {
            snprintf(err, err_size, "this oneDNN has no dnnl_gemm_bf16bf16f32");
            return -1;
        }
        if (probe_dnnl(gemm, err, err_size) != 0)
            return -1;
        m->bf16_gemm = gemm;
    }
    if (make_bf16_weights(m, reference) != 0) {
        snprintf(err, err_size, "out of memory for the bf16 weights");
        return -1;
    }
    m->precision = SG_E5_BF16;
    m->engine = ENG_BLAS;
    size_t l = strlen(m->identity);
    snprintf(m->identity + l, sizeof(m->identity) - l, ".bf16");
    return 0;
}

/* int8 calibration: generic English questions, encoded as queries (the route's query prefix first,
 * "query: " unless sg_e5_set_calibration_prefix said otherwise) in float32. The
 * mean of each product's input over their tokens is that product's centre (kern.h): whatever part
 * of an input every token shares (the [CLS], [SEP] and prefix tokens, the anisotropy of a BERT's
 * hidden states) then goes through the float32 weights once, in the bias, and only the rest is
 * quantised. Any centre keeps the product exact; a good one makes the quantised part small. The
 * texts are part of the scheme: changing them changes the int8 numbers (and needs a new identity
 * suffix). */
static const char *const calib_texts[] = {
    "who wrote the novel pride and prejudice",
    "what is the capital city of australia",
    "when did the first man land on the moon",
    "how many bones are in the adult human body",
    "where is the headquarters of the united nations",
    "why do leaves change colour in autumn",
    "what is the difference between a virus and a bacterium",
    "who was the first president of the united states",
    "which river flows through the city of cairo",
    "how does a nuclear reactor produce electricity",
    "what year did the berlin wall fall",
    "who painted the ceiling of the sistine chapel",
    "what is the boiling point of water at sea level",
    "how long does it take light from the sun to reach earth",
    "which country has the largest population in africa",
    "who discovered penicillin and when",
    "what causes the tides in the ocean",
    "how many players are on a football team",
    "what language is spoken in brazil",
    "when was the declaration of independence signed",
    "who composed the four seasons",
    "what is the tallest mountain in north america",
    "how do vaccines train the immune system",
    "where did the olympic games originate",
    "what is the chemical symbol for gold",
    "who is the author of one hundred years of solitude",
    "when did the roman empire fall",
    "how many time zones does russia have",
    "what is photosynthesis in simple terms",
    "which planet has the most moons",
    "who invented the printing press",
    "what is the population of tokyo",
    "how deep is the mariana trench",
    "when did world war one begin",
    "who played the lead role in the film casablanca",
    "what is the main ingredient of hummus",
    "how are earthquakes measured",
    "which element has the atomic number one",
    "who founded the company that makes the iphone",
    "what is the longest river in europe",
    "how many strings does a standard guitar have",
    "where is the great barrier reef located",
    "when was the eiffel tower built",
    "who wrote the theory of general relativity",
    "what is inflation in economics",
    "how do bees make honey",
    "which ocean is the deepest",
    "who was cleopatra married to",
    "what is the speed of sound in air",
    "how many countries are members of the european union",
    "what does dna stand for",
    "when did the titanic sink and how many people died",
    "who is known as the father of modern computing",
    "what is the largest desert in the world",
    "how does the heart pump blood through the body",
    "which city hosted the summer olympics in 2008",
    "who sang the song bohemian rhapsody",
    "what is the freezing point of salt water",
    "how many calories are in a banana",
    "where was the battle of hastings fought",
    "what is the currency of switzerland",
    "who directed the movie jurassic park",
    "how old is the universe according to scientists",
    "which animal is the fastest on land",
};

/* The centres of every product (m->centre), from a float32 pass over calib_texts with the model's
 * current engine (OpenBLAS when it runs another int8 scheme); rounded to bfloat16 precision so that
 * engines whose float32 sums differ in the last bits give the same centres (and the same int8
 * numbers). Returns 0, or -1 when out of memory. */
static int calibrate(sg_e5_model *m)
{
    enum { N = sizeof(calib_texts) / sizeof(calib_texts[0]) };
    const int engine = m->engine, precision = m->precision;
    if (engine == ENG_INT8) { /* the float32 weights are still there (lin_t) */
        m->engine = ENG_BLAS;
        m->precision = SG_E5_FP32;
    }
    const size_t per = centre_floats(&m->cfg), total = per * (size_t)m->cfg.layers;
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    float *out = malloc((size_t)N * (size_t)m->cfg.hidden * sizeof(float));
    m->centre = malloc(total * sizeof(float));
    int rc = -1;
    if (w == NULL || out == NULL || m->centre == NULL || (w->calib = calloc(total, sizeof(double))) == NULL)
        goto out;
    size_t lens[N];
    for (size_t i = 0; i < N; ++i)
        lens[i] = strlen(calib_texts[i]);
    char err[256];
    const char *prefix = m->calib_prefix != NULL ? m->calib_prefix : "query: ";
    if (sg_e5_encode(m, w, prefix, calib_texts, lens, N, sg_e5_max_length(m, 128), out, err, sizeof(err)) != 0 || w->tokens == 0)
        goto out;
    for (size_t i = 0; i < total; ++i)
        m->centre[i] = from_bf16(to_bf16((float)(w->calib[i] / (double)w->tokens)));
    rc = 0;
out:
    if (rc != 0) {
        free(m->centre);
        m->centre = NULL;
    }
    if (w != NULL)
        free(w->calib);
    sg_e5_workspace_free(w);
    free(out);
    m->engine = engine;
    m->precision = precision;
    return rc;
}

int sg_e5_set_calibration_prefix(sg_e5_model *m, const char *prefix)
{
    char *p = strdup(prefix);
    if (p == NULL)
        return -1;
    free(m->calib_prefix);
    m->calib_prefix = p;
    return 0;
}

const char *const *sg__e5_calib_texts(size_t *n)
{
    *n = sizeof(calib_texts) / sizeof(calib_texts[0]);
    return calib_texts;
}

const float *sg__e5_int8_centre(const sg_e5_model *m, int layer, int which)
{
    if (m->centre == NULL || layer < 0 || layer >= m->cfg.layers || which < 0 || which >= N_PROD)
        return NULL;
    return m->centre + centre_offset(&m->cfg, layer, which);
}

/* The weights of layer L's product `which` as the own kernels take them: Q, K and V stacked; for
 * int8 with the product's centre. */
static int pack_product(const sg_e5_model *m, const layer_t *L, int which, int int8, sg_kern_f32w_t *pf, sg_kern_q8w_t *pq)
{
    const int h = m->cfg.hidden, inter = m->cfg.intermediate;
    const lin_t *all[4][3] = {{&L->q, &L->k, &L->v}, {&L->o}, {&L->inter}, {&L->out}};
    int parts = which == P_QKV ? 3 : 1;
    const float *w[3], *b[3];
    int n[3];
    for (int i = 0; i < parts; ++i) {
        w[i] = all[which][i]->w;
        b[i] = all[which][i]->b;
        n[i] = which == P_INTER ? inter : h;
    }
    const float *mu = int8 && (m->q8_scheme & SG__E5_Q8_CENTRE) && m->centre != NULL
                          ? m->centre + centre_offset(&m->cfg, (int)(L - m->layers), which)
                          : NULL;
    return int8 ? sg_kern_q8_pack(pq, parts, w, b, n, which == P_OUT ? inter : h, int8, mu, (m->q8_scheme & SG__E5_Q8_ROTATE) != 0)
                : sg_kern_f32_pack(pf, parts, w, b, n, which == P_OUT ? inter : h);
}

/* Packs every layer's weights for the own kernels: float32 (int8 = 0), or quantised to `int8` (8
 * or 7) bits. */
static int pack_layers(sg_e5_model *m, int int8, int keep_rows)
{
    const sg_e5_config *c = &m->cfg;
    for (int li = 0; li < c->layers; ++li) {
        layer_t *L = &m->layers[li];
        for (int p = 0; p < N_PROD; ++p) {
            if (pack_product(m, L, p, int8, &L->pf[p], &L->pq[p]) != 0)
                return -1;
            if (int8 && keep_rows && sg_kern_q8_keep_rows(&L->pq[p]) != 0)
                return -1;
        }
    }
    return 0;
}

static void unpack_layers(sg_e5_model *m)
{
    for (int li = 0; li < m->cfg.layers; ++li) {
        for (int p = 0; p < N_PROD; ++p) {
            sg_kern_f32_free(&m->layers[li].pf[p]);
            sg_kern_q8_free(&m->layers[li].pq[p]);
        }
    }
}

int sg_e5_use_kernels(sg_e5_model *m, int kern, char *err, size_t err_size)
{
    if (m->precision != SG_E5_FP32) {
        snprintf(err, err_size, "the own float32 kernels run float32 only");
        return -1;
    }
    if (!sg_kern_runs(kern, 0, m->features) || kern == SG_KERN_VNNI) {
        snprintf(err, err_size, "the %s float32 kernels cannot run on this CPU", sg_kern_name(kern));
        return -1;
    }
    if (m->engine == ENG_OWN && m->kern == kern)
        return 0;
    unpack_layers(m);
    if (pack_layers(m, 0, 0) != 0) {
        unpack_layers(m);
        snprintf(err, err_size, "out of memory packing the weights");
        return -1;
    }
    m->engine = ENG_OWN;
    m->kern = kern;
    m->f32_gemm = NULL;
    return 0;
}

/* oneDNN's int8 GEMM on a small product checked against the exact integers (as bf16's probe). */
static int probe_dnnl_q8(q8_gemm_fn gemm, char *err, size_t err_size)
{
    enum { M = 5, N = 33, K = 72 };
    uint8_t a[M * K];
    int8_t b[N * K];
    int32_t c[M * N], zero = 0;
    for (int i = 0; i < M * K; ++i)
        a[i] = (uint8_t)((i * 37 + 11) % 256);
    for (int i = 0; i < N * K; ++i)
        b[i] = (int8_t)((i * 53 % 255) - 127);
    int rc = gemm('N', 'T', 'F', M, N, K, 1.0f, a, K, 0, b, K, 0, 0.0f, c, N, &zero);
    if (rc != 0) {
        snprintf(err, err_size, "oneDNN cannot run int8 matrix products on this CPU (dnnl_gemm_u8s8s32 returned %d)", rc);
        return -1;
    }
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            int32_t want = 0;
            for (int k = 0; k < K; ++k)
                want += (int32_t)a[i * K + k] * b[j * K + k];
            if (c[i * N + j] != want) {
                snprintf(err, err_size,
                         "oneDNN's int8 product is not exact on this CPU (%d instead of %d: its kernels saturate without VNNI)",
                         (int)c[i * N + j], (int)want);
                return -1;
            }
        }
    }
    return 0;
}

int sg_e5_set_int8(sg_e5_model *m, int kern, int bits, char *err, size_t err_size)
{
    return sg__e5_set_int8_scheme(m, kern, bits, SG__E5_Q8_DEFAULT, err, err_size);
}

int sg__e5_set_int8_scheme(sg_e5_model *m, int kern, int bits, unsigned scheme, char *err, size_t err_size)
{
    if (bits != 8 && bits != 7) {
        snprintf(err, err_size, "int8 weights have 8 or 7 bits, not %d", bits);
        return -1;
    }
    if (m->precision == SG_E5_INT8 && m->kern == kern && m->layers[0].pq[0].bits == bits && m->q8_scheme == scheme)
        return 0;
    if (m->precision == SG_E5_BF16) {
        snprintf(err, err_size, "the model already runs in bf16");
        return -1;
    }
    q8_gemm_fn gemm = NULL;
    if (kern == SG_E5_INT8_ONEDNN) {
        void *h = open_dnnl(m, err, err_size);
        if (h == NULL)
            return -1;
        if ((gemm = (q8_gemm_fn)dlsym(h, "dnnl_gemm_u8s8s32")) == NULL) {
            snprintf(err, err_size, "this oneDNN has no dnnl_gemm_u8s8s32");
            return -1;
        }
        if (probe_dnnl_q8(gemm, err, err_size) != 0)
            return -1;
    } else if (kern == SG_KERN_AVX512 || !sg_kern_runs(kern, 1, m->features)) {
        snprintf(err, err_size, "the %s int8 kernels cannot run on this CPU", sg_kern_name(kern));
        return -1;
    }
    if ((scheme & SG__E5_Q8_CENTRE) && m->centre == NULL && calibrate(m) != 0) {
        snprintf(err, err_size, "out of memory calibrating the int8 centres");
        return -1;
    }
    unpack_layers(m);
    m->q8_scheme = scheme;
    if (pack_layers(m, bits, kern == SG_E5_INT8_ONEDNN) != 0) {
        unpack_layers(m);
        snprintf(err, err_size, "out of memory for the int8 weights");
        return -1;
    }
    if (m->precision == SG_E5_INT8) /* another scheme: drop the old suffix */
        *strrchr(m->identity, '.') = '\0';
    size_t l = strlen(m->identity); /* .int8, w7 for 7-bit weights, then the scheme's letters */
    snprintf(m->identity + l, sizeof(m->identity) - l, ".int8%s%s%s%s", bits == 7 ? "w7" : "",
             (scheme & SG__E5_Q8_CENTRE) ? "c" : "", (scheme & SG__E5_Q8_ROTATE) ? "r" : "",
             (scheme & SG__E5_Q8_SPLIT_OUT) ? "s" : "");
    m->precision = SG_E5_INT8;
    m->engine = ENG_INT8;
    m->kern = kern;
    m->q8_gemm = gemm;
    m->f32_gemm = NULL;
    return 0;
}

int sg_e5_set_precision(sg_e5_model *m, int precision, char *err, size_t err_size)
{
    if (precision == SG_E5_FP32) {
        if (m->precision != SG_E5_FP32) {
            snprintf(err, err_size, "the model already runs in %s", m->precision == SG_E5_BF16 ? "bf16" : "int8");
            return -1;
        }
        return 0;
    }
    if (precision == SG_E5_INT8) {
        int kern = sg_kern_q8_best(m->features);
        return sg_e5_set_int8(m, kern, kern == SG_KERN_AVX2 ? 7 : 8, err, err_size);
    }
    if (precision != SG_E5_BF16) {
        snprintf(err, err_size, "unknown precision %d", precision);
        return -1;
    }
    return set_bf16(m, 0, err, err_size);
}

int sg__e5_set_bf16_reference(sg_e5_model *m, char *err, size_t err_size)
{
    return set_bf16(m, 1, err, err_size);
}

int sg_e5_precision(const sg_e5_model *m)
{
    return m->precision;
}

int sg_e5_kernel(const sg_e5_model *m)
{
    return m->engine == ENG_BLAS ? SG_KERN_NONE : m->kern;
}

uint32_t sg_e5_features(const sg_e5_model *m)
{
    return m->features;
}

const char *sg_e5_engine(const sg_e5_model *m, char *buf, size_t size)
{
    const char *prec = m->precision == SG_E5_BF16 ? "bf16" : m->precision == SG_E5_INT8 ? "int8" : "float32";
    int bits = m->engine == ENG_INT8 ? m->layers[0].pq[0].bits : 0;
    const unsigned sc = m->q8_scheme;
    char scheme[128];
    snprintf(scheme, sizeof(scheme), "%s%s%s%s", (sc & SG__E5_Q8_CENTRE) ? "; inputs centred" : "",
             (sc & SG__E5_Q8_ROTATE) ? ((sc & SG__E5_Q8_CENTRE) ? " and rotated" : "; inputs rotated") : "",
             (sc & SG__E5_Q8_SPLIT_OUT) ? "; the FFN output's input in two int8 terms" : "",
             sc == 0 ? "; plain per-channel / per-token" : "");
    if (m->engine == ENG_INT8 && m->kern == SG_E5_INT8_ONEDNN)
        snprintf(buf, size, "int8 (%d-bit weights) through oneDNN's dnnl_gemm_u8s8s32%s", bits, scheme);
    else if (m->engine == ENG_INT8)
        snprintf(buf, size, "int8 (%d-bit weights), own %s kernels%s", bits, sg_kern_name(m->kern), scheme);
    else if (m->engine != ENG_BLAS)
        snprintf(buf, size, "%s, own %s kernels over weights packed at load", prec, sg_kern_name(m->kern));
    else if (m->precision == SG_E5_BF16)
        snprintf(buf, size, "bf16 through %s", m->bf16_gemm != NULL ? "oneDNN" : "the reference kernel (bf16 operands, sgemm)");
    else
        snprintf(buf, size, "float32 through %s", m->f32_gemm != NULL ? "oneDNN's sgemm" : "OpenBLAS sgemm");
    return buf;
}

uint64_t sg_e5_workspace_tokens(const sg_e5_workspace *w)
{
    return w->tokens;
}

const char *sg_e5_step_name(int step)
{
    static const char *const names[SG_E5_STEPS] = {"tokenize", "embed", "qkv", "attention", "o", "inter", "out", "pool"};
    return step >= 0 && step < SG_E5_STEPS ? names[step] : "?";
}

void sg_e5_workspace_step_ns(const sg_e5_workspace *w, uint64_t ns[SG_E5_STEPS])
{
    memcpy(ns, w->step_ns, sizeof(w->step_ns));
}
