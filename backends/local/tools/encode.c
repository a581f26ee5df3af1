/*
 * searchgate-encode -- the local backend's e5 encoder on the command line, through the same
 * library calls the server makes (sg_e5_tokenize / sg_e5_encode).
 *
 *   searchgate-encode --model DIR [--prefix STR] [--ids] [--max-length N] [--batch N] [--precision P]
 *   searchgate-encode --compare int8|bf16 --model DIR --queries FILE [--index FLAT] [--json]
 *
 * Reads JSON lines from stdin, each one JSON string (so a text may hold newlines as \n), and
 * writes one JSON line per input line to stdout: the L2-normalised embedding as an array of
 * floats (printed with 9 significant digits, enough to round-trip float32), or with --ids the
 * token ids. Blank input lines are skipped. Exit status 1 on any error (message on stderr). The
 * products run as the server's "encoder_blas": "auto" runs them (the own kernels where AVX2 runs),
 * in float32 or the --precision given (fp32, int8, bf16), on the kernels the server would pick.
 *
 * --compare: the quality guard of a precision before a route is switched to it. Encodes the
 * queries of FILE (one JSON string a line) in float32 and in the other precision, with the
 * kernels the server would choose on this CPU, and prints the distribution of the cosine between
 * the two embeddings of each query; with --index (a FAISS Flat IP/L2 file, e.g. the route's
 * e5_Flat.index or the Flat file a converted index came from) it also searches both exactly and
 * prints the share of queries whose top-1, top-3 and top-10 lists are identical (same ids, same
 * order) and the recall@k of the other precision's lists against float32's.
 */
#include "blas.h"
#include "e5.h"
#include "gpuhost.h"
#include "jsonl.h"
#include "kern.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fprintf(stderr, "usage: searchgate-encode --model DIR [--prefix STR] [--ids] [--max-length N] [--batch N] [--precision P]\n"
                    "       searchgate-encode --compare int8|bf16 --model DIR --queries FILE [--index FLAT] [--json]\n"
                    "  reads one JSON string per line on stdin; writes one JSON array per line on stdout\n"
                    "  --prefix STR      text put before each input (default \"query: \")\n"
                    "  --ids             print token ids instead of embeddings\n"
                    "  --max-length N    truncation length in tokens, [CLS]/[SEP] included (default 256)\n"
                    "  --batch N         texts encoded per forward pass (default 32)\n"
                    "  --precision P     fp32 (default), int8 or bf16, on the kernels the server picks on this CPU\n"
                    "  --compare P       float32 against precision P on the queries of --queries (one JSON string a line):\n"
                    "                    the cosine between each query's two embeddings; with --index, the identical\n"
                    "                    top-1/3/10 lists and recall@k against float32 in that Flat IP/L2 index; --json: one\n"
                    "                    JSON object instead of text\n");
}

/* The server's engine on this CPU for `precision` ("fp32", "int8", "bf16"): float32 on the own
 * kernels where they run ("encoder_blas": "auto"), the others on the kernel their choice picks. */
static int set_engine(sg_e5_model *m, const char *precision, char *err, size_t err_size)
{
    if (strcmp(precision, "int8") == 0)
        return sg_e5_set_precision(m, SG_E5_INT8, err, err_size);
    if (strcmp(precision, "bf16") == 0)
        return sg_e5_set_precision(m, SG_E5_BF16, err, err_size);
    int f32 = sg_kern_f32_best(sg_e5_features(m));
    return f32 == SG_KERN_NONE ? 0 : sg_e5_use_kernels(m, f32, err, err_size);
}

/* ---- --compare ---- */

#define CMP_K 10

/* The queries of `path`: one JSON string a line, blank lines skipped. */
static char **read_queries(const char *path, size_t *n_out)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        fprintf(stderr, "searchgate-encode: %s: cannot open\n", path);
        return NULL;
    }
    char **texts = NULL, *line = NULL;
    size_t n = 0, cap = 0, lcap = 0;
    ssize_t got;
    unsigned long lineno = 0;
    while ((got = getline(&line, &lcap, fp)) >= 0) {
        ++lineno;
        size_t len = (size_t)got, s = 0;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
            --len;
        while (s < len && (line[s] == ' ' || line[s] == '\t'))
            ++s;
        if (s == len)
            continue;
        if (sg_json_check_string(line + s, len - s) != 0) {
            fprintf(stderr, "searchgate-encode: %s:%lu: not a JSON string\n", path, lineno);
            for (size_t i = 0; i < n; ++i)
                free(texts[i]);
            free(texts);
            texts = NULL;
            n = 0;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            texts = realloc(texts, cap * sizeof(*texts));
            if (texts == NULL)
                abort();
        }
        size_t tl;
        texts[n++] = sg_json_decode_string(line + s, len - s, &tl);
    }
    free(line);
    fclose(fp);
    if (texts != NULL && n == 0) {
        fprintf(stderr, "searchgate-encode: %s: no queries\n", path);
        free(texts);
        return NULL;
    }
    *n_out = n;
    return texts;
}

/* Encodes every text in batches of `batch` into out (n x dim). */
static int encode_all(const sg_e5_model *m, const char *prefix, uint32_t max_len, size_t batch, char **texts, size_t n, float *out)
{
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    size_t *lens = malloc(batch * sizeof(*lens));
    if (w == NULL || lens == NULL)
        abort();
    char err[512];
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += batch) {
        size_t b = n - i < batch ? n - i : batch;
        for (size_t j = 0; j < b; ++j)
            lens[j] = strlen(texts[i + j]);
        if (sg_e5_encode(m, w, prefix, (const char *const *)texts + i, lens, b, max_len, out + i * (size_t)sg_e5_dim(m), err,
                         sizeof(err)) != 0) {
            fprintf(stderr, "searchgate-encode: %s\n", err);
            rc = -1;
        }
    }
    free(lens);
    sg_e5_workspace_free(w);
    return rc;
}

/* Exact top-CMP_K of each query in the Flat file (best first; ties by the smaller row). */
static void exact_topk(const sg_gpu_flatfile_t *ff, const float *q, size_t nq, int64_t *ids)
{
    const int d = ff->dim;
    const int64_t chunk = 4096;
    float *x = malloc((size_t)chunk * (size_t)d * sizeof(float)), *sc = malloc((size_t)chunk * nq * sizeof(float));
    float *xn = malloc((size_t)chunk * sizeof(float)), *best = malloc(nq * CMP_K * sizeof(float));
    size_t *cnt = calloc(nq, sizeof(size_t));
    if (x == NULL || sc == NULL || xn == NULL || best == NULL || cnt == NULL)
        abort();
    for (int64_t r0 = 0; r0 < ff->ntotal; r0 += chunk) {
        int64_t m = ff->ntotal - r0 < chunk ? ff->ntotal - r0 : chunk;
        sg_gpu_flat_rows(ff, r0, m, x);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)m, d, 1.0f, q, d, x, d, 0.0f, sc, (int)m);
        for (int64_t i = 0; i < m && ff->metric == SG_GPU_L2; ++i) {
            float s = 0;
            for (int j = 0; j < d; ++j)
                s += x[i * d + j] * x[i * d + j];
            xn[i] = s;
        }
        for (size_t a = 0; a < nq; ++a) {
            float *bs = best + a * CMP_K;
            int64_t *bi = ids + a * CMP_K;
            for (int64_t i = 0; i < m; ++i) {
                float s = ff->metric == SG_GPU_L2 ? 2 * sc[a * (size_t)m + (size_t)i] - xn[i] : sc[a * (size_t)m + (size_t)i];
                size_t n = cnt[a];
                if (n == CMP_K && !(s > bs[CMP_K - 1]))
                    continue; /* rows come in increasing order: a tie keeps the earlier row */
                size_t j = n < CMP_K ? n++ : CMP_K - 1;
                while (j > 0 && bs[j - 1] < s) {
                    bs[j] = bs[j - 1];
                    bi[j] = bi[j - 1];
                    --j;
                }
                bs[j] = s;
                bi[j] = r0 + i;
                cnt[a] = n;
            }
        }
    }
    for (size_t a = 0; a < nq; ++a)
        for (size_t j = cnt[a]; j < CMP_K; ++j)
            ids[a * CMP_K + j] = -1;
    free(x);
    free(sc);
    free(xn);
    free(best);
    free(cnt);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quantile(const double *sorted, size_t n, double q)
{
    size_t i = (size_t)floor(q * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static int compare_main(const char *model, const char *kind, const char *queries, const char *index, const char *prefix,
                        long max_len, long batch, int json)
{
    size_t n = 0;
    char **texts = read_queries(queries, &n);
    if (texts == NULL)
        return 1;
    sg_e5_model *m32 = NULL, *mq = NULL;
    char err[768], d32[200], dq[200];
    int rc = 1, have_index = 0;
    float *a = NULL, *b = NULL;
    double *cs = NULL;
    int64_t *ia = NULL, *ib = NULL;
    sg_gpu_flatfile_t ff;
    if (sg_e5_load(model, &m32, err, sizeof(err)) != 0 || sg_e5_load(model, &mq, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-encode: %s\n", err);
        goto out;
    }
    if (set_engine(m32, "fp32", err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-encode: %s\n", err);
        goto out;
    }
    if (set_engine(mq, kind, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-encode: --compare %s cannot run here: %s\n", kind, err);
        goto out;
    }
    int dim = sg_e5_dim(m32);
    uint32_t ml = sg_e5_max_length(m32, (uint32_t)max_len);
    a = malloc(n * (size_t)dim * sizeof(float));
    b = malloc(n * (size_t)dim * sizeof(float));
    cs = malloc(n * sizeof(double));
    if (a == NULL || b == NULL || cs == NULL)
        abort();
    if (encode_all(m32, prefix, ml, (size_t)batch, texts, n, a) != 0 || encode_all(mq, prefix, ml, (size_t)batch, texts, n, b) != 0)
        goto out;
    double mean = 0;
    for (size_t i = 0; i < n; ++i) {
        double c = 0;
        for (int j = 0; j < dim; ++j)
            c += (double)a[i * (size_t)dim + (size_t)j] * b[i * (size_t)dim + (size_t)j];
        cs[i] = c;
        mean += c / (double)n;
    }
    qsort(cs, n, sizeof(double), cmp_double);
    double same[3] = {0, 0, 0}, recall[3] = {0, 0, 0};
    static const int ks[3] = {1, 3, CMP_K};
    if (index != NULL) {
        if (sg_gpu_flat_open(index, &ff, err, sizeof(err)) != 0) {
            fprintf(stderr, "searchgate-encode: --index: %s\n", err);
            goto out;
        }
        have_index = 1;
        if (ff.dim != dim) {
            fprintf(stderr, "searchgate-encode: --index %s has dimension %d but the model encodes %d\n", index, ff.dim, dim);
            goto out;
        }
        ia = malloc(n * CMP_K * sizeof(int64_t));
        ib = malloc(n * CMP_K * sizeof(int64_t));
        if (ia == NULL || ib == NULL)
            abort();
        exact_topk(&ff, a, n, ia);
        exact_topk(&ff, b, n, ib);
        for (size_t i = 0; i < n; ++i) {
            const int64_t *x = ia + i * CMP_K, *y = ib + i * CMP_K;
            for (int c = 0; c < 3; ++c) {
                int k = ks[c], eq = 1, hit = 0;
                for (int j = 0; j < k; ++j) {
                    eq &= x[j] == y[j];
                    for (int l = 0; l < k; ++l)
                        hit += y[j] >= 0 && y[j] == x[l];
                }
                same[c] += eq / (double)n;
                recall[c] += hit / (double)k / (double)n;
            }
        }
    }
    sg_e5_engine(m32, d32, sizeof(d32));
    sg_e5_engine(mq, dq, sizeof(dq));
    if (json) {
        printf("{\"precision\": \"%s\", \"queries\": %zu, \"float32\": \"%s\", \"other\": \"%s\", \"cosine\": {\"min\": %.6f, "
               "\"p1\": %.6f, \"p5\": %.6f, \"median\": %.6f, \"mean\": %.6f, \"max\": %.6f}",
               kind, n, d32, dq, cs[0], quantile(cs, n, 0.01), quantile(cs, n, 0.05), quantile(cs, n, 0.5), mean, cs[n - 1]);
        if (have_index)
            printf(", \"index\": {\"path\": \"%s\", \"vectors\": %lld, \"identical_top1\": %.4f, \"identical_top3\": %.4f, "
                   "\"identical_top10\": %.4f, \"recall@1\": %.4f, \"recall@3\": %.4f, \"recall@10\": %.4f}",
                   index, (long long)ff.ntotal, same[0], same[1], same[2], recall[0], recall[1], recall[2]);
        printf("}\n");
    } else {
        printf("searchgate-encode --compare %s: %zu queries of %s, model %s\n  float32: %s\n  %s: %s\n", kind, n, queries, model,
               d32, kind, dq);
        printf("cosine(float32, %s) per query: min %.6f, 1%% %.6f, 5%% %.6f, median %.6f, mean %.6f, max %.6f\n", kind, cs[0],
               quantile(cs, n, 0.01), quantile(cs, n, 0.05), quantile(cs, n, 0.5), mean, cs[n - 1]);
        if (have_index) {
            printf("exact search of %s (%lld vectors, %s), k = 1 / 3 / 10:\n", index, (long long)ff.ntotal,
                   ff.metric == SG_GPU_L2 ? "L2" : "inner product");
            printf("  identical top-k lists (same ids, same order): %5.1f%% / %5.1f%% / %5.1f%%\n", 100 * same[0], 100 * same[1],
                   100 * same[2]);
            printf("  recall@k of %s against float32:            %.4f / %.4f / %.4f\n", kind, recall[0], recall[1], recall[2]);
        }
    }
    rc = fflush(stdout) != 0;
out:
    if (have_index)
        sg_gpu_flat_close(&ff);
    free(a);
    free(b);
    free(cs);
    free(ia);
    free(ib);
    sg_e5_free(m32);
    sg_e5_free(mq);
    for (size_t i = 0; i < n; ++i)
        free(texts[i]);
    free(texts);
    return rc;
}

typedef struct st_pending_t {
    char **texts;
    size_t *lens;
    size_t n, cap;
} pending_t;

static int flush(const sg_e5_model *m, sg_e5_workspace *w, const char *prefix, uint32_t max_len, pending_t *p, float *out)
{
    if (p->n == 0)
        return 0;
    char err[512];
    if (sg_e5_encode(m, w, prefix, (const char *const *)p->texts, p->lens, p->n, max_len, out, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-encode: %s\n", err);
        return -1;
    }
    int dim = sg_e5_dim(m);
    for (size_t i = 0; i < p->n; ++i) {
        fputc('[', stdout);
        for (int d = 0; d < dim; ++d)
            printf(d ? ",%.9g" : "%.9g", (double)out[i * (size_t)dim + (size_t)d]);
        fputs("]\n", stdout);
        free(p->texts[i]);
    }
    p->n = 0;
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL, *prefix = "query: ", *compare = NULL, *queries = NULL, *index = NULL, *precision = "fp32";
    int ids = 0, json = 0;
    long max_len = 256, batch = 32;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc) {
            prefix = argv[++i];
        } else if (strcmp(argv[i], "--ids") == 0) {
            ids = 1;
        } else if (strcmp(argv[i], "--compare") == 0 && i + 1 < argc) {
            compare = argv[++i];
        } else if (strcmp(argv[i], "--queries") == 0 && i + 1 < argc) {
            queries = argv[++i];
        } else if (strcmp(argv[i], "--index") == 0 && i + 1 < argc) {
            index = argv[++i];
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc) {
            precision = argv[++i];
        } else if (strcmp(argv[i], "--max-length") == 0 && i + 1 < argc) {
            max_len = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            batch = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage();
            return 0;
        } else {
            usage();
            return 2;
        }
    }
    if (model == NULL || max_len < 2 || max_len > 1000000 || batch < 1 || batch > 65536) {
        usage();
        return 2;
    }
    if (compare != NULL && ((strcmp(compare, "int8") != 0 && strcmp(compare, "bf16") != 0) || queries == NULL || ids)) {
        fprintf(stderr, "searchgate-encode: --compare takes int8 or bf16 and needs --queries FILE\n");
        return 2;
    }
    if (strcmp(precision, "fp32") != 0 && strcmp(precision, "int8") != 0 && strcmp(precision, "bf16") != 0) {
        fprintf(stderr, "searchgate-encode: --precision takes fp32, int8 or bf16\n");
        return 2;
    }
    if (compare == NULL && (queries != NULL || index != NULL || json)) {
        fprintf(stderr, "searchgate-encode: --queries, --index and --json go with --compare\n");
        return 2;
    }
    sg_blas_choice_t blas; /* may re-execute this tool with OPENBLAS_CORETYPE set (blas.h) */
    if (sg_blas_tune(argv, &blas) != 0) {
        fprintf(stderr, "searchgate-encode: %s\n", blas.reason);
        return 2;
    }
    fprintf(stderr, "searchgate-encode: BLAS: %s with %s kernels (%s)\n", blas.library, blas.core, blas.reason);
    openblas_set_num_threads(1);
    if (compare != NULL)
        return compare_main(model, compare, queries, index, prefix, max_len, batch, json);
    sg_e5_model *m;
    char err[768];
    if (sg_e5_load(model, &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-encode: %s\n", err);
        return 1;
    }
    if (!ids && set_engine(m, precision, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-encode: --precision %s: %s\n", precision, err);
        sg_e5_free(m);
        return 1;
    }
    uint32_t ml = sg_e5_max_length(m, (uint32_t)max_len);
    sg_e5_workspace *w = sg_e5_workspace_new(m);
    int32_t *tok = malloc(ml * sizeof(int32_t));
    float *out = malloc((size_t)batch * (size_t)sg_e5_dim(m) * sizeof(float));
    pending_t p = {calloc((size_t)batch, sizeof(char *)), calloc((size_t)batch, sizeof(size_t)), 0, (size_t)batch};
    if (w == NULL || tok == NULL || out == NULL || p.texts == NULL || p.lens == NULL) {
        fprintf(stderr, "searchgate-encode: out of memory\n");
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    unsigned long lineno = 0;
    int rc = 0;
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        ++lineno;
        size_t len = (size_t)got;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
            --len;
        size_t s = 0;
        while (s < len && (line[s] == ' ' || line[s] == '\t'))
            ++s;
        if (s == len)
            continue;
        if (sg_json_check_string(line + s, len - s) != 0) {
            fprintf(stderr, "searchgate-encode: stdin:%lu: not a JSON string\n", lineno);
            rc = 1;
            break;
        }
        size_t tl;
        char *text = sg_json_decode_string(line + s, len - s, &tl);
        if (ids) {
            int k = sg_e5_tokenize(m, prefix, text, tl, ml, tok);
            free(text);
            if (k < 0) {
                fprintf(stderr, "searchgate-encode: stdin:%lu: tokenisation failed\n", lineno);
                rc = 1;
                break;
            }
            fputc('[', stdout);
            for (int i = 0; i < k; ++i)
                printf(i ? ",%d" : "%d", tok[i]);
            fputs("]\n", stdout);
            continue;
        }
        p.texts[p.n] = text;
        p.lens[p.n] = tl;
        if (++p.n == p.cap && flush(m, w, prefix, ml, &p, out) != 0) {
            rc = 1;
            break;
        }
    }
    if (rc == 0 && flush(m, w, prefix, ml, &p, out) != 0)
        rc = 1;
    for (size_t i = 0; i < p.n; ++i)
        free(p.texts[i]);
    if (fflush(stdout) != 0)
        rc = 1;
    free(line);
    free(p.texts);
    free(p.lens);
    free(out);
    free(tok);
    sg_e5_workspace_free(w);
    sg_e5_free(m);
    return rc;
}
