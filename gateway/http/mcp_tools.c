/*
 * mcp_tools.c -- the MCP tools: `search` for the default route and `search_<route>` for every
 * other route, `access` / `access_<route>` for the routes with a page store (docs/mcp.md).
 *
 * A call runs through sg_query_start(), the pipeline POST /retrieve and /access use, on behalf of
 * the client the request identified: the same rate limit, concurrency caps, fair queue, cache,
 * singleflight, deadline and metrics. The answer carries the documents twice: as text content
 * formatted like the Search-R1 observation (what a model reads), and as structuredContent
 * {"result": [...]} spliced from the same fragments /retrieve returns with return_scores true.
 * Failures of the search itself (rate limit, timeout, backend down) are tool results with isError
 * true, as the MCP spec wants, so an agent sees them; malformed calls are JSON-RPC errors.
 */
#include "mcp.h"
#include "mcp_impl.h"
#include "gen.h"
#include "json.h"
#include "query.h"
#include "fusion_route.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct st_mcp_tool_t {
    char *name;
    sg_route_t *route; /* the plugin route searched (or read, for access); NULL for a fusion search */
    int fusion;        /* index into the generation's cfg->fusions for a fusion route's tools, else -1 */
    int is_access;
    sg_counter_t *ok, *failed;
} mcp_tool_t;

/* The tools of one configuration generation. */
struct st_sg_mcp_tools_t {
    mcp_tool_t *tools;
    size_t n;
    sg_buf_t list;   /* the tools/list result */
    int text_format; /* mcp.text_format: SG_MCP_TEXT_* */
};

typedef struct st_mcp_call_t {
    sg_mcp_item_t *item;
    sg_gen_t *gen; /* of the tool and the client (referenced) */
    sg_query_t *q;
    sg_fusion_query_t *fq; /* a fusion route's search runs through sg_fusion_start() instead */
    const mcp_tool_t *tool;
    uint32_t n;
    char **texts;       /* the queries (URLs), kept for the access text */
    uint64_t max_bytes; /* limits.max_response_bytes: the tool result is refused beyond it */
} mcp_call_t;

const char *sg__mcp_tools_list(sg_gen_t *g, size_t *len)
{
    *len = g->mcp->list.len;
    return g->mcp->list.base;
}

/* {"type":TYPE,"description":DESC} without its closing brace (the caller may add members) */
static void schema_open(sg_jw_t *w, const char *key, const char *type, const char *desc)
{
    sg_jw_key(w, key);
    sg_jw_obj(w);
    sg_jw_kstr(w, "type", type);
    if (desc != NULL)
        sg_jw_kstr(w, "description", desc);
}

/* "type":[TYPE,"null"] */
static void schema_type_or_null(sg_jw_t *w, const char *type)
{
    sg_jw_key(w, "type");
    sg_jw_arr(w);
    sg_jw_str(w, type);
    sg_jw_str(w, "null");
    sg_jw_end(w);
}

/* "items":{"type":TYPE} */
static void schema_items(sg_jw_t *w, const char *type)
{
    sg_jw_key(w, "items");
    sg_jw_obj(w);
    sg_jw_kstr(w, "type", type);
    sg_jw_end(w);
}

/* "outputSchema":{"type":"object","properties":{"result":{"type":"array","description":DESC,
 * "items":ITEMS}},"required":["result"]}, ITEMS for search or access */
static void output_schema(sg_jw_t *w, const char *desc, int access)
{
    schema_open(w, "outputSchema", "object", NULL);
    sg_jw_key(w, "properties");
    sg_jw_obj(w);
    schema_open(w, "result", "array", desc);
    sg_jw_key(w, "items");
    sg_jw_obj(w);
    if (access) {
        schema_type_or_null(w, "object");
    } else { /* {"type":"array","items":{"type":"object"}} */
        sg_jw_kstr(w, "type", "array");
        schema_items(w, "object");
    }
    sg_jw_end(w);
    sg_jw_end(w);
    sg_jw_end(w);
    sg_jw_key(w, "required");
    sg_jw_arr(w);
    sg_jw_str(w, "result");
    sg_jw_end(w);
    sg_jw_end(w);
}

/* "NAME":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":MAX,"description":DESC} */
static void string_list_property(sg_jw_t *w, const char *name, uint32_t max_items, const char *desc)
{
    schema_open(w, name, "array", NULL);
    schema_items(w, "string");
    sg_jw_ku64(w, "minItems", 1);
    sg_jw_ku64(w, "maxItems", max_items);
    sg_jw_kstr(w, "description", desc);
    sg_jw_end(w);
}

static void append_tool(sg_jw_t *w, const mcp_tool_t *t, const sg_config_t *cfg)
{
    const sg_fusion_conf_t *fc = t->fusion >= 0 ? &cfg->fusions[t->fusion] : NULL;
    const char *rname = fc != NULL ? fc->name : t->route->conf->name;
    uint32_t rtopk = fc != NULL ? fc->topk : t->route->conf->topk;
    sg_jw_obj(w);
    sg_jw_kstr(w, "name", t->name);
    char title[160], topk_desc[80];
    sg_buf_t desc = {0}; /* text: the route's name is the only variable part */
    if (!t->is_access) {
        snprintf(title, sizeof(title), "Search %s", rname);
        sg_buf_appendf(&desc,
                       "Search the %s route (%s%s). Returns the top documents for each query, as text formatted like the "
                       "Search-R1 observation (Doc 1(Title: ...) text) and as structured documents.",
                       rname, fc != NULL ? "a fusion of other routes" : t->route->core->plugin.vt->name,
                       fc != NULL ? "" : " backend");
    } else {
        snprintf(title, sizeof(title), "Access pages of %s", rname);
        sg_buf_appendf(&desc,
                       "Read pages of the %s route's page store by URL (as POST /access). Returns each page's contents as text and "
                       "the pages (null when unknown) as structured content.",
                       rname);
    }
    sg_jw_kstr(w, "title", title);
    sg_jw_key(w, "description");
    sg_jw_strn(w, desc.base, desc.len);
    sg_buf_free(&desc);
    schema_open(w, "inputSchema", "object", NULL);
    sg_jw_key(w, "properties");
    sg_jw_obj(w);
    if (!t->is_access) {
        schema_open(w, "query", "string", "One search query.");
        sg_jw_end(w);
        string_list_property(w, "queries", cfg->limits.max_queries, "Several queries, answered in order (instead of query).");
        /* "type": ["integer", "null"]: 0, null or no topk is the route's default (as on /retrieve);
         * call_tool accepts exactly what this admits */
        sg_jw_key(w, "topk");
        sg_jw_obj(w);
        schema_type_or_null(w, "integer");
        sg_jw_ku64(w, "minimum", 0);
        sg_jw_ku64(w, "maximum", cfg->limits.max_topk);
        snprintf(topk_desc, sizeof(topk_desc), "Documents per query (0 or absent: the default, %u).", rtopk);
        sg_jw_kstr(w, "description", topk_desc);
        sg_jw_end(w);
    } else {
        schema_open(w, "url", "string", "One page URL.");
        sg_jw_end(w);
        string_list_property(w, "urls", cfg->limits.max_queries, "Several page URLs (instead of url).");
    }
    sg_jw_end(w);
    sg_jw_end(w);
    if (!t->is_access)
        output_schema(w, "One list per query of {document, score}, best first, as POST /retrieve returns with return_scores true.",
                      0);
    else
        output_schema(w, "One page (or null) per URL, as POST /access returns.", 1);
    sg_jw_key(w, "annotations");
    sg_jw_obj(w);
    sg_jw_kbool(w, "readOnlyHint", 1);
    sg_jw_kbool(w, "idempotentHint", 1);
    sg_jw_end(w);
    sg_jw_end(w);
}

static void add_tool(sg_mcp_tools_t *x, const char *name, sg_route_t *route, int fusion, int is_access)
{
    mcp_tool_t *t = &x->tools[x->n++];
    t->name = sg_strdup(name);
    t->route = route;
    t->fusion = fusion;
    t->is_access = is_access;
    char l[300];
    snprintf(l, sizeof(l), "tool=\"%s\",outcome=\"ok\"", name);
    t->ok =
        sg_metrics_counter("searchgate_mcp_tool_calls_total", "MCP tools/call by tool and outcome (error: isError results).", l);
    snprintf(l, sizeof(l), "tool=\"%s\",outcome=\"error\"", name);
    t->failed =
        sg_metrics_counter("searchgate_mcp_tool_calls_total", "MCP tools/call by tool and outcome (error: isError results).", l);
}

sg_mcp_tools_t *sg_mcp_tools_build(const sg_gen_t *g)
{
    const sg_config_t *cfg = g->cfg;
    sg_mcp_tools_t *x = sg_mem_calloc(1, sizeof(*x));
    x->text_format = g->server->cfg->mcp.text_format; /* mcp.* is read at start-up only */
    x->tools = sg_mem_calloc(2 * (g->n_routes + cfg->n_fusions) + 1, sizeof(*x->tools));
    char name[200];
    for (int access = 0; access < 2; ++access) {
        for (size_t i = 0; i < g->n_routes; ++i) {
            sg_route_t *b = &g->routes[i];
            if (access && !b->core->serves_access)
                continue;
            if ((int)i == cfg->default_backend)
                snprintf(name, sizeof(name), "%s", access ? "access" : "search");
            else
                snprintf(name, sizeof(name), "%s_%s", access ? "access" : "search", b->conf->name);
            add_tool(x, name, b, -1, access);
        }
        /* fusion routes (never the default route): search fans out to the legs; access reads the
         * pages of the first leg with a page store, as POST /access on the route does */
        for (size_t i = 0; i < cfg->n_fusions; ++i) {
            sg_route_t *via = access ? sg_fusion_access_backend(g, (int)i) : NULL;
            if (access && via == NULL)
                continue;
            snprintf(name, sizeof(name), "%s_%s", access ? "access" : "search", cfg->fusions[i].name);
            add_tool(x, name, via, (int)i, access);
        }
    }
    sg_jw_t w;
    sg_jw_init(&w, &x->list);
    sg_jw_obj(&w);
    sg_jw_key(&w, "tools");
    sg_jw_arr(&w);
    for (size_t i = 0; i < x->n; ++i)
        append_tool(&w, &x->tools[i], cfg);
    sg_jw_end(&w);
    sg_jw_end(&w);
    return x;
}

void sg_mcp_tools_free(sg_mcp_tools_t *x)
{
    if (x == NULL)
        return;
    for (size_t i = 0; i < x->n; ++i)
        free(x->tools[i].name);
    free(x->tools);
    sg_buf_free(&x->list);
    free(x);
}

/* ---- formatting ---- */

static const char *str_item(const cJSON *o, const char *key, size_t *len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v))
        return NULL;
    *len = strlen(v->valuestring);
    return v->valuestring;
}

int sg_mcp_format_search_r1(sg_buf_t *out, const cJSON *hits)
{
    if (!cJSON_IsArray(hits))
        return -1;
    int idx = 0;
    for (const cJSON *h = hits->child; h != NULL; h = h->next) {
        const cJSON *doc = cJSON_GetObjectItemCaseSensitive(h, "document");
        if (!cJSON_IsObject(doc))
            doc = h;
        size_t clen = 0, tlen = 0, xlen = 0;
        const char *contents = str_item(doc, "contents", &clen), *title, *text;
        if (contents != NULL) { /* Search-R1: title = the first line, text = the other lines */
            const char *nl = memchr(contents, '\n', clen);
            title = contents;
            tlen = nl != NULL ? (size_t)(nl - contents) : clen;
            text = nl != NULL ? nl + 1 : "";
            xlen = nl != NULL ? clen - tlen - 1 : 0;
        } else {
            title = str_item(doc, "title", &tlen);
            text = str_item(doc, "text", &xlen);
            if (title == NULL)
                title = "", tlen = 0;
            if (text == NULL)
                text = "", xlen = 0;
        }
        sg_buf_appendf(out, "Doc %d(Title: ", ++idx);
        sg_buf_append(out, title, tlen);
        sg_buf_appends(out, ") ");
        sg_buf_append(out, text, xlen);
        sg_buf_appendc(out, '\n');
    }
    return 0;
}

/* A JSON string literal with ' and ] escaped too (both are valid JSON escapes). */
static void append_guarded_string(sg_buf_t *out, const char *s, size_t n)
{
    sg_buf_t t = {0};
    sg_buf_append_json_string(&t, s, n);
    for (size_t i = 0; i < t.len; ++i) {
        if (t.base[i] == '\'')
            sg_buf_appends(out, "\\u0027");
        else if (t.base[i] == ']')
            sg_buf_appends(out, "\\u005d");
        else
            sg_buf_appendc(out, t.base[i]);
    }
    sg_buf_free(&t);
}

/* KEY: the guarded string */
static void jw_guarded(sg_jw_t *w, const char *key, const char *s, size_t n)
{
    sg_buf_t t = {0};
    append_guarded_string(&t, s, n);
    sg_jw_key(w, key);
    sg_jw_raw(w, t.base, t.len);
    sg_buf_free(&t);
}

int sg_mcp_format_results_json(sg_buf_t *out, const char *query, const cJSON *hits)
{
    if (!cJSON_IsArray(hits))
        return -1;
    sg_jw_t w;
    sg_jw_init(&w, out);
    sg_jw_obj(&w);
    jw_guarded(&w, "query", query, strlen(query));
    sg_jw_key(&w, "results");
    sg_jw_arr(&w);
    for (const cJSON *h = hits->child; h != NULL; h = h->next) {
        const cJSON *doc = cJSON_GetObjectItemCaseSensitive(h, "document");
        const cJSON *score = cJSON_GetObjectItemCaseSensitive(h, "score");
        if (!cJSON_IsObject(doc))
            doc = h;
        size_t clen = 0, tlen = 0, xlen = 0, ulen = 0;
        const char *contents = str_item(doc, "contents", &clen), *title = str_item(doc, "title", &tlen);
        const char *text = str_item(doc, "text", &xlen), *url = str_item(doc, "url", &ulen);
        if (contents != NULL) { /* "\"Title\"\ntext": the first line (unquoted) and the rest */
            const char *nl = memchr(contents, '\n', clen);
            size_t fl = nl != NULL ? (size_t)(nl - contents) : clen;
            if (title == NULL) {
                title = contents;
                tlen = fl;
                if (tlen >= 2 && title[0] == '"' && title[tlen - 1] == '"')
                    ++title, tlen -= 2;
            }
            if (text == NULL) {
                text = nl != NULL ? nl + 1 : "";
                xlen = nl != NULL ? clen - fl - 1 : 0;
            }
        }
        sg_jw_obj(&w);
        jw_guarded(&w, "title", title != NULL ? title : "", tlen);
        jw_guarded(&w, "url", url != NULL ? url : "", ulen);
        jw_guarded(&w, "content", text != NULL ? text : "", xlen);
        if (cJSON_IsNumber(score))
            sg_jw_kdouble(&w, "score", score->valuedouble);
        sg_jw_end(&w);
    }
    sg_jw_end(&w);
    sg_jw_end(&w);
    return 0;
}

/* {"type":"text","text":TEXT}, an item of a result's "content" */
static void text_item(sg_jw_t *w, const char *text, size_t len)
{
    sg_jw_obj(w);
    sg_jw_kstr(w, "type", "text");
    sg_jw_key(w, "text");
    sg_jw_strn(w, text, len);
    sg_jw_end(w);
}

/* {"content":[{"type":"text","text":TEXT}],"isError":true} */
static void tool_error(sg_mcp_item_t *item, const char *text)
{
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_obj(&w);
    sg_jw_key(&w, "content");
    sg_jw_arr(&w);
    text_item(&w, text, strlen(text));
    sg_jw_end(&w);
    sg_jw_kbool(&w, "isError", 1);
    sg_jw_end(&w);
    sg__mcp_item_result(item, b.base, b.len);
    sg_buf_free(&b);
}

static void call_free(mcp_call_t *c)
{
    for (uint32_t i = 0; i < c->n; ++i)
        free(c->texts[i]);
    free(c->texts);
    sg_gen_release(c->gen);
    free(c);
}

/* A successful tools/call result being built: the text items of "content" and the documents of
 * "structuredContent.result", each an array of its own until send_result joins them. */
typedef struct st_result_t {
    sg_buf_t content_buf, structured_buf;
    sg_jw_t content, structured;
} result_t;

static void result_init(result_t *r)
{
    memset(r, 0, sizeof(*r));
    sg_jw_init(&r->content, &r->content_buf);
    sg_jw_arr(&r->content);
    sg_jw_init(&r->structured, &r->structured_buf);
    sg_jw_arr(&r->structured);
}

/* Sends {"content":[...],"structuredContent":{"result":[...]},"isError":false} (0) -- or a tool
 * error when it is over `max_bytes` (limits.max_response_bytes; -1) -- and frees `r`'s buffers. */
static int send_result(sg_mcp_item_t *item, result_t *r, uint64_t max_bytes)
{
    sg_jw_end(&r->content);
    sg_jw_end(&r->structured);
    sg_buf_t b = {0};
    sg_jw_t w;
    sg_jw_init(&w, &b);
    sg_jw_obj(&w);
    sg_jw_key(&w, "content");
    sg_jw_raw(&w, r->content_buf.base, r->content_buf.len);
    sg_jw_key(&w, "structuredContent");
    sg_jw_obj(&w);
    sg_jw_key(&w, "result");
    sg_jw_raw(&w, r->structured_buf.base, r->structured_buf.len);
    sg_jw_end(&w);
    sg_jw_kbool(&w, "isError", 0);
    sg_jw_end(&w);
    sg_buf_free(&r->content_buf);
    sg_buf_free(&r->structured_buf);
    if (max_bytes != 0 && b.len > max_bytes) {
        char msg[300];
        snprintf(
            msg, sizeof(msg),
            "too_large: the result is %zu bytes, over limits.max_response_bytes (%llu): ask for fewer queries or a smaller topk",
            b.len, (unsigned long long)max_bytes);
        sg_buf_free(&b);
        tool_error(item, msg);
        return -1;
    }
    sg__mcp_item_result(item, b.base, b.len);
    sg_buf_free(&b);
    return 0;
}

static int answer_search(mcp_call_t *c, const sg_query_result_t *res)
{
    sg_buf_t frag = {0}, text = {0};
    result_t r;
    result_init(&r);
    for (uint32_t i = 0; i < res->n; ++i) {
        frag.len = 0;
        sg_blob_append_fragment(res->blobs[i], 1, &frag);
        sg_jw_raw(&r.structured, frag.base, frag.len);
        cJSON *hits = cJSON_ParseWithLength(frag.base, frag.len);
        text.len = 0;
        sg_buf_append(&text, "", 0);
        if (c->gen->mcp->text_format == SG_MCP_TEXT_RESULTS_JSON)
            sg_mcp_format_results_json(&text, c->texts[i], hits);
        else
            sg_mcp_format_search_r1(&text, hits);
        cJSON_Delete(hits);
        text_item(&r.content, text.base, text.len);
    }
    int rc = send_result(c->item, &r, c->max_bytes);
    sg_buf_free(&frag);
    sg_buf_free(&text);
    return rc;
}

static int answer_access(mcp_call_t *c, const sg_query_result_t *res)
{
    sg_buf_t page = {0};
    result_t r;
    result_init(&r);
    for (uint32_t i = 0; i < res->n; ++i) {
        const sg_blob_t *bl = res->blobs[i];
        page.len = 0;
        if (bl->n_hits > 0 && bl->docs != NULL) {
            sg_buf_append(&page, bl->json + bl->docs[0].off, bl->docs[0].len);
        } else if (bl->n_hits > 0) { /* a final fragment [PAGE] */
            cJSON *arr = cJSON_ParseWithLength(bl->json, bl->json_len);
            char *p = cJSON_IsArray(arr) && arr->child != NULL ? cJSON_PrintUnformatted(arr->child) : NULL;
            if (p != NULL)
                sg_buf_appends(&page, p);
            free(p);
            cJSON_Delete(arr);
        }
        if (page.len == 0)
            sg_jw_null(&r.structured);
        else
            sg_jw_raw(&r.structured, page.base, page.len);
        cJSON *pj = page.len != 0 ? cJSON_ParseWithLength(page.base, page.len) : NULL;
        size_t clen = 0;
        const char *contents = pj != NULL ? str_item(pj, "contents", &clen) : NULL;
        if (contents != NULL) {
            text_item(&r.content, contents, clen);
        } else {
            char msg[300];
            snprintf(msg, sizeof(msg), "No page found for %.200s", c->texts[i]);
            text_item(&r.content, msg, strlen(msg));
        }
        cJSON_Delete(pj);
    }
    int rc = send_result(c->item, &r, c->max_bytes);
    sg_buf_free(&page);
    return rc;
}

static void on_query_done(void *ctx, const sg_query_result_t *res)
{
    mcp_call_t *c = ctx;
    sg_mcp_item_t *item = c->item;
    if (res->status != 200) {
        char msg[800];
        int n = snprintf(msg, sizeof(msg), "%s failed (%d %s): %s", c->tool->name, res->status,
                         res->type != NULL ? res->type : "error", res->message != NULL ? res->message : "");
        if (res->retry_after_s > 0 && n > 0 && (size_t)n < sizeof(msg) &&
            (res->message == NULL || strstr(res->message, "retry") == NULL))
            snprintf(msg + n, sizeof(msg) - (size_t)n, "; retry after %u s", res->retry_after_s);
        tool_error(item, msg);
        sg_counter_add(c->tool->failed, 1);
    } else if ((c->tool->is_access ? answer_access(c, res) : answer_search(c, res)) == 0) {
        sg_counter_add(c->tool->ok, 1);
    } else { /* over limits.max_response_bytes: a tool error */
        sg_counter_add(c->gen->server->responses.m_too_large_exact, 1);
        sg_counter_add(c->tool->failed, 1);
    }
    call_free(c);
    sg__mcp_item_done(item);
}

static void on_fusion_done(void *ctx, const sg_query_result_t *res, const char *partial)
{
    (void)partial; /* counted by searchgate_fusion_partial_total; the answer holds the other legs' documents */
    on_query_done(ctx, res);
}

/* Reads `one` (a string) or `many` (a non-empty array of strings) into texts; -1 with a message. */
static int read_texts(const sg_config_t *cfg, const cJSON *args, const char *one, const char *many, char ***texts, uint32_t *n,
                      char *err, size_t err_size)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(args, one), *b = cJSON_GetObjectItemCaseSensitive(args, many);
    if (cJSON_IsNull(a))
        a = NULL;
    if (cJSON_IsNull(b))
        b = NULL;
    if ((a == NULL) == (b == NULL)) {
        snprintf(err, err_size, "arguments: give exactly one of %s (a string) and %s (an array of strings)", one, many);
        return -1;
    }
    if (a != NULL && !cJSON_IsString(a)) {
        snprintf(err, err_size, "arguments.%s must be a string", one);
        return -1;
    }
    if (b != NULL && (!cJSON_IsArray(b) || cJSON_GetArraySize(b) == 0)) {
        snprintf(err, err_size, "arguments.%s must be a non-empty array of strings", many);
        return -1;
    }
    uint32_t count = a != NULL ? 1 : (uint32_t)cJSON_GetArraySize(b);
    if (count > cfg->limits.max_queries) {
        snprintf(err, err_size, "arguments.%s has %u entries, over limits.max_queries (%u)", many, count, cfg->limits.max_queries);
        return -1;
    }
    char **t = sg_mem_calloc(count, sizeof(*t));
    uint32_t i = 0;
    for (const cJSON *e = a != NULL ? a : b->child; e != NULL && i < count; e = a != NULL ? NULL : e->next, ++i) {
        const char *what = a != NULL ? one : many;
        if (!cJSON_IsString(e)) {
            snprintf(err, err_size, "arguments.%s[%u] must be a string", what, i);
            goto fail;
        }
        size_t len = strlen(e->valuestring);
        if (len > cfg->limits.max_query_bytes) {
            snprintf(err, err_size, "arguments.%s%s is %zu bytes, over limits.max_query_bytes (%u)", what, a != NULL ? "" : "[]",
                     len, cfg->limits.max_query_bytes);
            goto fail;
        }
        t[i] = sg_strdup(e->valuestring);
    }
    *texts = t;
    *n = count;
    return 0;
fail:
    for (uint32_t j = 0; j < count; ++j)
        free(t[j]);
    free(t);
    return -1;
}

/* Runs tools/call `c` through the pipeline (or a fusion route's); its done() answers the item. */
static void start_call(mcp_call_t *c, sg_loop_t *loop, sg_client_t *client, uint32_t topk)
{
    const mcp_tool_t *tool = c->tool;
    char **texts = c->texts;
    uint32_t n = c->n;
    uint32_t *lens = sg_mem_alloc(n * sizeof(*lens));
    for (uint32_t i = 0; i < n; ++i)
        lens[i] = (uint32_t)strlen(texts[i]);
    if (tool->fusion >= 0 && !tool->is_access) {
        /* the tool result carries the scored fragments, and more */
        sg_fusion_spec_t fs = {.gen = c->gen,
                               .route = tool->fusion,
                               .client = client,
                               .texts = (const char *const *)texts,
                               .lens = lens,
                               .n = n,
                               .topk = topk,
                               .shape = SG_SHAPE_SCORED,
                               .max_response_bytes = c->max_bytes};
        sg_fusion_query_t *fq = sg_fusion_start(loop, &fs, on_fusion_done, c);
        free(lens);
        if (fq != NULL) /* else done() already ran and freed the call */
            c->fq = fq;
        return;
    }
    sg_query_spec_t spec = {.route = tool->route,
                            .client = client,
                            .texts = (const char *const *)texts,
                            .lens = lens,
                            .n = n,
                            .topk = topk,
                            .is_access = tool->is_access,
                            .shape = tool->is_access ? SG_SHAPE_PAGE : SG_SHAPE_SCORED, /* carried in the result, and more */
                            .max_response_bytes = c->max_bytes};
    sg_query_t *q = sg_query_start(loop, &spec, on_query_done, c);
    free(lens);
    if (q != NULL) /* else done() already ran and freed the call */
        c->q = q;
}

int sg__mcp_tools_call(sg_mcp_item_t *item, sg_loop_t *loop, sg_gen_t *g, sg_client_t *client, const cJSON *params)
{
    const sg_config_t *cfg = g->cfg;
    const sg_mcp_tools_t *x = g->mcp;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
    if (!cJSON_IsString(name)) {
        sg__mcp_item_error(item, SG_MCP_INVALID_PARAMS, "tools/call: params.name (a string) is required");
        return 0;
    }
    const mcp_tool_t *tool = NULL;
    for (size_t i = 0; i < x->n && tool == NULL; ++i)
        if (strcmp(x->tools[i].name, name->valuestring) == 0)
            tool = &x->tools[i];
    char err[300];
    if (tool == NULL) {
        snprintf(err, sizeof(err), "unknown tool: %.100s (tools/list names them)", name->valuestring);
        sg__mcp_item_error(item, SG_MCP_INVALID_PARAMS, err);
        return 0;
    }
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(params, "arguments");
    if (args != NULL && !cJSON_IsNull(args) && !cJSON_IsObject(args)) {
        sg__mcp_item_error(item, SG_MCP_INVALID_PARAMS, "tools/call: params.arguments must be an object");
        return 0;
    }
    uint32_t topk = 0;
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(args, "topk");
    if (!tool->is_access && tk != NULL && !cJSON_IsNull(tk)) {
        double v = cJSON_IsNumber(tk) ? tk->valuedouble : -1;
        if (v < 0 || v != (double)(uint64_t)v || v > cfg->limits.max_topk) {
            snprintf(err, sizeof(err),
                     "arguments.topk must be an integer in [0, %u] (limits.max_topk; 0 or null: the route's topk)",
                     cfg->limits.max_topk);
            sg__mcp_item_error(item, SG_MCP_INVALID_PARAMS, err);
            return 0;
        }
        topk = (uint32_t)v; /* 0, like null, means the route's default (as on /retrieve) */
    }
    char **texts = NULL;
    uint32_t n = 0;
    if (read_texts(cfg, args, tool->is_access ? "url" : "query", tool->is_access ? "urls" : "queries", &texts, &n, err,
                   sizeof(err)) != 0) {
        sg__mcp_item_error(item, SG_MCP_INVALID_PARAMS, err);
        return 0;
    }
    mcp_call_t *c = sg_mem_calloc(1, sizeof(*c));
    c->item = item;
    c->gen = sg_gen_ref(g);
    c->tool = tool;
    c->n = n;
    c->texts = texts;
    c->max_bytes = cfg->limits.max_response_bytes;
    item->call = c;
    start_call(c, loop, client, topk);
    return 1;
}

void sg__mcp_tools_cancel(sg_mcp_item_t *item)
{
    mcp_call_t *c = item->call;
    if (c == NULL)
        return;
    item->call = NULL;
    if (c->q != NULL)
        sg_query_cancel(c->q);
    if (c->fq != NULL)
        sg_fusion_cancel(c->fq);
    call_free(c);
}
