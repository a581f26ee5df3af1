/*
 * bench_bounds.c -- what this machine can do for the local backend, measured here, so the
 * benchmark can print each result as a fraction of a bound derived in the same run:
 *
 *   - the e5 encoder's matrix products (per layer: four h x h and two h x i linear layers) at M
 *     tokens, as GFLOP/s on one core and on every core at once (each core its own products: how
 *     the backend runs under load): through OpenBLAS sgemm ("gflops_*"), through the encoder's own
 *     float32 kernels over packed weights ("own_gflops_*", kern.h) and its int8 kernels, input
 *     quantisation included ("int8_gops_*": int8 multiply-adds count as float32 ones do);
 *   - memory read bandwidth with every core reading its part of a large buffer (the flat index
 *     scan's limit);
 *   - the mean token count of the benchmark's queries ("query: " prefix, the model's tokenizer),
 *     hence the encoder FLOPs per query.
 *
 * Prints one JSON object. Runs with the BLAS kernels the gateway would choose (blas.h), or with the
 * OPENBLAS_CORETYPE the environment sets, and reports which.
 *
 *     bench_bounds MODEL_DIR QUERIES_FILE [--tokens x1,x32,512] [--seconds 2] [--threads N]
 *
 * --tokens lists the M of the products: a number, or "xK" for K queries' mean tokens.
 */
#include "blas.h"
#include "e5.h"
#include "kern.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

char *openblas_get_corename(void);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { GEMM_BLAS = 0, GEMM_OWN = 1, GEMM_INT8 = 2 };
static int own_kern, int8_kern; /* kern.h's best for this CPU (SG_CPU_FEATURES applied) */

typedef struct {
    int m, h, inter, kind;
    double seconds;
    double flops; /* out */
    double elapsed;
} gemm_arg_t;

/* y = x W^T for the packed weights of the own kernels (float32 or int8) */
static void own_product(int kind, const void *w, const float *x, int m, int k, sg_kern_q8x_t *qx, float *y)
{
    if (kind == GEMM_OWN) {
        const sg_kern_f32w_t *pw = w;
        sg_kern_f32_tile(own_kern, pw, x, (size_t)k, 0, (size_t)m, 0, pw->np, y, (size_t)pw->n, 0);
        return;
    }
    const sg_kern_q8w_t *qw = w;
    sg_kern_q8x_reserve(qx, (size_t)m, k);
    sg_kern_q8_quantize(int8_kern, x, (size_t)k, k, NULL, 0, (size_t)m, qx, NULL);
    sg_kern_q8_tile(int8_kern, qw, qx, 0, (size_t)m, 0, qw->np, y, (size_t)qw->n, 0);
}

/* one encoder layer's linear products, repeated for `seconds` */
static void *gemm_loop(void *p)
{
    gemm_arg_t *a = p;
    int m = a->m, h = a->h, in = a->inter;
    float *x = malloc(sizeof(float) * (size_t)m * (size_t)in), *y = malloc(sizeof(float) * (size_t)m * (size_t)in);
    float *wq = malloc(sizeof(float) * (size_t)h * (size_t)h * 4), *wi = malloc(sizeof(float) * (size_t)h * (size_t)in),
          *wo = malloc(sizeof(float) * (size_t)h * (size_t)in);
    for (size_t i = 0; i < (size_t)m * (size_t)in; ++i)
        x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < (size_t)h * (size_t)h * 4; ++i)
        wq[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < (size_t)h * (size_t)in; ++i) {
        wi[i] = (float)((i * 7919u) % 1000) / 1000.0f - 0.5f;
        wo[i] = wi[i];
    }
    double per = 2.0 * m * (4.0 * h * h + 2.0 * h * in);
    /* the own kernels: weights packed once, as at start-up (not timed) */
    sg_kern_f32w_t pf[6];
    sg_kern_q8w_t pq[6];
    sg_kern_q8x_t qx = {0};
    const void *pw[6] = {NULL};
    if (a->kind != GEMM_BLAS) {
        for (int j = 0; j < 6; ++j) {
            const float *w = j < 4 ? wq + (size_t)j * h * h : j == 4 ? wi : wo;
            int n = j == 4 ? in : h, k = j == 5 ? in : h;
            if (a->kind == GEMM_OWN)
                sg_kern_f32_pack(&pf[j], 1, &w, NULL, &n, k);
            else
                sg_kern_q8_pack(&pq[j], 1, &w, NULL, &n, k, int8_kern == SG_KERN_AVX2 ? 7 : 8, NULL, 0);
            pw[j] = a->kind == GEMM_OWN ? (const void *)&pf[j] : (const void *)&pq[j];
        }
    }
    double t0 = now_s(), t;
    long reps = 0;
    do {
        if (a->kind == GEMM_BLAS) {
            for (int j = 0; j < 4; ++j)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, h, h, 1.0f, x, h, wq + (size_t)j * h * h, h, 0.0f, y, h);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, in, h, 1.0f, x, h, wi, h, 0.0f, y, in);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, h, in, 1.0f, x, in, wo, in, 0.0f, y, h);
        } else {
            for (int j = 0; j < 6; ++j)
                own_product(a->kind, pw[j], x, m, j == 5 ? in : h, &qx, y);
        }
        ++reps;
        t = now_s() - t0;
    } while (t < a->seconds);
    for (int j = 0; j < 6 && a->kind != GEMM_BLAS; ++j) {
        if (a->kind == GEMM_OWN)
            sg_kern_f32_free(&pf[j]);
        else
            sg_kern_q8_free(&pq[j]);
    }
    sg_kern_q8x_free(&qx);
    a->flops = per * (double)reps;
    a->elapsed = t;
    free(x);
    free(y);
    free(wq);
    free(wi);
    free(wo);
    return NULL;
}

static double gemm_rate(int threads, int kind, int m, int h, int inter, double seconds)
{
    pthread_t th[256];
    gemm_arg_t a[256];
    for (int i = 0; i < threads; ++i) {
        a[i] = (gemm_arg_t){m, h, inter, kind, seconds, 0, 0};
        pthread_create(&th[i], NULL, gemm_loop, &a[i]);
    }
    double total = 0;
    for (int i = 0; i < threads; ++i) {
        pthread_join(th[i], NULL);
        total += a[i].flops / a[i].elapsed;
    }
    return total / 1e9;
}

typedef struct {
    const float *p;
    size_t n;
    int reps;
    double sum;
} bw_arg_t;

static void *bw_loop(void *p)
{
    bw_arg_t *a = p;
    float acc[16] = {0};
    for (int r = 0; r < a->reps; ++r)
        for (size_t i = 0; i + 16 <= a->n; i += 16)
            for (int j = 0; j < 16; ++j)
                acc[j] += a->p[i + (size_t)j];
    for (int j = 0; j < 16; ++j)
        a->sum += acc[j];
    return NULL;
}

static double bandwidth(int threads, size_t bytes)
{
    size_t n = bytes / sizeof(float);
    float *buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; ++i)
        buf[i] = (float)(i & 1023);
    pthread_t th[256];
    bw_arg_t a[256];
    int reps = 3;
    double t0 = now_s();
    for (int i = 0; i < threads; ++i) {
        a[i] = (bw_arg_t){buf + n / (size_t)threads * (size_t)i, n / (size_t)threads, reps, 0};
        pthread_create(&th[i], NULL, bw_loop, &a[i]);
    }
    double sink = 0;
    for (int i = 0; i < threads; ++i) {
        pthread_join(th[i], NULL);
        sink += a[i].sum;
    }
    double t = now_s() - t0;
    free(buf);
    if (sink == 42.4242)
        fprintf(stderr, "!");
    return (double)(n / (size_t)threads * (size_t)threads) * sizeof(float) * reps / t / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_DIR QUERIES_FILE [--tokens 16,512] [--seconds 2] [--threads N]\n", argv[0]);
        return 2;
    }
    const char *model_dir = argv[1], *queries = argv[2], *tokens = "x1,x32";
    double seconds = 2;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--tokens") == 0)
            tokens = argv[i + 1];
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = strtod(argv[i + 1], NULL);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = strtol(argv[i + 1], NULL, 10);
    }
    if (threads < 1 || threads > 256)
        threads = 1;
    sg_blas_choice_t blas; /* the kernels the gateway would run (may re-execute this program) */
    if (sg_blas_tune(argv, &blas) != 0) {
        fprintf(stderr, "%s\n", blas.reason);
        return 2;
    }
    openblas_set_num_threads(1);
    sg_e5_model *m;
    char err[512];
    if (sg_e5_load(model_dir, &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const sg_e5_config *c = sg_e5_get_config(m);
    own_kern = sg_kern_f32_best(sg_e5_features(m));
    int8_kern = sg_kern_q8_best(sg_e5_features(m));
    /* mean tokens of the queries (JSON strings, one per line; escapes are rare in them) */
    FILE *fp = fopen(queries, "r");
    if (fp == NULL) {
        perror(queries);
        return 1;
    }
    char line[4096];
    int32_t ids[600];
    double tok_sum = 0;
    long nq = 0;
    while (fgets(line, sizeof(line), fp) != NULL && nq < 20000) {
        char *a = strchr(line, '"'), *b = a != NULL ? strrchr(line, '"') : NULL;
        if (a == NULL || b == a)
            continue;
        int n = sg_e5_tokenize(m, "query: ", a + 1, (size_t)(b - a - 1), 512, ids);
        if (n > 0) {
            tok_sum += n;
            ++nq;
        }
    }
    fclose(fp);
    double mean_tokens = nq > 0 ? tok_sum / (double)nq : 0;
    double flops_token = c->layers * 2.0 * (4.0 * c->hidden * c->hidden + 2.0 * c->hidden * c->intermediate);
    double attn = c->layers * 4.0 * mean_tokens * mean_tokens * c->hidden; /* scores + context */
    printf("{\"own_kernel\": \"%s\", \"int8_kernel\": \"%s\", ", sg_kern_name(own_kern), sg_kern_name(int8_kern));
    printf("\"core\": \"%s\", \"threads\": %ld, \"hidden\": %d, \"layers\": %d, \"intermediate\": %d, \"queries\": %ld, "
           "\"mean_tokens\": %.3f, \"encoder_flops_per_query\": %.6g",
           openblas_get_corename(), threads, c->hidden, c->layers, c->intermediate, nq, mean_tokens,
           flops_token * mean_tokens + attn);
    char *list = strdup(tokens);
    char *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        /* "x32": 32 queries' worth of tokens */
        int mt = t[0] == 'x' ? (int)(strtod(t + 1, NULL) * mean_tokens + 0.5) : (int)strtol(t, NULL, 10);
        if (mt < 1)
            continue;
        double one = gemm_rate(1, GEMM_BLAS, mt, c->hidden, c->intermediate, seconds);
        double all = gemm_rate((int)threads, GEMM_BLAS, mt, c->hidden, c->intermediate, seconds);
        printf(", \"gflops_1core_%s\": %.2f, \"gflops_allcores_%s\": %.2f, \"tokens_%s\": %d", t, one, t, all, t, mt);
        if (own_kern != SG_KERN_NONE) {
            one = gemm_rate(1, GEMM_OWN, mt, c->hidden, c->intermediate, seconds);
            all = gemm_rate((int)threads, GEMM_OWN, mt, c->hidden, c->intermediate, seconds);
            printf(", \"own_gflops_1core_%s\": %.2f, \"own_gflops_allcores_%s\": %.2f", t, one, t, all);
        }
        one = gemm_rate(1, GEMM_INT8, mt, c->hidden, c->intermediate, seconds);
        all = gemm_rate((int)threads, GEMM_INT8, mt, c->hidden, c->intermediate, seconds);
        printf(", \"int8_gops_1core_%s\": %.2f, \"int8_gops_allcores_%s\": %.2f", t, one, t, all);
        fflush(stdout);
    }
    free(list);
    printf(", \"bandwidth_gbs\": %.2f}\n", bandwidth((int)threads, (size_t)1 << 30));
    sg_e5_free(m);
    return 0;
}
