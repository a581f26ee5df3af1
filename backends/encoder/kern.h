/*
 * kern.h -- the encoder's own compute kernels (part of the sg_e5 library): matrix products over
 * weights packed once at load, in float32 and in int8, with the bias and GELU applied in their
 * epilogue, and fused attention for one (sequence, head).
 *
 * Products: y[r, j] = epilogue(x[r, :] . W[j, :]) for rows r of the input and output columns j of a
 * linear layer (W is [out, in] as torch stores it). The weights are packed in panels of 16 output
 * columns: float32 [panel][k][16], int8 [panel][k / 4][16][4] (four consecutive k of one column
 * next to each other: what VNNI's dot products of four bytes read). A product is computed in tiles
 * of rows x panels; any split of a product into tiles gives the same bits (every output is one
 * sum in k order), so a team may cut it any way it likes and one packed copy serves every thread.
 *
 * int8: per output channel symmetric weights (q = round(w * 127 / max|w_j|), |q| <= 127), per row
 * (token) symmetric activations quantised when the layer runs, exact int32 accumulation, float32
 * epilogue y = (acc * s_w[j]) * s_x[r] + b[j] (one fused multiply-add). Every int8 kernel computes
 * the same int32 sums -- no kernel saturates:
 *   - AVX512-VNNI: vpdpbusd takes unsigned x bytes, so x is stored as q + 128 and the column sums
 *     128 * sum_k q_w[j, k] are subtracted (exact in int32);
 *   - AVX2: vpmaddubsw on |q_x| (<= 127) and sign(q_w, q_x): a pair of products is at most
 *     2 * 127 * 127 = 32258 < 32767, so the 16-bit sums cannot saturate (u8 x s8 with 8-bit
 *     weights could: 2 * 255 * 127); then vpmaddwd to int32. With 7-bit weights (|q_w| <= 63,
 *     packed with bits 7) the sign step goes: q_x + 128 times q_w directly, 2 * 255 * 63 = 32130,
 *     the column sums subtracted after as for VNNI -- three instructions per 32 products instead
 *     of four, for half the weight resolution;
 *   - scalar C, and oneDNN's dnnl_gemm_u8s8s32 (called by e5.c, which applies
 *     sg_kern_q8_epilogue to its int32 results).
 * Before its input is quantised a layer may take it centred and rotated (e5.c does, by default):
 * c = x - mu for a centre mu whose W mu was added to the bias at packing (so only c meets the
 * quantised weights), then per block of SG_KERN_ROT (64) values c' = H D c / 8, D random signs
 * (-1 where bit 0 of murmur3's 32-bit finaliser of the position in the row is set), H the
 * Hadamard matrix in Sylvester's order applied as butterflies h = 1, 2, 4 ... 32, each pair (j,
 * j + h) becoming (a + b, a - b) in float32, in that order on every kernel; each weight row is
 * rotated the same way before it is quantised, so W c = (W D H / 8)(H D c / 8) exactly. This
 * spreads heavy tails and outlier channels over the block before the per-row scale is taken. An
 * input may also be split into two terms (sg_kern_q8_quantize with qx2): the rest c' - q s,
 * quantised again, as a second product added to the first.
 *
 * Thread-safety: packed weights are read-only once packed; every other call works on memory the
 * caller owns.
 */
#ifndef SG_ENCODER_KERN_H
#define SG_ENCODER_KERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel sets, from the least to the most capable. */
enum {
    SG_KERN_NONE = -1,  /* float32: no own kernel (the products go to a BLAS) */
    SG_KERN_SCALAR = 0, /* plain C */
    SG_KERN_AVX2 = 1,   /* AVX2 + FMA */
    SG_KERN_AVX512 = 2, /* AVX-512 F (+ BW for int8 quantisation) */
    SG_KERN_VNNI = 3    /* int8: AVX-512 F, BW and VNNI */
};

/** The width of a panel: output columns per packed block. */
#define SG_KERN_PANEL 16
/** The int8 rotation's block: inputs (and weight rows) rotated in blocks of this many (see above). */
#define SG_KERN_ROT 64
/** The longest rows sg_kern_q8_quantize splits into two terms. */
#define SG_KERN_Q8_SPLIT_MAX 4096
/** sg_kern_q8_tile / sg_kern_q8_epilogue flags: GELU after the epilogue; ADD: y's current values in
 * place of the bias (the second term of a split input). */
enum { SG_KERN_Q8_GELU = 1, SG_KERN_Q8_ADD = 2 };

/** "scalar", "avx2", "avx512", "avx512-vnni" ("blas" for SG_KERN_NONE). */
const char *sg_kern_name(int kern);
/** The best float32 kernel for these SG_CPU_* features (lib/blas.h): SG_KERN_NONE without AVX2 + FMA. */
int sg_kern_f32_best(uint32_t features);
/** The best int8 kernel for these features: VNNI, AVX2 or SCALAR. */
int sg_kern_q8_best(uint32_t features);
/** Whether `kern` can run with these features (int8 = 1: the int8 meaning of SG_KERN_AVX512/VNNI). */
int sg_kern_runs(int kern, int int8, uint32_t features);

/* ---- float32 ---- */

/** Packed float32 weights of a linear layer (or of several stacked, e.g. Q, K and V). */
typedef struct st_sg_kern_f32w_t {
    int n, k, np; /* output columns, inputs, panels (n rounded up to 16, / 16) */
    float *w;     /* [np][k][16], 64-byte aligned */
    float *b;     /* [np * 16]: the bias, zero past n */
} sg_kern_f32w_t;

/**
 * Packs `parts` weight matrices w[i] ([n[i], k] row-major) and their biases b[i] (NULL: 0) one
 * after another into one layer of sum(n) outputs. Returns 0, or -1 when out of memory.
 */
int sg_kern_f32_pack(sg_kern_f32w_t *pw, int parts, const float *const *w, const float *const *b, const int *n, int k);
void sg_kern_f32_free(sg_kern_f32w_t *pw);

/**
 * y[r, 16 p0 ...] for rows r0 <= r < r1 and panels p0 <= p < p1 (columns past pw->n are not
 * written): y = x . W^T + b, then GELU when `gelu`. x and y point at row 0 (row strides ldx, ldy).
 */
void sg_kern_f32_tile(int kern, const sg_kern_f32w_t *pw, const float *x, size_t ldx, size_t r0, size_t r1, int p0, int p1,
                      float *y, size_t ldy, int gelu);

/* ---- int8 ---- */

/** Quantised weights of a linear layer (or of several stacked). */
typedef struct st_sg_kern_q8w_t {
    int n, k, kp, np; /* outputs, inputs, inputs rounded up to 4, panels */
    int bits;         /* 8: |q| <= 127; 7: |q| <= 63 (AVX2 without VNNI, see above) */
    int8_t *w;        /* [np][kp / 4][16][4], 64-byte aligned */
    int8_t *rows;     /* [n][kp] row-major (oneDNN's layout), only after sg_kern_q8_keep_rows */
    float *scale;     /* [np * 16]: w[j, k] ~ q[j, k] * scale[j] */
    int32_t *comp;    /* [np * 16]: 128 * sum_k q[j, k] */
    float *b;         /* [np * 16]: the bias, plus W mu when centred */
    float *mu;        /* [kp] or NULL: the centre subtracted from every input row before it is quantised */
    float *sign;      /* [k] or NULL: the rotation's D (+1 / -1), when inputs and weights are rotated */
} sg_kern_q8w_t;

/**
 * Like sg_kern_f32_pack, quantising each output channel to `bits` (8 or 7) bits: scale =
 * max|w_j| / 127 (or 63), q = round(w / scale) to nearest even. With a centre `mu` (k floats, copied;
 * NULL: none) the layer computes y = W_q (x - mu) + (W mu + b): W mu is added to the bias here, in
 * double over the float32 weights, so only the centred input meets the quantised weights. With
 * `rotate` (and k a multiple of SG_KERN_ROT) each weight row is rotated as the inputs will be
 * before it is quantised. sg_kern_q8_quantize with this qw prepares the inputs to match. Returns
 * 0, or -1 when out of memory.
 */
int sg_kern_q8_pack(sg_kern_q8w_t *qw, int parts, const float *const *w, const float *const *b, const int *n, int k, int bits,
                    const float *mu, int rotate);
/** Also keeps the weights row-major ([n][kp]) for oneDNN. Returns 0, or -1 when out of memory. */
int sg_kern_q8_keep_rows(sg_kern_q8w_t *qw);
void sg_kern_q8_free(sg_kern_q8w_t *qw);
/** The quantised weight q[j, kk] (reads the packed layout; for references and tests). */
int sg_kern_q8_weight(const sg_kern_q8w_t *qw, int j, int kk);

/** Quantised activations: rows of kp bytes (zero past k). */
typedef struct st_sg_kern_q8x_t {
    size_t cap_rows, cap_bytes;
    int kp;       /* the current rows' length: k rounded up to 4 */
    uint8_t *u;   /* [rows][kp]: q + 128 (VNNI, oneDNN) */
    int8_t *s;    /* [rows][kp]: q (AVX2, scalar) */
    float *scale; /* [rows]: x[r, k] ~ q[r, k] * scale[r] */
} sg_kern_q8x_t;

/** Makes room for `rows` rows of `k` inputs (contents not kept). Returns 0, or -1 when out of memory. */
int sg_kern_q8x_reserve(sg_kern_q8x_t *qx, size_t rows, int k);
void sg_kern_q8x_free(sg_kern_q8x_t *qx);
/**
 * Quantises rows r0 <= r < r1 of x (k floats each, row stride ldx) as the product `qw` takes them
 * (NULL: neither centred nor rotated): c = x[r] - qw->mu (one float32 subtraction), rotated when
 * qw->sign is set, then scale = max|c| / 127, q = round(c / scale) to nearest even (0 for an
 * all-zero row). With `qx2` (k <= SG_KERN_Q8_SPLIT_MAX) the input is split into two terms: the
 * rest e = c - q * scale (one fused multiply-add) is quantised the same way into qx2's row r, so
 * that x ~ s1 q1 + s2 q2 carries about 15 bits; the product is then two tiles, the second with
 * SG_KERN_Q8_ADD. Every kernel gives the same bytes.
 */
void sg_kern_q8_quantize(int kern, const float *x, size_t ldx, int k, const sg_kern_q8w_t *qw, size_t r0, size_t r1,
                         sg_kern_q8x_t *qx, sg_kern_q8x_t *qx2);
/**
 * Like sg_kern_f32_tile, from quantised rows: y = (acc * s_w) * s_x + b, or with SG_KERN_Q8_ADD
 * y = (acc * s_w) * s_x + y (one fused multiply-add either way); then GELU with SG_KERN_Q8_GELU.
 */
void sg_kern_q8_tile(int kern, const sg_kern_q8w_t *qw, const sg_kern_q8x_t *qx, size_t r0, size_t r1, int p0, int p1, float *y,
                     size_t ldy, unsigned flags);
/**
 * The epilogue alone, for products computed elsewhere (oneDNN): the int32 sums of (q_x + 128) * q_w
 * for rows r0 <= r < r1 and columns j0 <= j < j1 are in acc (row stride ldacc), or with acc NULL
 * in y's own bytes (as dnnl_gemm_u8s8s32 writes them); y gets the float32 output, as
 * sg_kern_q8_tile gives it with the same flags.
 */
void sg_kern_q8_epilogue(const sg_kern_q8w_t *qw, const sg_kern_q8x_t *qx, size_t r0, size_t r1, int j0, int j1, const int32_t *acc,
                         size_t ldacc, float *y, size_t ldy, unsigned flags);

/* ---- elementwise and attention ---- */

/** GELU(x) = x/2 (1 + erf(x / sqrt 2)) over n floats (libmvec's vector erff with AVX2 / AVX-512). */
void sg_kern_gelu(int kern, float *x, size_t n);

/** Floats of scratch sg_kern_attention needs for a sequence of `ls` tokens and head size `dh`. */
size_t sg_kern_attention_scratch(int ls, int dh);
/**
 * One head of self-attention over one sequence of `ls` tokens: ctx[a] = softmax_b(scale q[a] .
 * k[b]) v[b] for a < ls, with q, k, v rows `ld` floats apart and ctx rows `ldc` apart (dh floats
 * each), in registers and `scratch` (sg_kern_attention_scratch floats) -- no matrix-product call.
 * `kern` SG_KERN_SCALAR runs plain C.
 */
void sg_kern_attention(int kern, const float *q, const float *k, const float *v, size_t ld, int ls, int dh, float scale, float *ctx,
                       size_t ldc, float *scratch);

#ifdef __cplusplus
}
#endif
#endif
