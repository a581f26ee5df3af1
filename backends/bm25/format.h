/*
 * format.h -- the on-disk format of a bm25 index (format version 1). docs/backends/bm25.md has the
 * long form; this header is the reference.
 *
 * An index is a directory of five files. Each starts with the same 64-byte header and is followed
 * by its payload; all integers are little-endian.
 *
 *   bm25.meta      sg_bm25_meta_t: counts, default k1/b, the analyzer it was built with
 *   docs.bin       the DOC JSON objects served to clients, concatenated (no separators)
 *   docs.idx       sg_bm25_docent_t[n_docs]: where each DOC is, and its length in tokens
 *   terms.bin      u64 n_terms, sg_bm25_terment_t[n_terms + 1] (sorted by term bytes; the last
 *                  entry is a sentinel giving end offsets), then the term bytes
 *   postings.bin   per term, in term order: its postings, docs ascending, each a LEB128 varint
 *                  (delta << 1 | (tf == 1)) followed by varint(tf) when tf != 1; the first
 *                  delta of a list is the doc number itself
 *
 * Integrity: every header carries a CRC-32 of itself and of its payload, and the build id, a hash
 * of the meta payload and of the length and CRC of every other file's payload; a reader accepts
 * only files whose build id matches the meta file's, so files of two builds never mix.
 */
#ifndef SG_BM25_FORMAT_H
#define SG_BM25_FORMAT_H

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the bm25 index format is little-endian; this build target is not"
#endif

#define SG_BM25_MAGIC "SGBM25\r\n" /* 8 bytes; \r\n catches text-mode mangling */
#define SG_BM25_FORMAT_VERSION 1
#define SG_BM25_HEADER_SIZE 64

enum {
    SG_BM25_FILE_META = 1,
    SG_BM25_FILE_DOCS = 2,
    SG_BM25_FILE_DOCIDX = 3,
    SG_BM25_FILE_TERMS = 4,
    SG_BM25_FILE_POSTINGS = 5,
    SG_BM25_NUM_FILES = 5
};

/** The file names, indexed by kind - 1. */
extern const char *const sg_bm25_file_names[SG_BM25_NUM_FILES];

typedef struct st_sg_bm25_header_t {
    char magic[8];
    uint32_t version;
    uint32_t kind;
    uint64_t payload_len;
    uint64_t build_id;
    uint32_t payload_crc; /* CRC-32 (zlib) of the payload */
    uint32_t header_size; /* SG_BM25_HEADER_SIZE */
    uint8_t reserved[20];
    uint32_t header_crc; /* CRC-32 of the 60 bytes before it */
} sg_bm25_header_t;

typedef struct st_sg_bm25_meta_t {
    uint64_t n_docs;        /* rows of the corpus = documents, numbered from 0 in corpus order */
    uint64_t n_scored_docs; /* documents with at least one token: Lucene's docCount, the N of idf and of avgdl */
    uint64_t n_terms;
    uint64_t n_postings;   /* sum of document frequencies */
    uint64_t total_tokens; /* sum of document lengths */
    double k1, b;          /* defaults the searcher uses unless its config overrides them */
    uint32_t analyzer_version;
    uint32_t stemmer; /* sg_bm25_stemmer_t */
    uint32_t stopset; /* sg_bm25_stopset_t */
    uint32_t max_doc_tokens;
    uint64_t corpus_bytes; /* bytes of (uncompressed) corpus read */
    uint8_t reserved[176];
} sg_bm25_meta_t;

typedef struct st_sg_bm25_docent_t {
    uint64_t off;     /* offset of the DOC in the docs.bin payload */
    uint32_t len;     /* its length in bytes */
    uint32_t ntokens; /* the document length BM25 uses */
} sg_bm25_docent_t;

typedef struct st_sg_bm25_terment_t {
    uint64_t post_off; /* offset of the postings in the postings.bin payload */
    uint64_t str_off;  /* offset of the term bytes, from the start of the term bytes */
    uint32_t df;
    uint32_t reserved;
} sg_bm25_terment_t;

_Static_assert(sizeof(sg_bm25_header_t) == SG_BM25_HEADER_SIZE, "header layout");
_Static_assert(sizeof(sg_bm25_meta_t) == 256, "meta layout");
_Static_assert(sizeof(sg_bm25_docent_t) == 16, "docent layout");
_Static_assert(sizeof(sg_bm25_terment_t) == 24, "terment layout");

/** CRC-32 of the header bytes before header_crc. */
uint32_t sg_bm25_header_crc(const sg_bm25_header_t *h);
/** The build id: FNV-1a 64 over the meta payload and (kind, payload_len, payload_crc) of the data files. */
uint64_t sg_bm25_build_id(const sg_bm25_meta_t *meta, const uint64_t lens[SG_BM25_NUM_FILES],
                          const uint32_t crcs[SG_BM25_NUM_FILES]);

/** Appends v as a LEB128 varint at p; returns the bytes written (at most 10). */
static inline unsigned sg_bm25_put_varint(uint8_t *p, uint64_t v)
{
    unsigned n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

/** Reads a varint from [*p, end); returns 0 and advances *p, or -1 when it is truncated or too long. */
static inline int sg_bm25_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    const uint8_t *q = *p;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (q >= end)
            return -1;
        uint8_t b = *q++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *p = q;
            *out = v;
            return 0;
        }
    }
    return -1;
}

#endif
