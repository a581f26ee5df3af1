/*
 * bench_encoder.c -- encoder throughput of sg_e5 on one thread: queries per second for batch
 * sizes 1, 8, 32 and 64 of short Search-R1-like queries. Not a test (not registered with CTest).
 *
 *     bench_encoder MODEL_DIR [seconds per point, default 3]
 */
#include "e5.h"

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

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [seconds]\n", argv[0]);
        return 2;
    }
    double secs = argc > 2 ? strtod(argv[2], NULL) : 3.0;
    openblas_set_num_threads(1);
    sg_e5_model *m;
    char err[512];
    double t0 = now_s();
    if (sg_e5_load(argv[1], &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("load: %.3f s, dim %d\n", now_s() - t0, sg_e5_dim(m));
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
        double start = now_s(), end;
        long n = 0;
        do {
            if (sg_e5_encode(m, w, "query: ", texts, lens, (size_t)bs, 256, out, err, sizeof(err)) != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            n += bs;
            end = now_s();
        } while (end - start < secs);
        printf("batch %2d: %7.1f queries/s, %7.2f ms per batch\n", bs, (double)n / (end - start),
               (end - start) * 1000.0 * bs / (double)n);
    }
    free(out);
    sg_e5_workspace_free(w);
    sg_e5_free(m);
    return 0;
}
