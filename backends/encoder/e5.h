/*
 * e5.h -- the e5 query encoder as a library (static, PIC: target `sg_e5`), shared by the local
 * dense backend, the Qdrant backend and the tools. A BERT model read straight from a Hugging
 * Face folder (config.json, vocab.txt, model.safetensors), uncased WordPiece tokenisation
 * exactly as BertTokenizer, forward pass on OpenBLAS, mean pooling over the attention mask and
 * L2 normalisation (docs/protocols.md, "e5 query encoding").
 *
 * Thread-safety: a loaded model is read-only and may be shared by any number of threads; each
 * thread encodes with its own workspace.
 */
#ifndef SG_E5_H
#define SG_E5_H

#include "sg_par.h"
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_e5_model sg_e5_model;
typedef struct sg_e5_workspace sg_e5_workspace;

/** Loads `dir`; on failure returns -1 with a message naming the file/tensor/key in `err`. */
int sg_e5_load(const char *dir, sg_e5_model **out, char *err, size_t err_size);
void sg_e5_free(sg_e5_model *m);
/** Embedding dimension (hidden size from config.json). */
int sg_e5_dim(const sg_e5_model *m);
/** A short identity of the model files (for cache keys), e.g. size+mtime+hash of the header. */
const char *sg_e5_identity(const sg_e5_model *m);

/**
 * Token ids of `prefix` + `text` (e.g. "query: "), with [CLS]/[SEP], truncated to `max_len`
 * (special tokens included). Writes at most `max_len` ids; returns the count, or -1 on error.
 */
int sg_e5_tokenize(const sg_e5_model *m, const char *prefix, const char *text, size_t len, uint32_t max_len, int32_t *ids);

sg_e5_workspace *sg_e5_workspace_new(const sg_e5_model *m);
void sg_e5_workspace_free(sg_e5_workspace *w);
enum { SG_E5_FP32 = 0, SG_E5_BF16 = 1, SG_E5_INT8 = 2 };
/**
 * Runs the linear layers (95% of the work) with bfloat16 weights and inputs and float32
 * accumulation, through oneDNN (libdnnl.so.2, loaded now) on a CPU with AVX512_BF16 or AMX; the
 * rest stays float32. oneDNN is checked on a small product first. Changes sg_e5_identity (cache
 * keys). Returns 0, or -1 with `err` saying why bf16 cannot run here.
 */
int sg_e5_set_precision(sg_e5_model *m, int precision, char *err, size_t err_size);
int sg_e5_precision(const sg_e5_model *m);
/** sg_e5_set_int8's `kern` for oneDNN's int8 GEMM (dnnl_gemm_u8s8s32; VNNI or AMX CPUs). */
#define SG_E5_INT8_ONEDNN (-2)
/**
 * precision int8 (SG_E5_INT8 through sg_e5_set_precision takes the best kernel for the CPU):
 * per output channel symmetric int8 weights (quantised now, 1 byte a weight), per token int8
 * activations, int32 sums, float32 outside the linear layers (kern.h). Each layer's input is first
 * centred on its mean over a float32 pass of built-in calibration texts (run now, once per model:
 * W mu goes into the bias through the float32 weights) and rotated in blocks of 64, the weights
 * alike (kern.h), which leaves the product exact and the quantised part small. `kern` is an int8
 * kernel of kern.h (SG_KERN_VNNI, SG_KERN_AVX2, SG_KERN_SCALAR) or SG_E5_INT8_ONEDNN (checked on a
 * small product first: oneDNN's kernels saturate on CPUs without VNNI); `bits` 8, or 7 for weights
 * of |q| <= 63 (what makes AVX2 without VNNI fast: kern.h). Every kernel computes the same int32
 * sums for the same weights. Adds ".int8cr" (".int8w7cr" for 7 bits) to sg_e5_identity. Returns 0,
 * or -1 with `err` set.
 */
int sg_e5_set_int8(sg_e5_model *m, int kern, int bits, char *err, size_t err_size);
/**
 * The text put before each of int8's calibration texts (default "query: "): the route's query
 * prefix, so that the centres see the tokens every query starts with. Copied. Call it before
 * sg_e5_set_int8 (the centres are computed once, at the first). Returns 0, or -1 when out of memory.
 */
int sg_e5_set_calibration_prefix(sg_e5_model *m, const char *prefix);
/**
 * Runs the float32 linear layers through the library's own kernels (kern.h: SG_KERN_AVX512,
 * SG_KERN_AVX2 or SG_KERN_SCALAR) over weights packed now (a copy: 4 bytes a weight), with the
 * bias, GELU and LayerNorm fused into the products; any team split gives the same bits. Returns
 * 0, or -1 with `err` set (a kernel this CPU cannot run, out of memory).
 */
int sg_e5_use_kernels(sg_e5_model *m, int kern, char *err, size_t err_size);
/** The kern.h kernel set of the linear layers (SG_E5_INT8_ONEDNN; SG_KERN_NONE: a BLAS runs them). */
int sg_e5_kernel(const sg_e5_model *m);
/** The SG_CPU_* features the model's kernels were chosen from (SG_CPU_FEATURES applied; lib/blas.h). */
uint32_t sg_e5_features(const sg_e5_model *m);
/** What runs the linear layers, in words for a log line, e.g. "int8, own avx512-vnni kernels ...". */
const char *sg_e5_engine(const sg_e5_model *m, char *buf, size_t size);
/**
 * Runs the float32 linear layers through oneDNN's dnnl_sgemm instead of OpenBLAS (or the own
 * kernels; docs/backends/local.md). Returns 0, or -1 with `err` set (no oneDNN).
 */
int sg_e5_use_onednn(sg_e5_model *m, char *err, size_t err_size);
/**
 * Lets the next encode calls on `w` split each layer's work over `par`'s threads (NULL: this
 * thread only). The embeddings agree either way to within float rounding (about 1e-7).
 */
void sg_e5_workspace_set_par(sg_e5_workspace *w, sg_par_t *par);
/** Tokens `w` has run through the layers since it was made (no padding is ever computed). */
uint64_t sg_e5_workspace_tokens(const sg_e5_workspace *w);

/** The steps of an encode call, each timed on the calling thread (a step split over a team: from
 * its start until its last task returned). SG_E5_STEP_O and SG_E5_STEP_OUT include their
 * residual + LayerNorm; SG_E5_STEP_INTER its GELU. */
enum {
    SG_E5_STEP_TOKENIZE,
    SG_E5_STEP_EMBED,
    SG_E5_STEP_QKV,
    SG_E5_STEP_ATTENTION,
    SG_E5_STEP_O,
    SG_E5_STEP_INTER,
    SG_E5_STEP_OUT,
    SG_E5_STEP_POOL,
    SG_E5_STEPS
};
/** "tokenize", "embed", "qkv", "attention", "o", "inter", "out", "pool" */
const char *sg_e5_step_name(int step);
/** Nanoseconds `w` has spent in each step since it was made, into ns[SG_E5_STEPS]. */
void sg_e5_workspace_step_ns(const sg_e5_workspace *w, uint64_t ns[SG_E5_STEPS]);

/**
 * Encodes `n` texts (each prefixed with `prefix`, tokenised with `max_len`, padded to the longest
 * in the batch) into `out` (n * dim floats, L2-normalised). Returns 0, or -1 with `err` set.
 */
int sg_e5_encode(const sg_e5_model *m, sg_e5_workspace *w, const char *prefix, const char *const *texts, const size_t *lens,
                 size_t n, uint32_t max_len, float *out, char *err, size_t err_size);

/* ---- additions for the local backend, the tools and the CUDA encoder ---- */

/** The architecture as read from config.json. */
typedef struct sg_e5_config {
    int hidden, layers, heads, intermediate, vocab, max_positions, type_vocab;
    double ln_eps;
} sg_e5_config;

const sg_e5_config *sg_e5_get_config(const sg_e5_model *m);
/** `max_len` capped to the model's max_position_embeddings. */
uint32_t sg_e5_max_length(const sg_e5_model *m, uint32_t max_len);

/**
 * Float32 views of the weights (valid until sg_e5_free), for other forward implementations
 * (the CUDA encoder). Linear weights are [out, in] row-major as torch stores them.
 */
typedef struct sg_e5_embedding_weights {
    const float *word, *position, *token_type, *ln_gamma, *ln_beta;
} sg_e5_embedding_weights;
typedef struct sg_e5_layer_weights {
    const float *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *attn_out_w, *attn_out_b, *attn_ln_gamma, *attn_ln_beta;
    const float *inter_w, *inter_b, *out_w, *out_b, *out_ln_gamma, *out_ln_beta;
} sg_e5_layer_weights;
void sg_e5_get_embedding_weights(const sg_e5_model *m, sg_e5_embedding_weights *out);
/** Returns -1 when `layer` is out of range. */
int sg_e5_get_layer_weights(const sg_e5_model *m, int layer, sg_e5_layer_weights *out);

/**
 * Encodes already tokenised sequences (`ids[i]` has `lens[i]` ids, [CLS]/[SEP] included, at most
 * max_position_embeddings) into `out` (n * dim floats). Same maths as sg_e5_encode.
 */
int sg_e5_encode_ids(sg_e5_workspace *w, const int32_t *const *ids, const uint32_t *lens, size_t n, float *out, char *err,
                     size_t err_size);

#ifdef __cplusplus
}
#endif
#endif
