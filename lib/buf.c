/*
 * buf.c -- the growable byte buffer (buf.h).
 */
#include "buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void sg_buf_reserve(sg_buf_t *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap != 0 ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->base, cap);
    if (p == NULL) {
        fprintf(stderr, "searchgate: out of memory growing a buffer to %zu bytes\n", cap);
        abort();
    }
    b->base = p;
    b->cap = cap;
}

void sg_buf_append(sg_buf_t *b, const void *p, size_t n)
{
    sg_buf_reserve(b, n);
    if (n != 0)
        memcpy(b->base + b->len, p, n);
    b->len += n;
    b->base[b->len] = '\0';
}

void sg_buf_appendf(sg_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    sg_buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->base + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sg_buf_free(sg_buf_t *b)
{
    free(b->base);
    b->base = NULL;
    b->len = b->cap = 0;
}

size_t sg_utf8_seq_len(const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return n >= 2 && (s[1] & 0xc0) == 0x80 ? 2 : 0;
    if (c >= 0xe0 && c <= 0xef) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f)) /* overlong, surrogates */
            return 0;
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
            return 0;
        if ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f)) /* overlong, > U+10FFFF */
            return 0;
        return 4;
    }
    return 0;
}

void sg_buf_append_json_string(sg_buf_t *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    sg_buf_reserve(b, n + 2);
    b->base[b->len++] = '"';
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
            size_t j = i + 1; /* copy a run of plain ASCII at once */
            while (j < n && p[j] >= 0x20 && p[j] < 0x80 && p[j] != '"' && p[j] != '\\')
                ++j;
            sg_buf_append(b, p + i, j - i);
            i = j;
            continue;
        }
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            sg_buf_append(b, esc, 2);
            ++i;
            continue;
        }
        if (c < 0x20) {
            static const char hex[] = "0123456789abcdef";
            char esc[6];
            size_t m = 2;
            esc[0] = '\\';
            switch (c) {
            case '\n':
                esc[1] = 'n';
                break;
            case '\r':
                esc[1] = 'r';
                break;
            case '\t':
                esc[1] = 't';
                break;
            case '\b':
                esc[1] = 'b';
                break;
            case '\f':
                esc[1] = 'f';
                break;
            default:
                esc[1] = 'u';
                esc[2] = '0';
                esc[3] = '0';
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                m = 6;
                break;
            }
            sg_buf_append(b, esc, m);
            ++i;
            continue;
        }
        size_t l = sg_utf8_seq_len(p + i, n - i);
        if (l == 0) {
            sg_buf_append(b, "\xef\xbf\xbd", 3); /* U+FFFD for a byte that is not UTF-8 */
            ++i;
        } else {
            sg_buf_append(b, p + i, l);
            i += l;
        }
    }
    sg_buf_append(b, "\"", 1);
}
