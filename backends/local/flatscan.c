/*
 * flatscan.c -- a parallel exact scan of a FAISS flat index (flatscan.h).
 */
#include "flatscan.h"

#include <cblas.h>
#include <faiss/c_api/IndexFlat_c.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    for (size_t i = 0; i < j->n * (size_t)k; ++i) {
        hd[i] = l2 ? INFINITY : -INFINITY;
        hl[i] = -1;
    }
    for (int64_t b0 = r0; b0 < r1; b0 += BLOCK_ROWS) {
        int rows = (int)(r1 - b0 < BLOCK_ROWS ? r1 - b0 : BLOCK_ROWS);
        const float *y = fs->xb + (size_t)b0 * (size_t)d;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)j->n, rows, d, 1.0f, j->x, d, y, d, 0.0f, ip, rows);
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
    scan_job_t j = {fs, x, NULL, n, k, n_slices, NULL, NULL, NULL, NULL};
    float *xnorm = NULL;
    j.hd = malloc(n_slices * n * (size_t)k * sizeof(float) + 1);
    j.hl = malloc(n_slices * n * (size_t)k * sizeof(int64_t) + 1);
    j.scratch = malloc((size_t)slots * n * BLOCK_ROWS * sizeof(float) + 1);
    j.ynorm = malloc((size_t)slots * BLOCK_ROWS * sizeof(float) + 1);
    if (l2)
        xnorm = malloc(n * sizeof(float) + 1);
    if (j.hd == NULL || j.hl == NULL || j.scratch == NULL || j.ynorm == NULL || (l2 && xnorm == NULL)) {
        snprintf(err, err_size, "out of memory for a search of %zu queries", n);
        free(j.hd);
        free(j.hl);
        free(j.scratch);
        free(j.ynorm);
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
    free(xnorm);
    return 0;
}
