/*
 * searchgate-index-dense -- builds a FAISS index from a wiki-18 style corpus the way Search-R1's
 * index_builder.py does: each row's "contents" with the "passage: " prefix, encoded by the e5
 * model (mean pooling, L2 normalisation), added in row order (FAISS label i = row i) to a Flat
 * inner-product index.
 *
 *   searchgate-index-dense --model DIR CORPUS.jsonl OUT.index [--prefix "passage: "] [--batch N]
 *                          [--max-length 256] [--threads N] [--factory Flat] [--metric ip|l2]
 *                          [--train-rows N]
 *
 * Rows are encoded by --threads workers (default: the online CPUs), each with single-threaded
 * BLAS, a chunk at a time, and added in order, so memory stays bounded for any corpus size.
 * Other FAISS factory strings ("HNSW32", "IVF1024,Flat", ...) are accepted; an index that needs
 * training is trained on the first --train-rows rows (default 65536).
 */
#include "blas.h"
#include "e5.h"
#include "kern.h"
#include "faissidx.h"
#include "jsonl.h"

#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct st_ctx_t {
    const sg_e5_model *m;
    const sg_jsonl_t *corpus;
    const char *prefix;
    uint32_t max_len;
    size_t batch;
    /* the current chunk */
    uint64_t first, count;
    float *out;
    pthread_mutex_t mu;
    uint64_t next; /* next row of the chunk to hand out */
    int failed;
    char err[512];
} ctx_t;

typedef struct st_worker_t {
    ctx_t *c;
    sg_e5_workspace *ws;
    char **texts;
    size_t *lens;
} worker_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The decoded "contents" of a row (malloc'ed), or NULL. */
static char *contents_of(const sg_jsonl_t *j, uint64_t row, size_t *len)
{
    const char *p, *v;
    size_t n, vl;
    sg_jsonl_row(j, row, &p, &n);
    if (!sg_json_find_key(p, n, "contents", &v, &vl) || vl < 2 || v[0] != '"')
        return NULL;
    return sg_json_decode_string(v, vl, len);
}

static void *work(void *arg)
{
    worker_t *w = arg;
    ctx_t *c = w->c;
    int dim = sg_e5_dim(c->m);
    for (;;) {
        pthread_mutex_lock(&c->mu);
        uint64_t s = c->next;
        uint64_t e = s + c->batch;
        if (e > c->first + c->count)
            e = c->first + c->count;
        c->next = e;
        int stop = c->failed || s >= e;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            return NULL;
        size_t n = (size_t)(e - s);
        char err[512] = "";
        int bad = 0;
        for (size_t i = 0; i < n; ++i) {
            w->texts[i] = contents_of(c->corpus, s + i, &w->lens[i]);
            if (w->texts[i] == NULL && !bad) {
                snprintf(err, sizeof(err), "%s: row %llu has no string \"contents\"", c->corpus->path, (unsigned long long)(s + i));
                bad = 1;
            }
        }
        if (!bad && sg_e5_encode(c->m, w->ws, c->prefix, (const char *const *)w->texts, w->lens, n, c->max_len,
                                 c->out + (s - c->first) * (uint64_t)dim, err, sizeof(err)) != 0)
            bad = 1;
        for (size_t i = 0; i < n; ++i)
            free(w->texts[i]);
        if (bad) {
            pthread_mutex_lock(&c->mu);
            if (!c->failed) {
                c->failed = 1;
                snprintf(c->err, sizeof(c->err), "%s", err);
            }
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: searchgate-index-dense --model DIR CORPUS.jsonl OUT.index [--prefix \"passage: \"] [--batch N]\n"
                    "                              [--max-length 256] [--threads N] [--factory Flat] [--metric ip|l2]\n"
                    "                              [--train-rows N]\n");
}

int main(int argc, char **argv)
{
    const char *model = NULL, *corpus_path = NULL, *out_path = NULL, *prefix = "passage: ", *factory = "Flat";
    long batch = 32, max_len = 256, threads = 0, train_rows = 65536;
    int metric = SG_FIDX_IP;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (strcmp(a, "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(a, "--prefix") == 0 && i + 1 < argc)
            prefix = argv[++i];
        else if (strcmp(a, "--batch") == 0 && i + 1 < argc)
            batch = strtol(argv[++i], NULL, 10);
        else if (strcmp(a, "--max-length") == 0 && i + 1 < argc)
            max_len = strtol(argv[++i], NULL, 10);
        else if (strcmp(a, "--threads") == 0 && i + 1 < argc)
            threads = strtol(argv[++i], NULL, 10);
        else if (strcmp(a, "--factory") == 0 && i + 1 < argc)
            factory = argv[++i];
        else if (strcmp(a, "--train-rows") == 0 && i + 1 < argc)
            train_rows = strtol(argv[++i], NULL, 10);
        else if (strcmp(a, "--metric") == 0 && i + 1 < argc) {
            const char *m = argv[++i];
            if (strcmp(m, "ip") == 0)
                metric = SG_FIDX_IP;
            else if (strcmp(m, "l2") == 0)
                metric = SG_FIDX_L2;
            else {
                usage();
                return 2;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            usage();
            return 2;
        } else if (corpus_path == NULL)
            corpus_path = a;
        else if (out_path == NULL)
            out_path = a;
        else {
            usage();
            return 2;
        }
    }
    if (model == NULL || corpus_path == NULL || out_path == NULL || batch < 1 || batch > 65536 || max_len < 2 || threads < 0 ||
        threads > 1024 || train_rows < 1) {
        usage();
        return 2;
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? n : 1;
    }
    sg_blas_choice_t blas; /* may re-execute this tool with OPENBLAS_CORETYPE set (blas.h) */
    if (sg_blas_tune(argv, &blas) != 0) {
        fprintf(stderr, "searchgate-index-dense: %s\n", blas.reason);
        return 2;
    }
    fprintf(stderr, "searchgate-index-dense: BLAS: %s with %s kernels (%s)\n", blas.library, blas.core, blas.reason);
    openblas_set_num_threads(1);
    char err[1024];
    double t0 = now_s();
    sg_e5_model *m;
    if (sg_e5_load(model, &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-index-dense: %s\n", err);
        return 1;
    }
    /* the server's float32 products ("encoder_blas": "auto"): the own kernels where AVX2 runs */
    int f32 = sg_kern_f32_best(sg_e5_features(m));
    if (f32 != SG_KERN_NONE && sg_e5_use_kernels(m, f32, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-index-dense: %s\n", err);
        sg_e5_free(m);
        return 1;
    }
    sg_jsonl_t corpus;
    sg_jsonl_opts_t o = {0, NULL};
    if (sg_jsonl_open(corpus_path, &o, &corpus, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-index-dense: %s\n", err);
        sg_e5_free(m);
        return 1;
    }
    int dim = sg_e5_dim(m);
    void *index = NULL;
    if (sg_fidx_create(factory, dim, metric, &index, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-index-dense: %s\n", err);
        sg_jsonl_close(&corpus);
        sg_e5_free(m);
        return 1;
    }
    fprintf(stderr, "searchgate-index-dense: %llu rows, dimension %d, %ld threads, factory \"%s\", metric %s\n",
            (unsigned long long)corpus.n_rows, dim, threads, factory, metric == SG_FIDX_IP ? "inner product" : "L2");
    ctx_t c;
    memset(&c, 0, sizeof(c));
    c.m = m;
    c.corpus = &corpus;
    c.prefix = prefix;
    c.max_len = sg_e5_max_length(m, (uint32_t)max_len);
    c.batch = (size_t)batch;
    pthread_mutex_init(&c.mu, NULL);
    uint64_t chunk = (uint64_t)batch * (uint64_t)threads * 8;
    if (chunk < (uint64_t)train_rows)
        chunk = (uint64_t)train_rows; /* the first chunk doubles as the training set */
    c.out = malloc(chunk * (uint64_t)dim * sizeof(float) + 1);
    worker_t *ws = calloc((size_t)threads, sizeof(*ws));
    pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
    if (c.out == NULL || ws == NULL || tids == NULL) {
        fprintf(stderr, "searchgate-index-dense: out of memory\n");
        return 1;
    }
    for (long i = 0; i < threads; ++i) {
        ws[i].c = &c;
        ws[i].ws = sg_e5_workspace_new(m);
        ws[i].texts = calloc((size_t)batch, sizeof(char *));
        ws[i].lens = calloc((size_t)batch, sizeof(size_t));
    }
    int rc = 0;
    double last = now_s();
    for (uint64_t first = 0; first < corpus.n_rows && rc == 0; first += chunk) {
        c.first = first;
        c.count = corpus.n_rows - first < chunk ? corpus.n_rows - first : chunk;
        c.next = first;
        for (long i = 0; i < threads; ++i)
            pthread_create(&tids[i], NULL, work, &ws[i]);
        for (long i = 0; i < threads; ++i)
            pthread_join(tids[i], NULL);
        if (c.failed) {
            fprintf(stderr, "searchgate-index-dense: %s\n", c.err);
            rc = 1;
            break;
        }
        if (first == 0 && sg_fidx_train(index, (size_t)c.count, c.out, err, sizeof(err)) != 0) {
            fprintf(stderr, "searchgate-index-dense: %s\n", err);
            rc = 1;
            break;
        }
        if (sg_fidx_add(index, (size_t)c.count, c.out, err, sizeof(err)) != 0) {
            fprintf(stderr, "searchgate-index-dense: %s\n", err);
            rc = 1;
            break;
        }
        double now = now_s();
        if (now - last > 10 || first + c.count == corpus.n_rows) {
            fprintf(stderr, "searchgate-index-dense: %llu / %llu rows, %.1f rows/s\n", (unsigned long long)(first + c.count),
                    (unsigned long long)corpus.n_rows, (double)(first + c.count) / (now - t0));
            last = now;
        }
    }
    if (rc == 0 && sg_fidx_write(index, out_path, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-index-dense: %s\n", err);
        rc = 1;
    }
    if (rc == 0)
        fprintf(stderr, "searchgate-index-dense: wrote %s in %.1f s\n", out_path, now_s() - t0);
    for (long i = 0; i < threads; ++i) {
        sg_e5_workspace_free(ws[i].ws);
        free(ws[i].texts);
        free(ws[i].lens);
    }
    free(ws);
    free(tids);
    free(c.out);
    pthread_mutex_destroy(&c.mu);
    sg_fidx_free(index);
    sg_jsonl_close(&corpus);
    sg_e5_free(m);
    return rc;
}
