/*
 * cfg.c -- config validation helpers. Errors name the key and quote the offending value, the
 * nginx way ("invalid value ... in ..."), so a start-up failure says exactly what to fix.
 */
#include "cfg.h"
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d == NULL)
        abort();
    memcpy(d, s, n + 1);
    return d;
}

int sg_cfg_fail(sg_cfg_t *c, const char *key, const cJSON *value, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    char shown[160] = "";
    if (value != NULL) {
        char *printed = cJSON_PrintUnformatted(value);
        if (printed != NULL) {
            size_t n = strlen(printed);
            if (n > 120)
                snprintf(shown, sizeof(shown), ", got %.120s...", printed);
            else
                snprintf(shown, sizeof(shown), ", got %s", printed);
            free(printed);
        }
    }
    const char *path = c->path != NULL ? c->path : "";
    if (key != NULL)
        snprintf(c->err, c->err_size, "%s%s%s: %s%s", path, *path != '\0' ? "." : "", key, what, shown);
    else
        snprintf(c->err, c->err_size, "%s: %s%s", *path != '\0' ? path : "(top level)", what, shown);
    return -1;
}

int sg_cfg_check_keys(sg_cfg_t *c, const cJSON *obj, const char *const *allowed)
{
    if (!cJSON_IsObject(obj))
        return sg_cfg_fail(c, NULL, obj, "expected a JSON object");
    for (const cJSON *it = obj->child; it != NULL; it = it->next) {
        int ok = 0;
        for (size_t i = 0; allowed[i] != NULL; ++i)
            if (it->string != NULL && strcmp(it->string, allowed[i]) == 0)
                ok = 1;
        if (!ok) {
            char list[512] = "";
            size_t off = 0;
            for (size_t i = 0; allowed[i] != NULL && off < sizeof(list); ++i)
                off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", i != 0 ? ", " : "", allowed[i]);
            return sg_cfg_fail(c, it->string, NULL, "unknown key (allowed: %s)", list);
        }
    }
    return 0;
}

static const cJSON *get(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(v) ? NULL : v;
}

int sg_cfg_int(sg_cfg_t *c, const cJSON *obj, const char *key, int64_t min, int64_t max, int64_t def, int64_t *out)
{
    const cJSON *v = get(obj, key);
    if (v == NULL) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)min ||
        v->valuedouble > (double)max)
        return sg_cfg_fail(c, key, v, "expected an integer in [%lld, %lld]", (long long)min, (long long)max);
    *out = (int64_t)v->valuedouble;
    return 0;
}

int sg_cfg_double(sg_cfg_t *c, const cJSON *obj, const char *key, double min, double max, double def, double *out)
{
    const cJSON *v = get(obj, key);
    if (v == NULL) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < min || v->valuedouble > max)
        return sg_cfg_fail(c, key, v, "expected a number in [%g, %g]", min, max);
    *out = v->valuedouble;
    return 0;
}

int sg_cfg_bool(sg_cfg_t *c, const cJSON *obj, const char *key, int def, int *out)
{
    const cJSON *v = get(obj, key);
    if (v == NULL) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return sg_cfg_fail(c, key, v, "expected true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

int sg_cfg_string(sg_cfg_t *c, const cJSON *obj, const char *key, int required, const char *def, char **out)
{
    const cJSON *v = get(obj, key);
    if (v == NULL) {
        if (required)
            return sg_cfg_fail(c, key, NULL, "required key is missing");
        *out = def != NULL ? dup_str(def) : NULL;
        return 0;
    }
    if (!cJSON_IsString(v) || v->valuestring[0] == '\0')
        return sg_cfg_fail(c, key, v, "expected a non-empty string");
    *out = dup_str(v->valuestring);
    return 0;
}

int sg_cfg_enum(sg_cfg_t *c, const cJSON *obj, const char *key, const char *const *choices, int def, int *out)
{
    const cJSON *v = get(obj, key);
    if (v == NULL) {
        *out = def;
        return 0;
    }
    if (cJSON_IsString(v))
        for (int i = 0; choices[i] != NULL; ++i)
            if (strcmp(v->valuestring, choices[i]) == 0) {
                *out = i;
                return 0;
            }
    char list[256] = "";
    size_t off = 0;
    for (size_t i = 0; choices[i] != NULL && off < sizeof(list); ++i)
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s\"%s\"", i != 0 ? ", " : "", choices[i]);
    return sg_cfg_fail(c, key, v, "expected one of %s", list);
}

char *sg_cfg_resolve(const char *base_dir, const char *p)
{
    if (p[0] == '/' || base_dir == NULL || base_dir[0] == '\0')
        return dup_str(p);
    size_t nb = strlen(base_dir), np = strlen(p);
    char *d = malloc(nb + np + 2);
    if (d == NULL)
        abort();
    memcpy(d, base_dir, nb);
    d[nb] = '/';
    memcpy(d + nb + 1, p, np + 1);
    return d;
}

int sg_cfg_path(sg_cfg_t *c, const cJSON *obj, const char *key, int required, const char *base_dir, char **out)
{
    char *raw;
    if (sg_cfg_string(c, obj, key, required, NULL, &raw) != 0)
        return -1;
    if (raw == NULL) {
        *out = NULL;
        return 0;
    }
    *out = sg_cfg_resolve(base_dir, raw);
    free(raw);
    return 0;
}

int sg_cfg_secret_env(sg_cfg_t *c, const cJSON *obj, const char *key, int required, char **out)
{
    char *name;
    *out = NULL;
    if (sg_cfg_string(c, obj, key, required, NULL, &name) != 0)
        return -1;
    if (name == NULL)
        return 0;
    const char *val = getenv(name);
    if (val == NULL || val[0] == '\0') {
        int r = sg_cfg_fail(c, key, NULL, "environment variable %s (named here) is not set or empty", name);
        free(name);
        return r;
    }
    free(name);
    *out = dup_str(val);
    return 0;
}

static int read_text(sg_cfg_t *c, const cJSON *obj, const sg_cfg_key_t *k, char **out)
{
    const cJSON *v = get(obj, k->key);
    if (v == NULL) {
        *out = dup_str(k->sdef != NULL ? k->sdef : "");
        return 0;
    }
    if (!cJSON_IsString(v) || (k->maxlen != 0 && strlen(v->valuestring) >= k->maxlen)) {
        if (k->expect != NULL)
            return sg_cfg_fail(c, k->key, v, "%s", k->expect);
        if (k->maxlen != 0)
            return sg_cfg_fail(c, k->key, v, "expected a string shorter than %zu bytes", k->maxlen);
        return sg_cfg_fail(c, k->key, v, "expected a string");
    }
    *out = dup_str(v->valuestring);
    return 0;
}

int sg_cfg_present(const cJSON *obj, const char *key)
{
    return get(obj, key) != NULL;
}

static void store_int(void *dst, size_t size, int64_t v)
{
    uint8_t u8 = (uint8_t)v;
    uint16_t u16 = (uint16_t)v;
    uint32_t u32 = (uint32_t)v;
    uint64_t u64 = (uint64_t)v;
    memcpy(dst, size == 1 ? (void *)&u8 : size == 2 ? (void *)&u16 : size == 4 ? (void *)&u32 : (void *)&u64, size);
}

static int read_entry(sg_cfg_t *c, const cJSON *obj, const sg_cfg_key_t *k, const char *base_dir, char *dst)
{
    int64_t v;
    int b;
    char *str = NULL;
    switch (k->type) {
    case SG_CFG_INT:
        if (sg_cfg_int(c, obj, k->key, k->min, k->max, k->def, &v) != 0)
            return -1;
        store_int(dst + k->offset, k->size, v);
        return 0;
    case SG_CFG_DOUBLE:
        return sg_cfg_double(c, obj, k->key, k->dmin, k->dmax, k->ddef, (double *)(void *)(dst + k->offset));
    case SG_CFG_BOOL:
    case SG_CFG_ENUM:
        if ((k->type == SG_CFG_BOOL ? sg_cfg_bool(c, obj, k->key, (int)k->def, &b)
                                    : sg_cfg_enum(c, obj, k->key, k->choices, (int)k->def, &b)) != 0)
            return -1;
        memcpy(dst + k->offset, &b, sizeof(b));
        return 0;
    case SG_CFG_STRING:
    case SG_CFG_PATH:
    case SG_CFG_TEXT:
        if ((k->type == SG_CFG_STRING ? sg_cfg_string(c, obj, k->key, k->required, k->sdef, &str)
             : k->type == SG_CFG_PATH ? sg_cfg_path(c, obj, k->key, k->required, base_dir, &str)
                                      : read_text(c, obj, k, &str)) != 0)
            return -1;
        memcpy(dst + k->offset, &str, sizeof(str));
        return 0;
    default:
        return 0; /* SG_CFG_CUSTOM: the plugin reads it */
    }
}

size_t sg_cfg_table_keys(const sg_cfg_key_t *table, size_t n, const char **allowed, size_t len, size_t cap)
{
    for (size_t i = 0; i < n && len + 1 < cap; ++i)
        allowed[len++] = table[i].key;
    allowed[len] = NULL;
    return len;
}

int sg_cfg_check_table(sg_cfg_t *c, const cJSON *obj, const sg_cfg_key_t *table, size_t n)
{
    const char *allowed[65];
    if (n >= sizeof(allowed) / sizeof(allowed[0]))
        return sg_cfg_fail(c, NULL, NULL, "too many keys in the config table");
    sg_cfg_table_keys(table, n, allowed, 0, sizeof(allowed) / sizeof(allowed[0]));
    return sg_cfg_check_keys(c, obj, allowed);
}

int sg_cfg_read_ex(sg_cfg_t *c, const cJSON *obj, const sg_cfg_key_t *table, size_t n, const char *base_dir, void *dst, int flags)
{
    if (obj != NULL && !(flags & SG_CFG_KEYS_CHECKED) && sg_cfg_check_table(c, obj, table, n) != 0)
        return -1;
    for (size_t i = 0; i < n; ++i) {
        if ((flags & SG_CFG_OVERLAY) && !table[i].required && get(obj, table[i].key) == NULL)
            continue; /* absent: the destination keeps what the caller put there */
        if (read_entry(c, obj, &table[i], base_dir, dst) != 0)
            return -1;
    }
    return 0;
}

int sg_cfg_read(sg_cfg_t *c, const cJSON *obj, const sg_cfg_key_t *table, size_t n, const char *base_dir, void *dst)
{
    return sg_cfg_read_ex(c, obj, table, n, base_dir, dst, 0);
}

/* ---- strict parsing ---- */

/* The key path of a member while walking the tree: "a.b[2].c", joined to the sg_cfg_t's path. */
typedef struct st_keypath_t {
    char buf[512];
    size_t len;
} keypath_t;

static size_t keypath_push(keypath_t *p, const char *key, size_t index)
{
    size_t was = p->len;
    int n = key != NULL ? snprintf(p->buf + p->len, sizeof(p->buf) - p->len, "%s%s", p->len != 0 ? "." : "", key)
                        : snprintf(p->buf + p->len, sizeof(p->buf) - p->len, "[%zu]", index);
    if (n > 0)
        p->len = p->len + (size_t)n < sizeof(p->buf) ? p->len + (size_t)n : sizeof(p->buf) - 1;
    return was;
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key of object `o` that appears twice (NULL when none): pairwise for small objects, by
 * sorting for large ones, so a hostile file with many keys costs n log n. */
static const char *duplicate_key(const cJSON *o)
{
    size_t n = 0;
    for (const cJSON *it = o->child; it != NULL; it = it->next)
        ++n;
    if (n <= 16) {
        for (const cJSON *a = o->child; a != NULL; a = a->next)
            for (const cJSON *b = a->next; b != NULL; b = b->next)
                if (strcmp(a->string, b->string) == 0)
                    return a->string;
        return NULL;
    }
    const cJSON **v = malloc(n * sizeof(*v));
    if (v == NULL)
        abort();
    n = 0;
    for (const cJSON *it = o->child; it != NULL; it = it->next)
        v[n++] = it;
    qsort(v, n, sizeof(*v), cmp_keys);
    const char *dup = NULL;
    for (size_t i = 1; i < n && dup == NULL; ++i)
        if (strcmp(v[i - 1]->string, v[i]->string) == 0)
            dup = v[i]->string;
    free(v);
    return dup;
}

static int check_duplicates(sg_cfg_t *c, const cJSON *v, keypath_t *p)
{
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return 0;
    const char *dup = cJSON_IsObject(v) ? duplicate_key(v) : NULL;
    if (dup != NULL) {
        char path[768];
        const char *base = c->path != NULL ? c->path : "";
        snprintf(path, sizeof(path), "%s%s%.*s", base, base[0] != '\0' && p->len != 0 ? "." : "", (int)p->len, p->buf);
        sg_cfg_t at = {path, c->err, c->err_size};
        return sg_cfg_fail(&at, dup, NULL, "duplicate key: given more than once in the same object (each key may appear once)");
    }
    size_t i = 0;
    for (const cJSON *it = v->child; it != NULL; it = it->next, ++i) {
        size_t was = keypath_push(p, cJSON_IsObject(v) ? it->string : NULL, i);
        int r = check_duplicates(c, it, p);
        p->len = was;
        p->buf[was] = '\0';
        if (r != 0)
            return -1;
    }
    return 0;
}

static void syntax_error(sg_cfg_t *c, const char *json, size_t bad_at, const char *why)
{
    size_t line = 1, col = 1;
    for (size_t i = 0; i < bad_at; ++i, ++col)
        if (json[i] == '\n') {
            ++line;
            col = 0;
        }
    const char *path = c->path != NULL ? c->path : "";
    if (strcmp(why, "unexpected data after the JSON value") == 0)
        why = "data after the end of the document (trailing garbage, or a second JSON document)";
    snprintf(c->err, c->err_size, "%s%snot valid JSON at line %zu, column %zu (byte %zu): %s", path, path[0] != '\0' ? ": " : "",
             line, col, bad_at, why);
}

cJSON *sg_cfg_parse(sg_cfg_t *c, const char *json, size_t len)
{
    size_t bad_at = 0;
    const char *why = NULL;
    long start = sg_json_validate(json, len, &bad_at, &why);
    if (start < 0) {
        syntax_error(c, json, bad_at, why);
        return NULL;
    }
    cJSON *root = cJSON_ParseWithLength(json + start, len - (size_t)start);
    if (root == NULL) { /* valid JSON that cJSON cannot hold (out of memory) */
        snprintf(c->err, c->err_size, "%s%scannot parse the JSON", c->path != NULL ? c->path : "",
                 c->path != NULL && c->path[0] != '\0' ? ": " : "");
        return NULL;
    }
    keypath_t p = {{0}, 0};
    if (check_duplicates(c, root, &p) != 0) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}
