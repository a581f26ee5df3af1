/*
 * index_main.c -- searchgate-index: one command for every index builder. `searchgate-index KIND
 * ARGS...` runs the builder `searchgate-index-KIND` that sits next to it (bm25, dense, ...), so
 * each backend ships its own builder and users learn one name.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *fp)
{
    fprintf(fp, "usage: searchgate-index KIND ARGS...\n"
                "  bm25   CORPUS.jsonl OUT_DIR           lexical index (see docs/backends/bm25.md)\n"
                "  dense  --model DIR CORPUS.jsonl OUT    e5 + FAISS Flat IP index (see docs/backends/local.md)\n"
                "  convert FLAT.index OUT.index --factory STR\n"
                "                                         Flat index -> IVF/PQ/HNSW with a recall report (docs/backends/local.md)\n"
                "`searchgate-index KIND --help` shows the options of one builder.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *kind = argv[1];
    for (const char *p = kind; *p != '\0'; ++p)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) {
            fprintf(stderr, "searchgate-index: bad index kind \"%s\"\n", kind);
            usage(stderr);
            return 2;
        }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        fprintf(stderr, "searchgate-index: cannot find my own location: %s\n", strerror(errno));
        return 1;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s/searchgate-index-%s", self, kind) >= sizeof(path)) {
        fprintf(stderr, "searchgate-index: path too long\n");
        return 1;
    }
    argv[1] = path;
    execv(path, argv + 1);
    fprintf(stderr, "searchgate-index: no index builder for \"%s\" (%s: %s)\n", kind, path, strerror(errno));
    usage(stderr);
    return 2;
}
