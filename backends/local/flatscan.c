/*
 * flatscan.c -- a parallel exact scan of a FAISS flat index (flatscan.h).
 */
#include "flatscan.h"
#include "blas.h"

#include <cblas.h>
#include <faiss/c_api/IndexFlat_c.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SG_FLATSCAN_X86 1
#endif

#define BLOCK_ROWS 1024

int sg_flatscan_init(sg_flatscan_t *fs, const sg_fidx_t *ix)
{
    memset(fs, 0, sizeof(*fs));
    if (ix->index == NULL || (ix->metric != SG_FIDX_IP && ix->metric != SG_FIDX_L2))
        return -1;
    FaissIndexFlat *flat = faiss_IndexFlat_cast(ix->index);
    if (flat == NULL)
        return -1;
    float *xb = NULL;
    size_t size = 0;
    faiss_IndexFlat_xb(flat, &xb, &size);
    if (xb == NULL || size != (size_t)ix->ntotal * (size_t)ix->dim)
        return -1;
    fs->xb = xb;
    fs->ntotal = ix->ntotal;
    fs->dim = ix->dim;
    fs->metric = ix->metric;
    return 0;
}

/* a before b: better score, then lower id; -1 labels after everything */
static inline int better(int l2, float da, int64_t la, float db, int64_t lb)
{
    if (la < 0 || lb < 0)
        return la >= 0 && lb < 0;
    if (da != db)
        return l2 ? da < db : da > db;
    return la < lb;
}

/* a k-entry heap with the worst entry at the root */
static void heap_push(int l2, float *hd, int64_t *hl, int k, float d, int64_t l)
{
    if (!better(l2, d, l, hd[0], hl[0]))
        return;
    int i = 0;
    for (;;) { /* sift the new entry down from the root */
        int a = 2 * i + 1, b = a + 1, w = i;
        float wd = d;
        int64_t wl = l;
        if (a < k && better(l2, wd, wl, hd[a], hl[a])) {
            w = a;
            wd = hd[a];
            wl = hl[a];
        }
        if (b < k && better(l2, wd, wl, hd[b], hl[b]))
            w = b;
        if (w == i)
            break;
        hd[i] = hd[w];
        hl[i] = hl[w];
        i = w;
    }
    hd[i] = d;
    hl[i] = l;
}

/* ---- a block's inner products ----
 *
 * sgemm packs both operands before it multiplies; for a scan that is n (1 to max_batch) queries
 * against a 1024-row block read once, packing the block costs about as much as the products
 * (measured: OpenBLAS's Zen sgemm reaches 35-50 GFLOP/s a core here where its large products run
 * at 65). On AVX2 CPUs the block is multiplied in place instead: 4 rows x 3 queries at a time
 * (12 accumulators), the rows' 3 KB each staying in L1 while every query passes over them, the
 * queries (n x 3 KB) in L2. Each (query, row) score is summed in the same order wherever it sits
 * (a row at a block's end is copied into a zeroed tile rather than taking another loop), so equal
 * rows score exactly equal and ties keep FAISS's order. CPUs with AVX-512 keep sgemm: their
 * OpenBLAS kernels are twice as wide as this one. */
#ifdef SG_FLATSCAN_X86
#define HSUM4(o, a, b, c, d)                                                                                                       \
    do {                                                                                                                           \
        __m256 s_ = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));                                                    \
        _mm_storeu_ps(o, _mm_add_ps(_mm256_castps256_ps128(s_), _mm256_extractf128_ps(s_, 1)));                                    \
    } while (0)

/* out[q * ld + i], i < 4: query q against the 4 rows y0..y3 (d floats each, d % 8 == 0) */
__attribute__((target("avx2,fma"))) static void tile_4x1(const float *x, const float *y0, int d, float *o4)
{
    const float *y1 = y0 + d, *y2 = y1 + d, *y3 = y2 + d;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int c = 0; c < d; c += 8) {
        __m256 v = _mm256_loadu_ps(x + c);
        a0 = _mm256_fmadd_ps(v, _mm256_loadu_ps(y0 + c), a0);
        a1 = _mm256_fmadd_ps(v, _mm256_loadu_ps(y1 + c), a1);
        a2 = _mm256_fmadd_ps(v, _mm256_loadu_ps(y2 + c), a2);
        a3 = _mm256_fmadd_ps(v, _mm256_loadu_ps(y3 + c), a3);
    }
    HSUM4(o4, a0, a1, a2, a3);
}

/* the same for 3 queries x0, x0 + d, x0 + 2d at once: o[0..3], o[4..7], o[8..11] */
__attribute__((target("avx2,fma"))) static void tile_4x3(const float *x0, const float *y0, int d, float *o12)
{
    const float *x1 = x0 + d, *x2 = x1 + d, *y1 = y0 + d, *y2 = y1 + d, *y3 = y2 + d;
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00, a20 = a00,
           a21 = a00, a22 = a00, a23 = a00;
    for (int c = 0; c < d; c += 8) {
        __m256 b0 = _mm256_loadu_ps(y0 + c), b1 = _mm256_loadu_ps(y1 + c), b2 = _mm256_loadu_ps(y2 + c),
               b3 = _mm256_loadu_ps(y3 + c);
        __m256 v = _mm256_loadu_ps(x0 + c);
        a00 = _mm256_fmadd_ps(v, b0, a00);
        a01 = _mm256_fmadd_ps(v, b1, a01);
        a02 = _mm256_fmadd_ps(v, b2, a02);
        a03 = _mm256_fmadd_ps(v, b3, a03);
        v = _mm256_loadu_ps(x1 + c);
        a10 = _mm256_fmadd_ps(v, b0, a10);
        a11 = _mm256_fmadd_ps(v, b1, a11);
        a12 = _mm256_fmadd_ps(v, b2, a12);
        a13 = _mm256_fmadd_ps(v, b3, a13);
        v = _mm256_loadu_ps(x2 + c);
        a20 = _mm256_fmadd_ps(v, b0, a20);
        a21 = _mm256_fmadd_ps(v, b1, a21);
        a22 = _mm256_fmadd_ps(v, b2, a22);
        a23 = _mm256_fmadd_ps(v, b3, a23);
    }
    HSUM4(o12, a00, a01, a02, a03);
    HSUM4(o12 + 4, a10, a11, a12, a13);
    HSUM4(o12 + 8, a20, a21, a22, a23);
}

/* The AVX-512 kernel: 4 rows x 6 queries (24 accumulators of the 32 registers), 16 floats a step.
 * Each accumulator is folded to 8 lanes, then summed as the AVX2 kernel's are (HSUM4), so every
 * (query, row) score takes the same sums in either tile shape. */
#define FOLD512(a) _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1))

__attribute__((target("avx512f,avx512dq,avx2,fma"))) static void tile512_4x1(const float *x, const float *y0, int d, float *o4)
{
    const float *y1 = y0 + d, *y2 = y1 + d, *y3 = y2 + d;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int c = 0; c < d; c += 16) {
        __m512 v = _mm512_loadu_ps(x + c);
        a0 = _mm512_fmadd_ps(v, _mm512_loadu_ps(y0 + c), a0);
        a1 = _mm512_fmadd_ps(v, _mm512_loadu_ps(y1 + c), a1);
        a2 = _mm512_fmadd_ps(v, _mm512_loadu_ps(y2 + c), a2);
        a3 = _mm512_fmadd_ps(v, _mm512_loadu_ps(y3 + c), a3);
    }
    HSUM4(o4, FOLD512(a0), FOLD512(a1), FOLD512(a2), FOLD512(a3));
}

#define Q6(i)                                                                                                                      \
    do {                                                                                                                           \
        __m512 v = _mm512_loadu_ps(x0 + (size_t)(i) * (size_t)d + c);                                                              \
        a[i][0] = _mm512_fmadd_ps(v, b0, a[i][0]);                                                                                 \
        a[i][1] = _mm512_fmadd_ps(v, b1, a[i][1]);                                                                                 \
        a[i][2] = _mm512_fmadd_ps(v, b2, a[i][2]);                                                                                 \
        a[i][3] = _mm512_fmadd_ps(v, b3, a[i][3]);                                                                                 \
    } while (0)

/* 6 queries x0 + i * d against the 4 rows y0..y3: o[4 * i .. 4 * i + 3] */
__attribute__((target("avx512f,avx512dq,avx2,fma"))) static void tile512_4x6(const float *x0, const float *y0, int d, float *o24)
{
    const float *y1 = y0 + d, *y2 = y1 + d, *y3 = y2 + d;
    __m512 a[6][4];
    for (int i = 0; i < 6; ++i)
        a[i][0] = a[i][1] = a[i][2] = a[i][3] = _mm512_setzero_ps();
    for (int c = 0; c < d; c += 16) {
        __m512 b0 = _mm512_loadu_ps(y0 + c), b1 = _mm512_loadu_ps(y1 + c), b2 = _mm512_loadu_ps(y2 + c),
               b3 = _mm512_loadu_ps(y3 + c);
        Q6(0);
        Q6(1);
        Q6(2);
        Q6(3);
        Q6(4);
        Q6(5);
    }
    for (int i = 0; i < 6; ++i)
        HSUM4(o24 + 4 * i, FOLD512(a[i][0]), FOLD512(a[i][1]), FOLD512(a[i][2]), FOLD512(a[i][3]));
}
#undef Q6

/* ip[q * rows + r] = x[q] . y[r]; `pad` holds 4 * d floats; `wide`: the AVX-512 tiles (d % 16 == 0) */
static void block_ip_avx2(const float *x, size_t n, const float *y, int rows, int d, float *ip, float *pad, int wide)
{
    float o[24];
    for (int r = 0; r < rows; r += 4) {
        const float *t = y + (size_t)r * (size_t)d;
        int m = rows - r < 4 ? rows - r : 4;
        if (m < 4) { /* the block's last rows, in a zeroed tile: the same sums as everywhere else */
            memset(pad, 0, sizeof(float) * 4 * (size_t)d);
            memcpy(pad, t, sizeof(float) * (size_t)m * (size_t)d);
            t = pad;
        }
        size_t q = 0;
        if (wide) {
            for (; q + 6 <= n; q += 6) {
                tile512_4x6(x + q * (size_t)d, t, d, o);
                for (int a = 0; a < 6; ++a)
                    memcpy(ip + (q + (size_t)a) * (size_t)rows + r, o + 4 * a, sizeof(float) * (size_t)m);
            }
            for (; q < n; ++q) {
                tile512_4x1(x + q * (size_t)d, t, d, o);
                memcpy(ip + q * (size_t)rows + r, o, sizeof(float) * (size_t)m);
            }
            continue;
        }
        for (; q + 3 <= n; q += 3) {
            tile_4x3(x + q * (size_t)d, t, d, o);
            for (int a = 0; a < 3; ++a)
                memcpy(ip + (q + (size_t)a) * (size_t)rows + r, o + 4 * a, sizeof(float) * (size_t)m);
        }
        for (; q < n; ++q) {
            tile_4x1(x + q * (size_t)d, t, d, o);
            memcpy(ip + q * (size_t)rows + r, o, sizeof(float) * (size_t)m);
        }
    }
}

#endif

/* ip[q * rows + r] = x[q] . y[r] for the block's rows: in place (pad != NULL; `wide`: AVX-512), else sgemm */
static void block_ip(const float *x, size_t n, const float *y, int rows, int d, float *ip, float *pad, int wide)
{
#ifdef SG_FLATSCAN_X86
    if (pad != NULL) {
        block_ip_avx2(x, n, y, rows, d, ip, pad, wide);
        return;
    }
#endif
    (void)pad;
    (void)wide;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, rows, d, 1.0f, x, d, y, d, 0.0f, ip, rows);
}

int sg_flatscan_pick(uint32_t features, int dim)
{
#ifdef SG_FLATSCAN_X86
    uint32_t avx2 = SG_CPU_AVX2 | SG_CPU_FMA, avx512 = avx2 | SG_CPU_AVX512F | SG_CPU_AVX512DQ;
    if ((features & avx512) == avx512 && dim > 0 && dim % 16 == 0)
        return SG_FLATSCAN_AVX512;
    if ((features & avx2) == avx2 && dim > 0 && dim % 8 == 0)
        return SG_FLATSCAN_AVX2;
#endif
    (void)features;
    (void)dim;
    return SG_FLATSCAN_SGEMM;
}

const char *sg_flatscan_kernel_name(int kernel)
{
    return kernel == SG_FLATSCAN_AVX512 ? "avx512" : kernel == SG_FLATSCAN_AVX2 ? "avx2" : "sgemm";
}

typedef struct st_scan_job_t {
    const sg_flatscan_t *fs;
    const float *x;
    const float *xnorm; /* L2 only */
    size_t n;
    int k;
    size_t n_slices;
    float *hd;      /* n_slices * n * k */
    int64_t *hl;    /* n_slices * n * k */
    float *scratch; /* slots * n * BLOCK_ROWS */
    float *ynorm;   /* slots * BLOCK_ROWS */
    float *pad;     /* slots * 4 * dim, when the AVX2 kernel runs; NULL: sgemm */
} scan_job_t;

static void scan_task(void *arg, size_t slice, unsigned slot)
{
    scan_job_t *j = arg;
    const sg_flatscan_t *fs = j->fs;
    int l2 = fs->metric == SG_FIDX_L2, d = fs->dim, k = j->k;
    int64_t r0 = (int64_t)((uint64_t)fs->ntotal * slice / j->n_slices);
    int64_t r1 = (int64_t)((uint64_t)fs->ntotal * (slice + 1) / j->n_slices);
    float *hd = j->hd + slice * j->n * (size_t)k;
    int64_t *hl = j->hl + slice * j->n * (size_t)k;
    float *ip = j->scratch + (size_t)slot * j->n * BLOCK_ROWS;
    float *yn = j->ynorm + (size_t)slot * BLOCK_ROWS;
    float *pad = j->pad != NULL ? j->pad + (size_t)slot * 4 * (size_t)d : NULL;
    for (size_t i = 0; i < j->n * (size_t)k; ++i) {
        hd[i] = l2 ? INFINITY : -INFINITY;
        hl[i] = -1;
    }
    for (int64_t b0 = r0; b0 < r1; b0 += BLOCK_ROWS) {
        int rows = (int)(r1 - b0 < BLOCK_ROWS ? r1 - b0 : BLOCK_ROWS);
        const float *y = fs->xb + (size_t)b0 * (size_t)d;
        block_ip(j->x, j->n, y, rows, d, ip, pad, j->fs->kernel == SG_FLATSCAN_AVX512);
        if (l2) {
            for (int r = 0; r < rows; ++r) {
                const float *yr = y + (size_t)r * (size_t)d;
                float s = 0;
                for (int c = 0; c < d; ++c)
                    s += yr[c] * yr[c];
                yn[r] = s;
            }
        }
        for (size_t q = 0; q < j->n; ++q) {
            const float *row = ip + q * (size_t)rows;
            float *qd = hd + q * (size_t)k;
            int64_t *ql = hl + q * (size_t)k;
            for (int r = 0; r < rows; ++r) {
                float s = row[r];
                if (l2) {
                    s = j->xnorm[q] + yn[r] - 2.0f * s;
                    if (s < 0)
                        s = 0;
                }
                if (better(l2, s, b0 + r, qd[0], ql[0]))
                    heap_push(l2, qd, ql, k, s, b0 + r);
            }
        }
    }
}

static void sort_list(int l2, float *d, int64_t *l, int k)
{
    for (int a = 1; a < k; ++a) { /* insertion sort: k is small */
        float dv = d[a];
        int64_t lv = l[a];
        int b = a - 1;
        while (b >= 0 && better(l2, dv, lv, d[b], l[b])) {
            d[b + 1] = d[b];
            l[b + 1] = l[b];
            --b;
        }
        d[b + 1] = dv;
        l[b + 1] = lv;
    }
}

void sg_flatscan_canonical(int metric, size_t n, int k, float *dist, int64_t *labels)
{
    for (size_t q = 0; q < n; ++q)
        sort_list(metric == SG_FIDX_L2, dist + q * (size_t)k, labels + q * (size_t)k, k);
}

int sg_flatscan_search(const sg_flatscan_t *fs, sg_par_t *par, size_t n, const float *x, int k, float *dist, int64_t *labels,
                       char *err, size_t err_size)
{
    int l2 = fs->metric == SG_FIDX_L2;
    unsigned threads = sg_par_threads(par), slots = par != NULL && par->slots > 1 ? par->slots : 1;
    size_t n_slices = threads;
    if ((int64_t)n_slices > fs->ntotal / BLOCK_ROWS)
        n_slices = fs->ntotal / BLOCK_ROWS > 0 ? (size_t)(fs->ntotal / BLOCK_ROWS) : 1;
    scan_job_t j = {fs, x, NULL, n, k, n_slices, NULL, NULL, NULL, NULL, NULL};
    float *xnorm = NULL;
    j.hd = malloc(n_slices * n * (size_t)k * sizeof(float) + 1);
    j.hl = malloc(n_slices * n * (size_t)k * sizeof(int64_t) + 1);
    j.scratch = malloc((size_t)slots * n * BLOCK_ROWS * sizeof(float) + 1);
    j.ynorm = malloc((size_t)slots * BLOCK_ROWS * sizeof(float) + 1);
    int fast = 0;
#ifdef SG_FLATSCAN_X86
    fast = (fs->kernel == SG_FLATSCAN_AVX2 && fs->dim % 8 == 0) || (fs->kernel == SG_FLATSCAN_AVX512 && fs->dim % 16 == 0);
#endif
    if (fast)
        j.pad = malloc((size_t)slots * 4 * (size_t)fs->dim * sizeof(float));
    if (l2)
        xnorm = malloc(n * sizeof(float) + 1);
    if (j.hd == NULL || j.hl == NULL || j.scratch == NULL || j.ynorm == NULL || (l2 && xnorm == NULL) || (fast && j.pad == NULL)) {
        snprintf(err, err_size, "out of memory for a search of %zu queries", n);
        free(j.hd);
        free(j.hl);
        free(j.scratch);
        free(j.ynorm);
        free(j.pad);
        free(xnorm);
        return -1;
    }
    if (l2) {
        for (size_t q = 0; q < n; ++q) {
            float s = 0;
            for (int c = 0; c < fs->dim; ++c)
                s += x[q * (size_t)fs->dim + (size_t)c] * x[q * (size_t)fs->dim + (size_t)c];
            xnorm[q] = s;
        }
        j.xnorm = xnorm;
    }
    sg_par_run(par, n_slices, scan_task, &j);
    /* merge: the slices' k best per query into one list */
    for (size_t q = 0; q < n; ++q) {
        float *od = dist + q * (size_t)k;
        int64_t *ol = labels + q * (size_t)k;
        for (int i = 0; i < k; ++i) {
            od[i] = l2 ? INFINITY : -INFINITY;
            ol[i] = -1;
        }
        for (size_t s = 0; s < n_slices; ++s) {
            const float *sd = j.hd + (s * n + q) * (size_t)k;
            const int64_t *sl = j.hl + (s * n + q) * (size_t)k;
            for (int i = 0; i < k; ++i)
                if (sl[i] >= 0)
                    heap_push(l2, od, ol, k, sd[i], sl[i]);
        }
        sort_list(l2, od, ol, k);
    }
    free(j.hd);
    free(j.hl);
    free(j.scratch);
    free(j.ynorm);
    free(j.pad);
    free(xnorm);
    return 0;
}
