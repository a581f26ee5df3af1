/*
 * safetensors.h -- a read-only view of a Hugging Face .safetensors file: the file is mmapped, the
 * JSON header is parsed with cJSON and checked (dtypes, shapes, offsets inside the data area), and
 * tensors are handed out as float32, converted from F16/BF16 where needed.
 *
 * Thread-safety: an open file is read-only; any number of threads may read tensors from it.
 */
#ifndef SG_LOCAL_SAFETENSORS_H
#define SG_LOCAL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

enum { SG_ST_F32 = 0, SG_ST_F16 = 1, SG_ST_BF16 = 2, SG_ST_OTHER = 3 };

#define SG_ST_MAX_DIMS 8

typedef struct st_sg_st_tensor_t {
    char *name;
    int dtype; /* SG_ST_* */
    char dtype_name[16];
    int ndim;
    int64_t shape[SG_ST_MAX_DIMS];
    uint64_t numel;
    const unsigned char *data; /* inside the mapping */
    uint64_t nbytes;
} sg_st_tensor_t;

typedef struct st_sg_st_file_t {
    void *map;
    size_t size;
    sg_st_tensor_t *tensors;
    size_t n_tensors;
    uint64_t header_hash; /* FNV-1a of the JSON header, for identities */
    int borrowed;         /* map is the caller's buffer (sg_st_open_buffer): never unmapped */
} sg_st_file_t;

/** Maps and validates `path`. Returns 0, or -1 with a message naming the file (and tensor) in `err`. */
int sg_st_open(const char *path, sg_st_file_t *f, char *err, size_t err_size);
/**
 * The same checks over `size` bytes at `data`, which the caller keeps alive and unchanged until
 * sg_st_close (nothing is copied); `name` stands for the file in messages. For data that is not
 * a file of its own, and for the fuzz target (tests/fuzz).
 */
int sg_st_open_buffer(const void *data, size_t size, const char *name, sg_st_file_t *f, char *err, size_t err_size);
void sg_st_close(sg_st_file_t *f);
/** The tensor called `name`, or NULL. */
const sg_st_tensor_t *sg_st_find(const sg_st_file_t *f, const char *name);
/**
 * Returns the tensor's values as float32: a pointer into the mapping when the tensor is F32 and
 * suitably aligned (`*owned` = NULL), else a malloc'ed converted copy (`*owned` = that pointer,
 * to be freed by the caller). NULL with `err` set for unsupported dtypes or out of memory.
 */
const float *sg_st_as_f32(const sg_st_tensor_t *t, float **owned, char *err, size_t err_size);
/** IEEE half and bfloat16 to float. */
float sg_st_f16_to_f32(uint16_t h);
float sg_st_bf16_to_f32(uint16_t h);

#endif
