/*
 * json.c -- JSON output helpers, and the strict check of request bodies. Responses are assembled
 * from ready fragments, so the only encoding work left to the gateway is strings (error messages,
 * echoed values) and numbers.
 *
 * cJSON (1.7.15) is lenient where Python's json module, which every peer server uses, is not: it
 * takes raw control bytes and invalid UTF-8 inside strings, stops a string at a raw NUL (so
 * "ham<NUL>let" silently became "ham"), and ignores data after the value. sg_json_validate() walks
 * the body once against the RFC 8259 grammar before cJSON sees it; sg_json_value_len() is the same
 * walk over one value inside a larger text (the documents of a cached result, cache/cache.c).
 */
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#if defined(__SSE2__) && !defined(SG_JSON_PORTABLE)
#include <emmintrin.h>
#endif

void sg_json_append_double(sg_buf_t *b, double v)
{
    if (!isfinite(v)) {
        sg_buf_appends(b, "null");
        return;
    }
    char tmp[40];
    for (int prec = 15; prec <= 17; ++prec) {
        snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
        if (prec == 17 || strtod(tmp, NULL) == v)
            break;
    }
    /* keep it a float for Python clients: 1 -> 1.0 */
    if (strpbrk(tmp, ".eEn") == NULL) {
        size_t l = strlen(tmp);
        memcpy(tmp + l, ".0", 3);
    }
    sg_buf_appends(b, tmp);
}

/* ---- the writer ---- */

void sg_jw_init(sg_jw_t *w, sg_buf_t *b)
{
    w->b = b;
    w->has_items = 0;
    w->is_array = 0;
    w->depth = 0;
    w->after_key = 0;
}

/* Before a value or a key: the comma that separates it from the previous member. */
static void sep(sg_jw_t *w)
{
    if (w->after_key) {
        w->after_key = 0;
        return;
    }
    uint64_t bit = 1ull << (w->depth & 63);
    if (w->has_items & bit)
        sg_buf_appendc(w->b, ',');
    w->has_items |= bit;
}

static void open_container(sg_jw_t *w, int array)
{
    sep(w);
    sg_buf_appendc(w->b, array ? '[' : '{');
    ++w->depth;
    uint64_t bit = 1ull << (w->depth & 63);
    w->has_items &= ~bit;
    w->is_array = array ? w->is_array | bit : w->is_array & ~bit;
}

void sg_jw_obj(sg_jw_t *w)
{
    open_container(w, 0);
}

void sg_jw_arr(sg_jw_t *w)
{
    open_container(w, 1);
}

void sg_jw_end(sg_jw_t *w)
{
    sg_buf_appendc(w->b, (w->is_array >> (w->depth & 63)) & 1 ? ']' : '}');
    --w->depth;
    w->after_key = 0;
}

void sg_jw_key(sg_jw_t *w, const char *key)
{
    sep(w);
    sg_buf_append_json_string(w->b, key, strlen(key));
    sg_buf_appendc(w->b, ':');
    w->after_key = 1;
}

void sg_jw_strn(sg_jw_t *w, const char *s, size_t n)
{
    sep(w);
    sg_buf_append_json_string(w->b, s, n);
}

void sg_jw_str(sg_jw_t *w, const char *s)
{
    sg_jw_strn(w, s, strlen(s));
}

void sg_jw_u64(sg_jw_t *w, uint64_t v)
{
    sep(w);
    sg_buf_appendf(w->b, "%llu", (unsigned long long)v);
}

void sg_jw_i64(sg_jw_t *w, int64_t v)
{
    sep(w);
    sg_buf_appendf(w->b, "%lld", (long long)v);
}

void sg_jw_double(sg_jw_t *w, double v)
{
    sep(w);
    sg_json_append_double(w->b, v);
}

void sg_jw_fixed(sg_jw_t *w, double v, int decimals)
{
    sep(w);
    if (isfinite(v))
        sg_buf_appendf(w->b, "%.*f", decimals, v);
    else
        sg_buf_appends(w->b, "null");
}

void sg_jw_bool(sg_jw_t *w, int v)
{
    sep(w);
    sg_buf_appends(w->b, v ? "true" : "false");
}

void sg_jw_null(sg_jw_t *w)
{
    sep(w);
    sg_buf_appends(w->b, "null");
}

void sg_jw_raw(sg_jw_t *w, const char *json, size_t n)
{
    sep(w);
    sg_buf_append(w->b, json, n);
}

void sg_jw_kstr(sg_jw_t *w, const char *key, const char *s)
{
    sg_jw_key(w, key);
    sg_jw_str(w, s);
}

void sg_jw_ku64(sg_jw_t *w, const char *key, uint64_t v)
{
    sg_jw_key(w, key);
    sg_jw_u64(w, v);
}

void sg_jw_ki64(sg_jw_t *w, const char *key, int64_t v)
{
    sg_jw_key(w, key);
    sg_jw_i64(w, v);
}

void sg_jw_kdouble(sg_jw_t *w, const char *key, double v)
{
    sg_jw_key(w, key);
    sg_jw_double(w, v);
}

void sg_jw_kfixed(sg_jw_t *w, const char *key, double v, int decimals)
{
    sg_jw_key(w, key);
    sg_jw_fixed(w, v, decimals);
}

void sg_jw_kbool(sg_jw_t *w, const char *key, int v)
{
    sg_jw_key(w, key);
    sg_jw_bool(w, v);
}

void sg_json_error_body(sg_buf_t *b, int status, const char *type, const char *msg)
{
    sg_jw_t w;
    sg_jw_init(&w, b);
    sg_jw_obj(&w);
    sg_jw_key(&w, "error");
    sg_jw_obj(&w);
    sg_jw_ki64(&w, "code", status);
    sg_jw_kstr(&w, "type", type);
    sg_jw_kstr(&w, "message", msg);
    sg_jw_end(&w);
    sg_jw_kstr(&w, "detail", msg);
    sg_jw_end(&w);
    sg_buf_appendc(b, '\n');
}

/* ---- strict validation ---- */

#define MAX_DEPTH 1000

typedef struct st_vctx_t {
    const unsigned char *p, *end, *start;
    const char *why;
    const unsigned char *bad;
} vctx_t;

static int vfail(vctx_t *v, const unsigned char *at, const char *why)
{
    v->bad = at;
    v->why = why;
    return -1;
}

static void skip_ws(vctx_t *v)
{
    while (v->p < v->end && (*v->p == ' ' || *v->p == '\t' || *v->p == '\n' || *v->p == '\r'))
        ++v->p;
}

static int is_cont(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

/* One UTF-8 sequence starting at v->p (a byte >= 0x80), per RFC 3629's table. */
static int utf8_seq(vctx_t *v)
{
    const unsigned char *s = v->p;
    size_t left = (size_t)(v->end - s);
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t n;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlong forms */
        else if (c == 0xED)
            hi = 0x9F; /* no UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* nothing past U+10FFFF */
    } else {
        return vfail(v, s, "invalid UTF-8");
    }
    if (left < n || s[1] < lo || s[1] > hi)
        return vfail(v, s, "invalid UTF-8");
    for (size_t i = 2; i < n; ++i)
        if (!is_cont(s[i]))
            return vfail(v, s, "invalid UTF-8");
    v->p += n;
    return 0;
}

static int hexdigit(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* The first byte of [p, end) that needs a look of its own inside a string -- '"', '\\', a control
 * character (< 0x20) or a byte >= 0x80 (UTF-8 to check) -- or, near the end, where the scan gave
 * up (the caller goes on byte by byte from there). Most of a document's text is plain bytes, so
 * they are skipped 16 at a time (SSE2, every x86-64) or 8 at a time (word-at-a-time zero-byte
 * tests, exact for "is there such a byte" but not for which one: the caller then steps; the unit
 * test unit_json_portable builds this path with SG_JSON_PORTABLE on x86-64 too). */
static const unsigned char *skip_plain(const unsigned char *p, const unsigned char *end)
{
#if defined(__SSE2__) && !defined(SG_JSON_PORTABLE)
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1f);
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                   _mm_cmpeq_epi8(_mm_min_epu8(x, ctl), x));    /* x <= 0x1f */
        unsigned m = (unsigned)(_mm_movemask_epi8(hit) | _mm_movemask_epi8(x)); /* | the bytes >= 0x80 */
        if (m != 0)
            return p + __builtin_ctz(m);
        p += 16;
    }
#else
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    while (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        uint64_t q = x ^ (ones * '"'), bs = x ^ (ones * '\\');
        if ((((x - ones * 0x20) & ~x) | ((q - ones) & ~q) | ((bs - ones) & ~bs) | x) & high)
            return p;
        p += 8;
    }
#endif
    return p;
}

static int vstring(vctx_t *v)
{
    ++v->p; /* the opening quote */
    for (;;) {
        v->p = skip_plain(v->p, v->end);
        if (v->p >= v->end)
            return vfail(v, v->p, "unterminated string");
        unsigned char c = *v->p;
        if (c == '"') {
            ++v->p;
            return 0;
        }
        if (c == 0)
            return vfail(v, v->p, "raw NUL byte in a string");
        if (c < 0x20)
            return vfail(v, v->p, "raw control character in a string");
        if (c == '\\') {
            if (v->p + 1 >= v->end)
                return vfail(v, v->p, "unterminated string");
            unsigned char e = v->p[1];
            if (e == 'u') {
                if (v->end - v->p < 6 || !hexdigit(v->p[2]) || !hexdigit(v->p[3]) || !hexdigit(v->p[4]) || !hexdigit(v->p[5]))
                    return vfail(v, v->p, "bad \\u escape (4 hex digits expected)");
                v->p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                v->p += 2;
            } else {
                return vfail(v, v->p, "bad escape in a string");
            }
            continue;
        }
        if (c >= 0x80) {
            if (utf8_seq(v) != 0)
                return -1;
            continue;
        }
        ++v->p;
    }
}

static int digits(vctx_t *v)
{
    const unsigned char *s = v->p;
    while (v->p < v->end && *v->p >= '0' && *v->p <= '9')
        ++v->p;
    return v->p > s ? 0 : -1;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int vnumber(vctx_t *v)
{
    const unsigned char *s = v->p;
    if (*v->p == '-')
        ++v->p;
    if (v->p < v->end && *v->p == '0') {
        ++v->p;
    } else if (digits(v) != 0) {
        return vfail(v, s, "bad number");
    }
    if (v->p < v->end && *v->p == '.') {
        ++v->p;
        if (digits(v) != 0)
            return vfail(v, s, "bad number (digits expected after the decimal point)");
    }
    if (v->p < v->end && (*v->p == 'e' || *v->p == 'E')) {
        ++v->p;
        if (v->p < v->end && (*v->p == '+' || *v->p == '-'))
            ++v->p;
        if (digits(v) != 0)
            return vfail(v, s, "bad number (digits expected in the exponent)");
    }
    if (v->p < v->end && ((*v->p >= '0' && *v->p <= '9') || *v->p == '.'))
        return vfail(v, s, "bad number");
    return 0;
}

static int vliteral(vctx_t *v, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(v->end - v->p) < n || memcmp(v->p, lit, n) != 0)
        return vfail(v, v->p, "unexpected character");
    v->p += n;
    return 0;
}

static int vvalue(vctx_t *v, int depth)
{
    skip_ws(v);
    if (v->p >= v->end)
        return vfail(v, v->p, "unexpected end of the body");
    unsigned char c = *v->p;
    switch (c) {
    case '{':
    case '[': {
        if (depth >= MAX_DEPTH)
            return vfail(v, v->p, "nested too deeply");
        int obj = c == '{';
        ++v->p;
        skip_ws(v);
        if (v->p < v->end && *v->p == (obj ? '}' : ']')) {
            ++v->p;
            return 0;
        }
        for (;;) {
            if (obj) {
                skip_ws(v);
                if (v->p >= v->end || *v->p != '"')
                    return vfail(v, v->p, "object key (a string) expected");
                if (vstring(v) != 0)
                    return -1;
                skip_ws(v);
                if (v->p >= v->end || *v->p != ':')
                    return vfail(v, v->p, "':' expected after an object key");
                ++v->p;
            }
            if (vvalue(v, depth + 1) != 0)
                return -1;
            skip_ws(v);
            if (v->p < v->end && *v->p == ',') {
                ++v->p;
                continue;
            }
            if (v->p < v->end && *v->p == (obj ? '}' : ']')) {
                ++v->p;
                return 0;
            }
            return vfail(v, v->p, obj ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    case '"':
        return vstring(v);
    case 't':
        return vliteral(v, "true");
    case 'f':
        return vliteral(v, "false");
    case 'n':
        return vliteral(v, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return vnumber(v);
        return vfail(v, v->p, c >= 0x80 ? "invalid UTF-8 or a character outside a string" : "unexpected character");
    }
}

long sg_json_validate(const char *p, size_t len, size_t *bad_at, const char **why)
{
    vctx_t v = {(const unsigned char *)p, (const unsigned char *)p + len, (const unsigned char *)p, NULL, NULL};
    if (len >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        v.p += 3;
    const unsigned char *value = v.p;
    if (vvalue(&v, 0) == 0) {
        skip_ws(&v);
        if (v.p == v.end)
            return (long)(value - v.start);
        vfail(&v, v.p, "unexpected data after the JSON value");
    }
    *bad_at = (size_t)(v.bad - v.start);
    *why = v.why;
    return -1;
}

long sg_json_value_len(const char *p, size_t len, int max_depth, size_t *bad_at, const char **why)
{
    vctx_t v = {(const unsigned char *)p, (const unsigned char *)p + len, (const unsigned char *)p, NULL, NULL};
    if (max_depth > MAX_DEPTH)
        max_depth = MAX_DEPTH;
    if (len != 0 && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        vfail(&v, v.p, "whitespace before the value");
    else if (vvalue(&v, MAX_DEPTH - max_depth) == 0)
        return (long)(v.p - v.start);
    *bad_at = (size_t)(v.bad - v.start);
    *why = v.why;
    return -1;
}

/* A JSON number passed through: integers stay integers, others in the shortest form that reads back. */
static void append_number(sg_buf_t *b, double d)
{
    if (!isfinite(d)) {
        sg_buf_appends(b, "null");
        return;
    }
    if (d == floor(d) && fabs(d) < 1e17) {
        sg_buf_appendf(b, "%.0f", d);
        return;
    }
    char tmp[40];
    snprintf(tmp, sizeof(tmp), "%.15g", d);
    if (strtod(tmp, NULL) != d)
        snprintf(tmp, sizeof(tmp), "%.17g", d);
    sg_buf_appends(b, tmp);
}

void sg_json_append_value(sg_buf_t *b, const cJSON *v)
{
    if (v == NULL || cJSON_IsNull(v) || cJSON_IsInvalid(v)) {
        sg_buf_appends(b, "null");
    } else if (cJSON_IsFalse(v)) {
        sg_buf_appends(b, "false");
    } else if (cJSON_IsTrue(v)) {
        sg_buf_appends(b, "true");
    } else if (cJSON_IsNumber(v)) {
        append_number(b, v->valuedouble);
    } else if (cJSON_IsString(v)) {
        const char *s = v->valuestring != NULL ? v->valuestring : "";
        sg_buf_append_json_string(b, s, strlen(s));
    } else if (cJSON_IsRaw(v)) {
        sg_buf_appends(b, v->valuestring != NULL ? v->valuestring : "null");
    } else if (cJSON_IsArray(v)) {
        sg_buf_append(b, "[", 1);
        for (const cJSON *it = v->child; it != NULL; it = it->next) {
            if (it != v->child)
                sg_buf_append(b, ",", 1);
            sg_json_append_value(b, it);
        }
        sg_buf_append(b, "]", 1);
    } else if (cJSON_IsObject(v)) {
        sg_buf_append(b, "{", 1);
        for (const cJSON *it = v->child; it != NULL; it = it->next) {
            if (it != v->child)
                sg_buf_append(b, ",", 1);
            const char *k = it->string != NULL ? it->string : "";
            sg_buf_append_json_string(b, k, strlen(k));
            sg_buf_append(b, ":", 1);
            sg_json_append_value(b, it);
        }
        sg_buf_append(b, "}", 1);
    } else {
        sg_buf_appends(b, "null");
    }
}
