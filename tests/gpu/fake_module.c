/*
 * fake_module.c -- a CUDA module table of a given size (FAKE_SIZE bytes; its functions are never
 * called), for the loader's append-only rule: a module from before a function was appended still
 * loads and is seen not to have it; a table smaller than the first one is refused. Built as
 * fake_module_<name>.so by tests/gpu/CMakeLists.txt for gpu.host.
 */
#include "sg_cuda.h"

static const sg_cuda_api table = {.abi_version = SG_CUDA_ABI_VERSION, .struct_size = (uint32_t)(FAKE_SIZE), .version = "fake"};

__attribute__((visibility("default"))) const sg_cuda_api *sg_cuda_entry(void)
{
    return &table;
}
