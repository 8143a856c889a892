/* error.c: status names and the per-thread message of the last failed call,
 * so that two threads running models never see each other's errors. */
#include "runtime/rt_impl.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

vitc_status rt_fail(vitc_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

VITC_API const char *vitc_last_error(void)
{
    return last_error;
}

VITC_API const char *vitc_status_string(vitc_status s)
{
    switch (s) {
    case VITC_STATUS_OK: return "ok";
    case VITC_STATUS_INVALID_ARGUMENT: return "invalid argument";
    case VITC_STATUS_LOAD_FAILED: return "load failed";
    case VITC_STATUS_ABI_MISMATCH: return "ABI mismatch";
    case VITC_STATUS_SHAPE_MISMATCH: return "shape mismatch";
    case VITC_STATUS_DTYPE_MISMATCH: return "dtype mismatch";
    case VITC_STATUS_BATCH_OUT_OF_RANGE: return "batch out of range";
    case VITC_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VITC_STATUS_NO_DEVICE: return "no device";
    case VITC_STATUS_INTERNAL: return "internal error";
    }
    return "unknown status";
}
