/*
 * bench_encoder.c -- encoder throughput of sg_e5 on one thread: queries per second for batch
 * sizes 1, 8, 32 and 64 of short Search-R1-like queries, for each engine of the linear layers
 * named (default: every one this CPU runs). Not a test (not registered with CTest).
 *
 *     bench_encoder MODEL_DIR [seconds per point, default 3] [ENGINE...]
 *
 * ENGINE: openblas, onednn (oneDNN's sgemm), own (kern.h's float32 kernels), bf16, int8 (the best
 * int8 kernel for the CPU), int8-avx2 (8-bit weights), int8-avx2-w7 (7-bit), int8-scalar, int8-onednn.
 */
#include "e5.h"
#include "kern.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *queries[] = {
    "who wrote the play hamlet",         "what is the capital of france",
    "when did the second world war end", "how many moons does jupiter have",
    "who is the lead singer of u2",      "what is the largest ocean on earth",
    "where was albert einstein born",    "what year did the titanic sink",
    "who painted the mona lisa",         "what is the boiling point of water in fahrenheit",
    "who invented the telephone",        "how tall is mount everest",
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* this thread's CPU time: what a shared machine cannot inflate by running others in between */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sets `engine` on a freshly loaded model; returns 0, or -1 (printed) when it cannot run here. */
static int set_engine(sg_e5_model *m, const char *engine)
{
    char err[512];
    int rc = 0, f32 = sg_kern_f32_best(sg_e5_features(m));
    if (strcmp(engine, "onednn") == 0)
        rc = sg_e5_use_onednn(m, err, sizeof(err));
    else if (strcmp(engine, "own") == 0)
        rc = f32 == SG_KERN_NONE ? (snprintf(err, sizeof(err), "no AVX2"), -1) : sg_e5_use_kernels(m, f32, err, sizeof(err));
    else if (strcmp(engine, "bf16") == 0)
        rc = sg_e5_set_precision(m, SG_E5_BF16, err, sizeof(err));
    else if (strcmp(engine, "int8") == 0)
        rc = sg_e5_set_precision(m, SG_E5_INT8, err, sizeof(err));
    else if (strcmp(engine, "int8-avx2") == 0)
        rc = sg_e5_set_int8(m, SG_KERN_AVX2, 8, err, sizeof(err));
    else if (strcmp(engine, "int8-avx2-w7") == 0)
        rc = sg_e5_set_int8(m, SG_KERN_AVX2, 7, err, sizeof(err));
    else if (strcmp(engine, "int8-scalar") == 0)
        rc = sg_e5_set_int8(m, SG_KERN_SCALAR, 8, err, sizeof(err));
    else if (strcmp(engine, "int8-onednn") == 0)
        rc = sg_e5_set_int8(m, SG_E5_INT8_ONEDNN, 8, err, sizeof(err));
    else if (strcmp(engine, "openblas") != 0)
        rc = (snprintf(err, sizeof(err), "unknown engine"), -1);
    if (rc != 0)
        printf("%s: not run (%s)\n", engine, err);
    return rc;
}

static int run(const char *dir, const char *engine, double secs)
{
    sg_e5_model *m;
    char err[512];
    double t0 = now_s();
    if (sg_e5_load(dir, &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (set_engine(m, engine) != 0) {
        sg_e5_free(m);
        return 0;
    }
    char desc[160];
    printf("%s: %s; load + setup %.3f s, dim %d\n", engine, sg_e5_engine(m, desc, sizeof(desc)), now_s() - t0, sg_e5_dim(m));
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    enum { NQ = sizeof(queries) / sizeof(queries[0]) };
    const int batches[] = {1, 8, 32, 64};
    const char *texts[64];
    size_t lens[64];
    float *out = malloc(64 * (size_t)sg_e5_dim(m) * sizeof(float));
    for (size_t b = 0; b < sizeof(batches) / sizeof(batches[0]); ++b) {
        int bs = batches[b];
        for (int i = 0; i < bs; ++i) {
            texts[i] = queries[i % NQ];
            lens[i] = strlen(texts[i]);
        }
        sg_e5_encode(m, w, "query: ", texts, lens, (size_t)bs, 256, out, err, sizeof(err)); /* warm-up */
        double start = now_s(), end, c0 = cpu_s();
        long n = 0;
        do {
            if (sg_e5_encode(m, w, "query: ", texts, lens, (size_t)bs, 256, out, err, sizeof(err)) != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            n += bs;
            end = now_s();
        } while (end - start < secs);
        double cpu = cpu_s() - c0;
        printf("  batch %2d: %7.1f queries/s, %7.2f ms per batch; CPU time: %7.1f queries/s, %7.2f ms per batch\n", bs,
               (double)n / (end - start), (end - start) * 1000.0 * bs / (double)n, (double)n / cpu, cpu * 1000.0 * bs / (double)n);
    }
    free(out);
    sg_e5_workspace_free(w);
    sg_e5_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [seconds] [ENGINE...]\n", argv[0]);
        return 2;
    }
    double secs = argc > 2 ? strtod(argv[2], NULL) : 3.0;
    openblas_set_num_threads(1);
    static const char *const all[] = {"openblas", "onednn", "own", "bf16", "int8", "int8-onednn"};
    int rc = 0;
    if (argc > 3) {
        for (int i = 3; i < argc && rc == 0; ++i)
            rc = run(argv[1], argv[i], secs);
    } else {
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]) && rc == 0; ++i)
            rc = run(argv[1], all[i], secs);
    }
    return rc;
}
