/*
 * jsonl.h -- a read-only row store over a JSON-lines file (wiki-18.jsonl, wiki_webpages.jsonl):
 * the file is mmapped and a compact sidecar (one uint64 offset per row, plus an optional URL hash
 * table) makes row -> line a constant-time lookup without one allocation per row. The sidecar is
 * built once -- every line is checked to be one JSON object on the way -- and reused on later
 * starts while the file's size, mtime, device and inode are unchanged.
 *
 * Rows: row i is line i (0-based). A line ends at '\n'; a trailing '\r' and surrounding spaces are
 * not part of the row; the last line needs no '\n'. An empty line before the end is an error
 * (it would shift every later row); empty lines at the very end are ignored.
 *
 * Thread-safety: after sg_jsonl_open returns, every reader function may run on any thread.
 */
#ifndef SG_LOCAL_JSONL_H
#define SG_LOCAL_JSONL_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_sg_jsonl_opts_t {
    int url_table;         /* build/use a table of the rows' "url" values (for /access) */
    const char *cache_dir; /* where sidecars go when not beside the file (NULL: beside it) */
} sg_jsonl_opts_t;

typedef struct st_sg_jsonl_t {
    char *path;
    const char *data; /* the mmapped file */
    size_t size;
    uint64_t n_rows;
    const uint64_t *offs;  /* n_rows + 1 line starts; offs[n_rows] = end of the last line + 1 */
    const uint64_t *table; /* URL table: (tag << 32) | (row + 1), 0 = empty */
    uint64_t table_mask;
    uint64_t content_hash; /* of the whole file, computed when the sidecar was built */
    void *side;            /* sidecar mapping (or malloc'ed when it could not be written) */
    size_t side_size;
    int side_malloced;
    /* how the sidecar was obtained, for the start-up log */
    char *side_path;
    int side_reused;     /* 1: read from disk; 0: built now */
    char side_note[256]; /* why it is kept in memory only, when it is */
    uint64_t n_urls;     /* rows with a "url" in the table */
    int data_borrowed;   /* data is the caller's buffer (sg_jsonl_open_buffer): never unmapped */
} sg_jsonl_t;

/** Opens `path`. Returns 0, or -1 with a message naming the file (and line) in `err`. */
int sg_jsonl_open(const char *path, const sg_jsonl_opts_t *opts, sg_jsonl_t *j, char *err, size_t err_size);
/**
 * The same scan and checks over `size` bytes at `data`, which the caller keeps alive and
 * unchanged until sg_jsonl_close (nothing is copied, no sidecar is read or written); `name`
 * stands for the file in messages. For rows that are not a file, and for the fuzz target.
 */
int sg_jsonl_open_buffer(const char *data, size_t size, const char *name, int url_table, sg_jsonl_t *j, char *err, size_t err_size);
void sg_jsonl_close(sg_jsonl_t *j);
/** Row `row` (< n_rows): the JSON object's bytes without line terminator. */
void sg_jsonl_row(const sg_jsonl_t *j, uint64_t row, const char **p, size_t *len);
/** The row whose "url" equals `url` after normalisation (see sg_jsonl_normalize_url), or -1. */
int64_t sg_jsonl_find_url(const sg_jsonl_t *j, const char *url, size_t len);

/**
 * The /access URL normalisation of the RLinf/ASearcher page servers: every "index.php/" becomes
 * "index.php?title=". Writes into `out` (capacity at least 2 * len + 1); returns the length.
 */
size_t sg_jsonl_normalize_url(const char *url, size_t len, char *out);

/* ---- JSON helpers over one object's bytes ---- */

/** 0 when p[0..len) is exactly one JSON object (RFC 8259, UTF-8); else -1 with `why` and `at`. */
int sg_json_check_object(const char *p, size_t len, const char **why, size_t *at);
/** 0 when p[0..len) is exactly one JSON string literal (surrounding whitespace allowed). */
int sg_json_check_string(const char *p, size_t len);
/**
 * Finds top-level key `key` of the object p[0..len). Returns 1 and the raw value span (for a
 * string, including its quotes) or 0 when absent. A key written more than once means its last
 * value, as in Python's json.loads.
 */
int sg_json_find_key(const char *p, size_t len, const char *key, const char **val, size_t *val_len);
/** Decodes the JSON string literal s[0..len) (with quotes) to UTF-8; malloc'ed, NUL-terminated. */
char *sg_json_decode_string(const char *s, size_t len, size_t *out_len);

#endif
