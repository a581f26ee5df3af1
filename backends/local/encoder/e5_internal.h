/*
 * e5_internal.h -- helpers of the sg_e5 library that the local backend and its tools share
 * (not part of the encoder API in e5.h).
 */
#ifndef SG_LOCAL_E5_INTERNAL_H
#define SG_LOCAL_E5_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/** A fast 64-bit hash of `n` bytes, chained through `h` (not cryptographic). */
uint64_t sg__e5_hash(uint64_t h, const void *data, size_t n);
/**
 * A content fingerprint of a file that is cheap even for very large files: its size and a hash
 * of its first and last 64 KiB and of 64 blocks of 4 KiB spread evenly in between. Independent
 * of mtime and path, so replicas holding copies of the same file agree on it.
 */
int sg__e5_fingerprint(const char *path, uint64_t *size, uint64_t *hash, char *err, size_t err_size);

/**
 * precision bf16 computed without oneDNN: operands rounded to bfloat16, then multiplied by sgemm
 * in float32 -- the same numbers as a bf16 GEMM with float32 accumulation, on any CPU. For tests
 * of bf16's fidelity; slower than float32.
 */
typedef struct sg_e5_model sg_e5_model;
int sg__e5_set_bf16_reference(sg_e5_model *m, char *err, size_t err_size);

#endif
