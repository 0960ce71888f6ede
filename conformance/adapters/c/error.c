/* error.c: the one way every check of this loader fails (RD-3): the registry's code, the offset
 * of the offending bytes, and a message of what was read, expected and found. */
#include "awq2.h"

#include <stdarg.h>
#include <stdio.h>

int awq2_fail(awq2_error *err, const char *code, uint64_t offset, const char *fmt, ...)
{
    va_list ap;
    err->code = code;
    err->offset = offset;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}
