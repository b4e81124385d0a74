#ifndef TOLLGATE_CLIBPQ_SHIM_H
#define TOLLGATE_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
