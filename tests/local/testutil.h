/*
 * testutil.h -- small helpers shared by the local backend's C tests: temp directories, whole-file
 * reads and writes, a JSON string decoder that keeps embedded NULs (cJSON's valuestring cannot),
 * and a safetensors writer. Header-only; each test includes it once.
 */
#ifndef SG_TESTS_LOCAL_TESTUTIL_H
#define SG_TESTS_LOCAL_TESTUTIL_H

#include <cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SG_FIXTURES
#error "SG_FIXTURES must be defined (path of tests/fixtures)"
#endif

__attribute__((unused)) static char *tu_read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while ((got = fread(buf + n, 1, cap - n, fp)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(fp);
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

__attribute__((unused)) static int tu_write_file(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    if (fp == NULL)
        return -1;
    size_t w = fwrite(data, 1, len, fp);
    return fclose(fp) == 0 && w == len ? 0 : -1;
}

__attribute__((unused)) static char *tu_path(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

__attribute__((unused)) static char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof(tmpl), "%s/sglocal-XXXXXX", base != NULL && base[0] != '\0' ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d != NULL ? strdup(d) : NULL;
}

__attribute__((unused)) static void tu_rmtree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *p = tu_path(dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            tu_rmtree(p);
        else
            unlink(p);
        free(p);
    }
    closedir(d);
    rmdir(dir);
}

__attribute__((unused)) static size_t tu_utf8(uint32_t c, char *o)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xC0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* The value of string field `key` of the JSON object text `line`, decoded to UTF-8 with
 * embedded NULs kept; malloc'ed, length in *len. Only for the fixtures' simple flat objects. */
__attribute__((unused)) static char *tu_json_string_field(const char *line, const char *key, size_t *len)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\": \"", key);
    const char *p = strstr(line, pat);
    if (p == NULL) {
        snprintf(pat, sizeof(pat), "\"%s\":\"", key);
        p = strstr(line, pat);
        if (p == NULL)
            return NULL;
    }
    p += strlen(pat);
    char *out = malloc(strlen(p) * 4 + 1);
    size_t n = 0;
    while (*p != '\0' && *p != '"') {
        if (*p != '\\') {
            out[n++] = *p++;
            continue;
        }
        ++p;
        char c = *p++;
        switch (c) {
        case 'n':
            out[n++] = '\n';
            break;
        case 't':
            out[n++] = '\t';
            break;
        case 'r':
            out[n++] = '\r';
            break;
        case 'b':
            out[n++] = '\b';
            break;
        case 'f':
            out[n++] = '\f';
            break;
        case 'u': {
            uint32_t u = (uint32_t)strtoul((char[5]){p[0], p[1], p[2], p[3], 0}, NULL, 16);
            p += 4;
            if (u >= 0xD800 && u < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                uint32_t lo = (uint32_t)strtoul((char[5]){p[2], p[3], p[4], p[5], 0}, NULL, 16);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                    p += 6;
                }
            }
            n += tu_utf8(u, out + n);
            break;
        }
        default:
            out[n++] = c;
        }
    }
    out[n] = '\0';
    *len = n;
    return out;
}

/* ---- safetensors writer ---- */

typedef struct tu_tensor {
    const char *name;
    const char *dtype; /* "F32", "F16", "BF16" */
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
} tu_tensor;

/* Writes a .safetensors file; `pad_header` adds spaces so the data area starts 8-aligned. */
__attribute__((unused)) static int tu_write_safetensors(const char *path, const tu_tensor *t, size_t n)
{
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    size_t off = 0;
    for (size_t i = 0; i < n; ++i) {
        cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(e, "dtype", t[i].dtype);
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t[i].ndim; ++d)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
        cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + t[i].nbytes)));
        off += t[i].nbytes;
    }
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hl = strlen(js);
    size_t padded = (hl + 7) / 8 * 8;
    FILE *fp = fopen(path, "wb");
    if (fp == NULL) {
        free(js);
        return -1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; ++i)
        len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    fwrite(len8, 1, 8, fp);
    fwrite(js, 1, hl, fp);
    for (size_t i = hl; i < padded; ++i)
        fputc(' ', fp);
    for (size_t i = 0; i < n; ++i)
        fwrite(t[i].data, 1, t[i].nbytes, fp);
    free(js);
    return fclose(fp);
}

__attribute__((unused)) static uint16_t tu_f32_to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t r = b + 0x7FFF + ((b >> 16) & 1); /* round to nearest even */
    return (uint16_t)(r >> 16);
}

__attribute__((unused)) static uint16_t tu_f32_to_f16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = (b >> 16) & 0x8000;
    int32_t exp = (int32_t)((b >> 23) & 0xFF) - 127 + 15;
    uint32_t mant = b & 0x7FFFFF;
    if (((b >> 23) & 0xFF) == 0xFF)
        return (uint16_t)(sign | 0x7C00 | (mant ? 0x200 : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7C00);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            ++half;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        ++half;
    return (uint16_t)half;
}

#endif
