/*
 * gen_scale.c -- the data of the local backend's cost curves (tests/bench/local/scale.py): a
 * wiki-18 shaped corpus of N rows and its FAISS Flat IP index, N up to tens of millions, in
 * bounded memory and in one pass. Not a test.
 *
 *     local_bench_gen --rows N --out-dir DIR [--dim 768] [--seed 1] [--threads T]
 *       -> DIR/wiki-N.jsonl, DIR/flat-N.index   (written under temporary names, then renamed)
 *
 * Vectors. Not uniform noise: e5 embeddings are anisotropic (two random passages have cosine
 * ~0.7) and clustered by subject, with a low intrinsic dimension inside a subject. Each row is
 *
 *     x = normalise( m*u  +  a*t[k]  +  b*s[k][j]  +  c*U[k] z  +  e*g )
 *
 * u one shared direction; t[k] the direction of topic k (1024 topics, Zipf-distributed sizes,
 * exponent 0.8); s[k][j] one of 32 sub-topic directions of topic k (uniform); U[k] a random
 * 768 x 16 basis of topic k with z ~ N(0, diag(1/(1 + i/4))) -- variation along a few
 * topic-specific axes; g isotropic Gaussian noise. All directions are random unit vectors of a
 * seeded generator. Weights (expected squared norms): m^2 0.70, a^2 0.08, b^2 0.06, c^2 0.12,
 * e^2 0.04, so random pairs have cosine ~0.70, pairs of one topic ~0.78, of one sub-topic ~0.84
 * plus their agreement along U[k] (the tool prints the measured values). Row r draws from its own
 * generator (seed, r): the first M rows are the same whatever N is.
 *
 * Text. ~100 words a row (title of 1-3 words, then title + 100 words; 70 % of the words from a
 * 64-word vocabulary of the row's topic, the rest from the whole list), words from the fixture
 * vocabulary, the JSON of wiki-18: {"id": "r", "contents": "\"Title\"\nTitle words..."}.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TOPICS 1024
#define SUBS 32
#define RANK 16
#define TOPIC_WORDS 64
#define BLOCK 16384
#define PROBES 64

static const double W_MEAN = 0.70, W_TOPIC = 0.08, W_SUB = 0.06, W_LOW = 0.12, W_NOISE = 0.04;

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct st_rng_t {
    uint64_t s;
    int have;
    double spare;
} rng_t;

static uint64_t next_u64(rng_t *r)
{
    return mix(r->s++);
}

static double uniform(rng_t *r) /* (0, 1) */
{
    return ((double)(next_u64(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double gauss(rng_t *r)
{
    if (r->have) {
        r->have = 0;
        return r->spare;
    }
    double u = uniform(r), v = uniform(r);
    double m = sqrt(-2.0 * log(u));
    r->spare = m * sin(6.283185307179586 * v);
    r->have = 1;
    return m * cos(6.283185307179586 * v);
}

static rng_t rng_for(uint64_t seed, uint64_t stream)
{
    rng_t r = {mix(seed * 0x2545f4914f6cdd1dull ^ mix(stream)), 0, 0};
    return r;
}

static void unit_vector(rng_t *r, float *v, int d)
{
    double n = 0;
    for (int i = 0; i < d; ++i) {
        v[i] = (float)gauss(r);
        n += (double)v[i] * v[i];
    }
    float inv = (float)(1.0 / sqrt(n));
    for (int i = 0; i < d; ++i)
        v[i] *= inv;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct st_model_t {
    int d;
    float *u;     /* d */
    float *topic; /* TOPICS x d */
    float *sub;   /* TOPICS x SUBS x d */
    float *basis; /* TOPICS x d x RANK (row-major: d rows of RANK) */
    double *cdf;  /* TOPICS, Zipf */
    float sigma[RANK];
    float c_low, e_noise;
    char **words;
    size_t n_words;
    uint32_t *topic_words; /* TOPICS x TOPIC_WORDS indices into words */
} model_t;

static int load_words(model_t *m, const char *path)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        fprintf(stderr, "gen: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[256];
    size_t cap = 0;
    while (fgets(line, sizeof(line), fp) != NULL) {
        size_t l = strcspn(line, "\r\n");
        line[l] = '\0';
        int ok = l >= 3;
        for (size_t i = 0; i < l && ok; ++i)
            ok = line[i] >= 'a' && line[i] <= 'z';
        if (!ok)
            continue;
        if (m->n_words == cap) {
            cap = cap ? cap * 2 : 4096;
            m->words = realloc(m->words, cap * sizeof(char *));
        }
        m->words[m->n_words++] = strdup(line);
    }
    fclose(fp);
    if (m->n_words < 100) {
        fprintf(stderr, "gen: %s has too few words\n", path);
        return -1;
    }
    return 0;
}

static void build_model(model_t *m, int d, uint64_t seed)
{
    m->d = d;
    m->u = malloc((size_t)d * sizeof(float));
    m->topic = malloc((size_t)TOPICS * (size_t)d * sizeof(float));
    m->sub = malloc((size_t)TOPICS * SUBS * (size_t)d * sizeof(float));
    m->basis = malloc((size_t)TOPICS * (size_t)d * RANK * sizeof(float));
    m->cdf = malloc(TOPICS * sizeof(double));
    m->topic_words = malloc((size_t)TOPICS * TOPIC_WORDS * sizeof(uint32_t));
    if (!m->u || !m->topic || !m->sub || !m->basis || !m->cdf || !m->topic_words)
        abort();
    rng_t r = rng_for(seed, 0xfeedull);
    unit_vector(&r, m->u, d);
#pragma omp parallel for schedule(static)
    for (int k = 0; k < TOPICS; ++k) {
        rng_t tr = rng_for(seed, 0x100000ull + (uint64_t)k);
        unit_vector(&tr, m->topic + (size_t)k * d, d);
        for (int j = 0; j < SUBS; ++j)
            unit_vector(&tr, m->sub + ((size_t)k * SUBS + j) * d, d);
        float *b = m->basis + (size_t)k * d * RANK;
        for (size_t i = 0; i < (size_t)d * RANK; ++i)
            b[i] = (float)(gauss(&tr) / sqrt((double)d));
        for (int w = 0; w < TOPIC_WORDS; ++w)
            m->topic_words[k * TOPIC_WORDS + w] = (uint32_t)(next_u64(&tr) % m->n_words);
    }
    double tot = 0;
    for (int k = 0; k < TOPICS; ++k) {
        tot += pow(k + 1.0, -0.8);
        m->cdf[k] = tot;
    }
    for (int k = 0; k < TOPICS; ++k)
        m->cdf[k] /= tot;
    double var = 0;
    for (int i = 0; i < RANK; ++i) {
        m->sigma[i] = (float)sqrt(1.0 / (1.0 + i / 4.0));
        var += (double)m->sigma[i] * m->sigma[i];
    }
    m->c_low = (float)sqrt(W_LOW / var);
    m->e_noise = (float)sqrt(W_NOISE / d);
}

static int pick_topic(const model_t *m, double u)
{
    int lo = 0, hi = TOPICS - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (m->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Row `row`: its vector into x (d floats) and its JSON line into buf (returns the length). */
static size_t make_row(const model_t *m, uint64_t seed, int64_t row, float *x, char *buf, size_t cap)
{
    const int d = m->d;
    rng_t r = rng_for(seed, 0x1000000000ull + (uint64_t)row);
    int k = pick_topic(m, uniform(&r));
    int j = (int)(next_u64(&r) % SUBS);
    float z[RANK];
    for (int i = 0; i < RANK; ++i)
        z[i] = (float)gauss(&r) * m->sigma[i] * m->c_low;
    const float *t = m->topic + (size_t)k * d, *s = m->sub + ((size_t)k * SUBS + j) * d, *b = m->basis + (size_t)k * d * RANK;
    const float wm = (float)sqrt(W_MEAN), wt = (float)sqrt(W_TOPIC), ws = (float)sqrt(W_SUB);
    double n = 0;
    for (int i = 0; i < d; ++i) {
        float low = 0;
        for (int q = 0; q < RANK; ++q)
            low += b[(size_t)i * RANK + q] * z[q];
        float v = wm * m->u[i] + wt * t[i] + ws * s[i] + low + m->e_noise * (float)gauss(&r);
        x[i] = v;
        n += (double)v * v;
    }
    float inv = (float)(1.0 / sqrt(n));
    for (int i = 0; i < d; ++i)
        x[i] *= inv;
    /* text */
    char title[96];
    size_t tl = 0;
    int nt = 1 + (int)(next_u64(&r) % 3);
    for (int w = 0; w < nt; ++w) {
        const char *word = m->words[m->topic_words[k * TOPIC_WORDS + (next_u64(&r) % TOPIC_WORDS)]];
        int l = snprintf(title + tl, sizeof(title) - tl, "%s%c%s", w ? " " : "", word[0] - 'a' + 'A', word + 1);
        if (l < 0 || (size_t)l >= sizeof(title) - tl)
            break;
        tl += (size_t)l;
    }
    size_t o = (size_t)snprintf(buf, cap, "{\"id\": \"%lld\", \"contents\": \"\\\"%s\\\"\\n%s", (long long)row, title, title);
    for (int w = 0; w < 100 && o + 64 < cap; ++w) {
        uint64_t p = next_u64(&r);
        const char *word =
            (p % 10) < 7 ? m->words[m->topic_words[k * TOPIC_WORDS + ((p >> 8) % TOPIC_WORDS)]] : m->words[(p >> 8) % m->n_words];
        o += (size_t)snprintf(buf + o, cap - o, " %s", word);
    }
    o += (size_t)snprintf(buf + o, cap - o, "\"}\n");
    return o;
}

static int write_all(FILE *fp, const void *p, size_t n)
{
    return fwrite(p, 1, n, fp) == n ? 0 : -1;
}

int main(int argc, char **argv)
{
    long long rows = 0;
    int d = 768, threads = 0;
    unsigned long long seed = 1;
    const char *dir = NULL, *vocab = SG_FIXTURES "/e5-tiny/vocab.txt";
    for (int i = 1; i + 1 < argc; i += 2) {
        char *end;
        if (strcmp(argv[i], "--rows") == 0)
            rows = strtoll(argv[i + 1], &end, 10);
        else if (strcmp(argv[i], "--dim") == 0)
            d = (int)strtol(argv[i + 1], &end, 10);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], &end, 10);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = (int)strtol(argv[i + 1], &end, 10);
        else if (strcmp(argv[i], "--out-dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--vocab") == 0)
            vocab = argv[i + 1];
        else {
            fprintf(stderr, "gen: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (rows < 1 || d < 8 || d > 65536 || dir == NULL) {
        fprintf(stderr, "usage: local_bench_gen --rows N --out-dir DIR [--dim 768] [--seed 1] [--threads T] [--vocab FILE]\n");
        return 2;
    }
    if (threads > 0)
        omp_set_num_threads(threads);
    openblas_set_num_threads(1);
    model_t m;
    memset(&m, 0, sizeof(m));
    if (load_words(&m, vocab) != 0)
        return 1;
    build_model(&m, d, seed);
    char corpus[4096], index[4096], tc[4200], ti[4200];
    snprintf(corpus, sizeof(corpus), "%s/wiki-%lld.jsonl", dir, rows);
    snprintf(index, sizeof(index), "%s/flat-%lld.index", dir, rows);
    snprintf(tc, sizeof(tc), "%s.tmp", corpus);
    snprintf(ti, sizeof(ti), "%s.tmp", index);
    FILE *fc = fopen(tc, "w"), *fi = fopen(ti, "w");
    if (fc == NULL || fi == NULL) {
        fprintf(stderr, "gen: cannot create files in %s: %s\n", dir, strerror(errno));
        return 1;
    }
    /* IndexFlatIP: "IxFI", int32 d, int64 ntotal, int64 1<<20 twice, bool is_trained, int32 metric (0), uint64 floats */
    unsigned char h[45];
    int32_t d32 = d, metric = 0;
    int64_t nt = rows, dummy = 1 << 20;
    uint64_t nf = (uint64_t)rows * (uint64_t)d;
    memcpy(h, "IxFI", 4);
    memcpy(h + 4, &d32, 4);
    memcpy(h + 8, &nt, 8);
    memcpy(h + 16, &dummy, 8);
    memcpy(h + 24, &dummy, 8);
    h[32] = 1;
    memcpy(h + 33, &metric, 4);
    memcpy(h + 37, &nf, 8);
    if (write_all(fi, h, sizeof(h)) != 0)
        return 1;
    const size_t line_cap = 2048;
    float *x = malloc((size_t)BLOCK * (size_t)d * sizeof(float));
    char *text = malloc((size_t)BLOCK * line_cap);
    size_t *tlen = malloc(BLOCK * sizeof(size_t));
    float *probe = malloc((size_t)PROBES * (size_t)d * sizeof(float));
    float *sims = malloc((size_t)PROBES * BLOCK * sizeof(float));
    double best[PROBES];
    int n_probe = rows < PROBES ? (int)rows : PROBES;
    if (!x || !text || !tlen || !probe || !sims)
        abort();
    for (int p = 0; p < PROBES; ++p)
        best[p] = -2;
    double pair_sum = 0;
    long long pairs = 0, bytes = 0;
    double t0 = now_s(), last = t0;
    for (long long r0 = 0; r0 < rows; r0 += BLOCK) {
        int n = rows - r0 < BLOCK ? (int)(rows - r0) : BLOCK;
#pragma omp parallel for schedule(static)
        for (int i = 0; i < n; ++i)
            tlen[i] = make_row(&m, seed, r0 + i, x + (size_t)i * d, text + (size_t)i * line_cap, line_cap);
        if (r0 == 0)
            memcpy(probe, x, (size_t)n_probe * (size_t)d * sizeof(float));
        /* statistics: nearest neighbour of the probe rows (rows 0..63) among all others, and random pairs */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_probe, n, d, 1.0f, probe, d, x, d, 0.0f, sims, n);
        for (int p = 0; p < n_probe; ++p)
            for (int i = 0; i < n; ++i)
                if (r0 + i != p && sims[(size_t)p * n + i] > best[p])
                    best[p] = sims[(size_t)p * n + i];
        for (int i = 0; i + 1 < n && i < 512; i += 2) {
            pair_sum += cblas_sdot(d, x + (size_t)i * d, 1, x + (size_t)(i + 1) * d, 1);
            ++pairs;
        }
        for (int i = 0; i < n; ++i) {
            if (write_all(fc, text + (size_t)i * line_cap, tlen[i]) != 0) {
                fprintf(stderr, "gen: write error: %s\n", strerror(errno));
                return 1;
            }
            bytes += (long long)tlen[i];
        }
        if (write_all(fi, x, (size_t)n * (size_t)d * sizeof(float)) != 0) {
            fprintf(stderr, "gen: write error: %s\n", strerror(errno));
            return 1;
        }
        double t = now_s();
        if (t - last > 10 || r0 + n == rows) {
            fprintf(stderr, "gen: %lld/%lld rows, %.0f rows/s\n", r0 + n, rows, (double)(r0 + n) / (t - t0));
            last = t;
        }
    }
    if (fclose(fc) != 0 || fclose(fi) != 0 || rename(tc, corpus) != 0 || rename(ti, index) != 0) {
        fprintf(stderr, "gen: cannot finish the files: %s\n", strerror(errno));
        return 1;
    }
    double nn = 0;
    for (int p = 0; p < n_probe; ++p)
        nn += best[p];
    printf("{\"rows\": %lld, \"dim\": %d, \"corpus\": \"%s\", \"index\": \"%s\", \"corpus_bytes\": %lld, "
           "\"mean_random_pair_cosine\": %.4f, \"mean_nearest_neighbour_cosine\": %.4f, \"seconds\": %.1f}\n",
           rows, d, corpus, index, bytes, pairs ? pair_sum / (double)pairs : 0.0, n_probe > 1 ? nn / n_probe : 0.0, now_s() - t0);
    return 0;
}
