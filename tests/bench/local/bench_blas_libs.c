/*
 * bench_blas_libs.c -- the BLAS libraries Debian ships, compared on the e5 encoder's products:
 * OpenBLAS (with whatever OPENBLAS_CORETYPE says), BLIS and oneDNN (float32, and bf16 where the
 * CPU runs it). Each library is dlopen'ed by path, so one binary measures any of them and none is
 * linked. How the local backend's BLAS was chosen (docs/backends/local.md, "BLAS kernels").
 *
 *     bench_blas_libs openblas|blis|dnnl|dnnl-bf16 [THREADS] [SECONDS]
 *
 * THREADS threads each run their own products (the backend's way under load); per M (tokens in
 * the product: one short query, 32 queries, 512 queries) it prints GFLOP/s for one layer's six
 * products (four h x h, h x 4h, 4h x h; h = 768).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t, float,
                             float *, int64_t);
typedef int (*dnnl_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *, int64_t, const uint16_t *, int64_t,
                            float, float *, int64_t);

static sgemm_fn cblas;
static dnnl_sgemm_fn dsgemm;
static dnnl_bf16_fn dbf16;
enum { H = 768, I = 3072 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* C[m,n] = A[m,k] . B[n,k]^T, row-major, as the encoder's linear layers */
static int product(int m, int n, int k, const void *a, const void *b, float *c)
{
    if (cblas != NULL) {
        cblas(101, 111, 112, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
        return 0;
    }
    if (dsgemm != NULL)
        return dsgemm('N', 'T', m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
    return dbf16('N', 'T', m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
}

typedef struct {
    int m;
    double seconds, gflops;
    int rc;
} job_t;

static void *run(void *p)
{
    job_t *j = p;
    size_t es = dbf16 != NULL ? 2 : 4;
    void *a = malloc(es * (size_t)j->m * I), *w = malloc(es * (size_t)H * I);
    float *c = malloc(sizeof(float) * (size_t)j->m * I);
    memset(a, 0x3e, es * (size_t)j->m * I); /* small positive numbers in either format */
    memset(w, 0x3e, es * (size_t)H * I);
    double per = 2.0 * j->m * (4.0 * H * H + 2.0 * H * I), t0 = now_s(), t;
    long reps = 0;
    do {
        for (int q = 0; q < 4; ++q)
            j->rc |= product(j->m, H, H, a, w, c);
        j->rc |= product(j->m, I, H, a, w, c);
        j->rc |= product(j->m, H, I, a, w, c);
        ++reps;
        t = now_s() - t0;
    } while (t < j->seconds && j->rc == 0);
    j->gflops = per * (double)reps / t / 1e9;
    free(a);
    free(w);
    free(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s openblas|blis|dnnl|dnnl-bf16 [THREADS] [SECONDS]\n", argv[0]);
        return 2;
    }
    const char *lib = argv[1];
    int threads = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 1;
    double seconds = argc > 3 ? strtod(argv[3], NULL) : 1.0;
    if (threads < 1 || threads > 256)
        threads = 1;
    char what[160] = "";
    if (strcmp(lib, "openblas") == 0) {
        void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            goto missing;
        cblas = (sgemm_fn)dlsym(h, "cblas_sgemm");
        ((void (*)(int))dlsym(h, "openblas_set_num_threads"))(1);
        snprintf(what, sizeof(what), "OpenBLAS, %s kernels", ((char *(*)(void))dlsym(h, "openblas_get_corename"))());
    } else if (strcmp(lib, "blis") == 0) {
        void *h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            h = dlopen("/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            goto missing;
        cblas = (sgemm_fn)dlsym(h, "cblas_sgemm");
        ((void (*)(long))dlsym(h, "bli_thread_set_num_threads"))(1);
        int id = ((int (*)(void))dlsym(h, "bli_arch_query_id"))();
        snprintf(what, sizeof(what), "BLIS, %s kernels", ((const char *(*)(int))dlsym(h, "bli_arch_string"))(id));
    } else if (strncmp(lib, "dnnl", 4) == 0) {
        void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (h == NULL)
            goto missing;
        if (strcmp(lib, "dnnl-bf16") == 0)
            dbf16 = (dnnl_bf16_fn)dlsym(h, "dnnl_gemm_bf16bf16f32");
        else
            dsgemm = (dnnl_sgemm_fn)dlsym(h, "dnnl_sgemm");
        snprintf(what, sizeof(what), "oneDNN %s (ISA id %d)", dbf16 != NULL ? "bf16" : "float32",
                 ((int (*)(void))dlsym(h, "dnnl_get_effective_cpu_isa"))());
    } else {
        fprintf(stderr, "unknown library %s\n", lib);
        return 2;
    }
    printf("%s, %d thread(s):", what, threads);
    int ms[] = {10, 300, 4800};
    for (int i = 0; i < 3; ++i) {
        pthread_t th[256];
        job_t j[256];
        for (int t = 0; t < threads; ++t) {
            j[t] = (job_t){ms[i], seconds, 0, 0};
            pthread_create(&th[t], NULL, run, &j[t]);
        }
        double sum = 0;
        int rc = 0;
        for (int t = 0; t < threads; ++t) {
            pthread_join(th[t], NULL);
            sum += j[t].gflops;
            rc |= j[t].rc;
        }
        if (rc != 0) {
            printf(" M=%d: not supported on this CPU (status %d)", ms[i], rc);
            break;
        }
        printf(" M=%d %.1f GFLOP/s;", ms[i], sum);
        fflush(stdout);
    }
    printf("\n");
    return 0;
missing:
    printf("%s: not installed (%s)\n", lib, dlerror());
    return 0;
}
