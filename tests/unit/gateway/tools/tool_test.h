/*
 * tool_test.h -- what the tests of searchgate-trace's commands share: a temporary directory for
 * the traces they write, and running a command with its standard output and error captured.
 * Header-only (static functions).
 */
#ifndef SG_TEST_TOOL_TEST_H
#define SG_TEST_TOOL_TEST_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "buf.h"

static char tool_dir[64];

static void tool_dir_make(void)
{
    snprintf(tool_dir, sizeof(tool_dir), "/tmp/sg_tool_XXXXXX");
    if (mkdtemp(tool_dir) == NULL)
        abort();
}

/* The path of `name` in the temporary directory (in a static buffer of 4, round robin). */
static const char *tool_path(const char *name)
{
    static char paths[4][128];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof(paths[0]), "%s/%s", tool_dir, name);
    return p;
}

static void tool_write(const char *name, const char *text)
{
    FILE *fp = fopen(tool_path(name), "w");
    if (fp == NULL || fputs(text, fp) < 0 || fclose(fp) != 0)
        abort();
}

/* The whole file (malloc'ed, NUL-terminated; "" when it does not exist). */
static char *tool_slurp(const char *path)
{
    sg_buf_t b = {0};
    sg_buf_append(&b, "", 0);
    FILE *fp = fopen(path, "r");
    if (fp != NULL) {
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0)
            sg_buf_append(&b, chunk, n);
        fclose(fp);
    }
    return b.base;
}

static void tool_dir_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tool_dir);
    if (system(cmd) != 0)
        abort();
}

typedef int (*tool_fn)(int argc, char **argv);

/* Runs `fn` on the NULL-terminated `args` (args[0] is the command's name) with its standard output
 * and error going to files; `*out` and `*err` are what it wrote (malloc'ed). Returns its code. */
static int tool_run(tool_fn fn, const char *const *args, char **out, char **err)
{
    char *argv[32];
    int argc = 0;
    for (; args[argc] != NULL && argc < 31; ++argc)
        argv[argc] = (char *)args[argc];
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    int saved1 = dup(1), saved2 = dup(2);
    int f1 = open(tool_path("stdout"), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    int f2 = open(tool_path("stderr"), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    if (saved1 < 0 || saved2 < 0 || f1 < 0 || f2 < 0)
        abort();
    dup2(f1, 1);
    dup2(f2, 2);
    int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved1, 1);
    dup2(saved2, 2);
    close(saved1);
    close(saved2);
    close(f1);
    close(f2);
    *out = tool_slurp(tool_path("stdout"));
    *err = tool_slurp(tool_path("stderr"));
    return rc;
}

/* A refusal: `fn` on `args` exits `rc`, prints nothing on standard output and exactly `want_err`
 * on standard error (cmocka.h is included before this header). */
static inline void tool_check_fails(tool_fn fn, const char *const *args, int rc, const char *want_err)
{
    char *out, *err;
    assert_int_equal(tool_run(fn, args, &out, &err), rc);
    assert_string_equal(out, "");
    assert_string_equal(err, want_err);
    free(out);
    free(err);
}

#endif
