/*
 * replay_main.c -- runs a libFuzzer harness over files, without libFuzzer: each argument is a
 * corpus directory or a file; every input is fed to LLVMFuzzerTestOneInput once. CTest uses this
 * (built with gcc, sanitizers as configured) to replay the committed seed corpora on every build.
 * Fails when an argument is missing or a directory holds no input. A harness's
 * LLVMFuzzerInitialize, when it has one, runs first, as under libFuzzer.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    return 0;
}

int main(int argc, char **argv)
{
    size_t total = 0;
    if (LLVMFuzzerInitialize != NULL)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; ++i) {
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
    printf("replayed %zu inputs\n", total);
    return 0;
}
