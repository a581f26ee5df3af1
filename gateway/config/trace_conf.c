/*
 * trace_conf.c -- "trace" objects of routes and clients (trace_conf.h, docs/traces.md), read and
 * validated at start-up and at each reload; the writer that uses them is pipeline/trace.c.
 */
#include "trace_conf.h"
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const field_names[] = {"time", "request", "client", "route", "op",   "topk",  "params", "query", "query_hash",
                                          "hits", "ids",     "scores", "empty", "docs", "cache", "status", "ms",    NULL};

/* "fields": a non-empty array of field names; absent, every field but docs and query_hash. */
static int parse_fields(sg_cfg_t *c, const cJSON *o, uint32_t *out)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "fields");
    *out = SG_TRACE_F_DEFAULT;
    if (f == NULL || cJSON_IsNull(f))
        return 0;
    if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) == 0)
        return sg_cfg_fail(c, "fields", f, "expected a non-empty array of field names (docs/traces.md)");
    *out = 0;
    for (const cJSON *it = f->child; it != NULL; it = it->next) {
        int found = -1;
        for (int i = 0; cJSON_IsString(it) && field_names[i] != NULL; ++i)
            if (strcmp(it->valuestring, field_names[i]) == 0)
                found = i;
        if (found < 0)
            return sg_cfg_fail(c, "fields", it,
                               "unknown field (expected time, request, client, route, op, topk, params, query, query_hash, hits, "
                               "ids, scores, empty, docs, cache, status, ms)");
        *out |= 1u << found;
    }
    return 0;
}

/* The file a "path" names: itself, or <dir>/<name>.jsonl for a directory (a trailing '/', or one
 * that exists). The name keeps letters, digits, '.', '-' and '_'. */
static char *trace_file(const char *base_dir, const char *raw, const char *name)
{
    char *full = sg_cfg_resolve(base_dir, raw);
    size_t n = strlen(raw);
    struct stat st;
    if (raw[n - 1] != '/' && !(stat(full, &st) == 0 && S_ISDIR(st.st_mode)))
        return full;
    sg_buf_t b = {0};
    sg_buf_appends(&b, full);
    while (b.len > 1 && b.base[b.len - 1] == '/')
        --b.len;
    sg_buf_appendc(&b, '/');
    for (const char *p = name; *p != '\0'; ++p) {
        int ok =
            (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_';
        sg_buf_appendc(&b, ok ? *p : '_');
    }
    sg_buf_appends(&b, ".jsonl");
    free(full);
    return b.base;
}

/* A "trace" object (docs/configuration.md, "Query traces"); "path" is read as given, then made the
 * file's path (trace_file). */
static const sg_cfg_key_t trace_config[] = {
    SG_CFG_STRING(sg_trace_conf_t, path, "path", 1, NULL),
    SG_CFG_DOUBLE(sg_trace_conf_t, sample, "sample", 0, 1, 1),
    SG_CFG_CUSTOM_KEY("fields"),
    SG_CFG_INT(sg_trace_conf_t, rotate_bytes, "rotate_bytes", 0, (int64_t)1 << 50, 268435456),
    SG_CFG_INT(sg_trace_conf_t, rotate_s, "rotate_s", 0, 31536000, 0),
    SG_CFG_INT(sg_trace_conf_t, keep, "keep", 0, 1000000, 0),
    SG_CFG_INT(sg_trace_conf_t, buffer_bytes, "buffer_bytes", 4096, (int64_t)1 << 36, 16 << 20),
};

int sg_trace_conf_parse(sg_cfg_t *c, const cJSON *parent, const char *base_dir, const char *name, sg_trace_conf_t **out)
{
    *out = NULL;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(parent, "trace");
    if (o == NULL || cJSON_IsNull(o))
        return 0;
    if (!cJSON_IsObject(o))
        return sg_cfg_fail(c, "trace", o, "expected an object {\"path\": \"FILE or DIR/\", \"sample\": 1.0, ...} or null");
    char where[200];
    snprintf(where, sizeof(where), "%s%strace", c->path, c->path[0] != '\0' ? "." : "");
    sg_cfg_t ct = {where, c->err, c->err_size};
    if (sg_cfg_check_table(&ct, o, trace_config, SG_CFG_N(trace_config)) != 0)
        return -1;
    sg_trace_conf_t *t = sg_mem_calloc(1, sizeof(*t));
    *out = t; /* the caller owns it from here, valid or not */
    t->where = sg_strdup(where);
    /* in the table's order ("fields", a list, read by hand in its place): the first message when
     * several keys are wrong is the one it always was */
    if (sg_cfg_read_ex(&ct, o, trace_config, 2, base_dir, t, SG_CFG_KEYS_CHECKED) != 0)
        return -1;
    char *raw = t->path;
    t->path = trace_file(base_dir, raw, name);
    free(raw);
    if (parse_fields(&ct, o, &t->fields) != 0)
        return -1;
    return sg_cfg_read_ex(&ct, o, trace_config + 2, SG_CFG_N(trace_config) - 2, base_dir, t, SG_CFG_KEYS_CHECKED);
}

int sg_trace_conf_check_shared(sg_trace_conf_t *const *all, size_t n, char *err, size_t err_size)
{
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < i; ++j) {
            const sg_trace_conf_t *a = all[j], *b = all[i];
            if (strcmp(a->path, b->path) != 0)
                continue;
            if (a->rotate_bytes != b->rotate_bytes || a->rotate_s != b->rotate_s || a->keep != b->keep ||
                a->buffer_bytes != b->buffer_bytes) {
                snprintf(err, err_size,
                         "%s: writes the file %s like %s, with other rotate_bytes, rotate_s, keep or buffer_bytes (traces "
                         "sharing a file share those settings: give them the same values)",
                         b->where, b->path, a->where);
                return -1;
            }
        }
    return 0;
}

void sg_trace_conf_free(sg_trace_conf_t *t)
{
    if (t == NULL)
        return;
    free(t->path);
    free(t->where);
    free(t);
}
