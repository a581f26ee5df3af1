/*
 * e5_internal.h -- helpers of the sg_e5 library that the local backend and its tools share
 * (not part of the encoder API in e5.h).
 */
#ifndef SG_LOCAL_E5_INTERNAL_H
#define SG_LOCAL_E5_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** A fast 64-bit hash of `n` bytes, chained through `h` (not cryptographic). */
uint64_t sg__e5_hash(uint64_t h, const void *data, size_t n);
/** Reads `fp` to its end into a malloc()ed buffer (NULL when empty); the caller checks ferror(fp). */
char *sg__e5_read_stream(FILE *fp, size_t *len);
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

/** precision int8's schemes (e5.c, kern.h): each product's input centred on its calibrated mean;
 * inputs and weights rotated in blocks of 64; the FFN output product's input in two int8 terms. */
enum { SG__E5_Q8_CENTRE = 1, SG__E5_Q8_ROTATE = 2, SG__E5_Q8_SPLIT_OUT = 4 };
/** What sg_e5_set_int8 runs. */
#define SG__E5_Q8_DEFAULT (SG__E5_Q8_CENTRE | SG__E5_Q8_ROTATE)
/**
 * sg_e5_set_int8 with another scheme (SG__E5_Q8_*; 0: plain per-channel weights and per-token
 * activations), for studies and benchmarks. The identity suffix names the scheme: .int8, w7 for
 * 7-bit weights, then c, r and s for its parts.
 */
int sg__e5_set_int8_scheme(sg_e5_model *m, int kern, int bits, unsigned scheme, char *err, size_t err_size);
/**
 * precision int8's calibration (e5.c): the texts whose float32 pass gives every product's centre,
 * encoded as queries (the calibration prefix first, at most 128 tokens). Returns the array
 * (static), count in *n.
 */
const char *const *sg__e5_calib_texts(size_t *n);
/**
 * The centre of layer `layer`'s product `which` (0: Q, K and V; 1: attention output; 2:
 * intermediate; 3: output) as int8 uses it (hidden floats, intermediate for 3), or NULL before
 * sg_e5_set_int8.
 */
const float *sg__e5_int8_centre(const sg_e5_model *m, int layer, int which);

/* ---- the BERT core for other heads (the cross-encoder, xenc.c) ---- */

typedef struct sg_e5_workspace sg_e5_workspace;
enum { SG__E5_HEAD_MEAN = 0, SG__E5_HEAD_POOLER = 1 };
/**
 * Runs the BERT layers over `n` sequences packed back to back in `ids` (lens[i] ids each, 1 to
 * max_position_embeddings, every id and type already checked by the caller), with token types
 * `types` (one per id; NULL: all 0), in passes of a bounded number of tokens, and writes `hidden`
 * floats per sequence to out[i * hidden]: with SG__E5_HEAD_MEAN the e5 embedding (what
 * sg_e5_encode_ids gives), with SG__E5_HEAD_POOLER BertPooler's tanh(dense(first token)) (after
 * sg__e5_load_pooler). Returns 0, or -1 when out of memory or the pooler is not loaded.
 */
int sg__e5_forward(sg_e5_workspace *w, const int32_t *ids, const uint8_t *types, const uint32_t *lens, size_t n, int head,
                   float *out);
/** Loads `[bert.]pooler.dense.{weight,bias}` (idempotent). Returns 0, or -1 with `err` set. */
int sg__e5_load_pooler(sg_e5_model *m, char *err, size_t err_size);
/**
 * Another tensor of the model's model.safetensors by its full name, checked to be [d0] (ndim 1) or
 * [d0, d1] (ndim 2), as float32 (valid until sg_e5_free). NULL with `err` set when missing or of
 * another shape.
 */
const float *sg__e5_tensor(sg_e5_model *m, const char *name, int ndim, int64_t d0, int64_t d1, char *err, size_t err_size);
typedef struct st_sg_wp_t sg_wp_t;
/** The model's WordPiece vocabulary (valid until sg_e5_free). */
const sg_wp_t *sg__e5_wordpiece(const sg_e5_model *m);
/** "bert." when the BertModel tensors are named so (a *ForSequenceClassification checkpoint), else "". */
const char *sg__e5_prefix(const sg_e5_model *m);

#endif
