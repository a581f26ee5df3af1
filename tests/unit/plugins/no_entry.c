/* A shared object that is not a searchgate plugin: it exports no sg_backend_entry. */
#include "sg_backend.h"

SG_BACKEND_EXPORT int not_a_plugin(void)
{
    return 42;
}
