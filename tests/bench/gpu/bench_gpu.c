/*
 * bench_gpu.c -- micro-benchmarks of the CUDA module (not a test; run by run_bench.sh):
 *
 *   bench_gpu MODULE encoder MODEL_DIR [SECONDS]
 *       e5 encoder queries/s on GPU 0 at batch 1, 64 and 512 (Search-R1-like questions of about
 *       16 tokens with "query: "), then 2 workspaces at batch 512 from 2 threads (streams
 *       overlapping host work); peer: the CPU encoder (sg_e5) with one workspace per core.
 *   bench_gpu MODULE flat ROWS DIM [SECONDS] [GPUS]
 *       flat inner-product search (k 10) over ROWS random unit vectors generated on the GPU(s)
 *       (GPUS: 1 = GPU 0, default; 0 = all): queries/s at batch 1 and 512, the memory bandwidth
 *       reached at batch 1 (ROWS * DIM * 2 bytes read per query) as a fraction of
 *       $SG_BENCH_PEAK_TBS (default 3.35, H100 SXM), the GEMM rate at batch 512; peer: FAISS
 *       on the CPU (all cores) over the same vectors regenerated on the host, at most 1 M rows.
 *
 * Prints one line per figure; exits 0 with "skipped: no GPU (...)" when there is none.
 */
#include "e5.h"
#include "faissidx.h"
#include "gpuhost.h"
#include "loader.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const sg_cuda_api *api;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "bench_gpu: %s: %s\n", what, err);
    exit(1);
}

/* ---- encoder ---- */

static const char *questions[] = {
    "who wrote the play hamlet and when was it first performed in london",
    "what is the capital city of france and how many people live there",
    "when did the second world war end in europe and in the pacific",
    "how many moons does the planet jupiter have according to nasa",
    "who is the lead singer of the irish rock band u2 from dublin",
    "what is the largest ocean on earth by surface area and volume",
    "where was the physicist albert einstein born and in which year",
    "in what year did the titanic sink after hitting an iceberg at night",
    "who painted the mona lisa that hangs in the louvre museum in paris",
    "what is the boiling point of water in fahrenheit at sea level pressure",
    "who invented the telephone and filed the first patent for it",
    "how tall is mount everest in meters above sea level today",
};
enum { NQ = sizeof(questions) / sizeof(questions[0]) };

typedef struct {
    sg_cuda_encoder_ws *ws;
    const int32_t **idp;
    const uint32_t *lens;
    size_t batch;
    double seconds;
    long done;
    float *out;
} enc_job_t;

static void *enc_loop(void *arg)
{
    enc_job_t *j = arg;
    char err[512];
    double t0 = now_s();
    while (now_s() - t0 < j->seconds) {
        if (api->encode_ids(j->ws, j->idp, j->lens, j->batch, j->out, err, sizeof(err)) != 0)
            die("encode", err);
        j->done += (long)j->batch;
    }
    return NULL;
}

typedef struct {
    const sg_e5_model *m;
    size_t batch;
    double seconds;
    long done;
} cpu_job_t;

static void *cpu_loop(void *arg)
{
    cpu_job_t *j = arg;
    sg_e5_workspace *w = sg_e5_workspace_new(j->m);
    const char *texts[64];
    size_t lens[64];
    for (size_t i = 0; i < j->batch; ++i) {
        texts[i] = questions[i % NQ];
        lens[i] = strlen(texts[i]);
    }
    float *out = malloc(j->batch * (size_t)sg_e5_dim(j->m) * sizeof(float));
    char err[512];
    double t0 = now_s();
    while (now_s() - t0 < j->seconds) {
        if (sg_e5_encode(j->m, w, "query: ", texts, lens, j->batch, 256, out, err, sizeof(err)) != 0)
            die("cpu encode", err);
        j->done += (long)j->batch;
    }
    free(out);
    sg_e5_workspace_free(w);
    return NULL;
}

static int bench_encoder(const char *dir, double secs)
{
    char err[1024];
    sg_e5_model *m;
    if (sg_e5_load(dir, &m, err, sizeof(err)) != 0)
        die("model", err);
    const sg_e5_config *c = sg_e5_get_config(m);
    enum { MAXB = 512 };
    int32_t *ids = malloc(sizeof(int32_t) * MAXB * 64);
    const int32_t **idp = malloc(sizeof(*idp) * MAXB);
    uint32_t *lens = malloc(sizeof(uint32_t) * MAXB);
    double tok = 0;
    for (int i = 0; i < MAXB; ++i) {
        idp[i] = ids + i * 64;
        int k = sg_e5_tokenize(m, "query: ", questions[i % NQ], strlen(questions[i % NQ]), 64, ids + i * 64);
        lens[i] = (uint32_t)k;
        tok += k;
    }
    printf("model %s: hidden %d, %d layers, %d heads; queries of %.1f tokens on average\n", dir, c->hidden, c->layers, c->heads,
           tok / MAXB);
    sg_e5_embedding_weights emb;
    sg_e5_get_embedding_weights(m, &emb);
    sg_e5_layer_weights *lw = calloc((size_t)c->layers + 1, sizeof(*lw));
    for (int i = 0; i < c->layers; ++i)
        sg_e5_get_layer_weights(m, i, &lw[i]);
    sg_cuda_encoder_desc d = {sizeof(d), 0, c, &emb, lw, 256, 16384, MAXB};
    sg_cuda_encoder *e;
    double t0 = now_s();
    if (api->encoder_create(&d, &e, err, sizeof(err)) != 0)
        die("encoder_create", err);
    printf("encoder weights uploaded in %.2f s\n", now_s() - t0);
    sg_cuda_encoder_ws *ws[2];
    for (int i = 0; i < 2; ++i)
        if (api->encoder_ws_create(e, &ws[i], err, sizeof(err)) != 0)
            die("encoder_ws_create", err);
    float *out[2] = {malloc(sizeof(float) * MAXB * (size_t)c->hidden), malloc(sizeof(float) * MAXB * (size_t)c->hidden)};
    const size_t batches[] = {1, 64, 512};
    double gpu512 = 0;
    for (size_t b = 0; b < 3; ++b) {
        enc_job_t j = {ws[0], idp, lens, batches[b], 0.3, 0, out[0]};
        enc_loop(&j); /* warm-up: cuBLAS picks its kernels */
        j.seconds = secs;
        j.done = 0;
        double s = now_s();
        enc_loop(&j);
        double el = now_s() - s;
        printf("GPU encoder, batch %3zu: %10.1f queries/s, %8.3f ms per batch\n", batches[b], (double)j.done / el,
               1000.0 * el * (double)batches[b] / (double)j.done);
        if (batches[b] == 512)
            gpu512 = (double)j.done / el;
    }
    enc_job_t jj[2] = {{ws[0], idp, lens, 512, secs, 0, out[0]}, {ws[1], idp, lens, 512, secs, 0, out[1]}};
    pthread_t th[2];
    double s = now_s();
    for (int i = 0; i < 2; ++i)
        pthread_create(&th[i], NULL, enc_loop, &jj[i]);
    for (int i = 0; i < 2; ++i)
        pthread_join(th[i], NULL);
    double el = now_s() - s;
    printf("GPU encoder, batch 512 from 2 threads (2 streams): %10.1f queries/s\n", (double)(jj[0].done + jj[1].done) / el);
    /* the peer: the CPU encoder, one workspace per core, batch 64 */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1)
        ncpu = 1;
    cpu_job_t *cj = calloc((size_t)ncpu, sizeof(*cj));
    pthread_t *ct = calloc((size_t)ncpu, sizeof(*ct));
    s = now_s();
    for (long i = 0; i < ncpu; ++i) {
        cj[i] = (cpu_job_t){m, 64, secs, 0};
        pthread_create(&ct[i], NULL, cpu_loop, &cj[i]);
    }
    long cdone = 0;
    for (long i = 0; i < ncpu; ++i) {
        pthread_join(ct[i], NULL);
        cdone += cj[i].done;
    }
    el = now_s() - s;
    printf("CPU encoder (peer), %ld threads, batch 64: %10.1f queries/s\n", ncpu, (double)cdone / el);
    printf("ratio GPU batch 512 / CPU: %.1fx\n", gpu512 / ((double)cdone / el));
    for (int i = 0; i < 2; ++i) {
        api->encoder_ws_destroy(ws[i]);
        free(out[i]);
    }
    api->encoder_destroy(e);
    free(cj);
    free(ct);
    free(lw);
    free(ids);
    free(idp);
    free(lens);
    sg_e5_free(m);
    return 0;
}

/* ---- flat search ---- */

static double run_searches(sg_cuda_flat *f, size_t nq, const float *q, double secs, float *keys, int64_t *lab)
{
    char err[1024];
    if (api->flat_search(f, nq, q, 10, keys, lab, err, sizeof(err)) != 0) /* warm-up */
        die("flat_search", err);
    long done = 0;
    double t0 = now_s(), el;
    do {
        if (api->flat_search(f, nq, q, 10, keys, lab, err, sizeof(err)) != 0)
            die("flat_search", err);
        done += (long)nq;
        el = now_s() - t0;
    } while (el < secs);
    return (double)done / el;
}

static int bench_flat(int64_t rows, int dim, double secs, int one_gpu)
{
    int count;
    char why[512], err[1024];
    api->probe(&count, why, sizeof(why));
    int *gpus = malloc(sizeof(int) * (size_t)count);
    for (int i = 0; i < count; ++i)
        gpus[i] = i;
    const int ng = one_gpu ? 1 : count;
    const uint64_t seed = 1234;
    sg_cuda_flat_desc d = {sizeof(d), gpus, ng, SG_CUDA_SRC_RANDOM, NULL, NULL, rows, dim, SG_GPU_IP, seed, 512, 10, 0};
    sg_cuda_flat *f;
    double t0 = now_s();
    if (api->flat_create(&d, &f, err, sizeof(err)) != 0)
        die("flat_create", err);
    printf("flat index: %lld x %d random unit vectors generated in fp16 on %d GPU(s) in %.2f s\n", (long long)rows, dim, ng,
           now_s() - t0);
    enum { Q = 512 };
    float *q = malloc(sizeof(float) * Q * (size_t)dim), *keys = malloc(sizeof(float) * Q * 10);
    int64_t *lab = malloc(sizeof(int64_t) * Q * 10);
    sg_gpu_random_rows(seed + 1, 0, Q, dim, q);
    const char *peak_env = getenv("SG_BENCH_PEAK_TBS");
    const double peak = (peak_env != NULL ? strtod(peak_env, NULL) : 3.35) * 1e12 * ng;
    double q1 = run_searches(f, 1, q, secs, keys, lab);
    double bytes = (double)rows * dim * 2.0;
    printf("GPU flat, batch   1: %10.1f queries/s, %8.3f ms per query, %7.1f GB/s = %.1f%% of the %.2f TB/s bound\n", q1,
           1000.0 / q1, bytes * q1 / 1e9, 100.0 * bytes * q1 / peak, peak / 1e12);
    double q512 = run_searches(f, Q, q, secs, keys, lab);
    printf("GPU flat, batch 512: %10.1f queries/s, %8.3f ms per batch, %.1f TFLOP/s in the score GEMMs\n", q512, 1000.0 * Q / q512,
           2.0 * (double)rows * dim * q512 / 1e12);
    api->flat_destroy(f);
    /* the peer: FAISS on the CPU over the same vectors (at most 1 M rows) */
    int64_t prow = rows < 1000000 ? rows : 1000000;
    float *x = malloc(sizeof(float) * (size_t)prow * (size_t)dim);
    sg_gpu_random_rows(seed, 0, prow, dim, x);
    void *ix;
    if (sg_fidx_create("Flat", dim, SG_FIDX_IP, &ix, err, sizeof(err)) != 0 ||
        sg_fidx_add(ix, (size_t)prow, x, err, sizeof(err)) != 0)
        die("faiss", err);
    sg_fidx_t fx = {.index = ix, .dim = dim, .ntotal = prow, .metric = SG_FIDX_IP};
    float *dist = malloc(sizeof(float) * Q * 10);
    sg_fidx_set_blas_threshold(1);
    double s = now_s();
    long done = 0;
    do {
        if (sg_fidx_search(&fx, Q, q, 10, dist, lab, err, sizeof(err)) != 0)
            die("faiss search", err);
        done += Q;
    } while (now_s() - s < secs);
    double cpu = (double)done / (now_s() - s);
    printf("FAISS CPU (peer), %lld rows, batch 512: %10.1f queries/s (%.1f per second per 1 M rows)\n", (long long)prow, cpu,
           cpu * (double)prow / 1e6);
    printf("ratio GPU batch 512 / FAISS CPU, normalised to the same rows: %.1fx\n", q512 * (double)rows / (cpu * (double)prow));
    sg_fidx_free(ix);
    free(x);
    free(dist);
    free(q);
    free(keys);
    free(lab);
    free(gpus);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODULE encoder MODEL_DIR [SECONDS] | MODULE flat ROWS DIM [SECONDS] [GPUS]\n", argv[0]);
        return 2;
    }
    char err[1024], why[512];
    if (sg_gpu_module_load(argv[1], &api, err, sizeof(err)) != 0) {
        printf("skipped: no GPU module (%s)\n", err);
        return 0;
    }
    int n;
    api->probe(&n, why, sizeof(why));
    if (n == 0) {
        printf("skipped: no GPU (%s)\n", why);
        return 0;
    }
    sg_cuda_device_info di;
    if (api->device_info(0, &di, err, sizeof(err)) == 0)
        printf("%s; GPU 0: %s, %.1f GiB; %d GPU(s)\n", api->version, di.name, (double)di.total_bytes / 1073741824.0, n);
    if (strcmp(argv[2], "encoder") == 0 && argc >= 4)
        return bench_encoder(argv[3], argc >= 5 ? strtod(argv[4], NULL) : 5.0);
    if (strcmp(argv[2], "flat") == 0 && argc >= 5)
        return bench_flat(strtoll(argv[3], NULL, 10), (int)strtol(argv[4], NULL, 10), argc >= 6 ? strtod(argv[5], NULL) : 5.0,
                          argc >= 7 ? strtol(argv[6], NULL, 10) != 0 : 1);
    fprintf(stderr, "bad arguments\n");
    return 2;
}
