/*
 * searchgate-index-convert (`searchgate-index convert`) -- turns an existing FAISS Flat IP/L2
 * index (Search-R1's e5_Flat.index: no re-encoding) into a compressed or graph index built by
 * FAISS's own index_factory, and measures what it costs in recall.
 *
 *   searchgate-index convert FLAT.index OUT.index --factory "IVF4096,SQ8" [options]
 *
 * Memory stays bounded for any input size: the Flat file is mapped read-only and read a chunk at
 * a time (pages already added are dropped from this process again); only the training sample, one
 * chunk and the index being built are in memory. The new index is written to OUT.index.tmp.<pid>
 * and renamed into place once complete (an interruption removes the temporary file), then its
 * recall against exact search is measured and stored beside it in OUT.index.sgmeta (JSON), which
 * the local backend reads at start-up to state the recall it can expect.
 *
 * Recall report: for each nprobe (IVF) or efSearch (HNSW) value, recall@1/@3/@10 of the new index
 * against exact search of the Flat file (|ANN top-k ∩ exact top-k| / k, averaged), each k from a
 * search of k results as a route serving topk = k makes it (with re-ranking: k x F candidates), and
 * queries/s (one thread, batches of 32, as one worker of the server searches). Queries are either --eval
 * rows of the Flat file, each searched with its own row left out of both result lists, or real
 * queries (--queries FILE --model DIR) encoded with the e5 model.
 */
#include "e5.h"
#include "e5_internal.h"
#include "faiss_ext.h"
#include "faissidx.h"
#include "kern.h"
#include "gpuhost.h"

#include <cJSON.h>
#include <cblas.h>
#include <faiss/c_api/Index_c.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define K_MAX 10   /* recall@1, @3, @10 */
#define GT_EXTRA 8 /* float candidates kept beyond K_MAX + 1, re-scored in double precision */
#define EVAL_BATCH 32

static const char *prog = "searchgate-index convert";

/* ---- temporary files, removed on any exit path, signals included ---- */

static char tmp_index[4096], tmp_meta[4096];

static void remove_temps(void)
{
    if (tmp_index[0] != '\0')
        unlink(tmp_index);
    if (tmp_meta[0] != '\0')
        unlink(tmp_meta);
}

static void on_signal(int sig)
{
    remove_temps(); /* unlink is async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- small helpers ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* `m` distinct rows of [0, n), ascending (a bitmap of n bits; m <= n). */
static int64_t *sample_rows(int64_t n, int64_t m, uint64_t seed)
{
    int64_t *out = malloc((size_t)(m > 0 ? m : 1) * sizeof(int64_t));
    uint8_t *bits = calloc((size_t)(n / 8 + 1), 1);
    if (out == NULL || bits == NULL)
        abort();
    int invert = m > n / 2; /* pick the rows left out instead */
    int64_t want = invert ? n - m : m, got = 0;
    uint64_t s = seed;
    while (got < want) {
        int64_t r = (int64_t)(rng_next(&s) % (uint64_t)n);
        if (bits[r >> 3] & (1u << (r & 7)))
            continue;
        bits[r >> 3] |= (uint8_t)(1u << (r & 7));
        ++got;
    }
    int64_t k = 0;
    for (int64_t r = 0; r < n; ++r) {
        int set = (bits[r >> 3] >> (r & 7)) & 1;
        if (set != invert)
            out[k++] = r;
    }
    free(bits);
    return out;
}

static void fmt_bytes(uint64_t b, char *buf, size_t size)
{
    sg_gpu_fmt_bytes(b, buf, size);
}

static void fmt_duration(double s, char *buf, size_t size)
{
    if (s < 0 || !isfinite(s))
        snprintf(buf, size, "?");
    else if (s < 60)
        snprintf(buf, size, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, size, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, size, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

/* One progress line: rewritten in place on a terminal, else printed every 10 s (and at the end). */
typedef struct st_progress_t {
    const char *what;
    int64_t total;
    double t0, last;
    int tty, printed;
} progress_t;

static void progress_start(progress_t *p, const char *what, int64_t total)
{
    p->what = what;
    p->total = total;
    p->t0 = p->last = now_s();
    p->tty = isatty(STDERR_FILENO);
    p->printed = 0;
}

static void progress(progress_t *p, int64_t done)
{
    double t = now_s();
    int end = done >= p->total;
    if (!end && t - p->last < (p->tty ? 0.5 : 10.0))
        return;
    p->last = t;
    double rate = t > p->t0 ? (double)done / (t - p->t0) : 0;
    char eta[32];
    fmt_duration(rate > 0 ? (double)(p->total - done) / rate : -1, eta, sizeof(eta));
    fprintf(stderr, "%s%s: %s %lld/%lld rows (%.1f%%), %.0f rows/s, ETA %s%s", p->tty ? "\r" : "", prog, p->what, (long long)done,
            (long long)p->total, p->total > 0 ? 100.0 * (double)done / (double)p->total : 100.0, rate, end ? "0s" : eta,
            p->tty ? "\033[K" : "\n");
    if (p->tty && end)
        fputc('\n', stderr);
    fflush(stderr);
    p->printed = 1;
}

/* Drops the pages of rows [r0, r1) from this process (the page cache keeps them). */
static void drop_rows(const sg_gpu_flatfile_t *ff, int64_t r0, int64_t r1)
{
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)sg_gpu_flat_row_bytes(ff, r0), b = (uintptr_t)sg_gpu_flat_row_bytes(ff, r1);
    a = (a + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
    b &= ~((uintptr_t)pg - 1);
    if (b > a)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* "1,4,16" -> ascending distinct values in [1, hi]; returns the count or -1. */
static int parse_list(const char *s, int *vals, int max, long hi)
{
    int n = 0;
    const char *p = s;
    while (*p != '\0') {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno != 0 || end == p || v < 1 || v > hi || n == max)
            return -1;
        vals[n++] = (int)v;
        p = end;
        if (*p == ',')
            ++p;
        else if (*p != '\0')
            return -1;
    }
    /* sort + dedupe */
    for (int i = 1; i < n; ++i)
        for (int j = i; j > 0 && vals[j - 1] > vals[j]; --j) {
            int t = vals[j];
            vals[j] = vals[j - 1];
            vals[j - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < n; ++i)
        if (m == 0 || vals[m - 1] != vals[i])
            vals[m++] = vals[i];
    return m;
}

/* ---- exact ground truth ---- */

typedef struct st_scored_t {
    double s; /* larger is better (inner product, or -squared L2) */
    int64_t label;
} scored_t;

static int better(double s1, int64_t l1, double s2, int64_t l2)
{
    return s1 > s2 || (s1 == s2 && l1 < l2);
}

/* Exact top-K_MAX of each query over the whole Flat file (skipping `self[q]` when self != NULL):
 * float scores from BLAS select GT_EXTRA spare candidates, which are then re-scored in double
 * precision, so the result is the exact order (ties by smaller row) whatever BLAS rounding does. */
static void ground_truth(const sg_gpu_flatfile_t *ff, const float *queries, size_t nq, const int64_t *self, int64_t *gt)
{
    const int d = ff->dim, keep = K_MAX + 1 + GT_EXTRA;
    const int64_t chunk = nq <= 4096 ? 8192 : (int64_t)(33554432 / nq) > 64 ? (int64_t)(33554432 / nq) : 64;
    float *x = malloc((size_t)chunk * (size_t)d * sizeof(float));
    float *sc = malloc((size_t)chunk * nq * sizeof(float));
    float *xn = malloc((size_t)chunk * sizeof(float));
    float *cs = malloc(nq * (size_t)keep * sizeof(float)); /* per query: best `keep`, ascending */
    int64_t *cl = malloc(nq * (size_t)keep * sizeof(int64_t));
    size_t *cn = calloc(nq, sizeof(size_t));
    if (x == NULL || sc == NULL || xn == NULL || cs == NULL || cl == NULL || cn == NULL)
        abort();
    progress_t p;
    progress_start(&p, "exact search (ground truth) over", ff->ntotal);
    for (int64_t r0 = 0; r0 < ff->ntotal; r0 += chunk) {
        int64_t m = ff->ntotal - r0 < chunk ? ff->ntotal - r0 : chunk;
        sg_gpu_flat_rows(ff, r0, m, x);
        drop_rows(ff, r0, r0 + m);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)m, d, 1.0f, queries, d, x, d, 0.0f, sc, (int)m);
        if (ff->metric == SG_GPU_L2)
            for (int64_t i = 0; i < m; ++i) {
                float s = 0;
                for (int j = 0; j < d; ++j)
                    s += x[i * d + j] * x[i * d + j];
                xn[i] = s;
            }
#pragma omp parallel for schedule(static)
        for (size_t q = 0; q < nq; ++q) {
            float *qs = cs + q * (size_t)keep;
            int64_t *ql = cl + q * (size_t)keep;
            const float *row = sc + q * (size_t)m;
            for (int64_t i = 0; i < m; ++i) {
                int64_t l = r0 + i;
                if (self != NULL && l == self[q])
                    continue;
                float s = ff->metric == SG_GPU_L2 ? 2 * row[i] - xn[i] : row[i];
                size_t n = cn[q], j;
                if (n < (size_t)keep) { /* ascending: qs[0] is the worst kept */
                    j = n;
                    cn[q] = n + 1;
                    while (j > 0 && qs[j - 1] > s) {
                        qs[j] = qs[j - 1];
                        ql[j] = ql[j - 1];
                        --j;
                    }
                } else if (s > qs[0]) { /* drop the worst */
                    j = 0;
                    while (j + 1 < n && qs[j + 1] < s) {
                        qs[j] = qs[j + 1];
                        ql[j] = ql[j + 1];
                        ++j;
                    }
                } else {
                    continue;
                }
                qs[j] = s;
                ql[j] = l;
            }
        }
        progress(&p, r0 + m);
    }
    /* exact re-scoring of the candidates */
    float *row = malloc((size_t)d * sizeof(float));
    scored_t *v = malloc((size_t)keep * sizeof(*v));
    if (row == NULL || v == NULL)
        abort();
    for (size_t q = 0; q < nq; ++q) {
        const float *qv = queries + q * (size_t)d;
        size_t n = cn[q];
        for (size_t i = 0; i < n; ++i) {
            int64_t l = cl[q * (size_t)keep + i];
            sg_gpu_flat_rows(ff, l, 1, row);
            double s = 0;
            for (int j = 0; j < d; ++j) {
                if (ff->metric == SG_GPU_L2) {
                    double t = (double)qv[j] - row[j];
                    s -= t * t;
                } else {
                    s += (double)qv[j] * row[j];
                }
            }
            v[i].s = s;
            v[i].label = l;
        }
        for (size_t i = 1; i < n; ++i) /* insertion sort, best first */
            for (size_t j = i; j > 0 && better(v[j].s, v[j].label, v[j - 1].s, v[j - 1].label); --j) {
                scored_t t = v[j];
                v[j] = v[j - 1];
                v[j - 1] = t;
            }
        for (int i = 0; i < K_MAX; ++i)
            gt[q * K_MAX + (size_t)i] = (size_t)i < n ? v[i].label : -1;
    }
    free(row);
    free(v);
    free(x);
    free(sc);
    free(xn);
    free(cs);
    free(cl);
    free(cn);
}

/* ---- recall ---- */

typedef struct st_point_t {
    const char *param; /* "nprobe", "efSearch" or NULL (no parameter) */
    int value;
    int rerank;
    double recall[3]; /* @1, @3, @10 */
    double qps;
} point_t;

static const int ks[3] = {1, 3, 10};

/* Searches every query as a route serving topk = k searches it, for each k of the report (one
 * thread, batches of EVAL_BATCH), and scores the results against the exact top-k. Serving fetches k
 * results, and with re-ranking k x F candidates that it re-scores exactly: recall@k must come from
 * that search, not from the top k of a longer list (k x F is a shorter shortlist for small k). A
 * held-out row of the Flat file is in the index itself, so its search fetches one more result
 * (with re-ranking, k x F + 1 candidates) and drops the row: the other rows get what a query from
 * outside the index gets. q/s is that of the k = 10 searches. */
static int measure(const sg_fidx_t *ix, const float *queries, size_t nq, const int64_t *self, const int64_t *gt, point_t *pt,
                   char *err, size_t err_size)
{
    const int extra = self != NULL ? 1 : 0;
    float *dist = malloc((size_t)EVAL_BATCH * (size_t)(K_MAX + 1) * sizeof(float));
    int64_t *lab = malloc(nq * (size_t)(K_MAX + 1) * sizeof(int64_t));
    if (dist == NULL || lab == NULL)
        abort();
    sg_fidx_sp_t sp = {0, 0, pt->rerank, 0};
    if (pt->param != NULL && strcmp(pt->param, "nprobe") == 0)
        sp.nprobe = pt->value;
    else if (pt->param != NULL)
        sp.ef_search = pt->value;
    int rc = 0;
    for (int c = 0; c < 3 && rc == 0; ++c) {
        const int k = ks[c], kq = k + extra;
        sp.candidates = pt->rerank > 0 ? k * pt->rerank + extra : 0;
        double t0 = now_s();
        for (size_t q0 = 0; q0 < nq && rc == 0; q0 += EVAL_BATCH) {
            size_t n = nq - q0 < EVAL_BATCH ? nq - q0 : EVAL_BATCH;
            rc = sg_fidx_search_sp(ix, n, queries + q0 * (size_t)ix->dim, kq, &sp, dist, lab + q0 * (size_t)kq, err, err_size);
        }
        double t = now_s() - t0;
        if (k == K_MAX)
            pt->qps = t > 0 ? (double)nq / t : 0;
        double hit = 0;
        for (size_t q = 0; q < nq && rc == 0; ++q) {
            int h = 0, n = 0; /* the first k results other than the query's own row */
            for (int i = 0; i < kq && n < k; ++i) {
                int64_t l = lab[q * (size_t)kq + (size_t)i];
                if (self != NULL && l == self[q])
                    continue;
                ++n;
                for (int j = 0; j < k && l >= 0; ++j)
                    if (gt[q * K_MAX + (size_t)j] == l) {
                        ++h;
                        break;
                    }
            }
            hit += (double)h / k;
        }
        pt->recall[c] = nq > 0 ? hit / (double)nq : 0;
    }
    free(dist);
    free(lab);
    return rc;
}

/* The setting to serve, among the points measured with the re-ranking asked for (in increasing
 * order of the parameter, i.e. of cost): the cheapest whose recall@3 reaches `target`; when none
 * does, the cheapest within `tolerance` of the best recall@3 measured -- past the point where recall
 * stops rising, a larger nprobe or efSearch costs many times more for a difference below sampling
 * error. *reached says which. */
static const point_t *recommend(const point_t *pts, int np, int rerank, double target, double tolerance, int *reached)
{
    const point_t *best = NULL;
    for (int i = 0; i < np; ++i) {
        if (pts[i].rerank != rerank)
            continue;
        if (pts[i].recall[1] >= target) {
            *reached = 1;
            return &pts[i];
        }
        if (best == NULL || pts[i].recall[1] > best->recall[1])
            best = &pts[i];
    }
    *reached = 0;
    for (int i = 0; best != NULL && i < np; ++i)
        if (pts[i].rerank == rerank && pts[i].recall[1] >= best->recall[1] - tolerance)
            return &pts[i];
    return best;
}

/* ---- real queries ---- */

static float *encode_queries(const char *file, const char *model_dir, const char *prefix, long max_len, int dim, size_t *nq,
                             char *err, size_t err_size)
{
    FILE *fp = fopen(file, "r");
    if (fp == NULL) {
        snprintf(err, err_size, "%s: cannot open: %s", file, strerror(errno));
        return NULL;
    }
    sg_e5_model *m = NULL;
    char e2[768];
    if (sg_e5_load(model_dir, &m, e2, sizeof(e2)) != 0) {
        snprintf(err, err_size, "--model: %s", e2);
        fclose(fp);
        return NULL;
    }
    if (sg_e5_dim(m) != dim) {
        snprintf(err, err_size, "--model %s encodes dimension %d but the index has dimension %d", model_dir, sg_e5_dim(m), dim);
        sg_e5_free(m);
        fclose(fp);
        return NULL;
    }
    char **texts = NULL;
    size_t *lens = NULL, n = 0, cap = 0;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    size_t lineno = 0;
    int bad = 0;
    while ((got = getline(&line, &lcap, fp)) > 0) {
        ++lineno;
        cJSON *s = cJSON_ParseWithLength(line, (size_t)got);
        if (s == NULL || !cJSON_IsString(s)) {
            int blank = 1;
            for (ssize_t i = 0; i < got; ++i)
                if (line[i] != ' ' && line[i] != '\n' && line[i] != '\r' && line[i] != '\t')
                    blank = 0;
            cJSON_Delete(s);
            if (blank)
                continue;
            snprintf(err, err_size, "%s:%zu: expected one JSON string per line", file, lineno);
            bad = 1;
            break;
        }
        if (n == cap) {
            cap = cap != 0 ? cap * 2 : 256;
            texts = realloc(texts, cap * sizeof(*texts));
            lens = realloc(lens, cap * sizeof(*lens));
            if (texts == NULL || lens == NULL)
                abort();
        }
        texts[n] = strdup(s->valuestring);
        lens[n] = strlen(s->valuestring);
        ++n;
        cJSON_Delete(s);
    }
    free(line);
    fclose(fp);
    float *out = NULL;
    if (!bad && n == 0) {
        snprintf(err, err_size, "%s: no queries", file);
        bad = 1;
    }
    if (!bad) {
        out = malloc(n * (size_t)dim * sizeof(float));
        sg_e5_workspace *ws = sg_e5_workspace_new(m);
        if (out == NULL || ws == NULL)
            abort();
        /* the server's float32 products ("encoder_blas": "auto"): the queries it would search */
        int f32 = sg_kern_f32_best(sg_e5_features(m));
        if (f32 != SG_KERN_NONE && sg_e5_use_kernels(m, f32, e2, sizeof(e2)) != 0) {
            snprintf(err, err_size, "--model: %s", e2);
            bad = 1;
        }
        uint32_t ml = sg_e5_max_length(m, (uint32_t)max_len);
        for (size_t i = 0; i < n && !bad; i += 32) {
            size_t b = n - i < 32 ? n - i : 32;
            if (sg_e5_encode(m, ws, prefix, (const char *const *)texts + i, lens + i, b, ml, out + i * (size_t)dim, e2,
                             sizeof(e2)) != 0) {
                snprintf(err, err_size, "encoding %s: %s", file, e2);
                bad = 1;
            }
        }
        sg_e5_workspace_free(ws);
    }
    for (size_t i = 0; i < n; ++i)
        free(texts[i]);
    free(texts);
    free(lens);
    sg_e5_free(m);
    if (bad) {
        free(out);
        return NULL;
    }
    *nq = n;
    return out;
}

/* ---- the side file ---- */

static int write_file_atomically(const char *path, char *tmp, size_t tmp_size, const char *data, size_t len, char *err,
                                 size_t err_size)
{
    snprintf(tmp, tmp_size, "%s.tmp.%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "w");
    if (fp == NULL) {
        snprintf(err, err_size, "%s: cannot create: %s", tmp, strerror(errno));
        tmp[0] = '\0';
        return -1;
    }
    int ok = fwrite(data, 1, len, fp) == len;
    ok = fflush(fp) == 0 && ok;
    ok = fsync(fileno(fp)) == 0 && ok;
    ok = fclose(fp) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        snprintf(err, err_size, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
        tmp[0] = '\0';
        return -1;
    }
    tmp[0] = '\0';
    return 0;
}

static int fsync_path(const char *path)
{
    FILE *fp = fopen(path, "r+");
    if (fp == NULL)
        return -1;
    int rc = fsync(fileno(fp));
    fclose(fp);
    return rc;
}

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: searchgate-index convert FLAT.index OUT.index --factory STR [options]\n"
            "  Reads a FAISS Flat IP/L2 index (e.g. Search-R1's e5_Flat.index) in bounded memory and writes the index\n"
            "  that FAISS's index_factory builds from STR, e.g. \"IVF4096,SQ8\", \"IVF4096,PQ64\", \"HNSW32\", \"HNSW32,SQ8\".\n"
            "  --train-rows N     rows sampled for training (IVF: max(64 x nlist, 131072); others: 131072; at most all)\n"
            "  --chunk N          rows read and added at a time (65536)\n"
            "  --threads N        threads for training, adding and exact search (online CPUs)\n"
            "  --blas-threads N   OpenBLAS threads while FAISS trains and adds (1: FAISS's OpenMP threads do the work)\n"
            "  --rerank F         record that searches re-rank topk x F candidates exactly from FLAT.index (IVF-PQ);\n"
            "                     the report then has rows with and without re-ranking\n"
            "  --eval N           recall report over N rows of FLAT.index, each searched with its own row left out (1000;\n"
            "                     0: no report)\n"
            "  --queries FILE     recall report over real queries instead (one JSON string per line), encoded with\n"
            "  --model DIR        this e5 model folder  [--prefix \"query: \"] [--max-length 256]\n"
            "  --nprobe LIST      IVF nprobe values of the report (1,4,16,32,64,128,256; capped at nlist)\n"
            "  --ef-search LIST   HNSW efSearch values of the report (16,32,64,128,256)\n"
            "  --target-recall R  recall@3 the recommended setting must reach (0.95); when none does, the smallest\n"
            "  --tolerance T      setting within T of the best recall@3 measured is recommended (0.005)\n"
            "  --seed N           sampling seed (1)\n"
            "  --force            replace OUT.index if it exists\n"
            "Writes OUT.index (via a temporary file renamed into place) and OUT.index.sgmeta (JSON: the report).\n");
}

int main(int argc, char **argv)
{
    /* libgomp reads OMP_WAIT_POLICY when it is loaded: its default spinning waits, next to
     * FAISS's many short parallel regions (PQ training: 64 small k-means), leave a busy or small
     * machine with threads that spin instead of work (2.5x slower here); start again with
     * passive waits unless the caller chose a policy */
    if (getenv("OMP_WAIT_POLICY") == NULL && setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0)
        execv("/proc/self/exe", argv); /* on failure, go on as we are */
    const char *src = NULL, *dst = NULL, *factory = NULL, *queries_file = NULL, *model_dir = NULL, *prefix = "query: ";
    long train_rows = 0, chunk = 65536, threads = 0, rerank = 0, n_eval = 1000, max_len = 256, seed = 1, blas_threads = 1;
    double target = 0.95, tolerance = 0.005;
    int force = 0;
    int nprobes[32] = {1, 4, 16, 32, 64, 128, 256}, n_nprobes = 7;
    int efs[32] = {16, 32, 64, 128, 256}, n_efs = 5;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--force") == 0) {
            force = 1;
            continue;
        } else if (a[0] == '-' && a[1] == '-' && v == NULL) {
            fprintf(stderr, "%s: option %s needs a value\n", prog, a);
            return 2;
        } else if (strcmp(a, "--factory") == 0) {
            factory = v;
        } else if (strcmp(a, "--queries") == 0) {
            queries_file = v;
        } else if (strcmp(a, "--model") == 0) {
            model_dir = v;
        } else if (strcmp(a, "--prefix") == 0) {
            prefix = v;
        } else if (strcmp(a, "--train-rows") == 0) {
            bad = parse_long(v, 1, 1L << 40, &train_rows);
        } else if (strcmp(a, "--chunk") == 0) {
            bad = parse_long(v, 1, 1L << 24, &chunk);
        } else if (strcmp(a, "--threads") == 0) {
            bad = parse_long(v, 0, 1024, &threads);
        } else if (strcmp(a, "--blas-threads") == 0) {
            bad = parse_long(v, 1, 1024, &blas_threads);
        } else if (strcmp(a, "--rerank") == 0) {
            bad = parse_long(v, 0, 64, &rerank);
        } else if (strcmp(a, "--eval") == 0) {
            bad = parse_long(v, 0, 100000, &n_eval);
        } else if (strcmp(a, "--max-length") == 0) {
            bad = parse_long(v, 2, 8192, &max_len);
        } else if (strcmp(a, "--seed") == 0) {
            bad = parse_long(v, 0, 1L << 62, &seed);
        } else if (strcmp(a, "--nprobe") == 0) {
            bad = (n_nprobes = parse_list(v, nprobes, 32, 1L << 24)) <= 0;
        } else if (strcmp(a, "--ef-search") == 0) {
            bad = (n_efs = parse_list(v, efs, 32, 1L << 20)) <= 0;
        } else if (strcmp(a, "--target-recall") == 0) {
            char *end;
            target = strtod(v, &end);
            bad = end == v || *end != '\0' || !(target > 0 && target <= 1);
        } else if (strcmp(a, "--tolerance") == 0) {
            char *end;
            tolerance = strtod(v, &end);
            bad = end == v || *end != '\0' || !(tolerance >= 0 && tolerance < 1);
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "%s: unknown option %s\n", prog, a);
            usage(stderr);
            return 2;
        } else {
            if (src == NULL)
                src = a;
            else if (dst == NULL)
                dst = a;
            else {
                fprintf(stderr, "%s: unexpected argument %s\n", prog, a);
                return 2;
            }
            continue;
        }
        if (bad) {
            fprintf(stderr, "%s: bad value for %s: \"%s\"\n", prog, a, v);
            return 2;
        }
        ++i;
    }
    if (src == NULL || dst == NULL || factory == NULL) {
        fprintf(stderr, "%s: FLAT.index, OUT.index and --factory are required\n", prog);
        usage(stderr);
        return 2;
    }
    if ((queries_file == NULL) != (model_dir == NULL)) {
        fprintf(stderr, "%s: --queries and --model go together\n", prog);
        return 2;
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? n : 1;
    }
    char err[2048];
    /* ---- the input: a Flat IP/L2 index, nothing else ---- */
    char fourcc[5];
    int is_flat = sg_gpu_flat_is_flat(src, fourcc, err, sizeof(err));
    if (is_flat < 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    if (is_flat == 0) {
        fprintf(stderr,
                "%s: %s is not a FAISS Flat index (its type tag is \"%s\"); convert reads IndexFlatIP / IndexFlatL2 files "
                "(tags IxFI, IxF2, IxFl), such as Search-R1's e5_Flat.index\n",
                prog, src, fourcc);
        return 1;
    }
    sg_gpu_flatfile_t ff;
    if (sg_gpu_flat_open(src, &ff, err, sizeof(err)) != 0) {
        if (strstr(err, "metric type") != NULL && strstr(err, "corrupt") == NULL)
            fprintf(stderr, "%s: %s is a Flat index with a metric other than inner product or L2; convert reads those two only\n",
                    prog, src);
        else
            fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    if (ff.ntotal < 1) {
        fprintf(stderr, "%s: %s holds no vectors\n", prog, src);
        sg_gpu_flat_close(&ff);
        return 1;
    }
    struct stat ss, ds;
    if (stat(dst, &ds) == 0) {
        if (stat(src, &ss) == 0 && ss.st_dev == ds.st_dev && ss.st_ino == ds.st_ino) {
            fprintf(stderr, "%s: OUT.index is the input file itself\n", prog);
            sg_gpu_flat_close(&ff);
            return 1;
        }
        if (!force) {
            fprintf(stderr, "%s: %s exists (use --force to replace it)\n", prog, dst);
            sg_gpu_flat_close(&ff);
            return 1;
        }
    }
    int metric = ff.metric == SG_GPU_L2 ? SG_FIDX_L2 : SG_FIDX_IP;
    const char *metric_name = metric == SG_FIDX_L2 ? "l2" : "inner_product";
    snprintf(tmp_index, sizeof(tmp_index), "%s.tmp.%ld", dst, (long)getpid());
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    atexit(remove_temps);
    /* FAISS parallelises with OpenMP and calls BLAS from inside its parallel regions: OpenBLAS
     * keeps one thread, or its spinning threads and OpenMP's fight over the cores (k-means then
     * runs tens of times slower). Only the ground truth's big GEMMs use OpenBLAS threads. */
    omp_set_num_threads((int)threads);
    openblas_set_num_threads((int)blas_threads);
    sg_fidx_set_blas_threshold(1);

    /* the report's queries first: a bad query file fails before hours of work, not after */
    float *queries = NULL;
    int64_t *self = NULL;
    size_t nq = 0;
    const char *qkind = NULL;
    if (queries_file != NULL) {
        fprintf(stderr, "%s: encoding the queries of %s\n", prog, queries_file);
        queries = encode_queries(queries_file, model_dir, prefix, max_len, ff.dim, &nq, err, sizeof(err));
        if (queries == NULL) {
            fprintf(stderr, "%s: %s\n", prog, err);
            return 1;
        }
        qkind = "queries";
    } else if (n_eval > 0) {
        nq = (size_t)(n_eval < ff.ntotal ? n_eval : ff.ntotal);
        self = sample_rows(ff.ntotal, (int64_t)nq, (uint64_t)seed * 104729u + 3u);
        queries = malloc(nq * (size_t)ff.dim * sizeof(float));
        if (queries == NULL)
            abort();
        for (size_t i = 0; i < nq; ++i)
            sg_gpu_flat_rows(&ff, self[i], 1, queries + i * (size_t)ff.dim);
        qkind = "rows";
    }
    void *index = NULL;
    if (sg_fidx_create(factory, ff.dim, metric, &index, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    sg_fext_info_t info;
    sg_fext_info(index, &info);
    if (sg_fext_skip_polysemous(index))
        fprintf(stderr,
                "%s: PQ codes are trained as standard PQ (no polysemous re-ordering: it serves only polysemous "
                "filtering, which is not used, and takes hours in a generic FAISS build)\n",
                prog);
    if (rerank > 0 && info.kind == SG_FEXT_FLAT) {
        fprintf(stderr, "%s: --rerank makes no sense for a Flat index\n", prog);
        return 1;
    }
    char b1[32], b2[32];
    fmt_bytes(ff.file_size, b1, sizeof(b1));
    fprintf(stderr, "%s: %s: %lld vectors of dimension %d, metric %s (%s) -> %s \"%s\", %ld threads\n", prog, src,
            (long long)ff.ntotal, ff.dim, metric_name, b1, dst, factory, threads);

    /* ---- train on a sample ---- */
    double t_train = 0, t_add = 0, t_write = 0;
    int64_t n_train = 0;
    if (!faiss_Index_is_trained(index)) {
        int64_t want = train_rows > 0                                         ? train_rows
                       : info.kind == SG_FEXT_IVF && info.nlist * 64 > 131072 ? info.nlist * 64
                                                                              : 131072;
        n_train = want < ff.ntotal ? want : ff.ntotal;
        int64_t *rows = sample_rows(ff.ntotal, n_train, (uint64_t)seed * 7919u + 17u);
        float *x = malloc((size_t)n_train * (size_t)ff.dim * sizeof(float));
        if (x == NULL) {
            fprintf(stderr, "%s: out of memory for %lld training rows\n", prog, (long long)n_train);
            return 1;
        }
        fmt_bytes((uint64_t)n_train * (uint64_t)ff.dim * 4u, b1, sizeof(b1));
        fprintf(stderr, "%s: training on %lld sampled rows (%s)\n", prog, (long long)n_train, b1);
        double t0 = now_s();
        for (int64_t i = 0; i < n_train; ++i)
            sg_gpu_flat_rows(&ff, rows[i], 1, x + (size_t)i * (size_t)ff.dim);
        drop_rows(&ff, 0, ff.ntotal);
        free(rows);
        if (sg_fidx_train(index, (size_t)n_train, x, err, sizeof(err)) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err);
            return 1;
        }
        free(x);
        t_train = now_s() - t0;
        fprintf(stderr, "%s: trained in %.1f s\n", prog, t_train);
    }

    /* ---- add in chunks ---- */
    {
        float *x = malloc((size_t)chunk * (size_t)ff.dim * sizeof(float));
        if (x == NULL) {
            fprintf(stderr, "%s: out of memory for a chunk of %ld rows\n", prog, chunk);
            return 1;
        }
        sg_gpu_flat_advise(&ff, 1);
        fprintf(stderr, "%s: adding %lld rows in chunks of %ld\n", prog, (long long)ff.ntotal, chunk);
        progress_t p;
        progress_start(&p, "adding", ff.ntotal);
        double t0 = now_s();
        for (int64_t r0 = 0; r0 < ff.ntotal; r0 += chunk) {
            int64_t m = ff.ntotal - r0 < chunk ? ff.ntotal - r0 : chunk;
            sg_gpu_flat_rows(&ff, r0, m, x);
            drop_rows(&ff, r0, r0 + m);
            if (sg_fidx_add(index, (size_t)m, x, err, sizeof(err)) != 0) {
                fprintf(stderr, "%s: %s\n", prog, err);
                return 1;
            }
            progress(&p, r0 + m);
        }
        t_add = now_s() - t0;
        free(x);
    }

    /* ---- write: temporary name, then rename ---- */
    {
        double t0 = now_s();
        if (sg_fidx_write(index, tmp_index, err, sizeof(err)) != 0 || fsync_path(tmp_index) != 0) {
            fprintf(stderr, "%s: %s\n", prog, err[0] != '\0' ? err : "cannot write the index");
            return 1;
        }
        if (rename(tmp_index, dst) != 0) {
            fprintf(stderr, "%s: cannot rename %s to %s: %s\n", prog, tmp_index, dst, strerror(errno));
            return 1;
        }
        tmp_index[0] = '\0';
        t_write = now_s() - t0;
    }
    uint64_t out_size = 0, out_hash = 0, src_size = 0, src_hash = 0;
    if (sg__e5_fingerprint(dst, &out_size, &out_hash, err, sizeof(err)) != 0 ||
        sg__e5_fingerprint(src, &src_size, &src_hash, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    fmt_bytes(out_size, b1, sizeof(b1));
    fmt_bytes(ff.file_size, b2, sizeof(b2));
    printf("%s: wrote %s (\"%s\", %lld vectors): %s, %.1f%% of the Flat file's %s\n", prog, dst, factory,
           (long long)faiss_Index_ntotal(index), b1, 100.0 * (double)out_size / (double)ff.file_size, b2);
    if (n_train > 0)
        printf("  trained on %lld rows in %.1f s; ", (long long)n_train, t_train);
    else
        printf("  no training needed; ");
    printf("added %lld rows in %.1f s (%.0f rows/s); written in %.1f s\n", (long long)ff.ntotal, t_add,
           t_add > 0 ? (double)ff.ntotal / t_add : 0, t_write);
    if (info.kind == SG_FEXT_IVF) {
        sg_fext_info(index, &info);
        fmt_bytes((uint64_t)info.nlist * (uint64_t)ff.dim * 4u, b1, sizeof(b1));
        fmt_bytes(info.list_bytes, b2, sizeof(b2));
        printf("  served: the coarse quantizer in memory (%s) + %s of inverted lists memory-mapped from the file\n", b1, b2);
    } else {
        printf("  served: the whole index in memory\n");
    }

    /* ---- the recall report ---- */
    sg_fidx_t ix;
    memset(&ix, 0, sizeof(ix));
    ix.index = index;
    ix.dim = ff.dim;
    ix.ntotal = ff.ntotal;
    ix.metric = metric;
    sg_fext_info(index, &ix.info);
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "searchgate_convert", 1);
    cJSON_AddStringToObject(meta, "factory", factory);
    cJSON_AddStringToObject(meta, "metric", metric_name);
    cJSON_AddNumberToObject(meta, "dim", ff.dim);
    cJSON_AddNumberToObject(meta, "ntotal", (double)ff.ntotal);
    char hex[24];
    cJSON *jo = cJSON_AddObjectToObject(meta, "index");
    cJSON_AddNumberToObject(jo, "size", (double)out_size);
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)out_hash);
    cJSON_AddStringToObject(jo, "fingerprint", hex);
    char *src_abs = realpath(src, NULL);
    jo = cJSON_AddObjectToObject(meta, "source");
    cJSON_AddStringToObject(jo, "path", src_abs != NULL ? src_abs : src);
    cJSON_AddNumberToObject(jo, "size", (double)src_size);
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)src_hash);
    cJSON_AddStringToObject(jo, "fingerprint", hex);
    free(src_abs);
    cJSON_AddNumberToObject(meta, "rerank", (double)rerank);
    jo = cJSON_AddObjectToObject(meta, "build");
    cJSON_AddNumberToObject(jo, "train_rows", (double)n_train);
    cJSON_AddNumberToObject(jo, "train_s", t_train);
    cJSON_AddNumberToObject(jo, "add_s", t_add);
    cJSON_AddNumberToObject(jo, "write_s", t_write);
    cJSON_AddNumberToObject(jo, "threads", (double)threads);
    int rc = 0;
    if (queries != NULL) {
        int64_t *gt = malloc(nq * K_MAX * sizeof(int64_t));
        if (gt == NULL)
            abort();
        sg_gpu_flat_advise(&ff, 1);
        openblas_set_num_threads((int)threads);
        ground_truth(&ff, queries, nq, self, gt);
        openblas_set_num_threads(1);
        sg_gpu_flat_advise(&ff, 0);
        if (rerank > 0)
            ix.rerank = ff; /* borrowed: closed below, not by ix */
        /* the sweep: one thread, as a server worker */
        omp_set_num_threads(1);
        openblas_set_num_threads(1);
        point_t pts[130];
        int np = 0;
        const char *param = info.kind == SG_FEXT_IVF ? "nprobe" : info.kind == SG_FEXT_HNSW ? "efSearch" : NULL;
        int *vals = info.kind == SG_FEXT_IVF ? nprobes : efs;
        int nv = param == NULL ? 1 : info.kind == SG_FEXT_IVF ? n_nprobes : n_efs;
        if (info.kind == SG_FEXT_HNSW) /* FAISS 1.7.3 sizes the candidate queue from the index's own efSearch */
            sg_fext_set_ef_search(index, efs[n_efs - 1]);
        for (int i = 0; i < nv; ++i) {
            int v = param == NULL ? 0 : vals[i];
            if (info.kind == SG_FEXT_IVF && v > info.nlist) {
                if (i > 0 && vals[i - 1] >= info.nlist)
                    break;
                v = (int)info.nlist;
            }
            for (int r = 0; r < (rerank > 0 ? 2 : 1); ++r) {
                point_t *pt = &pts[np++];
                memset(pt, 0, sizeof(*pt));
                pt->param = param;
                pt->value = v;
                pt->rerank = r == 1 ? (int)rerank : 0;
                if (measure(&ix, queries, nq, self, gt, pt, err, sizeof(err)) != 0) {
                    fprintf(stderr, "%s: %s\n", prog, err);
                    return 1;
                }
            }
        }
        if (info.kind == SG_FEXT_HNSW) /* what was written: FAISS's default */
            sg_fext_set_ef_search(index, info.ef_search);
        /* print and record */
        printf("recall against exact search of %s, %zu %s, k = 1/3/10, each k searched as a route serving topk = k searches it "
               "(re-ranking k x F candidates); q/s: one thread, batches of %d, k = 10\n",
               src, nq, self != NULL ? "rows of the Flat file, each searched with its own row left out" : "encoded queries",
               EVAL_BATCH);
        printf("  %-9s %6s %9s %9s %10s %10s\n", param != NULL ? param : "", "rerank", "recall@1", "recall@3", "recall@10", "q/s");
        cJSON *jr = cJSON_AddArrayToObject(meta, "recall");
        for (int i = 0; i < np; ++i) {
            const point_t *pt = &pts[i];
            char rr[16];
            snprintf(rr, sizeof(rr), "%d", pt->rerank);
            printf("  %-9d %6s %9.4f %9.4f %10.4f %10.1f\n", pt->value, pt->rerank > 0 ? rr : "-", pt->recall[0], pt->recall[1],
                   pt->recall[2], pt->qps);
            cJSON *e = cJSON_CreateObject();
            if (param != NULL)
                cJSON_AddNumberToObject(e, param, pt->value);
            cJSON_AddNumberToObject(e, "rerank", pt->rerank);
            cJSON_AddNumberToObject(e, "recall@1", pt->recall[0]);
            cJSON_AddNumberToObject(e, "recall@3", pt->recall[1]);
            cJSON_AddNumberToObject(e, "recall@10", pt->recall[2]);
            cJSON_AddNumberToObject(e, "qps", round(pt->qps * 10) / 10);
            cJSON_AddItemToArray(jr, e);
        }
        cJSON *je = cJSON_AddObjectToObject(meta, "eval");
        cJSON_AddStringToObject(je, "kind", qkind);
        cJSON_AddNumberToObject(je, "queries", (double)nq);
        cJSON_AddNumberToObject(je, "seed", (double)seed);
        cJSON_AddNumberToObject(je, "target_recall@3", target);
        cJSON_AddStringToObject(je, "qps_note", "one thread, batches of 32, k = 10");
        cJSON_AddStringToObject(je, "method", "recall@k from searches of k results (k x rerank candidates), as serving topk = k");
        if (self != NULL) {
            cJSON *rows = cJSON_AddArrayToObject(je, "rows");
            for (size_t i = 0; i < nq; ++i)
                cJSON_AddItemToArray(rows, cJSON_CreateNumber((double)self[i]));
        } else {
            cJSON_AddStringToObject(je, "file", queries_file);
        }
        if (param != NULL) {
            int reached = 0;
            const point_t *best = recommend(pts, np, (int)rerank, target, tolerance, &reached);
            cJSON *jrec = cJSON_AddObjectToObject(meta, "recommended");
            cJSON_AddNumberToObject(jrec, param, best->value);
            cJSON_AddNumberToObject(jrec, "rerank", best->rerank);
            cJSON_AddNumberToObject(jrec, "recall@3", best->recall[1]);
            cJSON_AddBoolToObject(jrec, "reached_target", reached);
            if (!reached)
                cJSON_AddNumberToObject(jrec, "tolerance", tolerance);
            if (reached)
                printf("recommended: %s=%d%s (the smallest with recall@3 >= %.2f: %.4f)\n", param, best->value,
                       best->rerank > 0 ? " with re-ranking" : "", target, best->recall[1]);
            else
                printf("recommended: %s=%d%s (no setting reached recall@3 >= %.2f; the smallest within %.3f of the best "
                       "measured: %.4f)\n",
                       param, best->value, best->rerank > 0 ? " with re-ranking" : "", target, tolerance, best->recall[1]);
        }
        free(gt);
    }
    char *text = cJSON_Print(meta);
    size_t mlen = strlen(dst) + 8;
    char *meta_path = malloc(mlen);
    if (text == NULL || meta_path == NULL)
        abort();
    snprintf(meta_path, mlen, "%s.sgmeta", dst);
    size_t tl = strlen(text);
    text = realloc(text, tl + 2);
    text[tl] = '\n';
    text[tl + 1] = '\0';
    if (write_file_atomically(meta_path, tmp_meta, sizeof(tmp_meta), text, tl + 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        rc = 1;
    } else {
        printf("recorded in %s\n", meta_path);
    }
    free(meta_path);
    free(text);
    cJSON_Delete(meta);
    free(queries);
    free(self);
    sg_fidx_free(index);
    sg_gpu_flat_close(&ff);
    return rc;
}
