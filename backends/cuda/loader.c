/*
 * loader.c -- dlopen() of the CUDA module and its ABI check (loader.h).
 */
#include "loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sg_gpu_module_load(const char *path, const sg_cuda_api **api, char *err, size_t err_size)
{
    *api = NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(err, err_size, "cannot load %s: %s", path, e != NULL ? e : "unknown error");
        return -1;
    }
    sg_cuda_entry_fn entry;
    void *sym = dlsym(h, SG_CUDA_ENTRY_NAME);
    memcpy(&entry, &sym, sizeof(entry)); /* object pointer -> function pointer without a cast warning */
    if (sym == NULL) {
        snprintf(err, err_size, "%s does not export %s", path, SG_CUDA_ENTRY_NAME);
        dlclose(h);
        return -1;
    }
    const sg_cuda_api *a = entry();
    if (a == NULL || a->abi_version != SG_CUDA_ABI_VERSION || a->struct_size < SG_CUDA_API_MIN_SIZE) {
        snprintf(err, err_size, "%s has CUDA module ABI %u (size %u); this build needs ABI %d (size %zu or more)", path,
                 a != NULL ? a->abi_version : 0, a != NULL ? a->struct_size : 0, SG_CUDA_ABI_VERSION, (size_t)SG_CUDA_API_MIN_SIZE);
        dlclose(h);
        return -1;
    }
    *api = a;
    return 0; /* the handle stays open for the life of the process */
}

char *sg_gpu_module_default_path(const void *addr)
{
    Dl_info info;
    if (dladdr(addr, &info) == 0 || info.dli_fname == NULL || info.dli_fname[0] == '\0')
        return NULL;
    const char *slash = strrchr(info.dli_fname, '/');
    size_t dir = slash != NULL ? (size_t)(slash - info.dli_fname) : 1;
    const char *d = slash != NULL ? info.dli_fname : ".";
    size_t n = dir + 1 + strlen(SG_CUDA_MODULE_FILE) + 1;
    char *p = malloc(n);
    if (p == NULL)
        abort();
    snprintf(p, n, "%.*s/%s", (int)dir, d, SG_CUDA_MODULE_FILE);
    return p;
}
