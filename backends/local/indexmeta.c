/*
 * indexmeta.c -- reading INDEX.sgmeta (indexmeta.h). The file is small (a few KB): read whole,
 * parsed with cJSON; every field is checked before use, so a hand-edited file cannot crash the
 * backend, only be ignored with a warning.
 */
#include "indexmeta.h"

#include <cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v : NULL;
}

static int int_of(const cJSON *o, const char *k, int lo, int hi, int *out)
{
    const cJSON *v = num(o, k);
    if (v == NULL || v->valuedouble < lo || v->valuedouble > hi || v->valuedouble != (double)(int)v->valuedouble)
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

int sg_imeta_load(const char *index_path, uint64_t size, uint64_t hash, sg_imeta_t *m, char *why, size_t why_size)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->path, sizeof(m->path), "%s.sgmeta", index_path);
    FILE *fp = fopen(m->path, "rb");
    if (fp == NULL) {
        if (errno == ENOENT)
            return 0;
        snprintf(why, why_size, "%s: cannot open: %s", m->path, strerror(errno));
        return -1;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap ? cap * 2 : 16384;
            if (cap > ((size_t)16 << 20)) {
                snprintf(why, why_size, "%s: larger than 16 MiB", m->path);
                free(text);
                fclose(fp);
                return -1;
            }
            char *t = realloc(text, cap);
            if (t == NULL) {
                free(text);
                fclose(fp);
                snprintf(why, why_size, "%s: out of memory", m->path);
                return -1;
            }
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len, fp);
        len += got;
        if (got == 0)
            break;
    }
    fclose(fp);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = -1;
    const cJSON *ix = cJSON_GetObjectItemCaseSensitive(root, "index");
    const cJSON *fpj = cJSON_GetObjectItemCaseSensitive(ix, "fingerprint");
    const cJSON *sz = num(ix, "size");
    const cJSON *fac = cJSON_GetObjectItemCaseSensitive(root, "factory");
    if (root == NULL || !cJSON_IsObject(root) || num(root, "searchgate_convert") == NULL || !cJSON_IsString(fpj) || sz == NULL ||
        !cJSON_IsString(fac)) {
        snprintf(why, why_size, "%s: not a side file of searchgate-index convert", m->path);
        goto out;
    }
    char want[24];
    snprintf(want, sizeof(want), "%016llx", (unsigned long long)hash);
    if (sz->valuedouble != (double)size || strcmp(fpj->valuestring, want) != 0) {
        snprintf(why, why_size, "%s describes another index file (size or content differ): ignored", m->path);
        goto out;
    }
    snprintf(m->factory, sizeof(m->factory), "%s", fac->valuestring);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "source"), "path");
    if (cJSON_IsString(src))
        snprintf(m->source, sizeof(m->source), "%s", src->valuestring);
    if (int_of(root, "rerank", 0, 64, &m->rerank) != 0)
        m->rerank = 0;
    const cJSON *eval = cJSON_GetObjectItemCaseSensitive(root, "eval");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(eval, "kind");
    const cJSON *nq = num(eval, "queries");
    if (cJSON_IsString(kind) && nq != NULL)
        snprintf(m->eval_desc, sizeof(m->eval_desc), "%.0f %s", nq->valuedouble,
                 strcmp(kind->valuestring, "rows") == 0 ? "held-out rows of the Flat file" : "encoded queries");
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(root, "recall");
    size_t n = (size_t)cJSON_GetArraySize(rec);
    if (cJSON_IsArray(rec) && n > 0) {
        m->points = calloc(n, sizeof(*m->points));
        if (m->points == NULL)
            goto out;
        const cJSON *e;
        cJSON_ArrayForEach(e, rec)
        {
            sg_imeta_point_t *p = &m->points[m->n_points];
            if (!cJSON_IsObject(e))
                continue;
            if (int_of(e, "nprobe", 1, 1 << 24, &p->value) == 0)
                snprintf(m->param, sizeof(m->param), "nprobe");
            else if (int_of(e, "efSearch", 1, 1 << 24, &p->value) == 0)
                snprintf(m->param, sizeof(m->param), "efSearch");
            const cJSON *r1 = num(e, "recall@1"), *r3 = num(e, "recall@3"), *r10 = num(e, "recall@10"), *q = num(e, "qps");
            if (int_of(e, "rerank", 0, 64, &p->rerank) != 0 || r1 == NULL || r3 == NULL || r10 == NULL)
                continue;
            p->recall1 = r1->valuedouble;
            p->recall3 = r3->valuedouble;
            p->recall10 = r10->valuedouble;
            p->qps = q != NULL ? q->valuedouble : 0;
            m->n_points++;
        }
    }
    const cJSON *best = cJSON_GetObjectItemCaseSensitive(root, "recommended");
    if (cJSON_IsObject(best) && m->param[0] != '\0' && int_of(best, m->param, 1, 1 << 24, &m->rec_value) == 0 &&
        int_of(best, "rerank", 0, 64, &m->rec_rerank) != 0)
        m->rec_rerank = 0;
    m->present = 1;
    rc = 1;
out:
    cJSON_Delete(root);
    if (rc != 1) {
        free(m->points);
        m->points = NULL;
        m->n_points = 0;
    }
    return rc;
}

void sg_imeta_free(sg_imeta_t *m)
{
    free(m->points);
    memset(m, 0, sizeof(*m));
}

/* appends to buf (size bytes), truncating safely */
static void app(char *buf, size_t size, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void app(char *buf, size_t size, size_t *o, const char *fmt, ...)
{
    if (*o + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *o, size - *o, fmt, ap);
    va_end(ap);
    if (n > 0)
        *o += (size_t)n < size - *o ? (size_t)n : size - *o - 1;
}

static void put_point(const sg_imeta_t *m, const sg_imeta_point_t *p, char *buf, size_t size, size_t *o)
{
    app(buf, size, o, "recall@3 %.3f (recall@1 %.3f, recall@10 %.3f)", p->recall3, p->recall1, p->recall10);
    if (m->param[0] != '\0')
        app(buf, size, o, " at %s=%d", m->param, p->value);
    if (p->rerank > 0)
        app(buf, size, o, " with re-ranking x%d", p->rerank);
}

int sg_imeta_expected(const sg_imeta_t *m, int value, int rerank, char *buf, size_t size)
{
    const sg_imeta_point_t *lo = NULL, *hi = NULL;
    for (size_t i = 0; i < m->n_points; ++i) {
        const sg_imeta_point_t *p = &m->points[i];
        if (p->rerank != rerank)
            continue;
        if (p->value <= value && (lo == NULL || p->value > lo->value))
            lo = p;
        if (p->value >= value && (hi == NULL || p->value < hi->value))
            hi = p;
    }
    size_t o = 0;
    if (size > 0)
        buf[0] = '\0';
    if (lo == NULL && hi == NULL) {
        app(buf, size, &o, "%s has no measurement%s%s", m->path, rerank > 0 ? " with this re-ranking factor" : "",
            m->n_points == 0 ? " (converted with --eval 0)" : "");
        return 0;
    }
    if (lo != NULL && hi != NULL && lo->value != hi->value) {
        app(buf, size, &o, "between ");
        put_point(m, lo, buf, size, &o);
        app(buf, size, &o, " and ");
        put_point(m, hi, buf, size, &o);
    } else {
        const sg_imeta_point_t *p = lo != NULL ? lo : hi;
        put_point(m, p, buf, size, &o);
        if (p->value != value && m->param[0] != '\0')
            app(buf, size, &o, " (the nearest measured to %s=%d)", m->param, value);
    }
    app(buf, size, &o, ", measured by searchgate-index convert on %s", m->eval_desc[0] ? m->eval_desc : "its sample");
    return 1;
}
