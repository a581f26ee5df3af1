/*
 * test_gpu_module.c -- checks a build of the CUDA module (sg_cuda.h) against the CPU
 * implementations it replaces: the e5 encoder (sg_e5) and FAISS's exact flat search. The same
 * program runs against the real build/plugins/sg_local_cuda.so on a GPU machine (CTest label
 * "gpu"; exit 77 = skipped when there is no GPU) and against the CPU emulation of the module
 * (tests/gpu/emu, label "gpu-emu") everywhere, so the module's own code is exercised here too.
 *
 *   test_gpu_module MODULE probe
 *   test_gpu_module MODULE encoder MODEL_DIR [MAX_LEN [GOLDEN_TEXTS]]
 *   test_gpu_module MODULE flat ROWS DIM QUERIES MAX_QUERIES
 *   test_gpu_module MODULE random ROWS DIM QUERIES
 *   test_gpu_module MODULE memory MODEL_DIR
 *   test_gpu_module MODULE sticky MODEL_DIR
 *
 * encoder: every text of tests/fixtures/e5-tiny/golden.jsonl (or the first GOLDEN_TEXTS) plus long
 *   and one-word texts, encoded by the CPU and on every GPU, whole, one at a time and in many small
 *   forward passes;
 *   cosine >= 0.999 per query (fp16 weights) and the same vector whatever the batch.
 * flat: FAISS Flat IP and L2 files written here, searched by FAISS (exact fp32) and on the GPUs,
 *   sharded over all of them and on one: per rank the same id, or a near-tie (the exact scores
 *   differ by less than the fp16 error bound); recall@k printed; self-queries find their row in
 *   every shard; one query at a time (streaming kernel) and many (GEMM); k = 1 and k = 1024;
 *   calls larger than max_queries; exact fp32 re-scoring gives FAISS's ids.
 * random: vectors generated on the GPUs, regenerated here bit for bit, searched both ways.
 * memory: indexes and workspaces that do not fit fail before allocating, with the sizes.
 * sticky: after a sticky CUDA error on GPU 0 (injected: SG_CUDA_EMU_FAULT=embed_ln:2 makes the
 *   emulation's second embed_ln launch fault; skipped without it, e.g. on a real module) every
 *   later call on GPU 0 fails with it, device_error() names it, GPU 1 goes on.
 */
#include "e5.h"
#include "faissidx.h"
#include "gpuhost.h"
#include "loader.h"
#include "../local/testutil.h"

#include <float.h>
#include <math.h>
#include <time.h>

static const sg_cuda_api *api;
static int n_gpus;
static int failures;

#define CHECK(cond, ...)                                                                                                           \
    do {                                                                                                                           \
        if (!(cond)) {                                                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                                        \
            fprintf(stderr, __VA_ARGS__);                                                                                          \
            fprintf(stderr, "\n");                                                                                                 \
            if (++failures > 20)                                                                                                   \
                exit(1);                                                                                                           \
        }                                                                                                                          \
    } while (0)

#define MUST(cond, ...)                                                                                                            \
    do {                                                                                                                           \
        if (!(cond)) {                                                                                                             \
            fprintf(stderr, "FATAL %s:%d: ", __FILE__, __LINE__);                                                                  \
            fprintf(stderr, __VA_ARGS__);                                                                                          \
            fprintf(stderr, "\n");                                                                                                 \
            exit(1);                                                                                                               \
        }                                                                                                                          \
    } while (0)

static char *mk_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof(tmpl), "%s/sggpu-XXXXXX", base != NULL && base[0] != '\0' ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d != NULL ? strdup(d) : NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float gauss(void)
{
    /* sum of 4 uniforms: cheap, roughly normal, deterministic */
    float s = 0;
    for (int i = 0; i < 4; ++i) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        s += (float)(rng >> 40) / 16777216.0f - 0.5f;
    }
    return s;
}

static void normalize(float *v, int d)
{
    double n = 0;
    for (int i = 0; i < d; ++i)
        n += (double)v[i] * v[i];
    n = sqrt(n);
    for (int i = 0; i < d; ++i)
        v[i] = (float)(v[i] / n);
}

static int *all_gpus(void)
{
    int *g = malloc(sizeof(int) * (size_t)(n_gpus + 1));
    for (int i = 0; i < n_gpus; ++i)
        g[i] = i;
    return g;
}

/* ---- encoder ---- */

static double cosine(const float *a, const float *b, int d)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < d; ++i) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb);
}

static int suite_encoder(const char *model_dir, uint32_t max_len, size_t golden)
{
    char err[1024];
    sg_e5_model *m;
    MUST(sg_e5_load(model_dir, &m, err, sizeof(err)) == 0, "%s", err);
    const sg_e5_config *c = sg_e5_get_config(m);
    const int h = c->hidden;
    max_len = sg_e5_max_length(m, max_len);
    /* texts: the golden set, plus edge cases */
    char *gold_path = tu_path(SG_FIXTURES, "e5-tiny/golden.jsonl");
    char *gold = tu_read_file(gold_path, NULL);
    MUST(gold != NULL, "cannot read %s", gold_path);
    char *texts[128];
    size_t lens_txt[128], n = 0;
    for (char *line = strtok(gold, "\n"); line != NULL && n < golden && n < 100; line = strtok(NULL, "\n"))
        if ((texts[n] = tu_json_string_field(line, "text", &lens_txt[n])) != NULL)
            ++n;
    const char *extra[] = {"a", "who wrote the play hamlet", "", "Zürich 東京 naïve résumé ÅÄÖ"};
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); ++i) {
        texts[n] = strdup(extra[i]);
        lens_txt[n++] = strlen(extra[i]);
    }
    size_t big = 6000; /* far past max_len tokens: truncated */
    texts[n] = malloc(big + 1);
    for (size_t i = 0; i < big; ++i)
        texts[n][i] = "lorem ipsum dolor sit amet "[i % 27];
    texts[n][big] = '\0';
    lens_txt[n++] = big;
    int32_t *ids = malloc(sizeof(int32_t) * n * max_len);
    const int32_t **idp = malloc(sizeof(*idp) * n);
    uint32_t *lens = malloc(sizeof(uint32_t) * n), longest = 0;
    for (size_t i = 0; i < n; ++i) {
        int k = sg_e5_tokenize(m, "query: ", texts[i], lens_txt[i], max_len, ids + i * max_len);
        MUST(k > 0, "tokenize %zu", i);
        lens[i] = (uint32_t)k;
        idp[i] = ids + i * max_len;
        longest = lens[i] > longest ? lens[i] : longest;
    }
    CHECK(longest == max_len, "the long text should fill max_len (%u of %u)", longest, max_len);
    float *cpu = malloc(sizeof(float) * n * (size_t)h), *gpu = malloc(sizeof(float) * n * (size_t)h),
          *one = malloc(sizeof(float) * (size_t)h);
    sg_e5_workspace *ws = sg_e5_workspace_new(m);
    MUST(sg_e5_encode_ids(ws, idp, lens, n, cpu, err, sizeof(err)) == 0, "%s", err);
    sg_e5_embedding_weights emb;
    sg_e5_get_embedding_weights(m, &emb);
    sg_e5_layer_weights *lw = calloc((size_t)c->layers + 1, sizeof(*lw));
    for (int i = 0; i < c->layers; ++i)
        sg_e5_get_layer_weights(m, i, &lw[i]);
    double worst_cos = 1, worst_abs = 0;
    for (int g = 0; g < n_gpus; ++g) {
        /* a workspace large enough for everything in one pass, and one that needs many passes */
        const uint32_t shapes[2][2] = {{max_len * 64, 64}, {max_len, 3}};
        for (int sh = 0; sh < (g == 0 ? 2 : 1); ++sh) { /* the many-pass workspace on GPU 0 only */
            sg_cuda_encoder_desc d = {sizeof(d), g, c, &emb, lw, max_len, shapes[sh][0], shapes[sh][1]};
            sg_cuda_encoder *e;
            sg_cuda_encoder_ws *w;
            double t0 = now_s();
            MUST(api->encoder_create(&d, &e, err, sizeof(err)) == 0, "%s", err);
            MUST(api->encoder_ws_create(e, &w, err, sizeof(err)) == 0, "%s", err);
            MUST(api->encode_ids(w, idp, lens, n, gpu, err, sizeof(err)) == 0, "%s", err);
            double t1 = now_s();
            for (size_t i = 0; i < n; ++i) {
                double cs = cosine(cpu + i * h, gpu + i * h, h), nn = cosine(gpu + i * h, gpu + i * h, h);
                double norm = 0;
                for (int j = 0; j < h; ++j) {
                    double a = fabs((double)cpu[i * h + j] - gpu[i * h + j]);
                    worst_abs = a > worst_abs ? a : worst_abs;
                    norm += (double)gpu[i * h + j] * gpu[i * h + j];
                }
                (void)nn;
                worst_cos = cs < worst_cos ? cs : worst_cos;
                CHECK(cs >= 0.999, "GPU %d, text %zu (%u tokens): cosine %.6f to the CPU encoder", g, i, lens[i], cs);
                CHECK(fabs(sqrt(norm) - 1) < 1e-3, "GPU %d, text %zu: norm %.6f", g, i, sqrt(norm));
            }
            /* one at a time: the same vectors (padding is masked) */
            for (size_t i = 0; i < n; i += 7) {
                MUST(api->encode_ids(w, &idp[i], &lens[i], 1, one, err, sizeof(err)) == 0, "%s", err);
                double cs = cosine(one, gpu + i * h, h);
                CHECK(cs >= 0.9999, "GPU %d, text %zu alone vs in a batch: cosine %.7f", g, i, cs);
            }
            printf("encoder on GPU %d, %u tokens/%u sequences per pass: %zu texts in %.3f s\n", g, shapes[sh][0], shapes[sh][1], n,
                   t1 - t0);
            /* bad input is refused, not run */
            uint32_t zero = 0, toolong = max_len + 1;
            int32_t bad_id = c->vocab;
            const int32_t *bp = &bad_id;
            uint32_t one_len = 1;
            CHECK(api->encode_ids(w, idp, &zero, 1, one, err, sizeof(err)) == -1 && strstr(err, "0 tokens") != NULL, "%s", err);
            if (toolong <= (uint32_t)c->max_positions)
                CHECK(api->encode_ids(w, idp, &toolong, 1, one, err, sizeof(err)) == -1, "a too long sequence was accepted");
            CHECK(api->encode_ids(w, &bp, &one_len, 1, one, err, sizeof(err)) == -1 && strstr(err, "vocabulary") != NULL, "%s",
                  err);
            api->encoder_ws_destroy(w);
            api->encoder_destroy(e);
        }
    }
    printf("encoder vs CPU over %zu texts on %d GPU(s): min cosine %.7f, max |diff| %.2e\n", n, n_gpus, worst_cos, worst_abs);
    sg_e5_workspace_free(ws);
    for (size_t i = 0; i < n; ++i)
        free(texts[i]);
    free(lw);
    free(cpu);
    free(gpu);
    free(one);
    free(ids);
    free(idp);
    free(lens);
    free(gold);
    free(gold_path);
    sg_e5_free(m);
    return 0;
}

/* ---- flat search ---- */

typedef struct {
    int64_t rows;
    int dim, metric;
    const float *x;
} data_t;

static double exact(const data_t *D, const float *q, int64_t label)
{
    const float *r = D->x + label * D->dim;
    double s = 0;
    for (int j = 0; j < D->dim; ++j)
        s += D->metric == SG_GPU_L2 ? ((double)q[j] - r[j]) * ((double)q[j] - r[j]) : (double)q[j] * r[j];
    return s;
}

/* The GPU's ranking against FAISS's: per rank the same id, or ids whose exact scores differ by
 * less than `tol` (a near-tie at fp16 precision); the GPU's distances within `tol` of the exact
 * ones. Returns the recall (shared ids / k). */
static double compare(const data_t *D, const float *queries, size_t nq, int k, const int64_t *want, const float *want_d,
                      const int64_t *got, const float *got_d, double tol, const char *what)
{
    size_t shared = 0, total = 0;
    for (size_t q = 0; q < nq; ++q) {
        const float *qv = queries + q * (size_t)D->dim;
        for (int i = 0; i < k; ++i) {
            int64_t w = want[q * k + i], g = got[q * k + i];
            if (w < 0) {
                CHECK(g < 0, "%s: query %zu rank %d: GPU found %lld where FAISS found nothing", what, q, i, (long long)g);
                continue;
            }
            ++total;
            CHECK(g >= 0 && g < D->rows, "%s: query %zu rank %d: label %lld", what, q, i, (long long)g);
            if (g < 0 || g >= D->rows)
                continue;
            for (int j = 0; j < k; ++j)
                if (want[q * k + j] == g)
                    ++shared;
            double eg = exact(D, qv, g);
            CHECK(fabs(eg - got_d[q * k + i]) <= tol, "%s: query %zu rank %d: GPU distance %.6f, exact %.6f", what, q, i,
                  got_d[q * k + i], eg);
            if (g != w)
                CHECK(fabs(eg - (double)want_d[q * k + i]) <= tol,
                      "%s: query %zu rank %d: GPU id %lld (exact %.6f) vs FAISS id %lld (%.6f): not a near-tie", what, q, i,
                      (long long)g, eg, (long long)w, want_d[q * k + i]);
            for (int j = 0; j < i; ++j)
                CHECK(got[q * k + j] != g, "%s: query %zu: id %lld twice", what, q, (long long)g);
        }
    }
    return total > 0 ? (double)shared / (double)total : 1.0;
}

static void gpu_search(sg_cuda_flat *f, const data_t *D, size_t nq, const float *q, int k, float *dist, int64_t *lab)
{
    char err[1024];
    float *keys = malloc(sizeof(float) * nq * (size_t)k + 4);
    MUST(api->flat_search(f, nq, q, k, keys, lab, err, sizeof(err)) == 0, "%s", err);
    sg_gpu_keys_to_dist(D->metric, q, D->dim, nq, k, keys, lab, dist);
    free(keys);
}

static int suite_flat(int64_t rows, int dim, size_t nq, uint32_t max_q)
{
    char *dir = mk_tmpdir();
    float *x = malloc(sizeof(float) * (size_t)rows * (size_t)dim);
    for (int64_t r = 0; r < rows; ++r) {
        for (int j = 0; j < dim; ++j)
            x[r * dim + j] = gauss();
        normalize(x + r * dim, dim);
    }
    /* queries: noisy copies of rows spread over every shard, a few exact copies, and noise */
    float *q = malloc(sizeof(float) * nq * (size_t)dim);
    int64_t *self = malloc(sizeof(int64_t) * nq);
    for (size_t i = 0; i < nq; ++i) {
        self[i] = i == 0 ? 0 : i == 1 ? rows - 1 : (int64_t)((i * 7919u) % (uint64_t)rows);
        float noise = i < 16 ? 0.0f : i % 3 == 0 ? 1.0f : 0.05f;
        for (int j = 0; j < dim; ++j)
            q[i * dim + j] = x[self[i] * dim + j] + noise * gauss() / sqrtf((float)dim);
        normalize(q + i * dim, dim);
    }
    const int ks[] = {10, 1, 100};
    int *gpus = all_gpus();
    for (int metric = 0; metric < 2; ++metric) {
        data_t D = {rows, dim, metric == 0 ? SG_GPU_IP : SG_GPU_L2, x};
        char name[64];
        snprintf(name, sizeof(name), "flat-%s.index", metric == 0 ? "ip" : "l2");
        char *path = tu_path(dir, name), err[1024];
        void *w;
        MUST(sg_fidx_create("Flat", dim, metric == 0 ? SG_FIDX_IP : SG_FIDX_L2, &w, err, sizeof(err)) == 0, "%s", err);
        MUST(sg_fidx_add(w, (size_t)rows, x, err, sizeof(err)) == 0, "%s", err);
        MUST(sg_fidx_write(w, path, err, sizeof(err)) == 0, "%s", err);
        sg_fidx_free(w);
        sg_fidx_t cpu;
        MUST(sg_fidx_open(path, NULL, &cpu, err, sizeof(err)) == 0, "%s", err);
        /* fp16 storage and fp16 queries: |q.x - q~.x~| <= ~2^-10 for unit vectors; L2 keys are 2 q.x */
        const double tol = metric == 0 ? 2e-3 : 4e-3;
        /* A: sharded over every GPU, default score budget (one tile per shard at these sizes): every check.
         * B: one GPU, 16 queries per call and a score budget of rows/40 rows: many tiles, chunks shorter than
         *    k = 1024 (padded), several reduction levels, the streaming kernel over several tiles. */
        for (int mode = 0; mode < 2; ++mode) {
            const int full = mode == 0, n_dev = mode == 0 ? n_gpus : 1;
            const uint32_t mq = mode == 0 ? max_q : 16;
            const uint64_t budget = mode == 0 ? 0 : (uint64_t)mq * sizeof(float) * (uint64_t)(rows / 40 > 0 ? rows / 40 : 1);
            const size_t nq_mode = mode == 0 ? nq : (nq < 64 ? nq : 64);
            sg_cuda_flat_desc d = {sizeof(d), gpus, n_dev, SG_CUDA_SRC_FILE, path, NULL, 0, 0, 0, 0, mq, SG_GPU_MAX_K, budget};
            sg_cuda_flat *f;
            double t0 = now_s();
            MUST(api->flat_create(&d, &f, err, sizeof(err)) == 0, "%s", err);
            double t1 = now_s();
            sg_cuda_flat_info info;
            api->flat_info(f, &info);
            CHECK(info.ntotal == rows && info.dim == dim && info.metric == D.metric &&
                      info.n_shards == (rows < n_dev ? rows : n_dev),
                  "flat_info: %lld x %d, metric %d, %d shards", (long long)info.ntotal, info.dim, info.metric, info.n_shards);
            for (size_t ki = 0; ki < (full ? sizeof(ks) / sizeof(ks[0]) : 1); ++ki) {
                int k = ks[ki] < rows ? ks[ki] : (int)rows;
                size_t n1 = nq_mode;
                float *wd = malloc(sizeof(float) * n1 * (size_t)k), *gd = malloc(sizeof(float) * n1 * (size_t)k);
                int64_t *wl = malloc(sizeof(int64_t) * n1 * (size_t)k), *gl = malloc(sizeof(int64_t) * n1 * (size_t)k);
                MUST(sg_fidx_search(&cpu, n1, q, k, wd, wl, err, sizeof(err)) == 0, "%s", err);
                double t2 = now_s();
                gpu_search(f, &D, n1, q, k, gd, gl);
                double t3 = now_s();
                char what[160];
                snprintf(what, sizeof(what), "%s, %d GPU(s)%s, k %d, %zu queries", metric == 0 ? "IP" : "L2", n_dev,
                         full ? "" : ", small tiles", k, n1);
                double rec = compare(&D, q, n1, k, wl, wd, gl, gd, tol, what);
                printf("flat %s: recall@%d %.4f vs FAISS CPU (%.3f s; upload %.3f s)\n", what, k, rec, t3 - t2, t1 - t0);
                CHECK(rec >= 0.95, "%s: recall %.4f", what, rec);
                /* exact copies find their own row first, in whichever shard it is */
                for (size_t i = 0; i < 16 && i < n1; ++i)
                    CHECK(gl[i * k] == self[i], "%s: query %zu is row %lld but the GPU ranks %lld first", what, i,
                          (long long)self[i], (long long)gl[i * k]);
                if (ki == 0) {
                    /* one query per call (streaming kernel) and 5 per call must agree with FAISS too */
                    for (size_t i = 0; i < n1 && i < (full ? 6u : 2u); ++i) { /* rows of the first and last shard, and others */
                        float d1[1024];
                        int64_t l1[1024];
                        gpu_search(f, &D, 1, q + i * dim, k, d1, l1);
                        compare(&D, q + i * dim, 1, k, wl + i * k, wd + i * k, l1, d1, tol, "one query per call");
                    }
                    size_t five = n1 < 5 ? n1 : 5;
                    float d5[5 * 1024];
                    int64_t l5[5 * 1024];
                    gpu_search(f, &D, five, q, k, d5, l5);
                    compare(&D, q, five, k, wl, wd, l5, d5, tol, "five queries per call");
                }
                if (ki == 0 && full) {
                    /* exact re-scoring of 4k candidates gives FAISS's own ranking */
                    int kc = 4 * k <= (int)SG_GPU_MAX_K ? 4 * k : (int)SG_GPU_MAX_K;
                    float *ck = malloc(sizeof(float) * n1 * (size_t)kc), *rd = malloc(sizeof(float) * n1 * (size_t)k), row[4096];
                    int64_t *cl = malloc(sizeof(int64_t) * n1 * (size_t)kc), *rl = malloc(sizeof(int64_t) * n1 * (size_t)k);
                    MUST(api->flat_search(f, n1, q, kc, ck, cl, err, sizeof(err)) == 0, "%s", err);
                    sg_gpu_flatfile_t ff;
                    MUST(sg_gpu_flat_open(path, &ff, err, sizeof(err)) == 0, "%s", err);
                    MUST(dim <= 4096, "dim");
                    sg_gpu_rescore(&ff, q, n1, cl, kc, k, rd, rl, row);
                    sg_gpu_flat_close(&ff);
                    size_t same = 0;
                    for (size_t i = 0; i < n1 * (size_t)k; ++i)
                        same += rl[i] == wl[i] || fabs((double)rd[i] - wd[i]) <= 1e-5;
                    printf("flat %s: re-scored %d candidates: %zu of %zu ranks as FAISS\n", what, kc, same, n1 * (size_t)k);
                    CHECK(same == n1 * (size_t)k, "%s: re-scoring differs from FAISS at %zu ranks", what, n1 * (size_t)k - same);
                    free(ck);
                    free(cl);
                    free(rd);
                    free(rl);
                }
                free(wd);
                free(gd);
                free(wl);
                free(gl);
            }
            /* k = max_k: in B over 16 queries, i.e. 40 tiles x 1024 candidates, two reduction levels */
            if (rows >= SG_GPU_MAX_K) {
                size_t n2 = full ? (nq < 3 ? nq : 3) : (nq < 16 ? nq : 16);
                float *wd = malloc(sizeof(float) * n2 * SG_GPU_MAX_K), *gd = malloc(sizeof(float) * n2 * SG_GPU_MAX_K);
                int64_t *wl = malloc(sizeof(int64_t) * n2 * SG_GPU_MAX_K), *gl = malloc(sizeof(int64_t) * n2 * SG_GPU_MAX_K);
                MUST(sg_fidx_search(&cpu, n2, q, SG_GPU_MAX_K, wd, wl, err, sizeof(err)) == 0, "%s", err);
                gpu_search(f, &D, n2, q, SG_GPU_MAX_K, gd, gl);
                double rec = compare(&D, q, n2, SG_GPU_MAX_K, wl, wd, gl, gd, tol, "k = 1024");
                printf("flat %s, %s, k 1024, %zu queries: recall %.4f\n", metric == 0 ? "IP" : "L2",
                       full ? "all GPUs" : "small tiles", n2, rec);
                free(wd);
                free(gd);
                free(wl);
                free(gl);
            }
            float dk[2];
            int64_t lk[2];
            CHECK(api->flat_search(f, 1, q, SG_GPU_MAX_K + 1, dk, lk, err, sizeof(err)) == -1 && strstr(err, "k 1025") != NULL,
                  "%s", err);
            CHECK(api->flat_search(f, 1, q, 0, dk, lk, err, sizeof(err)) == -1, "k 0 accepted");
            api->flat_destroy(f);
        }
        sg_fidx_close(&cpu);
        unlink(path);
        free(path);
    }
    /* fewer rows than k, and than GPUs: missing results are label -1 */
    {
        data_t D = {3, dim, SG_GPU_IP, x};
        sg_cuda_flat_desc d = {sizeof(d), gpus, n_gpus, SG_CUDA_SRC_HOST, NULL, x, 3, dim, SG_GPU_IP, 0, 4, 8, 0};
        sg_cuda_flat *f;
        char err[1024];
        MUST(api->flat_create(&d, &f, err, sizeof(err)) == 0, "%s", err);
        float dist[8];
        int64_t lab[8];
        gpu_search(f, &D, 1, x + 2 * dim, 8, dist, lab);
        CHECK(lab[0] == 2, "tiny index: top-1 %lld", (long long)lab[0]);
        CHECK(lab[1] >= 0 && lab[2] >= 0 && lab[1] != lab[2] && lab[1] != 2 && lab[2] != 2, "tiny index: %lld %lld",
              (long long)lab[1], (long long)lab[2]);
        for (int i = 3; i < 8; ++i)
            CHECK(lab[i] == -1 && dist[i] == -FLT_MAX, "tiny index: rank %d is %lld (%g)", i, (long long)lab[i], dist[i]);
        api->flat_destroy(f);
    }
    free(gpus);
    free(x);
    free(q);
    free(self);
    tu_rmtree(dir);
    free(dir);
    return 0;
}

/* ---- random vectors generated on the GPU ---- */

static int suite_random(int64_t rows, int dim, size_t nq)
{
    const uint64_t seed = 77;
    float *x = malloc(sizeof(float) * (size_t)rows * (size_t)dim);
    sg_gpu_random_rows(seed, 0, rows, dim, x); /* what random_rows writes on the GPUs */
    float *q = malloc(sizeof(float) * nq * (size_t)dim);
    for (size_t i = 0; i < nq; ++i) {
        for (int j = 0; j < dim; ++j)
            q[i * dim + j] = x[((int64_t)(i * 104729u) % rows) * dim + j] + 0.3f * gauss() / sqrtf((float)dim);
        normalize(q + i * dim, dim);
    }
    const int k = 10;
    int *gpus = all_gpus();
    data_t D = {rows, dim, SG_GPU_IP, x};
    /* brute force on the host, in double */
    int64_t *wl = malloc(sizeof(int64_t) * nq * k);
    float *wd = malloc(sizeof(float) * nq * k);
    for (size_t i = 0; i < nq; ++i) {
        for (int j = 0; j < k; ++j) {
            wl[i * k + j] = -1;
            wd[i * k + j] = -FLT_MAX;
        }
        for (int64_t r = 0; r < rows; ++r) {
            float s = (float)exact(&D, q + i * dim, r);
            if (s <= wd[i * k + k - 1])
                continue;
            int j = k - 1;
            while (j > 0 && wd[i * k + j - 1] < s) {
                wd[i * k + j] = wd[i * k + j - 1];
                wl[i * k + j] = wl[i * k + j - 1];
                --j;
            }
            wd[i * k + j] = s;
            wl[i * k + j] = r;
        }
    }
    for (int mode = 0; mode < 2; ++mode) {
        int n_dev = mode == 0 ? n_gpus : 1;
        sg_cuda_flat_desc d = {sizeof(d), gpus, n_dev, SG_CUDA_SRC_RANDOM, NULL, NULL, rows, dim, SG_GPU_IP, seed, 64, 16, 0};
        sg_cuda_flat *f;
        char err[1024], what[64];
        MUST(api->flat_create(&d, &f, err, sizeof(err)) == 0, "%s", err);
        float *gd = malloc(sizeof(float) * nq * k);
        int64_t *gl = malloc(sizeof(int64_t) * nq * k);
        gpu_search(f, &D, nq, q, k, gd, gl);
        snprintf(what, sizeof(what), "random %lld x %d on %d GPU(s)", (long long)rows, dim, n_dev);
        double rec = compare(&D, q, nq, k, wl, wd, gl, gd, 2e-3, what);
        printf("%s: recall@%d %.4f vs brute force over the same vectors made on the host\n", what, k, rec);
        CHECK(rec >= 0.95, "%s: recall %.4f", what, rec);
        free(gd);
        free(gl);
        api->flat_destroy(f);
    }
    free(gpus);
    free(wl);
    free(wd);
    free(x);
    free(q);
    return 0;
}

/* ---- memory checks and argument errors ---- */

static int suite_memory(const char *model_dir)
{
    char err[1024];
    int gpu0 = 0, twice[2] = {0, 0}, bad = n_gpus + 98;
    /* 10^9 vectors of 768 dimensions on one GPU: 1.4 TiB */
    sg_cuda_flat_desc d = {sizeof(d), &gpu0, 1, SG_CUDA_SRC_RANDOM, NULL, NULL, 1000000000, 768, SG_GPU_IP, 1, 512, 10, 0};
    sg_cuda_flat *f = NULL;
    CHECK(api->flat_create(&d, &f, err, sizeof(err)) == -1 && f == NULL, "a 1.4 TiB index was created");
    printf("too large index: %s\n", err);
    CHECK(strstr(err, "GPU 0") != NULL && strstr(err, "needs 1") != NULL && strstr(err, "free") != NULL &&
              strstr(err, "gpu_ids") != NULL,
          "unclear message: %s", err);
    d.n = 1000;
    d.devices = &bad;
    CHECK(api->flat_create(&d, &f, err, sizeof(err)) == -1 && strstr(err, "does not exist") != NULL, "%s", err);
    if (n_gpus >= 1) {
        d.devices = twice;
        d.n_devices = 2;
        CHECK(api->flat_create(&d, &f, err, sizeof(err)) == -1 && strstr(err, "listed twice") != NULL, "%s", err);
    }
    d.devices = &gpu0;
    d.n_devices = 1;
    d.max_k = SG_GPU_MAX_K + 1;
    CHECK(api->flat_create(&d, &f, err, sizeof(err)) == -1 && strstr(err, "k 1025") != NULL, "%s", err);
    d.max_k = 10;
    d.source = SG_CUDA_SRC_FILE;
    d.path = "/nonexistent/e5_Flat.index";
    CHECK(api->flat_create(&d, &f, err, sizeof(err)) == -1 && strstr(err, "/nonexistent/e5_Flat.index") != NULL, "%s", err);
    /* an encoder workspace far beyond any GPU: 2^24 tokens per pass */
    sg_e5_model *m;
    MUST(sg_e5_load(model_dir, &m, err, sizeof(err)) == 0, "%s", err);
    const sg_e5_config *c = sg_e5_get_config(m);
    sg_e5_embedding_weights emb;
    sg_e5_get_embedding_weights(m, &emb);
    sg_e5_layer_weights *lw = calloc((size_t)c->layers + 1, sizeof(*lw));
    for (int i = 0; i < c->layers; ++i)
        sg_e5_get_layer_weights(m, i, &lw[i]);
    sg_cuda_encoder_desc ed = {sizeof(ed), 0, c, &emb, lw, (uint32_t)c->max_positions, 1u << 24, 4096};
    sg_cuda_encoder *e;
    sg_cuda_encoder_ws *w = NULL;
    MUST(api->encoder_create(&ed, &e, err, sizeof(err)) == 0, "%s", err);
    CHECK(api->encoder_ws_create(e, &w, err, sizeof(err)) == -1 && w == NULL, "a huge workspace was created");
    printf("too large workspace: %s\n", err);
    CHECK(strstr(err, "encoder workspace") != NULL && strstr(err, "needs") != NULL, "unclear message: %s", err);
    api->encoder_destroy(e);
    ed.device = bad;
    CHECK(api->encoder_create(&ed, &e, err, sizeof(err)) == -1 && strstr(err, "does not exist") != NULL, "%s", err);
    ed.device = 0;
    ed.max_len = (uint32_t)c->max_positions + 1;
    CHECK(api->encoder_create(&ed, &e, err, sizeof(err)) == -1 && strstr(err, "max length") != NULL, "%s", err);
    free(lw);
    sg_e5_free(m);
    return 0;
}

/* ---- sticky errors ---- */

static int suite_sticky(const char *model_dir)
{
    if (getenv("SG_CUDA_EMU_FAULT") == NULL) {
        printf("skipped: nothing injects a fault (set SG_CUDA_EMU_FAULT on the emulated module)\n");
        exit(77);
    }
    MUST(n_gpus >= 2, "the sticky suite needs 2 GPUs");
    MUST(SG_CUDA_API_HAS(api, device_error), "the module has no device_error (it predates 1.1)");
    char err[1024];
    sg_e5_model *m;
    MUST(sg_e5_load(model_dir, &m, err, sizeof(err)) == 0, "%s", err);
    const sg_e5_config *c = sg_e5_get_config(m);
    sg_e5_embedding_weights emb;
    sg_e5_get_embedding_weights(m, &emb);
    sg_e5_layer_weights *lw = calloc((size_t)c->layers + 1, sizeof(*lw));
    for (int i = 0; i < c->layers; ++i)
        sg_e5_get_layer_weights(m, i, &lw[i]);
    sg_cuda_encoder *e[2];
    sg_cuda_encoder_ws *w[2];
    for (int g = 0; g < 2; ++g) {
        sg_cuda_encoder_desc d = {sizeof(d), g, c, &emb, lw, 32, 256, 8};
        MUST(api->encoder_create(&d, &e[g], err, sizeof(err)) == 0, "%s", err);
        MUST(api->encoder_ws_create(e[g], &w[g], err, sizeof(err)) == 0, "%s", err);
    }
    int32_t ids[32];
    int k = sg_e5_tokenize(m, "query: ", "who wrote hamlet", 16, 32, ids);
    MUST(k > 0, "tokenize");
    const int32_t *idp = ids;
    const uint32_t len = (uint32_t)k;
    float *out = malloc(sizeof(float) * (size_t)c->hidden);
    CHECK(api->encode_ids(w[0], &idp, &len, 1, out, err, sizeof(err)) == 0, "first encode on GPU 0: %s", err);
    CHECK(api->device_error(0, err, sizeof(err)) == 0, "GPU 0 reported broken before the fault: %s", err);
    /* the second embed_ln launch faults */
    CHECK(api->encode_ids(w[0], &idp, &len, 1, out, err, sizeof(err)) == -1, "an encode through a faulting kernel succeeded");
    printf("encode on the faulting GPU: %s\n", err);
    /* whichever call meets the fault first reports it (a launch, a cuBLAS call, the final sync) */
    CHECK(strstr(err, "GPU 0") != NULL, "unclear message: %s", err);
    CHECK(api->device_error(0, err, sizeof(err)) == -1, "device_error does not report the sticky error");
    printf("device_error(0): %s\n", err);
    CHECK(strstr(err, "GPU 0") != NULL && strstr(err, "illegal memory access") != NULL && strstr(err, "(700)") != NULL &&
              strstr(err, "restart") != NULL,
          "unclear message: %s", err);
    CHECK(api->device_error(1, err, sizeof(err)) == 0, "GPU 1 reported broken: %s", err);
    /* the same thread goes on with GPU 1: GPU 0's error is not taken for one of GPU 1 */
    CHECK(api->encode_ids(w[1], &idp, &len, 1, out, err, sizeof(err)) == 0, "GPU 1 after GPU 0 faulted: %s", err);
    CHECK(api->device_error(1, err, sizeof(err)) == 0, "GPU 1 reported broken after it worked: %s", err);
    /* sticky: every later call on GPU 0 fails the same way */
    CHECK(api->encode_ids(w[0], &idp, &len, 1, out, err, sizeof(err)) == -1 && strstr(err, "(700)") != NULL,
          "GPU 0 worked again: %s", err);
    sg_cuda_encoder_ws *w2 = NULL;
    CHECK(api->encoder_ws_create(e[0], &w2, err, sizeof(err)) == -1 && strstr(err, "(700)") != NULL, "new workspace on GPU 0: %s",
          err);
    for (int g = 0; g < 2; ++g) {
        api->encoder_ws_destroy(w[g]);
        api->encoder_destroy(e[g]);
    }
    free(out);
    free(lw);
    sg_e5_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODULE probe|encoder|flat|random|memory|sticky [args]\n", argv[0]);
        return 2;
    }
    char err[1024], why[512];
    MUST(sg_gpu_module_load(argv[1], &api, err, sizeof(err)) == 0, "%s", err);
    api->probe(&n_gpus, why, sizeof(why));
    if (n_gpus == 0) {
        printf("skipped: no GPU (%s)\n", why);
        return 77;
    }
    printf("module %s: %d GPU(s)\n", api->version, n_gpus);
    for (int g = 0; g < n_gpus; ++g) {
        sg_cuda_device_info di;
        MUST(api->device_info(g, &di, err, sizeof(err)) == 0, "%s", err);
        printf("  GPU %d: %s, compute %d.%d, %.1f GiB, %.1f GiB free\n", g, di.name, di.major, di.minor,
               (double)di.total_bytes / 1073741824.0, (double)di.free_bytes / 1073741824.0);
    }
    const char *suite = argv[2];
    if (strcmp(suite, "probe") == 0)
        return 0;
    if (strcmp(suite, "encoder") == 0 && argc >= 4)
        suite_encoder(argv[3], argc >= 5 ? (uint32_t)strtoul(argv[4], NULL, 10) : 256,
                      argc >= 6 ? (size_t)strtoul(argv[5], NULL, 10) : 100);
    else if (strcmp(suite, "sticky") == 0 && argc >= 4)
        suite_sticky(argv[3]);
    else if (strcmp(suite, "flat") == 0 && argc >= 7)
        suite_flat(strtoll(argv[3], NULL, 10), (int)strtol(argv[4], NULL, 10), strtoull(argv[5], NULL, 10),
                   (uint32_t)strtoul(argv[6], NULL, 10));
    else if (strcmp(suite, "random") == 0 && argc >= 6)
        suite_random(strtoll(argv[3], NULL, 10), (int)strtol(argv[4], NULL, 10), strtoull(argv[5], NULL, 10));
    else if (strcmp(suite, "memory") == 0 && argc >= 4)
        suite_memory(argv[3]);
    else {
        fprintf(stderr, "bad arguments for suite %s\n", suite);
        return 2;
    }
    if (failures > 0) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
