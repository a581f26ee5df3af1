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
