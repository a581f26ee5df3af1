/*
 * faiss_ext.h -- what the local backend needs from FAISS that the C API of FAISS 1.7.3 lacks, as a
 * small C++ shim (faiss_ext.cc) over FAISS's C++ API with C linkage:
 *
 *   - searching with per-call parameters (faiss::SearchParametersIVF / SearchParametersHNSW), so
 *     that calls with different nprobe / efSearch can run at the same time on one shared index
 *     (FAISS's ParameterSpace changes the index itself and is not safe during searches);
 *   - what kind of index a file holds (IVF, HNSW, Flat) and its search parameters, for the
 *     start-up log, config checks and `searchgate-index convert`;
 *   - turning off the per-search prefetch threads of memory-mapped inverted lists.
 *
 * Every function takes the FaissIndex * of the C API (a faiss::Index *). None throws: FAISS
 * exceptions become -1 with the message in `err`.
 */
#ifndef SG_LOCAL_FAISS_EXT_H
#define SG_LOCAL_FAISS_EXT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { SG_FEXT_OTHER = 0, SG_FEXT_FLAT = 1, SG_FEXT_IVF = 2, SG_FEXT_HNSW = 3 };

typedef struct st_sg_fext_info_t {
    int kind;            /* SG_FEXT_* (an IndexPreTransform is looked through) */
    int64_t nlist;       /* IVF: inverted lists */
    int nprobe;          /* IVF: the index's own nprobe */
    int lists_mapped;    /* IVF: 1 the inverted lists are memory-mapped (IO_FLAG_MMAP or on-disk lists); 0 in RAM;
                            -1 on-disk lists left unmapped (a file of OnDiskInvertedLists read with IO_FLAG_MMAP) */
    uint64_t list_bytes; /* IVF: bytes of codes + ids in the lists */
    size_t code_size;    /* IVF / SQ / PQ: bytes per vector code (0 when unknown) */
    int hnsw_m;          /* HNSW: neighbours per node on the upper levels (M) */
    int ef_search;       /* HNSW: the index's own efSearch */
    int ef_construction; /* HNSW */
    char storage[48];    /* HNSW: the storage ("Flat", "SQ", "PQ", "other"); IVF: the code kind ("Flat", "SQ", "PQ", "other") */
} sg_fext_info_t;

/** Describes `index`. Never fails. */
void sg_fext_info(const void *index, sg_fext_info_t *out);

/**
 * Searches like faiss_Index_search, with per-call parameters: `nprobe` (> 0: IVF indexes) and
 * `ef_search` (> 0: HNSW indexes); 0 means the index's own value. A parameter given for an index
 * of the other kind is an error. Thread-safe with other searches of the same index.
 *
 * FAISS 1.7.3 sizes HNSW's candidate queue from the index's own efSearch even when a call passes
 * another one; a call's efSearch above the index's own is therefore only fully honoured once the
 * index's own efSearch was raised to at least that value (sg_fext_set_ef_search).
 */
int sg_fext_search(const void *index, int64_t n, const float *x, int64_t k, float *dist, int64_t *labels, int nprobe, int ef_search,
                   char *err, size_t err_size);

/** Sets the index's own efSearch (HNSW) or nprobe (IVF). Returns -1 when the index has no such parameter. */
int sg_fext_set_ef_search(void *index, int ef_search);
int sg_fext_set_nprobe(void *index, int nprobe);

/**
 * Memory-mapped inverted lists (IO_FLAG_MMAP) start up to 32 threads on every search to touch
 * the pages of the lists about to be scanned, serialised by one mutex: with the file in the page
 * cache that is pure overhead, so the backend turns it off. Returns 1 when it was on, 0 otherwise.
 */
int sg_fext_disable_prefetch(void *index);

/**
 * index_factory turns on "polysemous training" for "PQ<m>" codes (unless written "PQ<m>np"): a
 * re-ordering of the PQ centroids that only serves polysemous Hamming filtering, which is never
 * used here, and that costs hours for 768-d vectors in Debian's generic libfaiss (software
 * popcount). This turns it off in an untrained IndexPQ / IndexIVFPQ (codes, search and file
 * format are those of standard PQ). Returns 1 when it was on, 0 otherwise.
 */
int sg_fext_skip_polysemous(void *index);

/** FAISS's IO_FLAG_MMAP (read IVF lists as a mapping of the file instead of copying them). */
int sg_fext_io_flag_mmap(void);

#ifdef __cplusplus
}
#endif
#endif
