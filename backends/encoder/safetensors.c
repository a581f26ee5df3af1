/*
 * safetensors.c -- mmap + header validation for .safetensors files (the format: an 8-byte little
 * endian header length N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [b, e]}, ...,
 * "__metadata__": {...}}, then the data area; offsets are relative to the data area).
 *
 * Every tensor entry is checked when the file is opened, so a truncated or corrupt file fails at
 * start-up with a message naming the tensor rather than crashing on first use.
 */
#include "safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (100u << 20)

static int dtype_of(const char *s, uint64_t *elsize)
{
    static const struct {
        const char *name;
        int dtype;
        uint64_t size;
    } map[] = {{"F32", SG_ST_F32, 4},   {"F16", SG_ST_F16, 2},       {"BF16", SG_ST_BF16, 2},    {"F64", SG_ST_OTHER, 8},
               {"I64", SG_ST_OTHER, 8}, {"I32", SG_ST_OTHER, 4},     {"I16", SG_ST_OTHER, 2},    {"I8", SG_ST_OTHER, 1},
               {"U8", SG_ST_OTHER, 1},  {"BOOL", SG_ST_OTHER, 1},    {"U16", SG_ST_OTHER, 2},    {"U32", SG_ST_OTHER, 4},
               {"U64", SG_ST_OTHER, 8}, {"F8_E4M3", SG_ST_OTHER, 1}, {"F8_E5M2", SG_ST_OTHER, 1}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); ++i) {
        if (strcmp(s, map[i].name) == 0) {
            *elsize = map[i].size;
            return map[i].dtype;
        }
    }
    return -1;
}

void sg_st_close(sg_st_file_t *f)
{
    for (size_t i = 0; i < f->n_tensors; ++i)
        free(f->tensors[i].name);
    free(f->tensors);
    if (f->map != NULL && f->map != MAP_FAILED && !f->borrowed)
        munmap(f->map, f->size);
    memset(f, 0, sizeof(*f));
}

/* Checks one header entry and fills `t`. */
static int parse_entry(const char *path, const cJSON *e, const unsigned char *data, uint64_t data_size, sg_st_tensor_t *t,
                       char *err, size_t err_size)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
        cJSON_GetArraySize(offs) != 2) {
        snprintf(err, err_size, "%s: tensor %s: header entry needs \"dtype\", \"shape\" and \"data_offsets\" [begin, end]", path,
                 e->string);
        return -1;
    }
    uint64_t elsize;
    t->dtype = dtype_of(dt->valuestring, &elsize);
    if (t->dtype < 0) {
        snprintf(err, err_size, "%s: tensor %s: unknown dtype \"%.32s\"", path, e->string, dt->valuestring);
        return -1;
    }
    snprintf(t->dtype_name, sizeof(t->dtype_name), "%s", dt->valuestring);
    int nd = cJSON_GetArraySize(shape);
    if (nd > SG_ST_MAX_DIMS) {
        snprintf(err, err_size, "%s: tensor %s: %d dimensions (at most %d supported)", path, e->string, nd, SG_ST_MAX_DIMS);
        return -1;
    }
    t->ndim = nd;
    uint64_t numel = 1;
    int i = 0;
    for (const cJSON *d = shape->child; d != NULL; d = d->next, ++i) {
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9.0e15 ||
            d->valuedouble != (double)(int64_t)d->valuedouble) {
            snprintf(err, err_size, "%s: tensor %s: shape[%d] is not a non-negative integer", path, e->string, i);
            return -1;
        }
        t->shape[i] = (int64_t)d->valuedouble;
        if (t->shape[i] != 0 && numel > UINT64_MAX / 16 / (uint64_t)t->shape[i]) {
            snprintf(err, err_size, "%s: tensor %s: shape too large", path, e->string);
            return -1;
        }
        numel *= (uint64_t)t->shape[i];
    }
    t->numel = numel;
    double b = cJSON_GetArrayItem(offs, 0)->valuedouble, en = cJSON_GetArrayItem(offs, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(offs, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(offs, 1)) || b < 0 || en < b ||
        en > (double)data_size || b != (double)(uint64_t)b || en != (double)(uint64_t)en) {
        snprintf(err, err_size, "%s: tensor %s: data_offsets [%.0f, %.0f] outside the data area of %llu bytes (truncated file?)",
                 path, e->string, b, en, (unsigned long long)data_size);
        return -1;
    }
    uint64_t ub = (uint64_t)b, ue = (uint64_t)en;
    if (ue - ub != numel * elsize) {
        snprintf(err, err_size, "%s: tensor %s: %llu data bytes for %llu elements of %s", path, e->string,
                 (unsigned long long)(ue - ub), (unsigned long long)numel, t->dtype_name);
        return -1;
    }
    t->data = data + ub;
    t->nbytes = ue - ub;
    return 0;
}

/* Validates the header of the file in f->map (f->size bytes) and fills f->tensors; `path` names
 * it in messages. On failure the caller closes f. */
static int parse_file(const char *path, sg_st_file_t *f, char *err, size_t err_size)
{
    if (f->size < 10) {
        snprintf(err, err_size, "%s: too short for a safetensors file (%zu bytes)", path, f->size);
        return -1;
    }
    const unsigned char *p = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
        n = (n << 8) | p[i];
    if (n < 2 || n > MAX_HEADER || n > f->size - 8) {
        snprintf(err, err_size, "%s: bad safetensors header length %llu for a %zu-byte file", path, (unsigned long long)n, f->size);
        return -1;
    }
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; ++i)
        h = (h ^ p[8 + i]) * 1099511628211ull;
    f->header_hash = h;
    cJSON *root = cJSON_ParseWithLength((const char *)p + 8, (size_t)n);
    if (!cJSON_IsObject(root)) {
        snprintf(err, err_size, "%s: the safetensors header is not a JSON object", path);
        cJSON_Delete(root);
        return -1;
    }
    const unsigned char *data = p + 8 + n;
    uint64_t data_size = f->size - 8 - n;
    size_t count = (size_t)cJSON_GetArraySize(root);
    f->tensors = calloc(count + 1, sizeof(*f->tensors));
    if (f->tensors == NULL) {
        snprintf(err, err_size, "%s: out of memory", path);
        cJSON_Delete(root);
        return -1;
    }
    for (const cJSON *e = root->child; e != NULL; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        sg_st_tensor_t *t = &f->tensors[f->n_tensors];
        if (parse_entry(path, e, data, data_size, t, err, err_size) != 0) {
            cJSON_Delete(root);
            return -1;
        }
        t->name = strdup(e->string);
        if (t->name == NULL)
            abort();
        f->n_tensors++;
    }
    cJSON_Delete(root);
    return 0;
}

int sg_st_open(const char *path, sg_st_file_t *f, char *err, size_t err_size)
{
    memset(f, 0, sizeof(*f));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, err_size, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (st.st_size < 10) {
        snprintf(err, err_size, "%s: too short for a safetensors file (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return -1;
    }
    f->size = (size_t)st.st_size;
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        snprintf(err, err_size, "%s: mmap failed: %s", path, strerror(errno));
        return -1;
    }
    if (parse_file(path, f, err, err_size) != 0) {
        sg_st_close(f);
        return -1;
    }
    return 0;
}

int sg_st_open_buffer(const void *data, size_t size, const char *name, sg_st_file_t *f, char *err, size_t err_size)
{
    memset(f, 0, sizeof(*f));
    f->map = (void *)(uintptr_t)data;
    f->size = size;
    f->borrowed = 1;
    if (parse_file(name, f, err, err_size) != 0) {
        sg_st_close(f);
        return -1;
    }
    return 0;
}

const sg_st_tensor_t *sg_st_find(const sg_st_file_t *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; ++i)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

float sg_st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            mant &= 0x3ffu;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (mant << 13);
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float out;
    memcpy(&out, &bits, sizeof(out));
    return out;
}

float sg_st_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, sizeof(out));
    return out;
}

const float *sg_st_as_f32(const sg_st_tensor_t *t, float **owned, char *err, size_t err_size)
{
    *owned = NULL;
    if (t->dtype == SG_ST_F32 && ((uintptr_t)t->data % sizeof(float)) == 0)
        return (const float *)(const void *)t->data;
    if (t->dtype != SG_ST_F32 && t->dtype != SG_ST_F16 && t->dtype != SG_ST_BF16) {
        snprintf(err, err_size, "tensor %s: dtype %s is not supported (F32, F16 and BF16 are)", t->name, t->dtype_name);
        return NULL;
    }
    float *out = malloc(t->numel * sizeof(float) + 1);
    if (out == NULL) {
        snprintf(err, err_size, "tensor %s: out of memory converting %llu elements", t->name, (unsigned long long)t->numel);
        return NULL;
    }
    if (t->dtype == SG_ST_F32) {
        memcpy(out, t->data, t->numel * sizeof(float));
    } else {
        for (uint64_t i = 0; i < t->numel; ++i) {
            uint16_t v = (uint16_t)(t->data[2 * i] | (t->data[2 * i + 1] << 8));
            out[i] = t->dtype == SG_ST_F16 ? sg_st_f16_to_f32(v) : sg_st_bf16_to_f32(v);
        }
    }
    *owned = out;
    return out;
}
