/*
 * trace_summary.c -- `searchgate-trace summary [--top N] [--json] TRACE [TRACE...]`
 * (docs/traces.md): what a training run searched for, per client and route, and how another trace
 * of the same queries (a replay against a new index, nprobe, rerank model or fusion) differs.
 *
 * Per client and route, and over all: queries (lines), requests, distinct queries and the repeat
 * rate, the share of answered queries with zero hits or with an empty observation (hits whose text
 * is blank), errors by type, latency percentiles over requests, where answers came from, and the
 * most frequent queries. Comparison of each further trace with the first, over the distinct query
 * texts both answered (the first answer of each): identical top-k (same ids, same order), mean
 * recall@k of the new list against the old (k = the old list's length), and the queries whose top-1
 * changed, with examples.
 *
 * The result is built as one JSON document; --json prints it, otherwise it is rendered as text.
 */
#include "trace_tool.h"
#include "common.h"
#include "hmap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_count_t {
    char *key;
    size_t len;
    uint64_t n;
} count_t;

typedef struct st_stats_t {
    char *key; /* "client\x1froute" (groups) */
    size_t key_len;
    char *client, *route;
    uint64_t queries, requests, answered, zero, empty, errors;
    sg_hmap_t distinct, error_types, cache; /* count_t */
    double *ms;
    size_t n_ms, cap_ms;
} stats_t;

/* The first answer a trace has for a distinct query (for comparisons). */
typedef struct st_answer_t {
    char *key;
    size_t len;
    uint32_t n;
    char **ids; /* JSON text of each id; NULL for null */
} answer_t;

typedef struct st_trace_t {
    const char *path;
    uint64_t malformed, lines;
    sg_hmap_t groups; /* stats_t */
    stats_t all;
    sg_hmap_t answers; /* answer_t */
} trace_t;

static int key_eq(const void *item, const void *key, size_t len, const void *ud)
{
    (void)ud;
    const count_t *c = item; /* count_t, stats_t and answer_t all start with key, len */
    return c->len == len && memcmp(c->key, key, len) == 0;
}

static void count_add(sg_hmap_t *m, const char *key, size_t len, uint64_t by)
{
    uint64_t h = sg_hmap_hash(key, len);
    count_t *c = sg_hmap_find(m, h, key, len);
    if (c == NULL) {
        c = sg_mem_calloc(1, sizeof(*c));
        c->key = sg_strndup(key, len);
        c->len = len;
        sg_hmap_insert(m, h, c);
    }
    c->n += by;
}

static void counts_free(sg_hmap_t *m)
{
    size_t pos = 0;
    for (count_t *c; (c = sg_hmap_next(m, &pos)) != NULL;) {
        free(c->key);
        free(c);
    }
    sg_hmap_dispose(m);
}

static void stats_init(stats_t *s, const char *client, const char *route)
{
    memset(s, 0, sizeof(*s));
    s->client = client != NULL ? sg_strdup(client) : NULL;
    s->route = route != NULL ? sg_strdup(route) : NULL;
    sg_hmap_init(&s->distinct, key_eq, NULL, 0);
    sg_hmap_init(&s->error_types, key_eq, NULL, 0);
    sg_hmap_init(&s->cache, key_eq, NULL, 0);
}

static void stats_free(stats_t *s)
{
    counts_free(&s->distinct);
    counts_free(&s->error_types);
    counts_free(&s->cache);
    free(s->ms);
    free(s->key);
    free(s->client);
    free(s->route);
}

/* The distinct key of a line's query: its text, else "#" + its hash; NULL when it has neither. */
static char *query_key(const cJSON *l, size_t *len)
{
    const char *q = sg__tool_str(l, "query");
    sg_buf_t b = {0};
    if (q != NULL)
        sg_buf_appends(&b, q);
    else if ((q = sg__tool_str(l, "query_hash")) != NULL)
        sg_buf_appendf(&b, "#%s", q);
    else
        return NULL;
    *len = b.len;
    return b.base;
}

static void account(stats_t *s, const cJSON *l, const char *key, size_t klen)
{
    ++s->queries;
    if (sg__tool_num(l, "i", 0) == 0) { /* a request's first line (or a line without "i": a request of its own) */
        ++s->requests;
        double ms = sg__tool_num(l, "ms", -1);
        if (ms >= 0) {
            if (s->n_ms == s->cap_ms)
                s->ms = sg_mem_realloc(s->ms, (s->cap_ms = s->cap_ms * 2 + 64) * sizeof(*s->ms));
            s->ms[s->n_ms++] = ms;
        }
    }
    int status = (int)sg__tool_num(l, "status", 200);
    if (status == 200) {
        ++s->answered;
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(l, "ids");
        double hits = sg__tool_num(l, "hits", cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : -1);
        s->zero += hits == 0;
        s->empty += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(l, "empty"));
    } else {
        ++s->errors;
        const char *e = sg__tool_str(l, "error");
        char tmp[32];
        if (e == NULL)
            snprintf(tmp, sizeof(tmp), "http_%d", status);
        count_add(&s->error_types, e != NULL ? e : tmp, strlen(e != NULL ? e : tmp), 1);
    }
    const char *c = sg__tool_str(l, "cache");
    if (c != NULL)
        count_add(&s->cache, c, strlen(c), 1);
    if (key != NULL)
        count_add(&s->distinct, key, klen, 1);
}

static stats_t *group_of(trace_t *t, const char *client, const char *route)
{
    sg_buf_t k = {0};
    sg_buf_appendf(&k, "%s\x1f%s", client, route);
    uint64_t h = sg_hmap_hash(k.base, k.len);
    stats_t *g = sg_hmap_find(&t->groups, h, k.base, k.len);
    if (g != NULL) {
        sg_buf_free(&k);
        return g;
    }
    g = sg_mem_alloc(sizeof(*g));
    stats_init(g, client, route);
    g->key = k.base;
    g->key_len = k.len;
    sg_hmap_insert(&t->groups, h, g);
    return g;
}

/* Keeps the first successful /retrieve answer of each distinct query. */
static void remember(trace_t *t, const cJSON *l, const char *key, size_t klen)
{
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(l, "ids");
    const char *op = sg__tool_str(l, "op");
    if (!cJSON_IsArray(ids) || sg__tool_num(l, "status", 200) != 200 || (op != NULL && strcmp(op, "retrieve") != 0))
        return;
    uint64_t h = sg_hmap_hash(key, klen);
    if (sg_hmap_find(&t->answers, h, key, klen) != NULL)
        return;
    answer_t *a = sg_mem_calloc(1, sizeof(*a));
    a->key = sg_strndup(key, klen);
    a->len = klen;
    a->n = (uint32_t)cJSON_GetArraySize(ids);
    a->ids = sg_mem_calloc(a->n + 1, sizeof(*a->ids));
    uint32_t i = 0;
    for (const cJSON *it = ids->child; it != NULL; it = it->next)
        a->ids[i++] = sg__tool_id_text(it);
    sg_hmap_insert(&t->answers, h, a);
}

static int on_line(void *ctx, const cJSON *l)
{
    trace_t *t = ctx;
    const char *client = sg__tool_str(l, "client"), *route = sg__tool_str(l, "route");
    size_t klen = 0;
    char *key = query_key(l, &klen);
    ++t->lines;
    account(group_of(t, client != NULL ? client : "-", route != NULL ? route : "-"), l, key, klen);
    account(&t->all, l, key, klen);
    if (key != NULL)
        remember(t, l, key, klen);
    free(key);
    return 0;
}

static void trace_free(trace_t *t)
{
    size_t pos = 0;
    for (stats_t *g; (g = sg_hmap_next(&t->groups, &pos)) != NULL;) {
        stats_free(g);
        free(g);
    }
    sg_hmap_dispose(&t->groups);
    stats_free(&t->all);
    pos = 0;
    for (answer_t *a; (a = sg_hmap_next(&t->answers, &pos)) != NULL;) {
        for (uint32_t i = 0; i < a->n; ++i)
            free(a->ids[i]);
        free(a->ids);
        free(a->key);
        free(a);
    }
    sg_hmap_dispose(&t->answers);
}

/* ---- the result document ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmp_count(const void *a, const void *b)
{
    const count_t *x = *(const count_t *const *)a, *y = *(const count_t *const *)b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* The items of a count table, most frequent first (ties by key); `*n` of them. */
static count_t **sorted_counts(const sg_hmap_t *m, size_t *n)
{
    count_t **all = sg_mem_alloc((sg_hmap_size(m) + 1) * sizeof(*all));
    size_t pos = 0, k = 0;
    for (count_t *c; (c = sg_hmap_next(m, &pos)) != NULL;)
        all[k++] = c;
    qsort(all, k, sizeof(*all), cmp_count);
    *n = k;
    return all;
}

static double share(uint64_t part, uint64_t whole)
{
    return whole != 0 ? (double)part / (double)whole : 0.0;
}

static cJSON *latency_json(stats_t *s)
{
    cJSON *o = cJSON_CreateObject();
    if (s->n_ms == 0)
        return o;
    qsort(s->ms, s->n_ms, sizeof(*s->ms), cmp_double);
    static const struct {
        const char *name;
        double p;
    } ps[] = {{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); ++i) {
        size_t rank = (size_t)ceil(ps[i].p * (double)s->n_ms); /* nearest rank */
        cJSON_AddNumberToObject(o, ps[i].name, s->ms[rank > 0 ? rank - 1 : 0]);
    }
    cJSON_AddNumberToObject(o, "max", s->ms[s->n_ms - 1]);
    return o;
}

static cJSON *counts_json(const sg_hmap_t *m)
{
    cJSON *o = cJSON_CreateObject();
    size_t n;
    count_t **all = sorted_counts(m, &n);
    for (size_t i = 0; i < n; ++i)
        cJSON_AddNumberToObject(o, all[i]->key, (double)all[i]->n);
    free(all);
    return o;
}

static cJSON *stats_json(stats_t *s, int top)
{
    cJSON *o = cJSON_CreateObject();
    if (s->client != NULL) {
        cJSON_AddStringToObject(o, "client", s->client);
        cJSON_AddStringToObject(o, "route", s->route);
    }
    size_t distinct = sg_hmap_size(&s->distinct);
    cJSON_AddNumberToObject(o, "queries", (double)s->queries);
    cJSON_AddNumberToObject(o, "requests", (double)s->requests);
    cJSON_AddNumberToObject(o, "distinct", (double)distinct);
    cJSON_AddNumberToObject(o, "repeat_rate", s->queries != 0 && distinct != 0 ? 1.0 - share(distinct, s->queries) : 0.0);
    cJSON_AddNumberToObject(o, "answered", (double)s->answered);
    cJSON_AddNumberToObject(o, "zero_hits", (double)s->zero);
    cJSON_AddNumberToObject(o, "zero_hit_share", share(s->zero, s->answered));
    cJSON_AddNumberToObject(o, "empty", (double)s->empty);
    cJSON_AddNumberToObject(o, "empty_share", share(s->empty, s->answered));
    cJSON_AddNumberToObject(o, "errors", (double)s->errors);
    cJSON_AddNumberToObject(o, "error_share", share(s->errors, s->queries));
    cJSON_AddItemToObject(o, "errors_by_type", counts_json(&s->error_types));
    cJSON_AddItemToObject(o, "cache", counts_json(&s->cache));
    cJSON_AddItemToObject(o, "latency_ms", latency_json(s));
    cJSON *tq = cJSON_AddArrayToObject(o, "top_queries");
    size_t n;
    count_t **all = sorted_counts(&s->distinct, &n);
    for (size_t i = 0; i < n && i < (size_t)top; ++i) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddStringToObject(q, "query", all[i]->key);
        cJSON_AddNumberToObject(q, "count", (double)all[i]->n);
        cJSON_AddItemToArray(tq, q);
    }
    free(all);
    return o;
}

static int cmp_group(const void *a, const void *b)
{
    const stats_t *x = *(const stats_t *const *)a, *y = *(const stats_t *const *)b;
    int c = strcmp(x->client, y->client);
    return c != 0 ? c : strcmp(x->route, y->route);
}

static cJSON *trace_json(trace_t *t, int top)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", t->path);
    cJSON_AddNumberToObject(o, "lines", (double)t->lines);
    cJSON_AddNumberToObject(o, "malformed", (double)t->malformed);
    cJSON *groups = cJSON_AddArrayToObject(o, "groups");
    stats_t **gs = sg_mem_alloc((sg_hmap_size(&t->groups) + 1) * sizeof(*gs));
    size_t pos = 0, n = 0;
    for (stats_t *g; (g = sg_hmap_next(&t->groups, &pos)) != NULL;)
        gs[n++] = g;
    qsort(gs, n, sizeof(*gs), cmp_group);
    for (size_t i = 0; i < n; ++i)
        cJSON_AddItemToArray(groups, stats_json(gs[i], top));
    free(gs);
    cJSON_AddItemToObject(o, "all", stats_json(&t->all, top));
    return o;
}

/* ---- comparison ---- */

static int same_id(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

static int cmp_answer(const void *a, const void *b)
{
    const answer_t *x = *(const answer_t *const *)a, *y = *(const answer_t *const *)b;
    return strcmp(x->key, y->key);
}

/* Recall of the old top-k in the new list's first k (k = the old list's length). */
static double recall(const answer_t *o, const answer_t *n)
{
    uint32_t found = 0;
    for (uint32_t i = 0; i < o->n; ++i)
        for (uint32_t j = 0; j < n->n && j < o->n; ++j)
            if (same_id(o->ids[i], n->ids[j])) {
                ++found;
                break;
            }
    return (double)found / (double)o->n;
}

static void add_example(cJSON *examples, const answer_t *o, const answer_t *n)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "query", o->key);
    cJSON_AddItemToObject(e, "old_top1", o->n > 0 && o->ids[0] != NULL ? cJSON_Parse(o->ids[0]) : cJSON_CreateNull());
    cJSON_AddItemToObject(e, "new_top1", n->n > 0 && n->ids[0] != NULL ? cJSON_Parse(n->ids[0]) : cJSON_CreateNull());
    cJSON_AddItemToArray(examples, e);
}

static cJSON *compare(const trace_t *old, const trace_t *new, int top)
{
    answer_t **olds = sg_mem_alloc((sg_hmap_size(&old->answers) + 1) * sizeof(*olds));
    size_t pos = 0, n = 0, compared = 0, identical = 0, changed = 0, recall_n = 0;
    for (answer_t *a; (a = sg_hmap_next(&old->answers, &pos)) != NULL;)
        olds[n++] = a;
    qsort(olds, n, sizeof(*olds), cmp_answer); /* examples in query order, whatever the table's */
    double recall_sum = 0;
    cJSON *o = cJSON_CreateObject(), *examples = cJSON_CreateArray();
    for (size_t i = 0; i < n; ++i) {
        const answer_t *a = olds[i], *b = sg_hmap_find(&new->answers, sg_hmap_hash(a->key, a->len), a->key, a->len);
        if (b == NULL)
            continue;
        ++compared;
        int same = a->n == b->n;
        for (uint32_t k = 0; same && k < a->n; ++k)
            same = same_id(a->ids[k], b->ids[k]) || (a->ids[k] == NULL && b->ids[k] == NULL);
        identical += same;
        if (a->n > 0) {
            recall_sum += recall(a, b);
            ++recall_n;
        }
        int top1_same = (a->n == 0 && b->n == 0) || (a->n > 0 && b->n > 0 && same_id(a->ids[0], b->ids[0]));
        if (!top1_same && changed++ < (size_t)top)
            add_example(examples, a, b);
    }
    free(olds);
    cJSON_AddStringToObject(o, "old", old->path);
    cJSON_AddStringToObject(o, "new", new->path);
    cJSON_AddNumberToObject(o, "compared", (double)compared);
    cJSON_AddNumberToObject(o, "only_old", (double)(sg_hmap_size(&old->answers) - compared));
    cJSON_AddNumberToObject(o, "only_new", (double)(sg_hmap_size(&new->answers) - compared));
    cJSON_AddNumberToObject(o, "identical", (double)identical);
    cJSON_AddNumberToObject(o, "identical_share", share(identical, compared));
    cJSON_AddNumberToObject(o, "recall_at_k", recall_n != 0 ? recall_sum / (double)recall_n : 0.0);
    cJSON_AddNumberToObject(o, "top1_changed", (double)changed);
    cJSON_AddNumberToObject(o, "top1_changed_share", share(changed, compared));
    cJSON_AddItemToObject(o, "examples", examples);
    return o;
}

/* ---- text rendering ---- */

static double num(const cJSON *o, const char *k)
{
    return sg__tool_num(o, k, 0);
}

static void print_counts(const char *title, const cJSON *o, double whole)
{
    if (o->child == NULL)
        return;
    printf("  %s", title);
    for (const cJSON *it = o->child; it != NULL; it = it->next)
        printf("  %s %.1f%%", it->string, 100.0 * (whole != 0 ? it->valuedouble / whole : 0));
    printf("\n");
}

static void print_stats(const cJSON *s)
{
    printf("  queries %.0f  requests %.0f  distinct %.0f  repeat rate %.1f%%\n", num(s, "queries"), num(s, "requests"),
           num(s, "distinct"), 100 * num(s, "repeat_rate"));
    printf("  zero hits %.1f%%  empty observations %.1f%%  errors %.1f%%\n", 100 * num(s, "zero_hit_share"),
           100 * num(s, "empty_share"), 100 * num(s, "error_share"));
    const cJSON *lat = cJSON_GetObjectItem(s, "latency_ms");
    if (lat->child != NULL)
        printf("  latency ms  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n", num(lat, "p50"), num(lat, "p90"), num(lat, "p99"),
               num(lat, "max"));
    print_counts("errors by type:", cJSON_GetObjectItem(s, "errors_by_type"), num(s, "errors"));
    print_counts("cache:", cJSON_GetObjectItem(s, "cache"), num(s, "queries"));
    const cJSON *tq = cJSON_GetObjectItem(s, "top_queries");
    for (const cJSON *q = tq->child; q != NULL; q = q->next) {
        char *text = cJSON_PrintUnformatted(cJSON_GetObjectItem(q, "query"));
        printf("  %s %6.0f  %s\n", q == tq->child ? "top queries:" : "            ", num(q, "count"), text);
        free(text);
    }
}

static void print_text(const cJSON *doc)
{
    for (const cJSON *t = cJSON_GetObjectItem(doc, "traces")->child; t != NULL; t = t->next) {
        printf("trace %s: %.0f lines, %.0f malformed\n", sg__tool_str(t, "file"), num(t, "lines"), num(t, "malformed"));
        for (const cJSON *g = cJSON_GetObjectItem(t, "groups")->child; g != NULL; g = g->next) {
            printf("client %s, route %s\n", sg__tool_str(g, "client"), sg__tool_str(g, "route"));
            print_stats(g);
        }
        printf("all clients and routes\n");
        print_stats(cJSON_GetObjectItem(t, "all"));
    }
    for (const cJSON *c = cJSON_GetObjectItem(doc, "comparisons")->child; c != NULL; c = c->next) {
        printf("%s against %s: %.0f distinct queries answered in both (%.0f only in the first, %.0f only in the second)\n",
               sg__tool_str(c, "new"), sg__tool_str(c, "old"), num(c, "compared"), num(c, "only_old"), num(c, "only_new"));
        printf("  identical top-k %.1f%%  recall@k %.3f  top-1 changed %.1f%% (%.0f)\n", 100 * num(c, "identical_share"),
               num(c, "recall_at_k"), 100 * num(c, "top1_changed_share"), num(c, "top1_changed"));
        for (const cJSON *e = cJSON_GetObjectItem(c, "examples")->child; e != NULL; e = e->next) {
            char *q = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "query"));
            char *a = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "old_top1"));
            char *b = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "new_top1"));
            printf("  %s: top-1 %s -> %s\n", q, a, b);
            free(q);
            free(a);
            free(b);
        }
    }
}

/* ---- the command ---- */

int sg__tool_summary(int argc, char **argv)
{
    int top = 10, as_json = 0, first = argc;
    for (int i = 1; i < argc && first == argc; ++i) {
        char *end = NULL;
        if (strcmp(argv[i], "--json") == 0)
            as_json = 1;
        else if (strcmp(argv[i], "--top") == 0 && i + 1 < argc && (top = (int)strtol(argv[i + 1], &end, 10)) >= 0 && *end == '\0')
            ++i;
        else if (argv[i][0] == '-' && argv[i][1] != '\0')
            return fprintf(stderr, "searchgate-trace summary: bad option %s (see --help)\n", argv[i]), 2;
        else
            first = i;
    }
    if (first == argc)
        return fprintf(stderr, "usage: searchgate-trace summary [--top N] [--json] TRACE [TRACE...]\n"), 2;
    size_t n = (size_t)(argc - first);
    trace_t *ts = sg_mem_calloc(n, sizeof(*ts));
    int rc = 0;
    for (size_t i = 0; i < n; ++i) {
        ts[i].path = argv[first + (int)i];
        sg_hmap_init(&ts[i].groups, key_eq, NULL, 0);
        sg_hmap_init(&ts[i].answers, key_eq, NULL, 0);
        stats_init(&ts[i].all, NULL, NULL);
        if (rc == 0 && sg__tool_read(ts[i].path, on_line, &ts[i], &ts[i].malformed) != 0)
            rc = 1;
    }
    if (rc == 0) {
        cJSON *doc = cJSON_CreateObject(), *traces = cJSON_AddArrayToObject(doc, "traces");
        cJSON *cmps = cJSON_AddArrayToObject(doc, "comparisons");
        for (size_t i = 0; i < n; ++i)
            cJSON_AddItemToArray(traces, trace_json(&ts[i], top));
        for (size_t i = 1; i < n; ++i)
            cJSON_AddItemToArray(cmps, compare(&ts[0], &ts[i], top));
        char *text = as_json ? cJSON_Print(doc) : NULL;
        if (as_json)
            printf("%s\n", text);
        else
            print_text(doc);
        free(text);
        cJSON_Delete(doc);
    }
    for (size_t i = 0; i < n; ++i)
        trace_free(&ts[i]);
    free(ts);
    return rc;
}
