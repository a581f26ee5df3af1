/*
 * index_main.c -- searchgate-index-bm25: builds a bm25 index from a JSONL corpus, and a few tools
 * around it (the analyzer, index info, a one-off search) for tests, benchmarks and debugging.
 * `searchgate-index bm25 ...` runs this program.
 */
#include "analyzer.h"
#include "builder.h"
#include "index.h"

#include <cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define SG_BM25_TOOL_VERSION "1.0.0"

static void usage(FILE *fp)
{
    fprintf(fp, "usage: searchgate-index-bm25 CORPUS.jsonl[.gz] OUT_DIR [options]    build an index\n"
                "       searchgate-index-bm25 --analyze [--stemmer S] [--stopwords S] [TEXT ...]\n"
                "       searchgate-index-bm25 --info INDEX_DIR [--verify]\n"
                "       searchgate-index-bm25 --search INDEX_DIR [--topk K] [--k1 X] [--b X] QUERY ...\n"
                "\n"
                "Build options:\n"
                "  --k1 X            BM25 k1 recorded as the index default (0.9, pyserini's; range 0..1000)\n"
                "  --b X             BM25 b recorded as the index default (0.4, pyserini's; range 0..1)\n"
                "  --stemmer S       porter (default: Lucene's PorterStemFilter), english (Porter2) or none\n"
                "  --stopwords S     lucene (default: EnglishAnalyzer's 33 words) or none\n"
                "  --memory-mb N     in-memory budget before postings are spilled to a run file (default 512)\n"
                "  --tmp-dir DIR     where run files go (default OUT_DIR)\n"
                "  --progress        draw a progress bar (default: when stderr is a terminal)\n"
                "  --no-progress     never draw one\n"
                "  --quiet           no summary line\n"
                "  --stats-json      print build statistics as one JSON object on stdout\n"
                "\n"
                "CORPUS is JSON lines, each with a string \"contents\" (\"\\\"Title\\\"\\nText\", the wiki-18 convention)\n"
                "and optional \"id\" (string or integer; default the 0-based row) and \"url\"; gzip input is read\n"
                "as is; \"-\" reads standard input.\n"
                "--analyze prints the tokens of each TEXT on one line, space-separated; without TEXT it reads\n"
                "standard input, one text per line (a line starting with '\"' is a JSON string).\n"
                "  -h, --help        this text\n"
                "  -V, --version     print the version\n");
}

static int parse_double(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static void print_tokens(sg_bm25_analyzer_t *a, sg_bm25_tokens_t *t, const char *s, size_t n)
{
    size_t k = sg_bm25_analyze(a, s, n, t);
    for (size_t i = 0; i < k; ++i)
        printf("%s%s", i > 0 ? " " : "", sg_bm25_token(t, i));
    putchar('\n');
}

static int cmd_analyze(sg_bm25_stemmer_t stem, sg_bm25_stopset_t stop, int argc, char **argv)
{
    sg_bm25_analyzer_t *a = sg_bm25_analyzer_new(stem, stop);
    if (a == NULL) {
        fprintf(stderr, "searchgate-index-bm25: cannot create the stemmer\n");
        return 1;
    }
    sg_bm25_tokens_t t = {0};
    if (argc > 0) {
        for (int i = 0; i < argc; ++i)
            print_tokens(a, &t, argv[i], strlen(argv[i]));
    } else {
        char *line = NULL;
        size_t cap = 0;
        ssize_t len;
        while ((len = getline(&line, &cap, stdin)) >= 0) {
            if (len > 0 && line[len - 1] == '\n')
                line[--len] = '\0';
            if (len > 0 && line[0] == '"') {
                cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
                if (!cJSON_IsString(j)) {
                    fprintf(stderr, "searchgate-index-bm25: not a JSON string: %s\n", line);
                    cJSON_Delete(j);
                    free(line);
                    sg_bm25_tokens_free(&t);
                    sg_bm25_analyzer_free(a);
                    return 1;
                }
                print_tokens(a, &t, j->valuestring, strlen(j->valuestring));
                cJSON_Delete(j);
            } else {
                print_tokens(a, &t, line, (size_t)len);
            }
            fflush(stdout);
        }
        free(line);
    }
    sg_bm25_tokens_free(&t);
    sg_bm25_analyzer_free(a);
    return 0;
}

static int cmd_info(const char *dir, int verify)
{
    sg_bm25_index_t ix;
    char err[1024];
    if (sg_bm25_index_open(&ix, dir, verify ? SG_BM25_VERIFY_FULL : SG_BM25_VERIFY_HEADER, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-index-bm25: %s\n", err);
        return 1;
    }
    const sg_bm25_meta_t *m = &ix.meta;
    printf("{\"format_version\":%d,\"build_id\":\"%016llx\",\"docs\":%llu,\"scored_docs\":%llu,\"terms\":%llu,\"postings\":%llu,"
           "\"tokens\":%llu,\"avgdl\":%.6f,\"max_doc_tokens\":%u,\"k1\":%g,\"b\":%g,\"stemmer\":\"%s\",\"stopwords\":\"%s\","
           "\"analyzer_version\":%u,\"corpus_bytes\":%llu,\"index_bytes\":%llu,\"verified\":%s}\n",
           SG_BM25_FORMAT_VERSION, (unsigned long long)ix.build_id, (unsigned long long)m->n_docs,
           (unsigned long long)m->n_scored_docs, (unsigned long long)m->n_terms, (unsigned long long)m->n_postings,
           (unsigned long long)m->total_tokens, ix.avgdl, m->max_doc_tokens, m->k1, m->b,
           sg_bm25_stemmer_name((sg_bm25_stemmer_t)m->stemmer), sg_bm25_stopset_name((sg_bm25_stopset_t)m->stopset),
           m->analyzer_version, (unsigned long long)m->corpus_bytes, (unsigned long long)ix.total_bytes,
           verify ? "\"full\"" : "\"header\"");
    sg_bm25_index_close(&ix);
    return 0;
}

static int cmd_search(const char *dir, uint32_t topk, double k1, double b, int argc, char **argv)
{
    sg_bm25_index_t ix;
    char err[1024];
    if (sg_bm25_index_open(&ix, dir, SG_BM25_VERIFY_HEADER, 0, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-index-bm25: %s\n", err);
        return 1;
    }
    float *norms = sg_bm25_norms(&ix, k1 >= 0 ? k1 : ix.meta.k1, b >= 0 ? b : ix.meta.b);
    sg_bm25_searcher_t *s = norms != NULL ? sg_bm25_searcher_new(&ix, norms) : NULL;
    sg_bm25_hit_t *hits = calloc(topk, sizeof(*hits));
    if (s == NULL || hits == NULL)
        abort();
    for (int i = 0; i < argc; ++i) {
        sg_bm25_qstats_t st = {0};
        size_t n = sg_bm25_search(s, argv[i], strlen(argv[i]), topk, hits, &st);
        printf("[");
        for (size_t k = 0; k < n; ++k) {
            const sg_bm25_docent_t *e = &ix.docent[hits[k].doc];
            printf("%s{\"row\":%u,\"score\":%.9g,\"document\":%.*s}", k > 0 ? "," : "", hits[k].doc, (double)hits[k].score,
                   (int)e->len, ix.docs + e->off);
        }
        printf("]\n");
    }
    free(hits);
    sg_bm25_searcher_free(s);
    free(norms);
    sg_bm25_index_close(&ix);
    return 0;
}

int main(int argc, char **argv)
{
    enum {
        O_K1 = 256,
        O_B,
        O_STEMMER,
        O_STOPWORDS,
        O_MEMORY,
        O_TMPDIR,
        O_PROGRESS,
        O_NOPROGRESS,
        O_QUIET,
        O_STATS,
        O_ANALYZE,
        O_INFO,
        O_VERIFY,
        O_SEARCH,
        O_TOPK
    };
    static const struct option longopts[] = {{"k1", required_argument, NULL, O_K1},
                                             {"b", required_argument, NULL, O_B},
                                             {"stemmer", required_argument, NULL, O_STEMMER},
                                             {"stopwords", required_argument, NULL, O_STOPWORDS},
                                             {"memory-mb", required_argument, NULL, O_MEMORY},
                                             {"tmp-dir", required_argument, NULL, O_TMPDIR},
                                             {"progress", no_argument, NULL, O_PROGRESS},
                                             {"no-progress", no_argument, NULL, O_NOPROGRESS},
                                             {"quiet", no_argument, NULL, O_QUIET},
                                             {"stats-json", no_argument, NULL, O_STATS},
                                             {"analyze", no_argument, NULL, O_ANALYZE},
                                             {"info", required_argument, NULL, O_INFO},
                                             {"verify", no_argument, NULL, O_VERIFY},
                                             {"search", required_argument, NULL, O_SEARCH},
                                             {"topk", required_argument, NULL, O_TOPK},
                                             {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},
                                             {NULL, 0, NULL, 0}};
    sg_bm25_build_opts_t o = {.k1 = 0.9, .b = 0.4, .memory_budget = (size_t)512 << 20, .progress = isatty(2)};
    double k1 = -1, b = -1;
    int quiet = 0, stats = 0, analyze = 0, verify = 0;
    const char *info = NULL, *search = NULL;
    long topk = 10;
    int c;
    while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        char *end;
        switch (c) {
        case O_K1:
        case O_B: {
            double v;
            if (parse_double(optarg, &v) != 0 || !(v >= 0) || (c == O_B && v > 1) || v > 1000) {
                fprintf(stderr, "searchgate-index-bm25: --%s: expected a number in [0, %s], got %s\n", c == O_K1 ? "k1" : "b",
                        c == O_K1 ? "1000" : "1", optarg);
                return 2;
            }
            *(c == O_K1 ? &k1 : &b) = v;
            break;
        }
        case O_STEMMER:
            if (sg_bm25_stemmer_parse(optarg, &o.stemmer) != 0) {
                fprintf(stderr, "searchgate-index-bm25: --stemmer: expected porter, english or none, got %s\n", optarg);
                return 2;
            }
            break;
        case O_STOPWORDS:
            if (sg_bm25_stopset_parse(optarg, &o.stopset) != 0) {
                fprintf(stderr, "searchgate-index-bm25: --stopwords: expected lucene or none, got %s\n", optarg);
                return 2;
            }
            break;
        case O_MEMORY: {
            long v = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || v < 1 || v > 1 << 20) {
                fprintf(stderr, "searchgate-index-bm25: --memory-mb: expected an integer in [1, 1048576], got %s\n", optarg);
                return 2;
            }
            o.memory_budget = (size_t)v << 20;
            break;
        }
        case O_TMPDIR:
            o.tmp_dir = optarg;
            break;
        case O_PROGRESS:
            o.progress = 1;
            break;
        case O_NOPROGRESS:
            o.progress = 0;
            break;
        case O_QUIET:
            quiet = 1;
            break;
        case O_STATS:
            stats = 1;
            break;
        case O_ANALYZE:
            analyze = 1;
            break;
        case O_INFO:
            info = optarg;
            break;
        case O_VERIFY:
            verify = 1;
            break;
        case O_SEARCH:
            search = optarg;
            break;
        case O_TOPK:
            topk = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || topk < 1 || topk > 100000) {
                fprintf(stderr, "searchgate-index-bm25: --topk: expected an integer in [1, 100000], got %s\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("searchgate-index-bm25 %s (index format %d, analyzer %d)\n", SG_BM25_TOOL_VERSION, SG_BM25_FORMAT_VERSION,
                   SG_BM25_ANALYZER_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (analyze)
        return cmd_analyze(o.stemmer, o.stopset, argc - optind, argv + optind);
    if (info != NULL)
        return cmd_info(info, verify);
    if (search != NULL)
        return cmd_search(search, (uint32_t)topk, k1, b, argc - optind, argv + optind);
    if (argc - optind != 2) {
        usage(stderr);
        return 2;
    }
    o.corpus = argv[optind];
    o.out_dir = argv[optind + 1];
    if (k1 >= 0)
        o.k1 = k1;
    if (b >= 0)
        o.b = b;
    sg_bm25_build_stats_t st;
    char err[1024];
    if (sg_bm25_build(&o, &st, err, sizeof(err)) != 0) {
        fprintf(stderr, "searchgate-index-bm25: %s\n", err);
        return 1;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (!quiet)
        fprintf(
            stderr,
            "searchgate-index-bm25: %llu documents, %llu terms, %llu postings in %.2f s (%.0f docs/s, %llu run%s, peak RSS %.1f "
            "MB); index %.1f MB in %s\n",
            (unsigned long long)st.docs, (unsigned long long)st.terms, (unsigned long long)st.postings, st.seconds,
            st.seconds > 0 ? (double)st.docs / st.seconds : 0.0, (unsigned long long)st.runs, st.runs == 1 ? "" : "s",
            (double)ru.ru_maxrss / 1024.0, (double)st.index_bytes / 1048576.0, o.out_dir);
    if (stats)
        printf("{\"docs\":%llu,\"terms\":%llu,\"postings\":%llu,\"tokens\":%llu,\"corpus_bytes\":%llu,\"index_bytes\":%llu,"
               "\"runs\":%llu,\"seconds\":%.3f,\"docs_per_s\":%.1f,\"peak_rss_kb\":%ld,\"build_id\":\"%016llx\"}\n",
               (unsigned long long)st.docs, (unsigned long long)st.terms, (unsigned long long)st.postings,
               (unsigned long long)st.tokens, (unsigned long long)st.corpus_bytes, (unsigned long long)st.index_bytes,
               (unsigned long long)st.runs, st.seconds, st.seconds > 0 ? (double)st.docs / st.seconds : 0.0, ru.ru_maxrss,
               (unsigned long long)st.build_id);
    return 0;
}
