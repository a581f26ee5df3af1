/*
 * bench_int8.c -- the int8 schemes' trade-off curve: quality against float32 and speed, in one
 * process on one thread. Not a test (not registered with CTest).
 *
 *     bench_int8 MODEL_DIR QUERIES FLAT_INDEX [REPEATS, default 3] [SCHEME...]
 *
 * QUERIES: one JSON string a line (the benchmark's 1,000: bench.py's queries.txt lines 50001 to
 * 51000); FLAT_INDEX: a FAISS IndexFlatIP file of the model's dimension (the benchmark's 100k rows).
 * Each query is encoded with "query: " first, in batches of 32 (the "32-query requests"),
 * in float32 (the own kernels when the CPU runs them) and in each int8 scheme (default: all of
 * them on this CPU's int8 kernel): "plain" (per-channel weights, per-token activations), "c"
 * (inputs centred), "cr" (centred and rotated: what precision int8 runs), "crs" (also the FFN
 * output's input in two terms), each also as "w7-..." (7-bit weights, the AVX2 kernel), and
 * "bf16" where oneDNN runs it. Printed per scheme: the mean and minimum cosine to float32, the
 * share of queries whose exact top-1 / top-3 / top-10 lists are identical to float32's, recall@3,
 * and queries/s over this thread's CPU time (the best of REPEATS passes over all queries, so a
 * loaded machine inflates it less), with the ratio to float32's.
 */
#include "e5.h"
#include "e5_internal.h"
#include "faissidx.h"
#include "kern.h"

#include <cJSON.h>
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOPK 10
#define BATCH 32

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char **read_queries(const char *path, size_t *n_out)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return NULL;
    char **texts = NULL, *line = NULL;
    size_t n = 0, cap = 0, lcap = 0;
    while (getline(&line, &lcap, fp) >= 0) {
        cJSON *j = cJSON_Parse(line);
        if (j != NULL && cJSON_IsString(j)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                texts = realloc(texts, cap * sizeof(*texts));
                if (texts == NULL)
                    abort();
            }
            texts[n++] = strdup(j->valuestring);
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(fp);
    *n_out = n;
    return texts;
}

/* Exact top-TOPK rows of each query: the Flat index through the local plugin's FAISS reader. */
static void topk(const sg_fidx_t *ix, const float *q, size_t nq, int64_t *ids)
{
    char err[256];
    float *dist = malloc(nq * TOPK * sizeof(float));
    if (dist == NULL || sg_fidx_search(ix, nq, q, TOPK, dist, ids, err, sizeof(err)) != 0) {
        fprintf(stderr, "search: %s\n", dist != NULL ? err : "out of memory");
        abort();
    }
    free(dist);
}

/* Encodes every query in batches of BATCH; returns the best pass's queries/s of thread CPU time. */
static double encode_all(const sg_e5_model *m, char **texts, size_t n, int repeats, float *out)
{
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    size_t lens[BATCH];
    char err[512];
    double best = 0;
    for (int rep = 0; rep < repeats; ++rep) {
        double c0 = cpu_s();
        for (size_t i = 0; i < n; i += BATCH) {
            size_t b = n - i < BATCH ? n - i : BATCH;
            for (size_t j = 0; j < b; ++j)
                lens[j] = strlen(texts[i + j]);
            if (sg_e5_encode(m, w, "query: ", (const char *const *)texts + i, lens, b, 256, out + i * (size_t)sg_e5_dim(m), err,
                             sizeof(err)) != 0) {
                fprintf(stderr, "%s\n", err);
                exit(1);
            }
        }
        double qps = (double)n / (cpu_s() - c0);
        best = qps > best ? qps : best;
    }
    sg_e5_workspace_free(w);
    return best;
}

/* A scheme by name on a freshly loaded model; 0, or -1 (printed) when it cannot run here. */
static int set_scheme(sg_e5_model *m, const char *name)
{
    char err[512];
    int rc, kern = sg_kern_q8_best(sg_e5_features(m)), bits = 8;
    if (strcmp(name, "bf16") == 0) {
        rc = sg_e5_set_precision(m, SG_E5_BF16, err, sizeof(err));
    } else {
        const char *s = name;
        if (strncmp(s, "w7-", 3) == 0) {
            bits = 7;
            s += 3;
            if (kern == SG_KERN_VNNI)
                kern = SG_KERN_AVX2;
        }
        unsigned scheme = strcmp(s, "plain") == 0 ? 0
                          : strcmp(s, "c") == 0   ? SG__E5_Q8_CENTRE
                          : strcmp(s, "cr") == 0  ? SG__E5_Q8_CENTRE | SG__E5_Q8_ROTATE
                          : strcmp(s, "crs") == 0 ? SG__E5_Q8_CENTRE | SG__E5_Q8_ROTATE | SG__E5_Q8_SPLIT_OUT
                                                  : 99;
        if (scheme == 99) {
            printf("%s: unknown scheme\n", name);
            return -1;
        }
        rc = sg__e5_set_int8_scheme(m, kern, bits, scheme, err, sizeof(err));
    }
    if (rc != 0)
        printf("%-10s not run here: %s\n", name, err);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL_DIR QUERIES FLAT_INDEX [REPEATS] [SCHEME...]\n", argv[0]);
        return 2;
    }
    openblas_set_num_threads(1);
    int repeats = argc > 4 ? atoi(argv[4]) : 3;
    size_t n = 0;
    char **texts = read_queries(argv[2], &n);
    sg_fidx_t index;
    char err[512], desc[256];
    if (texts == NULL || n == 0) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    if (sg_fidx_open(argv[3], NULL, &index, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int dim = index.dim;
    long rows = (long)index.ntotal;
    sg_e5_model *m;
    if (sg_e5_load(argv[1], &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int f32 = sg_kern_f32_best(sg_e5_features(m));
    if (f32 != SG_KERN_NONE && sg_e5_use_kernels(m, f32, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (sg_e5_dim(m) != dim) {
        fprintf(stderr, "the index has dimension %d, the model %d\n", dim, sg_e5_dim(m));
        return 1;
    }
    float *ref = malloc(n * (size_t)dim * sizeof(float)), *out = malloc(n * (size_t)dim * sizeof(float));
    int64_t *ref_ids = malloc(n * TOPK * sizeof(int64_t)), *ids = malloc(n * TOPK * sizeof(int64_t));
    double qps32 = encode_all(m, texts, n, repeats, ref);
    topk(&index, ref, n, ref_ids);
    printf("%zu queries, batches of %d, one thread; %ld-row index; float32 (%s): %.1f queries/s of CPU time\n", n, BATCH, rows,
           sg_e5_engine(m, desc, sizeof(desc)), qps32);
    sg_e5_free(m);
    static const char *const all[] = {"plain", "c", "cr", "crs", "w7-plain", "w7-cr", "w7-crs", "bf16"};
    int count = argc > 5 ? argc - 5 : (int)(sizeof(all) / sizeof(all[0]));
    printf("%-10s %9s %9s %11s %7s %7s %7s %7s %9s %6s\n", "scheme", "cos mean", "cos min", "1-cos mean", "top-1", "top-3",
           "top-10", "r@3", "q/s", "x fp32");
    for (int s = 0; s < count; ++s) {
        const char *name = argc > 5 ? argv[5 + s] : all[s];
        if (sg_e5_load(argv[1], &m, err, sizeof(err)) != 0 || set_scheme(m, name) != 0) {
            sg_e5_free(m);
            continue;
        }
        double qps = encode_all(m, texts, n, repeats, out);
        topk(&index, out, n, ids);
        double cmean = 0, cmin = 1, same[3] = {0, 0, 0}, r3 = 0;
        static const int ks[3] = {1, 3, TOPK};
        for (size_t i = 0; i < n; ++i) {
            double c = 0;
            for (int j = 0; j < dim; ++j)
                c += (double)ref[i * (size_t)dim + (size_t)j] * out[i * (size_t)dim + (size_t)j];
            cmean += c / (double)n;
            cmin = c < cmin ? c : cmin;
            for (int q = 0; q < 3; ++q)
                same[q] += memcmp(ref_ids + i * TOPK, ids + i * TOPK, (size_t)ks[q] * sizeof(int64_t)) == 0;
            for (int a = 0; a < 3; ++a)
                for (int b = 0; b < 3; ++b)
                    r3 += ids[i * TOPK + (size_t)a] == ref_ids[i * TOPK + (size_t)b];
        }
        printf("%-10s %9.6f %9.6f %11.3g %6.1f%% %6.1f%% %6.1f%% %7.4f %9.1f %6.2f   %s\n", name, cmean, cmin, 1 - cmean,
               100 * same[0] / (double)n, 100 * same[1] / (double)n, 100 * same[2] / (double)n, r3 / (3.0 * (double)n), qps,
               qps / qps32, sg_e5_engine(m, desc, sizeof(desc)));
        fflush(stdout);
        sg_e5_free(m);
    }
    for (size_t i = 0; i < n; ++i)
        free(texts[i]);
    free(texts);
    sg_fidx_close(&index);
    free(ref);
    free(out);
    free(ref_ids);
    free(ids);
    return 0;
}
