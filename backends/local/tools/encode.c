/*
 * searchgate-encode -- the local backend's e5 encoder on the command line, through the same
 * library calls the server makes (sg_e5_tokenize / sg_e5_encode).
 *
 *   searchgate-encode --model DIR [--prefix STR] [--ids] [--max-length N] [--batch N]
 *
 * Reads JSON lines from stdin, each one JSON string (so a text may hold newlines as \n), and
 * writes one JSON line per input line to stdout: the L2-normalised embedding as an array of
 * floats (printed with 9 significant digits, enough to round-trip float32), or with --ids the
 * token ids. Blank input lines are skipped. Exit status 1 on any error (message on stderr).
 */
#include "blas.h"
#include "e5.h"
#include "jsonl.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fprintf(stderr, "usage: searchgate-encode --model DIR [--prefix STR] [--ids] [--max-length N] [--batch N]\n"
                    "  reads one JSON string per line on stdin; writes one JSON array per line on stdout\n"
                    "  --prefix STR      text put before each input (default \"query: \")\n"
                    "  --ids             print token ids instead of embeddings\n"
                    "  --max-length N    truncation length in tokens, [CLS]/[SEP] included (default 256)\n"
                    "  --batch N         texts encoded per forward pass (default 32)\n");
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
    const char *model = NULL, *prefix = "query: ";
    int ids = 0;
    long max_len = 256, batch = 32;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc) {
            prefix = argv[++i];
        } else if (strcmp(argv[i], "--ids") == 0) {
            ids = 1;
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
    sg_blas_choice_t blas; /* may re-execute this tool with OPENBLAS_CORETYPE set (blas.h) */
    if (sg_blas_tune(argv, &blas) != 0) {
        fprintf(stderr, "searchgate-encode: %s\n", blas.reason);
        return 2;
    }
    fprintf(stderr, "searchgate-encode: BLAS: %s with %s kernels (%s)\n", blas.library, blas.core, blas.reason);
    openblas_set_num_threads(1);
    sg_e5_model *m;
    char err[768];
    if (sg_e5_load(model, &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-encode: %s\n", err);
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
