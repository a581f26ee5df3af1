/*
 * bench_cache_decode.c -- what reading one Redis cache value costs (cache/cache.c,
 * sg_cache_decode: the header, the full RFC 8259 check of every document, the copy), on values
 * shaped like the gateway's: HITS Wikipedia-like passages of about DOC_BYTES bytes each (a quoted
 * title, then prose with the odd UTF-8 letter), as sg_blob_from_hits() writes them.
 *
 * Usage: build/bench_cache_decode [HITS] [DOC_BYTES] [ROUNDS]   (defaults 3 600 200000)
 * prints the value size and the best of 5 passes in ns per value and per byte. For a count of
 * instructions that the machine's load cannot skew:
 *   valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=sg_cache_decode \
 *       build/bench_cache_decode 3 600 1000
 * and divide the "Collected" Ir by the number of decodes, 5 x ROUNDS + 1 (5001). Run it alone on
 * a quiet machine for the timings.
 */
#include "cache.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One value as the gateway stores it: [{"document":{"id":..,"contents":..},"score":S},...]. */
static void make_value(sg_buf_t *out, unsigned hits, size_t doc_bytes)
{
    /* a Search-R1 wiki-18 passage: "Title"\n then prose, mostly ASCII with the odd UTF-8 letter */
    static const char title[] = "\"Z\xc3\xbcrich\"\n";
    static const char words[] = "Zurich is the largest city in Switzerland and the capital of the canton of Zurich. It is located "
                                "in north-central Switzerland, at the northwestern tip of Lake Zurich, and was founded by the "
                                "Romans, who in 15 BC called it Turicum; the Caf\xc3\xa9 Odeon opened there in 1911. ";
    sg_buf_t frag = {0}, text = {0};
    sg_blob_t b = {0};
    b.n_hits = hits;
    b.docs = calloc(hits != 0 ? hits : 1, sizeof(*b.docs));
    if (b.docs == NULL)
        abort();
    sg_buf_append(&text, title, sizeof(title) - 1);
    while (text.len < doc_bytes)
        sg_buf_append(&text, words, sizeof(words) - 1);
    sg_jw_t w;
    sg_jw_init(&w, &frag);
    sg_jw_arr(&w);
    for (unsigned i = 0; i < hits; ++i) {
        sg_jw_obj(&w);
        sg_jw_key(&w, "document");
        b.docs[i].off = (uint32_t)frag.len;
        sg_jw_obj(&w);
        sg_jw_ku64(&w, "id", 1000000 + i);
        sg_jw_key(&w, "contents");
        sg_jw_strn(&w, text.base, doc_bytes);
        sg_jw_end(&w);
        b.docs[i].len = (uint32_t)(frag.len - b.docs[i].off);
        sg_jw_kdouble(&w, "score", 0.8731 - i * 0.01);
        sg_jw_end(&w);
    }
    sg_jw_end(&w);
    b.json = frag.base;
    b.json_len = frag.len;
    sg_cache_encode(out, &b);
    free(b.docs);
    sg_buf_free(&frag);
    sg_buf_free(&text);
}

int main(int argc, char **argv)
{
    unsigned hits = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 3;
    size_t doc_bytes = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 600;
    unsigned long rounds = argc > 3 ? strtoul(argv[3], NULL, 10) : 200000;
    sg_buf_t v = {0};
    make_value(&v, hits, doc_bytes);
    const char *why = NULL;
    sg_blob_t *check = sg_cache_decode(v.base, v.len, &why);
    if (check == NULL) {
        fprintf(stderr, "bench_cache_decode: the value does not decode: %s\n", why);
        return 1;
    }
    sg_blob_release(check);
    double best = 1e9;
    for (int pass = 0; pass < 5; ++pass) {
        double t0 = now_s();
        for (unsigned long r = 0; r < rounds; ++r)
            sg_blob_release(sg_cache_decode(v.base, v.len, NULL));
        double per = (now_s() - t0) / (double)(rounds != 0 ? rounds : 1);
        if (per < best)
            best = per;
    }
    printf("value %zu bytes (%u hits of ~%zu bytes): %.1f ns per value, %.3f ns per byte\n", v.len, hits, doc_bytes, best * 1e9,
           best * 1e9 / (double)v.len);
    sg_buf_free(&v);
    return 0;
}
