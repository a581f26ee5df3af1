/*
 * fuzz_safetensors.c -- libFuzzer harness for the safetensors header reader of the e5 encoder
 * (backends/encoder/safetensors.c), through sg_st_open_buffer. Byte 0 picks the layout:
 * odd: the rest is the file as is; even: the rest is the JSON header up to the first NUL byte
 * and the data area after it (none without a NUL), and the harness writes the 8-byte header
 * length in front, so mutations reach the JSON. Checks: never crashes or leaks; a failure has
 * a message; a success lists tensors whose bytes lie inside the data area, whose byte count is
 * the element count times the dtype size and whose element count is the product of the shape;
 * each is found by name, and F32/F16/BF16 ones convert to floats (others are refused).
 */
#include "fuzz_util.h"
#include "safetensors.h"

static uint64_t elsize(const char *dtype)
{
    static const struct {
        const char *name;
        uint64_t size;
    } map[] = {{"F32", 4}, {"F16", 2},  {"BF16", 2}, {"F64", 8}, {"I64", 8}, {"I32", 4},     {"I16", 2},    {"I8", 1},
               {"U8", 1},  {"BOOL", 1}, {"U16", 2},  {"U32", 4}, {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); ++i)
        if (strcmp(dtype, map[i].name) == 0)
            return map[i].size;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    unsigned char *file;
    size_t fsize;
    if (data[0] & 1) {
        file = (unsigned char *)fuzz_copy(in, n);
        fsize = n;
    } else {
        const uint8_t *nul = memchr(in, 0, n);
        size_t hl = nul != NULL ? (size_t)(nul - in) : n;
        size_t dl = nul != NULL ? n - hl - 1 : 0;
        fsize = 8 + hl + dl;
        file = malloc(fsize);
        FUZZ_CHECK(file != NULL);
        for (int i = 0; i < 8; ++i)
            file[i] = (unsigned char)((uint64_t)hl >> (8 * i));
        memcpy(file + 8, in, hl);
        if (dl > 0)
            memcpy(file + 8 + hl, nul + 1, dl);
    }
    sg_st_file_t f;
    char err[512];
    err[0] = '\0';
    if (sg_st_open_buffer(file, fsize, "<fuzz>", &f, err, sizeof(err)) != 0) {
        FUZZ_CHECK(strncmp(err, "<fuzz>: ", 8) == 0);
        FUZZ_CHECK(f.tensors == NULL && f.n_tensors == 0);
        free(file);
        return 0;
    }
    FUZZ_CHECK(fsize >= 10);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; --i)
        hl = hl << 8 | file[i];
    FUZZ_CHECK(hl >= 2 && hl <= fsize - 8);
    const unsigned char *area = file + 8 + hl, *end = file + fsize;
    for (size_t i = 0; i < f.n_tensors; ++i) {
        const sg_st_tensor_t *t = &f.tensors[i];
        FUZZ_CHECK(t->name != NULL);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= SG_ST_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; ++d) {
            FUZZ_CHECK(t->shape[d] >= 0);
            numel *= (uint64_t)t->shape[d];
        }
        FUZZ_CHECK(numel == t->numel);
        uint64_t es = elsize(t->dtype_name);
        FUZZ_CHECK(es != 0 && t->nbytes == t->numel * es);
        FUZZ_CHECK(t->data >= area && t->data <= end && t->nbytes <= (uint64_t)(end - t->data));
        FUZZ_CHECK(t->dtype == (strcmp(t->dtype_name, "F32") == 0    ? SG_ST_F32
                                : strcmp(t->dtype_name, "F16") == 0  ? SG_ST_F16
                                : strcmp(t->dtype_name, "BF16") == 0 ? SG_ST_BF16
                                                                     : SG_ST_OTHER));
        const sg_st_tensor_t *found = sg_st_find(&f, t->name);
        FUZZ_CHECK(found != NULL && strcmp(found->name, t->name) == 0);
        float *owned;
        const float *v = sg_st_as_f32(t, &owned, err, sizeof(err));
        if (t->dtype == SG_ST_OTHER) {
            FUZZ_CHECK(v == NULL && owned == NULL);
        } else {
            FUZZ_CHECK(v != NULL);
            volatile float sink = 0;
            for (uint64_t k = 0; k < t->numel; ++k)
                sink += v[k];
            (void)sink;
            free(owned);
        }
    }
    sg_st_close(&f);
    free(file);
    return 0;
}
