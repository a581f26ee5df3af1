/*
 * version.c -- `searchgate --version` (version.h). Compile-time facts (the version, the git
 * revision from the generated revision.h, the plugin ABI, the h2o and hiredis headers, the FAISS
 * the local plugin links statically) and run-time ones (cJSON, OpenSSL, and the OpenBLAS and
 * libcurl that the plugins load, opened here with dlopen() under the same sonames).
 */
#include "version.h"
#include "runtime.h"
#include "blas.h"
#include "revision.h"
#include "sg_backend.h"

#include <cJSON.h>
#include <dirent.h>
#include <dlfcn.h>
#include <hiredis.h>
#include <openssl/crypto.h>
#include <string.h>

#ifndef SG_FAISS_VERSION
#define SG_FAISS_VERSION "unknown"
#endif

/* "libcurl/7.88.1 OpenSSL/3.0.17 zlib/1.2.13 ..." -> "7.88.1" */
static void curl_line(FILE *fp)
{
    void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    void *sym = h != NULL ? dlsym(h, "curl_version") : NULL;
    if (sym == NULL) {
        fprintf(fp, "libcurl      not found (the serper, qdrant and upstream plugins need libcurl.so.4)\n");
    } else {
        char *(*fn)(void);
        memcpy(&fn, &sym, sizeof(fn));
        const char *v = fn();
        const char *slash = strchr(v, '/');
        size_t n = strcspn(slash != NULL ? slash + 1 : v, " ");
        fprintf(fp, "libcurl      %.*s\n", (int)n, slash != NULL ? slash + 1 : v);
    }
    /* never dlclose()d: the process ends right after, and what the library allocated for itself
     * would otherwise look leaked (LeakSanitizer) once its globals are unmapped */
}

static void openblas_line(FILE *fp)
{
    void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(fp, "BLAS         OpenBLAS not found (the local plugin and the rerank stage need libopenblas.so.0)\n");
        return;
    }
    sg_blas_choice_t c;
    if (sg_blas_tune(NULL, &c) != 0)
        fprintf(fp, "BLAS         %s (%s)\n", c.library, c.reason);
    else if (strcmp(c.source, "library") == 0 || strcmp(c.source, "user") == 0)
        fprintf(fp, "BLAS         %s, %s kernels (%s)\n", c.library, c.core,
                strcmp(c.source, "user") == 0 ? "OPENBLAS_CORETYPE" : "the library's choice for this CPU");
    else
        fprintf(fp, "BLAS         %s, %s kernels (the library would pick %s; searchgate sets OPENBLAS_CORETYPE=%s)\n", c.library,
                c.core, c.default_core, c.core);
    /* kept loaded, like libcurl above */
}

static void plugins_line(FILE *fp, const char *dir)
{
    fprintf(fp, "plugins      %s:", dir);
    DIR *d = opendir(dir);
    int any = 0;
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n > 6 && strncmp(de->d_name, "sg_", 3) == 0 && strcmp(de->d_name + n - 3, ".so") == 0) {
            fprintf(fp, " %.*s", (int)(n - 6), de->d_name + 3);
            any = 1;
        }
    }
    if (d != NULL)
        closedir(d);
    fprintf(fp, "%s\n", any ? "" : d == NULL ? " (not found)" : " (none)");
}

void sg_version_print(FILE *fp, const char *plugin_dir)
{
    fprintf(fp, "searchgate %s (git %s)\n", SG_VERSION, SG_GIT_REVISION);
    fprintf(fp, "plugin ABI   %d.%d\n", SG_BACKEND_ABI_MAJOR, SG_BACKEND_ABI_MINOR);
    fprintf(fp, "h2o          %s (libh2o-evloop)\n", H2O_VERSION);
    fprintf(fp, "hiredis      %d.%d.%d\n", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    curl_line(fp);
    openblas_line(fp);
    fprintf(fp, "FAISS        %s (linked into the local plugin)\n", SG_FAISS_VERSION);
    fprintf(fp, "cJSON        %s\n", cJSON_Version());
    fprintf(fp, "OpenSSL      %s\n", OpenSSL_version(OPENSSL_VERSION));
    plugins_line(fp, plugin_dir);
}
