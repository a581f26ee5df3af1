/*
 * trace_replay.c -- `searchgate-trace replay TRACE --url URL [--route R] [--rate N/s]
 * [--batch recorded|single] [--params recorded|none] [--concurrency N] [--timeout S] --out FILE`
 * (docs/traces.md).
 *
 * Re-sends the /retrieve queries of a trace to any Search-R1 /retrieve endpoint -- the same
 * gateway, another route of it (--route adds "backend": R to the bodies), another gateway, a peer
 * server -- and writes what came back as a new trace in the gateway's format, so `summary OLD NEW`
 * shows what a new index, nprobe, rerank model or fusion changes in the top-k the agent saw.
 *
 * Batches: "recorded" (the default) sends each recorded request's queries together, in their
 * order, with its topk and its search parameters; "single" sends one query per request. The
 * recorded "params" (the canonical text the route's check_params made of the request's
 * "search_params": "nprobe=64") go back as the object they came from ({"nprobe": 64}); queries
 * with different parameters are never in one request; "--params none" sends none, for a route
 * whose backend takes other parameters. Requests start at most --rate per
 * second, --concurrency at a time (libcurl multi; default 1, so the output keeps the trace's
 * order). Each output line keeps the query's origin ("replay_of": "<request>#<i>") and the
 * answer's X-Searchgate-Provenance header when there is one. /access lines are not replayed.
 */
#include "trace_tool.h"
#include "common.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

typedef struct st_batch_t {
    uint32_t topk; /* 0: not recorded (the route's default) */
    uint32_t n;
    char *params;      /* the recorded canonical search parameters to send ("nprobe=64"), or NULL */
    char *params_json; /* the same as the "search_params" object ({"nprobe":64}), or NULL */
    char **texts;
    char **origin; /* "<request>#<i>" */
    char *request; /* the recorded request id, while reading */
} batch_t;

typedef struct st_replay_t {
    int single;
    batch_t *batches;
    size_t n_batches, cap;
    int no_params;
    uint64_t skipped_access, no_text, bad_params;
    char *bad_example; /* the first "params" that is not key=value text */
} replay_t;

typedef struct st_opts_t {
    const char *trace, *url, *route, *out;
    double rate;
    long concurrency, timeout_s;
    int single, no_params;
} opts_t;

/* A new batch; it takes `params_json` (malloc'ed, or NULL). */
static batch_t *new_batch(replay_t *r, const char *request, uint32_t topk, const char *params, char *params_json)
{
    if (r->n_batches == r->cap)
        r->batches = sg_mem_realloc(r->batches, (r->cap = r->cap * 2 + 64) * sizeof(*r->batches));
    batch_t *b = &r->batches[r->n_batches++];
    *b = (batch_t){.topk = topk,
                   .params = params != NULL ? sg_strdup(params) : NULL,
                   .params_json = params_json,
                   .request = request != NULL ? sg_strdup(request) : NULL};
    return b;
}

/* Whether the `n` bytes at `v` are exactly one JSON number (RFC 8259: -?int frac? exp?). */
static int json_number(const char *v, size_t n)
{
    size_t i = v[0] == '-';
    if (i >= n || v[i] < '0' || v[i] > '9')
        return 0;
    if (v[i] == '0')
        ++i;
    else
        i += strspn(v + i, "0123456789");
    if (i < n && v[i] == '.') {
        size_t d = strspn(v + i + 1, "0123456789");
        if (d == 0)
            return 0;
        i += 1 + d;
    }
    if (i < n && (v[i] == 'e' || v[i] == 'E')) {
        i += 1 + (i + 1 < n && (v[i + 1] == '+' || v[i + 1] == '-'));
        size_t d = strspn(v + i, "0123456789");
        if (d == 0)
            return 0;
        i += d;
    }
    return i == n;
}

/* The JSON value of one canonical "key=value" item's value: a JSON number, true or false as it is
 * (the local backend's "nprobe=64" came from {"nprobe": 64}), any other text as a string. */
static void append_param_value(sg_buf_t *out, const char *v, size_t n)
{
    if ((n != 0 && json_number(v, n)) || (n == 4 && memcmp(v, "true", 4) == 0) || (n == 5 && memcmp(v, "false", 5) == 0))
        sg_buf_append(out, v, n);
    else
        sg_buf_append_json_string(out, v, n);
}

/* The "search_params" object whose canonical text is `canon` -- comma-separated "key=value" items
 * (docs/plugins.md, check_params) -- appended to `out`. Returns -1 (nothing appended) when `canon`
 * is not such text. */
static int append_search_params(sg_buf_t *out, const char *canon)
{
    sg_buf_t o = {0};
    sg_buf_appendc(&o, '{');
    for (const char *p = canon;;) {
        size_t item = strcspn(p, ","), key = strcspn(p, "=");
        if (key == 0 || key >= item) {
            sg_buf_free(&o);
            return -1;
        }
        if (o.len > 1)
            sg_buf_appendc(&o, ',');
        sg_buf_append_json_string(&o, p, key);
        sg_buf_appendc(&o, ':');
        append_param_value(&o, p + key + 1, item - key - 1);
        if (p[item] == '\0')
            break;
        p += item + 1;
    }
    sg_buf_appendc(&o, '}');
    sg_buf_append(out, o.base, o.len);
    sg_buf_free(&o);
    return 0;
}

static int same_params(const char *a, const char *b)
{
    return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

/* Adds a line's query: to the batch of its recorded request (the lines of a request are written
 * together, in order), or to a batch of its own. */
static int on_line(void *ctx, const cJSON *l)
{
    replay_t *r = ctx;
    const char *op = sg__tool_str(l, "op"), *q = sg__tool_str(l, "query"), *req = sg__tool_str(l, "request");
    if (op != NULL && strcmp(op, "retrieve") != 0) {
        ++r->skipped_access;
        return 0;
    }
    if (q == NULL) {
        ++r->no_text;
        return 0;
    }
    uint32_t topk = (uint32_t)sg__tool_num(l, "topk", 0), i = (uint32_t)sg__tool_num(l, "i", 0);
    const char *params = r->no_params ? NULL : sg__tool_str(l, "params");
    if (params != NULL && params[0] == '\0')
        params = NULL;   /* the route's defaults */
    sg_buf_t json = {0}; /* the search_params object, kept by a new batch */
    if (params != NULL && append_search_params(&json, params) != 0) {
        if (r->bad_params++ == 0)
            r->bad_example = sg_strdup(params);
    }
    batch_t *b = r->n_batches != 0 ? &r->batches[r->n_batches - 1] : NULL;
    if (r->single || b == NULL || req == NULL || b->request == NULL || strcmp(b->request, req) != 0 || i == 0 ||
        !same_params(b->params, params)) {
        sg_buf_appendc(&json, '\0');
        b = new_batch(r, req, topk, params, params != NULL ? json.base : NULL);
        if (params != NULL)
            json = (sg_buf_t){0};
    }
    sg_buf_free(&json);
    b->texts = sg_mem_realloc(b->texts, (b->n + 1) * sizeof(*b->texts));
    b->origin = sg_mem_realloc(b->origin, (b->n + 1) * sizeof(*b->origin));
    b->texts[b->n] = sg_strdup(q);
    sg_buf_t o = {0};
    sg_buf_appendf(&o, "%s#%u", req != NULL ? req : "-", i);
    b->origin[b->n++] = o.base;
    return 0;
}

static void replay_free(replay_t *r)
{
    for (size_t i = 0; i < r->n_batches; ++i) {
        batch_t *b = &r->batches[i];
        for (uint32_t k = 0; k < b->n; ++k) {
            free(b->texts[k]);
            free(b->origin[k]);
        }
        free(b->texts);
        free(b->origin);
        free(b->request);
        free(b->params);
        free(b->params_json);
    }
    free(r->batches);
    free(r->bad_example);
}

/* ---- one request ---- */

typedef struct st_xfer_t {
    CURL *h;
    size_t batch, seq;
    sg_buf_t body, resp, prov;
    struct curl_slist *hdrs;
    double sent_wall;
    uint64_t start_us;
} xfer_t;

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    sg_buf_append(&((xfer_t *)ud)->resp, p, size * n);
    return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
    static const char name[] = "x-searchgate-provenance:";
    xfer_t *x = ud;
    size_t len = size * n;
    if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        const char *v = p + sizeof(name) - 1, *end = p + len;
        while (v < end && *v == ' ')
            ++v;
        while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
            --end;
        x->prov.len = 0;
        sg_buf_append(&x->prov, v, (size_t)(end - v));
    }
    return len;
}

static xfer_t *xfer_start(CURLM *m, const opts_t *o, const batch_t *b, size_t bi, size_t seq)
{
    xfer_t *x = sg_mem_calloc(1, sizeof(*x));
    x->batch = bi;
    x->seq = seq;
    sg_buf_appends(&x->body, "{\"queries\":[");
    for (uint32_t i = 0; i < b->n; ++i) {
        if (i != 0)
            sg_buf_appendc(&x->body, ',');
        sg_buf_append_json_string(&x->body, b->texts[i], strlen(b->texts[i]));
    }
    sg_buf_appends(&x->body, "],\"return_scores\":true");
    if (b->topk != 0)
        sg_buf_appendf(&x->body, ",\"topk\":%u", b->topk);
    if (b->params != NULL) {
        sg_buf_appends(&x->body, ",\"search_params\":");
        sg_buf_appends(&x->body, b->params_json);
    }
    if (o->route != NULL) {
        sg_buf_appends(&x->body, ",\"backend\":");
        sg_buf_append_json_string(&x->body, o->route, strlen(o->route));
    }
    sg_buf_appendc(&x->body, '}');
    x->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    x->h = curl_easy_init();
    curl_easy_setopt(x->h, CURLOPT_URL, o->url);
    curl_easy_setopt(x->h, CURLOPT_POSTFIELDS, x->body.base);
    curl_easy_setopt(x->h, CURLOPT_POSTFIELDSIZE, (long)x->body.len);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->h, CURLOPT_TIMEOUT, o->timeout_s);
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
    x->sent_wall = sg_wall_time();
    x->start_us = sg_now_us();
    curl_multi_add_handle(m, x->h);
    return x;
}

static void xfer_free(CURLM *m, xfer_t *x)
{
    curl_multi_remove_handle(m, x->h);
    curl_easy_cleanup(x->h);
    curl_slist_free_all(x->hdrs);
    sg_buf_free(&x->body);
    sg_buf_free(&x->resp);
    sg_buf_free(&x->prov);
    free(x);
}

/* ---- the output trace ---- */

static int blank_text(const char *s)
{
    for (; s != NULL && *s != '\0'; ++s)
        if (strchr(" \n\r\t\"", *s) == NULL)
            return 0;
    return 1;
}

/* "hits", "ids", "scores", "empty" of one answered query: a list of {"document", "score"} (or of
 * bare documents, from a server that ignores return_scores). */
static void append_answer(sg_buf_t *out, const cJSON *list)
{
    int n = cJSON_GetArraySize(list), empty = n > 0;
    sg_buf_t ids = {0}, scores = {0};
    for (const cJSON *it = list->child; it != NULL; it = it->next) {
        const cJSON *doc = cJSON_GetObjectItemCaseSensitive(it, "document"), *score = cJSON_GetObjectItemCaseSensitive(it, "score");
        if (!cJSON_IsObject(doc))
            doc = it;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(doc, "id"), *url = cJSON_GetObjectItemCaseSensitive(doc, "url");
        if (id == NULL || cJSON_IsNull(id) || (cJSON_IsString(id) && id->valuestring[0] == '\0'))
            id = cJSON_IsString(url) && url->valuestring[0] != '\0' ? url : NULL;
        char *idt = sg__tool_id_text(id);
        sg_buf_appendf(&ids, "%s%s", ids.len != 0 ? "," : "", idt != NULL ? idt : "null");
        free(idt);
        if (cJSON_IsNumber(score))
            sg_buf_appendf(&scores, "%s%.17g", scores.len != 0 ? "," : "", score->valuedouble);
        else
            sg_buf_appendf(&scores, "%snull", scores.len != 0 ? "," : "");
        if (!blank_text(sg__tool_str(doc, "contents")))
            empty = 0;
    }
    sg_buf_appendf(out, ",\"hits\":%d,\"ids\":[%s],\"scores\":[%s],\"empty\":%s", n, ids.base != NULL ? ids.base : "",
                   scores.base != NULL ? scores.base : "", empty ? "true" : "false");
    sg_buf_free(&ids);
    sg_buf_free(&scores);
}

/* The route the answer names in its provenance header, else --route, else "-". */
static void append_route(sg_buf_t *out, const xfer_t *x, const opts_t *o)
{
    const char *r = x->prov.base != NULL ? strstr(x->prov.base, "route=") : NULL;
    sg_buf_appends(out, ",\"route\":");
    if (r != NULL && (r == x->prov.base || r[-1] == ' ')) {
        size_t n = strcspn(r + 6, ";");
        sg_buf_append_json_string(out, r + 6, n);
    } else {
        const char *name = o->route != NULL ? o->route : "-";
        sg_buf_append_json_string(out, name, strlen(name));
    }
}

/* Writes one line per query of the batch `x` carried. `status` is the HTTP status (0: no answer).
 * Returns the status written: 0 for a 200 whose "result" is not one list per query. */
static int write_lines(FILE *out, const xfer_t *x, const opts_t *o, const batch_t *b, int status, const char *error)
{
    cJSON *doc = status == 200 ? cJSON_ParseWithLength(x->resp.base, x->resp.len) : NULL;
    const cJSON *result = cJSON_GetObjectItemCaseSensitive(doc, "result");
    if (status == 200 && (!cJSON_IsArray(result) || cJSON_GetArraySize(result) != (int)b->n))
        status = 0, error = "bad_response";
    char when[40];
    time_t sec = (time_t)x->sent_wall;
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t k = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + k, sizeof(when) - k, ".%03dZ", (int)((x->sent_wall - (double)sec) * 1000.0) % 1000);
    double ms = (double)(sg_now_us() - x->start_us) / 1000.0;
    const cJSON *list = status == 200 ? result->child : NULL;
    for (uint32_t i = 0; i < b->n; ++i, list = list != NULL ? list->next : NULL) {
        sg_buf_t l = {0};
        sg_buf_appendf(&l, "{\"time\":\"%s\",\"request\":\"replay-%zu\",\"i\":%u,\"n\":%u,\"client\":\"replay\"", when, x->seq, i,
                       b->n);
        append_route(&l, x, o);
        sg_buf_appends(&l, ",\"op\":\"retrieve\"");
        if (b->topk != 0)
            sg_buf_appendf(&l, ",\"topk\":%u", b->topk);
        if (b->params != NULL) {
            sg_buf_appends(&l, ",\"params\":");
            sg_buf_append_json_string(&l, b->params, strlen(b->params));
        }
        sg_buf_appends(&l, ",\"query\":");
        sg_buf_append_json_string(&l, b->texts[i], strlen(b->texts[i]));
        if (list != NULL)
            append_answer(&l, list);
        sg_buf_appendf(&l, ",\"status\":%d", status);
        if (error != NULL) {
            sg_buf_appends(&l, ",\"error\":");
            sg_buf_append_json_string(&l, error, strlen(error));
        }
        sg_buf_appendf(&l, ",\"ms\":%.3f", ms);
        if (x->prov.len != 0) {
            sg_buf_appends(&l, ",\"provenance\":");
            sg_buf_append_json_string(&l, x->prov.base, x->prov.len);
        }
        sg_buf_appends(&l, ",\"replay_of\":");
        sg_buf_append_json_string(&l, b->origin[i], strlen(b->origin[i]));
        sg_buf_appends(&l, "}\n");
        fwrite(l.base, 1, l.len, out);
        sg_buf_free(&l);
    }
    cJSON_Delete(doc);
    return status;
}

/* A finished transfer: its lines, with the HTTP status and the error type of a failed one. */
static int finish(FILE *out, const opts_t *o, const replay_t *r, xfer_t *x, CURLcode cc)
{
    long code = 0;
    char error[160];
    const char *err = NULL;
    if (cc != CURLE_OK) {
        snprintf(error, sizeof(error), "connection: %s", curl_easy_strerror(cc));
        err = error;
    } else {
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
        if (code != 200) {
            cJSON *doc = cJSON_ParseWithLength(x->resp.base != NULL ? x->resp.base : "", x->resp.len);
            const char *type = sg__tool_str(cJSON_GetObjectItemCaseSensitive(doc, "error"), "type");
            snprintf(error, sizeof(error), "%s", type != NULL ? type : "http_error");
            err = error;
            cJSON_Delete(doc);
        }
    }
    /* a 200 without an answer per query (bad_response) failed too */
    return write_lines(out, x, o, &r->batches[x->batch], (int)code, err) == 200 ? 0 : 1;
}

/* ---- the command ---- */

/* Milliseconds until request `k` may start under --rate (0: now). */
static int rate_wait_ms(const opts_t *o, uint64_t t0, size_t k)
{
    uint64_t due = o->rate > 0 ? t0 + (uint64_t)((double)k * 1e6 / o->rate) : 0, now = sg_now_us();
    return due > now ? (int)((due - now + 999) / 1000) : 0;
}

/* Sends every batch, --concurrency at a time and at most --rate per second; returns failed requests. */
static size_t run(FILE *out, const opts_t *o, const replay_t *r)
{
    CURLM *m = curl_multi_init();
    size_t next = 0, active = 0, failed = 0;
    uint64_t t0 = sg_now_us();
    while (next < r->n_batches || active > 0) {
        while (active < (size_t)o->concurrency && next < r->n_batches && rate_wait_ms(o, t0, next) == 0) {
            xfer_start(m, o, &r->batches[next], next, next);
            ++next;
            ++active;
        }
        int running = 0, left = 0;
        curl_multi_perform(m, &running);
        for (CURLMsg *msg; (msg = curl_multi_info_read(m, &left)) != NULL;) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            xfer_t *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            failed += (size_t)finish(out, o, r, x, msg->data.result);
            xfer_free(m, x);
            --active;
        }
        int startable = active < (size_t)o->concurrency && next < r->n_batches;
        if (active > 0 || next < r->n_batches) /* a free slot waits only for the rate's next start */
            curl_multi_poll(m, NULL, 0, startable ? rate_wait_ms(o, t0, next) : 100, NULL);
    }
    curl_multi_cleanup(m);
    return failed;
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.concurrency = 1, .timeout_s = 60};
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (a[0] != '-' && o->trace == NULL) {
            o->trace = a;
            continue;
        }
        if (v == NULL)
            return fprintf(stderr, "searchgate-trace replay: %s needs a value\n", a), -1;
        ++i;
        if (strcmp(a, "--url") == 0)
            o->url = v;
        else if (strcmp(a, "--route") == 0)
            o->route = v;
        else if (strcmp(a, "--out") == 0)
            o->out = v;
        else if (strcmp(a, "--batch") == 0 && (strcmp(v, "recorded") == 0 || strcmp(v, "single") == 0))
            o->single = strcmp(v, "single") == 0;
        else if (strcmp(a, "--params") == 0 && (strcmp(v, "recorded") == 0 || strcmp(v, "none") == 0))
            o->no_params = strcmp(v, "none") == 0;
        else if (strcmp(a, "--rate") == 0 && (o->rate = strtod(v, &end)) > 0 && isfinite(o->rate) &&
                 (*end == '\0' || strcmp(end, "/s") == 0))
            continue;
        else if (strcmp(a, "--concurrency") == 0 && (o->concurrency = strtol(v, &end, 10)) >= 1 && o->concurrency <= 1024 &&
                 *end == '\0')
            continue;
        else if (strcmp(a, "--timeout") == 0 && (o->timeout_s = strtol(v, &end, 10)) >= 1 && *end == '\0')
            continue;
        else
            return fprintf(stderr, "searchgate-trace replay: bad option %s %s (see --help)\n", a, v), -1;
    }
    if (o->trace == NULL || o->url == NULL || o->out == NULL)
        return fprintf(stderr, "searchgate-trace replay: TRACE, --url and --out are required (see --help)\n"), -1;
    return 0;
}

int sg__tool_replay(int argc, char **argv)
{
    opts_t o;
    if (parse_opts(argc, argv, &o) != 0)
        return 2;
    replay_t r = {.single = o.single, .no_params = o.no_params};
    uint64_t malformed = 0;
    if (sg__tool_read(o.trace, on_line, &r, &malformed) != 0) {
        replay_free(&r);
        return 1;
    }
    if (r.bad_params != 0) {
        fprintf(stderr,
                "searchgate-trace replay: %llu lines have \"params\" that are not key=value text (\"%s\"), so their search_params "
                "cannot be sent again; replay with --params none to send none\n",
                (unsigned long long)r.bad_params, r.bad_example);
        replay_free(&r);
        return 2;
    }
    if (r.no_text != 0)
        fprintf(stderr, "searchgate-trace replay: %llu lines without \"query\" (a trace without the query field) are skipped\n",
                (unsigned long long)r.no_text);
    FILE *out = strcmp(o.out, "-") == 0 ? stdout : fopen(o.out, "w");
    if (out == NULL) {
        fprintf(stderr, "searchgate-trace replay: cannot write %s: %s\n", o.out, strerror(errno));
        replay_free(&r);
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    uint64_t t0 = sg_now_us();
    size_t failed = run(out, &o, &r), queries = 0;
    for (size_t i = 0; i < r.n_batches; ++i)
        queries += r.batches[i].n;
    int bad = fflush(out) != 0 || (out != stdout && fclose(out) != 0);
    fprintf(stderr,
            "searchgate-trace replay: %zu queries in %zu requests, %zu failed, in %.2f s (%llu /access lines skipped, %llu "
            "malformed)\n",
            queries, r.n_batches, failed, (double)(sg_now_us() - t0) / 1e6, (unsigned long long)r.skipped_access,
            (unsigned long long)malformed);
    curl_global_cleanup();
    replay_free(&r);
    if (bad)
        fprintf(stderr, "searchgate-trace replay: cannot write %s\n", o.out);
    return bad ? 1 : failed != 0 ? 3 : 0;
}
