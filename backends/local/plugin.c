/*
 * plugin.c -- the entry point of sg_local.so; everything else lives in local.c and the static
 * libraries it links (sg_e5, faiss_c, Debian's libfaiss.a), whose symbols stay hidden.
 */
#include "local.h"

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return sg__local_vtable();
}
