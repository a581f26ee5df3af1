/*
 * bench_xenc.c -- cross-encoder throughput of xenc.h: pairs per second when reranking 30
 * candidates of 256 tokens each (the pair truncated to max_length 256, as a rerank stage over a
 * wiki-18 top-30 does), one call per query. Not a test (not registered with CTest).
 *
 *     bench_xenc MODEL_DIR [seconds per point, default 5] [threads, default 1] [openblas|onednn|bf16]
 *
 * A model of the shape of cross-encoder/ms-marco-MiniLM-L-12-v2 with random weights:
 *     /usr/bin/python3 tests/bench/local/make_model.py DIR --hidden 384 --layers 12 --heads 12 \
 *         --intermediate 1536 --labels 1
 * With threads > 1 the calls run on a team of that many threads (team.h, as the local backend's
 * idle workers help a running batch); BLAS stays single-threaded either way.
 */
#include "team.h"
#include "xenc.h"

#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { CANDIDATES = 30, MAX_LENGTH = 256 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* a wiki-18-like passage of ~350 words (more than 256 tokens), different for each seed */
static char *passage(unsigned seed)
{
    static const char *words[] = {"the",     "of",      "and",    "in",      "to",      "was",   "is",       "for",
                                  "on",      "as",      "by",     "with",    "he",      "at",    "from",     "his",
                                  "an",      "were",    "are",    "which",   "this",    "also",  "be",       "has",
                                  "first",   "new",     "one",    "their",   "after",   "two",   "who",      "they",
                                  "city",    "river",   "church", "war",     "school",  "album", "season",   "film",
                                  "team",    "league",  "world",  "state",   "county",  "born",  "known",    "song",
                                  "history", "company", "series", "village", "england", "1999",  "national", "population"};
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
    for (int i = 0; i < 350; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const char *w = words[x % (sizeof(words) / sizeof(words[0]))];
        size_t l = strlen(w);
        if (n + l + 3 >= cap)
            s = realloc(s, cap *= 2);
        memcpy(s + n, w, l);
        n += l;
        s[n++] = i % 17 == 16 ? '.' : ' ';
        if (i % 17 == 16)
            s[n++] = ' ';
    }
    s[n] = '\0';
    return s;
}

typedef struct {
    sg_team_t *team;
    unsigned self;
    _Atomic int *stop;
} helper_t;

static void *helper_main(void *arg)
{
    helper_t *h = arg;
    static const _Atomic int never;
    while (!atomic_load(h->stop)) {
        if (sg_team_is_open(h->team))
            sg_team_help(h->team, h->self, &never);
        else
            sched_yield();
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL_DIR [seconds] [threads] [openblas|onednn|bf16]\n", argv[0]);
        return 2;
    }
    double secs = argc > 2 ? strtod(argv[2], NULL) : 5.0;
    long threads = argc > 3 ? strtol(argv[3], NULL, 10) : 1;
    const char *kind = argc > 4 ? argv[4] : "openblas";
    if (!(secs > 0) || threads < 1 || threads > 64) {
        fprintf(stderr, "bad seconds or threads\n");
        return 2;
    }
    openblas_set_num_threads(1);
    sg_xenc_model *m;
    char err[512];
    double t0 = now_s();
    if (sg_xenc_load(argv[1], &m, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double load = now_s() - t0;
    if ((strcmp(kind, "onednn") == 0 && sg_xenc_use_onednn(m, err, sizeof(err)) != 0) ||
        (strcmp(kind, "bf16") == 0 && sg_xenc_set_precision(m, SG_E5_BF16, err, sizeof(err)) != 0)) {
        fprintf(stderr, "%s: %s\n", kind, err);
        return 1;
    }
    const char *query = "who was the first president of the united states";
    char *ps[CANDIDATES];
    size_t pls[CANDIDATES];
    size_t tokens = 0;
    for (unsigned i = 0; i < CANDIDATES; ++i) {
        ps[i] = passage(i);
        pls[i] = strlen(ps[i]);
        int32_t ids[MAX_LENGTH];
        tokens += (size_t)sg_xenc_tokenize(m, query, strlen(query), ps[i], pls[i], MAX_LENGTH, ids, NULL);
    }
    printf("load %.3f s; %d candidates x %.0f tokens (max_length %d), %s, %ld thread%s\n", load, CANDIDATES,
           (double)tokens / CANDIDATES, MAX_LENGTH, kind, threads, threads > 1 ? "s" : "");

    sg_team_t team;
    _Atomic int stop = 0;
    pthread_t tids[64];
    helper_t helpers[64];
    sg_xenc_workspace *w = sg_xenc_workspace_new(m);
    if (threads > 1) {
        sg_team_init(&team, (unsigned)threads);
        for (long i = 1; i < threads; ++i) {
            helpers[i] = (helper_t){&team, (unsigned)i, &stop};
            pthread_create(&tids[i], NULL, helper_main, &helpers[i]);
        }
        sg_xenc_workspace_set_par(w, &team.par);
    }
    float scores[CANDIDATES];
    /* tokenisation alone, then whole calls (the first one warms up) */
    double start = now_s(), end;
    long calls = 0;
    do {
        for (unsigned i = 0; i < CANDIDATES; ++i) {
            int32_t ids[MAX_LENGTH];
            sg_xenc_tokenize(m, query, strlen(query), ps[i], pls[i], MAX_LENGTH, ids, NULL);
        }
        ++calls;
        end = now_s();
    } while (end - start < 0.5);
    double tok_ms = (end - start) * 1000.0 / (double)calls;
    for (int pass = 0; pass < 2; ++pass) {
        start = now_s();
        calls = 0;
        do {
            if (threads > 1)
                sg_team_open(&team, 0, (unsigned)threads);
            int rc = sg_xenc_score(m, w, query, strlen(query), (const char *const *)ps, pls, CANDIDATES, MAX_LENGTH, scores, err,
                                   sizeof(err));
            if (threads > 1)
                sg_team_close(&team);
            if (rc != 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            ++calls;
            end = now_s();
        } while (pass == 1 && end - start < secs);
    }
    double per_call = (end - start) / (double)calls;
    printf("%.1f pairs/s; %.1f ms per query (%d pairs), of which %.2f ms tokenising; %ld calls\n", CANDIDATES / per_call,
           per_call * 1000.0, CANDIDATES, tok_ms, calls);
    if (threads > 1) {
        atomic_store(&stop, 1);
        for (long i = 1; i < threads; ++i)
            pthread_join(tids[i], NULL);
    }
    for (unsigned i = 0; i < CANDIDATES; ++i)
        free(ps[i]);
    sg_xenc_workspace_free(w);
    sg_xenc_free(m);
    return 0;
}
