/* A plugin built for a future ABI major version: the loader must refuse it. */
#include "sg_backend.h"

static const sg_backend_vtable vt = {
    .abi_major = SG_BACKEND_ABI_MAJOR + 1, .abi_minor = 0, .struct_size = sizeof(sg_backend_vtable), .name = "bad", .version = "0"};

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return &vt;
}
