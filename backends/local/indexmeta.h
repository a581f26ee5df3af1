/*
 * indexmeta.h -- the side file `searchgate-index convert` writes beside the index it builds
 * (INDEX.sgmeta, JSON): the factory string, the Flat file it came from, the re-ranking factor it
 * was built for, and the recall it measured against exact search at each nprobe / efSearch. The
 * local backend reads it at start-up to pick its default search parameters and to state the recall
 * to expect. A side file whose recorded fingerprint is not that of the index is ignored.
 */
#ifndef SG_LOCAL_INDEXMETA_H
#define SG_LOCAL_INDEXMETA_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_sg_imeta_point_t {
    int value;  /* nprobe or efSearch (0: the index has neither) */
    int rerank; /* re-ranking factor of this measurement (0: none) */
    double recall1, recall3, recall10, qps;
} sg_imeta_point_t;

typedef struct st_sg_imeta_t {
    int present;         /* a valid side file was read */
    char path[4096];     /* INDEX.sgmeta */
    char factory[128];   /* "IVF4096,PQ64" */
    char param[16];      /* "nprobe", "efSearch" or "" */
    char source[4096];   /* the Flat file it was converted from */
    int rerank;          /* the factor convert was asked to plan for (0: none) */
    int rec_value;       /* recommended nprobe / efSearch (0: none) */
    int rec_rerank;      /* re-ranking of the recommendation */
    char eval_desc[160]; /* "1000 held-out rows of the Flat file" */
    sg_imeta_point_t *points;
    size_t n_points;
} sg_imeta_t;

/**
 * Reads INDEX.sgmeta for the index at `index_path` with fingerprint (size, hash). Returns 1 when
 * read (m->present), 0 when there is none, -1 when it exists but is unreadable, malformed or
 * belongs to another index file: `why` then says so (the caller warns and goes on without it).
 */
int sg_imeta_load(const char *index_path, uint64_t size, uint64_t hash, sg_imeta_t *m, char *why, size_t why_size);
void sg_imeta_free(sg_imeta_t *m);
/**
 * Writes what convert measured for (value, rerank) into `buf`: the exact point, or the two points
 * around it, e.g. "recall@3 0.962 (recall@1 0.970, recall@10 0.931) at nprobe=32 with re-ranking x8,
 * measured by searchgate-index convert on 1000 held-out rows of the Flat file". Returns 0 when the
 * file has no measurement for this re-ranking factor (buf then says so).
 */
int sg_imeta_expected(const sg_imeta_t *m, int value, int rerank, char *buf, size_t size);

#endif
