/*
 * loader.h -- finding and loading the CUDA module (build/plugins/sg_local_cuda.so, sg_cuda.h) at
 * run time, so that nothing that links sg_gpu_host depends on CUDA. Part of sg_gpu_host.
 */
#ifndef SG_CUDA_LOADER_H
#define SG_CUDA_LOADER_H

#include <stddef.h>

#include "sg_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * dlopen()s `path` (RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE: the CUDA runtime is never unloaded),
 * looks up sg_cuda_entry and checks the table's ABI version and size. Returns 0 with the table in
 * *api, or -1 with the reason in `err` (dlerror()'s text when the file or a library it needs,
 * e.g. libcudart.so.13, cannot be loaded).
 */
int sg_gpu_module_load(const char *path, const sg_cuda_api **api, char *err, size_t err_size);

/**
 * The default place of the module: SG_CUDA_MODULE_FILE in the directory of the shared object
 * (or executable) that contains `addr`. malloc'ed; NULL when that directory cannot be found.
 */
char *sg_gpu_module_default_path(const void *addr);

#ifdef __cplusplus
}
#endif
#endif
