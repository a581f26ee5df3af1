/*
 * gcide.c -- searchgate-gcide-corpus: turns Debian's dict-gcide (the GNU Collaborative
 * International Dictionary of English in dictd format: gcide.dict.dz + gcide.index) into a
 * wiki-18 style passage corpus, one JSON line per dictionary entry:
 *
 *     {"id": "<n>", "contents": "\"Headword\"\nHeadword, n. A definition ..."}
 *
 * This is the demo corpus of the embedded default (build/prepare-default): real English text
 * from a Debian package, so the first README command serves sensible passages without any
 * download. The dictd markup is cleaned: pronunciations (\Vol*ca"no\ and the "(...)" respelling
 * after them) are dropped, {cross references} lose their braces, character codes such as [e^] or
 * [=o] become the letters they stand for, source tags such as [1913 Webster] are dropped, and
 * whitespace is collapsed, so the text reads as plain prose.
 */
#include "builder.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SG_GCIDE_TOOL_VERSION "1.0.0"

typedef struct st_entry_t {
    uint64_t off, len;
} entry_t;

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n != 0 ? n : 1);
    if (q == NULL)
        abort();
    return q;
}

static int b64val(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

static int b64num(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 10)
        return -1;
    for (size_t i = 0; i < n; ++i) {
        int d = b64val((unsigned char)s[i]);
        if (d < 0)
            return -1;
        v = v * 64 + (uint64_t)d;
    }
    *out = v;
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const entry_t *x = a, *y = b;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return (x->len > y->len) - (x->len < y->len);
}

/* ---- markup ---- */

static const struct {
    const char *code, *utf8;
} charcodes[] = {
    {"'e", "é"},    {"'a", "á"},     {"'o", "ó"},     {"'i", "í"},    {"'u", "ú"},     {"'E", "É"},     {"'A", "Á"},
    {"`e", "è"},    {"`a", "à"},     {"\"o", "ö"},    {"\"e", "ë"},   {"\"u", "ü"},    {"\"i", "ï"},    {"\"a", "ä"},
    {"^o", "ô"},    {"^u", "û"},     {"^a", "â"},     {"^e", "ê"},    {"^i", "î"},     {"a^", "ă"},     {"e^", "ĕ"},
    {"i^", "ĭ"},    {"o^", "ŏ"},     {"u^", "ŭ"},     {"y^", "y̆"},    {"oo^", "o͝o"},   {"=a", "ā"},     {"=e", "ē"},
    {"=o", "ō"},    {"=u", "ū"},     {"=y", "ȳ"},     {"=ae", "ǣ"},   {"=oo", "o͞o"},   {"=i", "ī"},     {"imac", "ī"},
    {".a", "ȧ"},    {".u", "u̇"},     {".r", "ṛ"},     {".t", "ṭ"},    {".n", "ṅ"},     {"~e", "ẽ"},     {"~n", "ñ"},
    {"ae", "æ"},    {"AE", "Æ"},     {"oe", "œ"},     {"OE", "Œ"},    {"-o", "o"},     {"-e", "e"},     {"-u", "u"},
    {"-i", "i"},    {"aum", "â"},    {"asl", "a"},    {"add", "ä"},   {"udd", "ü"},    {"eth", "ð"},    {"thorn", "þ"},
    {"yogh", "ȝ"},  {"ng", "ŋ"},     {"th", "th"},    {"root", "√"},  {"deg", "°"},    {"sect", "§"},   {"pounds", "£"},
    {"alpha", "α"}, {"beta", "β"},   {"gamma", "γ"},  {"delta", "δ"}, {"mu", "μ"},     {"pi", "π"},     {",c", "ç"},
    {"*a", "a"},    {"bprime", "″"}, {"prime", "′"},  {"dsdot", "·"}, {"frac12", "½"}, {"frac14", "¼"}, {"frac34", "¾"},
    {"cced", "ç"},  {"ae^", "æ"},    {"ntilde", "ñ"},
};

typedef struct st_out_t {
    char *s;
    size_t len, cap;
} out_t;

static void put(out_t *o, const char *p, size_t n)
{
    if (o->len + n + 1 > o->cap) {
        while (o->len + n + 1 > o->cap)
            o->cap = o->cap != 0 ? o->cap * 2 : 4096;
        o->s = xrealloc(o->s, o->cap);
    }
    memcpy(o->s + o->len, p, n);
    o->len += n;
    o->s[o->len] = '\0';
}

/* Appends one character, collapsing whitespace. */
static void putc_(out_t *o, char c)
{
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        if (o->len == 0 || o->s[o->len - 1] == ' ')
            return;
        c = ' ';
    }
    put(o, &c, 1);
}

/* Is the bracketed text a source tag ([1913 Webster], [WordNet 1.5 +PJC], [PJC], ...)? */
static int is_source_tag(const char *s, size_t n)
{
    static const char *const exact[] = {"PJC", "PJC.", "RDH", "RHUD", "AS", "+PJC"};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); ++i)
        if (strlen(exact[i]) == n && memcmp(s, exact[i], n) == 0)
            return 1;
    return memmem(s, n, "Webster", 7) != NULL || memmem(s, n, "WordNet", 7) != NULL;
}

/* Cleans one dictd article into `o` (plain text, one line). */
static void clean(const char *a, size_t n, out_t *o)
{
    o->len = 0;
    size_t i = 0;
    while (i < n) {
        char c = a[i];
        if (c == '\\') {
            /* a pronunciation \Vol*ca"no\ on one line: drop it, and a respelling "(...)" right after it */
            const char *e = memchr(a + i + 1, '\\', n - i - 1);
            const char *nl = memchr(a + i + 1, '\n', n - i - 1);
            if (e != NULL && (nl == NULL || e < nl) && e - (a + i) < 100) {
                i = (size_t)(e - a) + 1;
                size_t j = i;
                while (j < n && a[j] == ' ')
                    ++j;
                if (j < n && a[j] == '(') {
                    const char *close = memchr(a + j, ')', n - j);
                    if (close != NULL && close - (a + j) < 60) {
                        size_t k = (size_t)(close - a);
                        int has_mark = 0, has_space = 0;
                        for (size_t q = j; q < k; ++q) {
                            has_mark |= a[q] == '"' || a[q] == '[' || a[q] == '`' || a[q] == '*';
                            has_space |= a[q] == ' ' || a[q] == '\n';
                        }
                        if (has_mark && !has_space)
                            i = k + 1;
                    }
                }
                /* "Volcano \Vol*ca"no\, n." -> "Volcano, n." */
                if (i < n && (a[i] == ',' || a[i] == ';' || a[i] == '.' || a[i] == ':') && o->len > 0 && o->s[o->len - 1] == ' ')
                    --o->len;
                continue;
            }
            ++i;
            continue;
        }
        if (c == '(') {
            /* a respelling such as (k[a^]p"[i^]*tal*[imac]zd) anywhere: no spaces, pronunciation marks */
            const char *close = memchr(a + i + 1, ')', n - i - 1);
            if (close != NULL && close - (a + i) < 60) {
                int has_mark = 0, has_space = 0;
                for (const char *q = a + i + 1; q < close; ++q) {
                    has_mark |= *q == '"' || *q == '`' || *q == '*';
                    has_space |= *q == ' ' || *q == '\n';
                }
                if (has_mark && !has_space) {
                    i = (size_t)(close - a) + 1;
                    if (o->len > 0 && o->s[o->len - 1] == ' ' && i < n && (a[i] == ',' || a[i] == ';' || a[i] == '.'))
                        --o->len;
                    continue;
                }
            }
        }
        if (c == '{' || c == '}') {
            ++i;
            continue;
        }
        if (c == '[') {
            const char *close = memchr(a + i + 1, ']', n - i - 1);
            if (close != NULL) {
                size_t k = (size_t)(close - a), m = k - i - 1;
                const char *in = a + i + 1;
                int done = 0;
                for (size_t t = 0; t < sizeof(charcodes) / sizeof(charcodes[0]) && !done; ++t)
                    if (strlen(charcodes[t].code) == m && memcmp(charcodes[t].code, in, m) == 0) {
                        put(o, charcodes[t].utf8, strlen(charcodes[t].utf8));
                        done = 1;
                    }
                if (!done && m < 200 && is_source_tag(in, m)) {
                    done = 1;
                    while (o->len > 0 && o->s[o->len - 1] == ' ')
                        --o->len;
                }
                if (done) {
                    i = k + 1;
                    continue;
                }
            }
            /* an unterminated source tag ("[WordNet 1.5" at the end of a line) */
            const char *nl = memchr(a + i + 1, '\n', n - i - 1);
            size_t m = nl != NULL ? (size_t)(nl - a) - i - 1 : n - i - 1;
            if ((close == NULL || (nl != NULL && nl < close)) && m < 200 && is_source_tag(a + i + 1, m)) {
                i += m + 1;
                continue;
            }
        }
        putc_(o, c);
        ++i;
    }
    while (o->len > 0 && o->s[o->len - 1] == ' ')
        --o->len;
    if (o->s != NULL)
        o->s[o->len] = '\0';
}

/* The headword: the first line up to its pronunciation, markup removed. */
static void headword(const char *a, size_t n, const char *fallback, out_t *title, out_t *tmp)
{
    const char *nl = memchr(a, '\n', n);
    size_t l = nl != NULL ? (size_t)(nl - a) : n;
    const char *bs = memmem(a, l, " \\", 2);
    if (bs != NULL) {
        clean(a, (size_t)(bs - a), tmp);
    } else {
        tmp->len = 0;
        put(tmp, fallback, strlen(fallback));
    }
    title->len = 0;
    for (size_t i = 0; i < tmp->len; ++i)
        if (tmp->s[i] != '"') /* a quote would break the "Title" convention */
            put(title, tmp->s + i, 1);
    if (title->len == 0)
        put(title, fallback, strlen(fallback));
}

static char *read_all(const char *path, size_t *len, char *err, size_t en)
{
    gzFile gz = gzopen(path, "rb");
    if (gz == NULL) {
        snprintf(err, en, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    gzbuffer(gz, 1 << 20);
    size_t cap = 1 << 24, n = 0;
    char *buf = xrealloc(NULL, cap);
    int got;
    for (;;) {
        if (cap - n < (1 << 20)) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        got = gzread(gz, buf + n, (unsigned)(cap - n - 1));
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    if (got < 0) {
        int z;
        snprintf(err, en, "%s: read failed: %s", path, gzerror(gz, &z));
        gzclose(gz);
        free(buf);
        return NULL;
    }
    gzclose(gz);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void usage(FILE *fp)
{
    fprintf(fp, "usage: searchgate-gcide-corpus [--dict FILE] [--index FILE] [--limit N] OUT.jsonl\n"
                "\n"
                "Writes one wiki-18 style passage per GCIDE dictionary entry ({\"id\",\"contents\"}, JSON lines) to\n"
                "OUT.jsonl (\"-\" = standard output), in dictionary order.\n"
                "  --dict FILE    the dictd data (default /usr/share/dictd/gcide.dict.dz, package dict-gcide)\n"
                "  --index FILE   the dictd index (default /usr/share/dictd/gcide.index)\n"
                "  --limit N      stop after N passages (default: all, about 126,000)\n"
                "  -V, --version  print the version\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"dict", required_argument, NULL, 'd'},  {"index", required_argument, NULL, 'i'},
                                             {"limit", required_argument, NULL, 'l'}, {"help", no_argument, NULL, 'h'},
                                             {"version", no_argument, NULL, 'V'},     {NULL, 0, NULL, 0}};
    const char *dict = "/usr/share/dictd/gcide.dict.dz", *index = "/usr/share/dictd/gcide.index";
    unsigned long long limit = 0;
    int c;
    while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            dict = optarg;
            break;
        case 'i':
            index = optarg;
            break;
        case 'l': {
            char *end;
            limit = strtoull(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || limit == 0) {
                fprintf(stderr, "searchgate-gcide-corpus: --limit: expected a positive integer, got %s\n", optarg);
                return 2;
            }
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("searchgate-gcide-corpus %s\n", SG_GCIDE_TOOL_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 1) {
        usage(stderr);
        return 2;
    }
    const char *out_path = argv[optind];
    char err[1024];
    size_t dlen, ilen;
    char *data = read_all(dict, &dlen, err, sizeof(err));
    char *idx = data != NULL ? read_all(index, &ilen, err, sizeof(err)) : NULL;
    if (data == NULL || idx == NULL) {
        fprintf(stderr, "searchgate-gcide-corpus: %s (install the Debian package dict-gcide)\n", err);
        free(data);
        return 1;
    }
    /* the index: "headword \t offset \t length" (dictd base64 numbers); one article may have many headwords */
    entry_t *ents = NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    unsigned long long line_no = 0;
    for (char *p = idx, *end = idx + ilen; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl != NULL ? nl : end;
        ++line_no;
        char *t1 = memchr(p, '\t', (size_t)(e - p));
        char *t2 = t1 != NULL ? memchr(t1 + 1, '\t', (size_t)(e - t1 - 1)) : NULL;
        if (e > p) {
            entry_t en;
            if (t2 == NULL || b64num(t1 + 1, (size_t)(t2 - t1 - 1), &en.off) != 0 ||
                b64num(t2 + 1, (size_t)(e - t2 - 1), &en.len) != 0 || en.off > dlen || en.len > dlen - en.off) {
                fprintf(stderr, "searchgate-gcide-corpus: %s:%llu: not a dictd index line\n", index, line_no);
                return 1;
            }
            if (!(t1 - p >= 3 && memcmp(p, "00-", 3) == 0) && en.len > 0) { /* 00-database-* are about the file */
                if (n == cap) {
                    cap = cap != 0 ? cap * 2 : 1 << 17;
                    ents = xrealloc(ents, cap * sizeof(*ents));
                    names = xrealloc(names, cap * sizeof(*names));
                }
                *t1 = '\0';
                names[n] = p;
                ents[n++] = en;
            }
        }
        p = e + 1;
    }
    /* keep the first headword of each article, then order articles as in the data file */
    entry_t *order = xrealloc(NULL, (n != 0 ? n : 1) * sizeof(*order));
    char **onames = xrealloc(NULL, (n != 0 ? n : 1) * sizeof(*onames));
    size_t m = 0;
    {
        /* sort indices by (off, len, index-order) so the first listed headword wins */
        size_t *ix = xrealloc(NULL, (n != 0 ? n : 1) * sizeof(*ix));
        for (size_t i = 0; i < n; ++i)
            ix[i] = i;
        /* insertion into buckets would be faster, but a stable merge sort on 200k items is instant */
        size_t *tmp = xrealloc(NULL, (n != 0 ? n : 1) * sizeof(*tmp));
        for (size_t w = 1; w < n; w *= 2) {
            for (size_t lo = 0; lo < n; lo += 2 * w) {
                size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, a = lo, b = mid, k = lo;
                while (a < mid || b < hi) {
                    if (b >= hi || (a < mid && cmp_entry(&ents[ix[a]], &ents[ix[b]]) <= 0))
                        tmp[k++] = ix[a++];
                    else
                        tmp[k++] = ix[b++];
                }
            }
            memcpy(ix, tmp, n * sizeof(*ix));
        }
        for (size_t i = 0; i < n; ++i) {
            if (m > 0 && cmp_entry(&order[m - 1], &ents[ix[i]]) == 0)
                continue;
            order[m] = ents[ix[i]];
            onames[m] = names[ix[i]];
            ++m;
        }
        free(tmp);
        free(ix);
    }
    FILE *out = strcmp(out_path, "-") == 0 ? stdout : fopen(out_path, "wb");
    if (out == NULL) {
        fprintf(stderr, "searchgate-gcide-corpus: %s: cannot create: %s\n", out_path, strerror(errno));
        return 1;
    }
    setvbuf(out, NULL, _IOFBF, 1 << 20);
    out_t body = {0}, title = {0}, tmp = {0};
    char *line = NULL;
    size_t line_len = 0, line_cap = 0;
    unsigned long long written = 0;
    for (size_t i = 0; i < m && (limit == 0 || written < limit); ++i) {
        const char *a = data + order[i].off;
        size_t len = order[i].len;
        clean(a, len, &body);
        if (body.len == 0)
            continue;
        headword(a, len, onames[i], &title, &tmp);
        /* contents = "\"Title\"\nText" */
        tmp.len = 0;
        put(&tmp, "\"", 1);
        put(&tmp, title.s, title.len);
        put(&tmp, "\"\n", 2);
        put(&tmp, body.s, body.len);
        fprintf(out, "{\"id\":\"%llu\",\"contents\":\"", written);
        line_len = 0;
        sg_bm25_json_escape(&line, &line_len, &line_cap, tmp.s, tmp.len);
        fwrite(line, 1, line_len, out);
        fputs("\"}\n", out);
        ++written;
    }
    int bad = ferror(out) != 0;
    if (out != stdout)
        bad |= fclose(out) != 0;
    else
        bad |= fflush(out) != 0;
    if (bad) {
        fprintf(stderr, "searchgate-gcide-corpus: %s: write failed: %s\n", out_path, strerror(errno));
        return 1;
    }
    fprintf(stderr, "searchgate-gcide-corpus: %llu passages from %zu dictionary entries\n", written, m);
    free(line);
    free(body.s);
    free(title.s);
    free(tmp.s);
    free(order);
    free(onames);
    free(ents);
    free(names);
    free(idx);
    free(data);
    return 0;
}
