/*
 * gpuhost.h -- the host-side half of the GPU path of the local backend (static library
 * `sg_gpu_host`, plain C, built with or without CUDA): everything about GPU search and encoding
 * that does not need a GPU, so that it is unit-tested on any machine and shared by the CUDA
 * module (sg_local_cuda.so) and the local plugin.
 *
 *   - the FAISS IndexFlat file reader (docs/protocols.md, "Corpus and index files"; the vectors start at the unaligned
 *     offset 45), over mmap;
 *   - the shard planner (contiguous, equal row ranges, as faiss index_cpu_to_all_gpus shard=True);
 *   - the memory plans: every device buffer the module allocates for a flat-index shard or an
 *     encoder, computed before anything is allocated so a too-small GPU fails with a clear message;
 *   - the k-way merge of per-shard top-k lists and the exact fp32 re-scoring of candidates;
 *   - IEEE fp16 conversion (round to nearest even).
 *
 * Thread-safety: all functions are reentrant; an open sg_gpu_flatfile_t is read-only and may be
 * read from any number of threads.
 */
#ifndef SG_CUDA_GPUHOST_H
#define SG_CUDA_GPUHOST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SG_GPU_IP = 0, SG_GPU_L2 = 1 };

/** Largest k one GPU search returns per query (FAISS's GPU limit is 2048). */
#define SG_GPU_MAX_K 1024
/** Largest number of queries of one GPU search call (larger calls are split by the caller). */
#define SG_GPU_MAX_QUERIES 4096
/** Score entries one top-k block reduces (level 1 and later levels). */
#define SG_GPU_SELECT_CHUNK 32768
/** Rows of fp32 vectors staged per host-to-device copy while uploading an index. */
#define SG_GPU_STAGE_BYTES ((uint64_t)64 << 20)

/* ---- fp16 ---- */

/** IEEE 754 binary16 of `f`, rounded to nearest even (overflow gives infinity; NaN stays NaN). */
/**
 * The random unit vectors flat.cu's random_rows kernel writes on the GPU (rows `first` ..
 * `first + n - 1` of dimension `d`, seeded by `seed`), computed on the host in float32 into `x`:
 * the CPU peer of the GPU tests and benchmark searches the same vectors.
 */
void sg_gpu_random_rows(uint64_t seed, int64_t first, int64_t n, int d, float *x);
uint16_t sg_gpu_f32_to_f16(float f);
/** The exact float value of a binary16. */
float sg_gpu_f16_to_f32(uint16_t h);
/** Converts `n` floats. */
void sg_gpu_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);

/* ---- the FAISS IndexFlat file ---- */

typedef struct st_sg_gpu_flatfile_t {
    char fourcc[5];       /* "IxFI" (inner product), "IxF2" (L2) or "IxFl" (metric in the header) */
    int dim;              /* d */
    int64_t ntotal;       /* vectors */
    int metric;           /* SG_GPU_IP or SG_GPU_L2 */
    uint64_t data_offset; /* where row 0 starts: 45 (49 when the header carries a metric_arg) */
    uint64_t file_size;
    const unsigned char *map; /* the whole file, read-only */
    size_t map_len;
} sg_gpu_flatfile_t;

/**
 * Reads the first 4 bytes of `path` into `fourcc` (NUL-terminated, '?' for unprintable bytes).
 * Returns 1 when they name a FAISS IndexFlat ("IxFI", "IxF2", "IxFl"), 0 when not, -1 with `err`
 * set when the file cannot be read.
 */
int sg_gpu_flat_is_flat(const char *path, char fourcc[5], char *err, size_t err_size);
/**
 * Opens and checks a FAISS IndexFlat file: fourcc, header fields, and that the file size is
 * exactly what the header describes. Only inner-product and L2 indexes are accepted. Returns 0,
 * or -1 with a message naming the file in `err`.
 */
int sg_gpu_flat_open(const char *path, sg_gpu_flatfile_t *ff, char *err, size_t err_size);
/** Copies rows [row0, row0 + n) as floats into `dst` (any alignment of the file's data is fine). */
void sg_gpu_flat_rows(const sg_gpu_flatfile_t *ff, int64_t row0, int64_t n, float *dst);
/** Pointer to row `row` inside the map: NOT float-aligned in general; memcpy from it. */
const unsigned char *sg_gpu_flat_row_bytes(const sg_gpu_flatfile_t *ff, int64_t row);
/** Hints the kernel how the map will be read: sequential (1) while uploading, random (0) after. */
void sg_gpu_flat_advise(const sg_gpu_flatfile_t *ff, int sequential);
void sg_gpu_flat_close(sg_gpu_flatfile_t *ff);

/* ---- shards ---- */

/**
 * Splits `rows` rows into `n` contiguous shards of equal size (the first `rows % n` shards get one
 * row more): shard i covers [start[i], start[i] + count[i]). Returns 0, or -1 when n < 1.
 */
int sg_gpu_plan_shards(int64_t rows, int n, int64_t *start, int64_t *count);

/* ---- memory plans ---- */

/** What one GPU holds for one shard of a flat index, and how a search of it is laid out. */
typedef struct st_sg_gpu_flat_plan_t {
    /* inputs */
    int64_t rows;          /* vectors in this shard */
    int dim;               /* d */
    int metric;            /* SG_GPU_IP or SG_GPU_L2 */
    uint32_t max_queries;  /* most queries per search call, 1 .. SG_GPU_MAX_QUERIES */
    uint32_t max_k;        /* largest k, 1 .. SG_GPU_MAX_K */
    uint64_t score_budget; /* bytes for the fp32 score tile (queries x rows) */
    /* derived */
    int64_t tile;          /* rows per GEMM tile when max_queries queries are searched */
    int64_t score_entries; /* floats of the score buffer: max_queries * tile */
    int64_t cand_entries;  /* (key, label) entries of each of the two candidate buffers */
    int64_t stage_rows;    /* rows per upload copy */
    /* bytes on the device */
    uint64_t vec_bytes, norm_bytes, score_bytes, query_bytes, cand_bytes, out_bytes, stage_bytes, total_bytes;
    /* pinned host bytes */
    uint64_t pinned_bytes;
} sg_gpu_flat_plan_t;

/** The row range one search works on: how a call of `nq` queries tiles the shard. */
typedef struct st_sg_gpu_flat_layout_t {
    int64_t tile;        /* rows per tile for this call */
    int64_t n_tiles;     /* ceil(rows / tile) */
    int64_t chunks_full; /* top-k blocks per query of a full tile */
    int64_t chunks_last; /* ... of the last tile */
    int64_t level1;      /* level-1 candidates per query: (chunks of all tiles) * k */
} sg_gpu_flat_layout_t;

/**
 * Fills the derived fields of `p` from its inputs. Returns 0, or -1 with `err` naming the bad
 * input (rows < 1 or a shard over 2^31 - 1 rows, dim < 1, max_k or max_queries out of range).
 */
int sg_gpu_flat_plan(sg_gpu_flat_plan_t *p, char *err, size_t err_size);
/** The layout of a search of `nq` (1 .. max_queries) queries with `k` (1 .. max_k). */
void sg_gpu_flat_layout(const sg_gpu_flat_plan_t *p, uint32_t nq, uint32_t k, sg_gpu_flat_layout_t *out);
/** Top-k blocks over `n` entries: ceil(n / SG_GPU_SELECT_CHUNK). */
int64_t sg_gpu_select_blocks(int64_t n);

/** The transformer's shape, as in sg_e5_config (kept separate so this header needs no e5.h). */
typedef struct st_sg_gpu_enc_shape_t {
    int hidden, layers, heads, intermediate, vocab, max_positions;
} sg_gpu_enc_shape_t;

/** What one GPU holds for the encoder: the weights once, and each workspace. */
typedef struct st_sg_gpu_enc_plan_t {
    sg_gpu_enc_shape_t shape;
    uint32_t max_len;    /* longest sequence in tokens ([CLS]/[SEP] included), <= max_positions */
    uint32_t max_tokens; /* padded tokens (sequences x longest) per forward pass, >= max_len */
    uint32_t max_seqs;   /* sequences per forward pass */
    uint64_t weight_bytes;
    uint64_t ws_bytes;     /* device bytes of one workspace */
    uint64_t pinned_bytes; /* pinned host bytes of one workspace */
} sg_gpu_enc_plan_t;

/** Fills the byte counts of `p` from its inputs. Returns 0, or -1 with `err` naming the bad input. */
int sg_gpu_enc_plan(sg_gpu_enc_plan_t *p, char *err, size_t err_size);

/**
 * Splits `n` sequences (lengths `lens`) into consecutive forward passes of at most `max_seqs`
 * sequences and at most `max_tokens` padded tokens (sequences x the pass's longest). Returns the
 * number of sequences of the pass starting at `first` (>= 1 while first < n), and its longest
 * length in `*longest`.
 */
size_t sg_gpu_enc_pass(const uint32_t *lens, size_t n, size_t first, uint32_t max_seqs, uint32_t max_tokens, uint32_t *longest);

/** The usable bytes of a GPU with `free_bytes` free: a reserve for the CUDA context and cuBLAS. */
uint64_t sg_gpu_usable(uint64_t free_bytes);

/** Writes "12.3 GiB" style sizes. */
const char *sg_gpu_fmt_bytes(uint64_t bytes, char *buf, size_t size);

/* ---- results ---- */

/**
 * Merges the top-k lists of `n_shards` shards for `nq` queries. Shard s holds keys[s][q * k + i]
 * (larger is better, best first) and shard-local labels[s][q * k + i] (-1 = none; such entries
 * come last); base[s] is the global label of its local row 0. Writes the best `k` of each query
 * to out_keys/out_labels (nq * k; missing entries: key -INFINITY, label -1). Equal keys are
 * ordered by global label, smallest first.
 */
void sg_gpu_merge(size_t n_shards, const float *const *keys, const int32_t *const *labels, const int64_t *base, size_t nq, int k,
                  float *out_keys, int64_t *out_labels);

/**
 * Converts merged keys to FAISS distances in place: inner product: unchanged; L2: the squared
 * distance |q|^2 - key (the key being 2 q.x - |x|^2). Missing entries get -FLT_MAX (IP) or
 * FLT_MAX (L2), as FAISS's flat search reports them.
 */
void sg_gpu_keys_to_dist(int metric, const float *queries, int dim, size_t nq, int k, const float *keys, const int64_t *labels,
                         float *dist);

/**
 * Exact fp32 re-scoring: for each query, reads the `kc` candidate rows (labels, -1 skipped) from
 * the flat file, computes the exact distance as FAISS does (inner product, or squared L2) and
 * keeps the best `k` (k <= kc), best first, ties by label. Writes nq * k to dist/labels (missing:
 * -1 and -FLT_MAX / FLT_MAX). `row` is scratch of `dim` floats.
 */
void sg_gpu_rescore(const sg_gpu_flatfile_t *ff, const float *queries, size_t nq, const int64_t *cand, int kc, int k, float *dist,
                    int64_t *labels, float *row);

#ifdef __cplusplus
}
#endif
#endif
