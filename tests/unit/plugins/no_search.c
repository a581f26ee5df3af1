/* A plugin whose vtable lacks a mandatory function (search). */
#include "sg_backend.h"

static sg_status create(const sg_host_api *host, const char *instance, const char *base_dir, const char *config_json,
                        size_t config_len, sg_backend **out, char *err, size_t err_size)
{
    (void)host, (void)instance, (void)base_dir, (void)config_json, (void)config_len, (void)err, (void)err_size;
    *out = NULL;
    return SG_OK;
}

static void destroy(sg_backend *self)
{
    (void)self;
}

static sg_status health(sg_backend *self, char *detail, size_t n)
{
    (void)self, (void)detail, (void)n;
    return SG_OK;
}

static const sg_backend_vtable vt = {SG_BACKEND_HEADER("nosearch", "0"), .create = create, .destroy = destroy, .health = health};

SG_BACKEND_EXPORT const sg_backend_vtable *sg_backend_entry(void)
{
    return &vt;
}
