/*
 * replay_main.c -- runs a libFuzzer harness over files, without libFuzzer: each argument is a
 * corpus directory or a file; every input is fed to LLVMFuzzerTestOneInput once. CTest uses this
 * (built with gcc, sanitizers as configured) to replay the committed seed corpora on every build.
 * Fails when an argument is missing or a directory holds no input. A harness's
 * LLVMFuzzerInitialize, when it has one, runs first, as under libFuzzer.
 *
 * Arguments starting with '-' are libFuzzer options; the one this program honours is
 * -rss_limit_mb=N, as libFuzzer does: after each input the process's peak resident set
 * (getrusage) must stay within N MiB, or the replay fails naming the input, with libFuzzer's
 * "out-of-memory (used: XMb; limit: NMb)". So an input that
 * makes a parser use memory out of proportion to its size (an amplification) is a failure on
 * every build, not only under libFuzzer. The others are ignored.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

static unsigned long rss_limit_mb; /* 0: no limit */

/* Peak resident set of the process so far, in MiB. */
static unsigned long peak_rss_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (unsigned long)ru.ru_maxrss / 1024; /* kilobytes on Linux */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf != NULL && (r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (nb == NULL)
                free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf == NULL)
        return -1;
    /* exact-size copy so ASan catches reads past the input */
    uint8_t *exact = malloc(len != 0 ? len : 1);
    if (exact == NULL) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    unsigned long peak = peak_rss_mb();
    if (rss_limit_mb != 0 && peak > rss_limit_mb) {
        /* libFuzzer's words, so one pattern finds the failure under either (fuzz.replay_rss_limit_enforced) */
        fprintf(stderr, "replay: out-of-memory (used: %luMb; limit: %luMb) after %s (%zu bytes): over -rss_limit_mb=%lu\n", peak,
                rss_limit_mb, path, len, rss_limit_mb);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t total = 0;
    if (LLVMFuzzerInitialize != NULL)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; ++i) {
        if (strncmp(argv[i], "-rss_limit_mb=", 14) == 0) {
            char *end;
            rss_limit_mb = strtoul(argv[i] + 14, &end, 10);
            if (*end != '\0') {
                fprintf(stderr, "replay: bad %s\n", argv[i]);
                return 1;
            }
        }
    }
    for (int i = 1; i < argc; ++i) {
        if (argv[i][0] == '-')
            continue; /* a libFuzzer option */
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0)
                return 1;
            ++total;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        size_t n = 0;
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            if (run_file(path) != 0) {
                closedir(d);
                return 1;
            }
            ++n;
        }
        if (d != NULL)
            closedir(d);
        if (n == 0) {
            fprintf(stderr, "replay: no inputs in %s\n", argv[i]);
            return 1;
        }
        total += n;
    }
    if (rss_limit_mb != 0)
        printf("replayed %zu inputs, peak RSS %lu MiB (limit %lu MiB)\n", total, peak_rss_mb(), rss_limit_mb);
    else
        printf("replayed %zu inputs\n", total);
    return 0;
}
