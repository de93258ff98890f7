/*
 * status.c - the status table and error reporting.
 */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

const char *
lmca_status_name(int status)
{
    switch (status) {
#define LMCA__NAME_CASE(name, value, text) \
    case LMCA_##name:                      \
        return #name;
        LMCA_STATUS_MAP(LMCA__NAME_CASE)
#undef LMCA__NAME_CASE
    }
    return "UNKNOWN_STATUS";
}

const char *
lmca_strerror(int status)
{
    switch (status) {
#define LMCA__TEXT_CASE(name, value, text) \
    case LMCA_##name:                      \
        return text;
        LMCA_STATUS_MAP(LMCA__TEXT_CASE)
#undef LMCA__TEXT_CASE
    }
    return "unknown status";
}

int
lmca__fail(lmca_err_t *err, int status, int as_code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        err->status = status;
        err->as_code = as_code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap); /* truncates; always NUL-ends */
        va_end(ap);
    }
    return status;
}

void
lmca__log(const lmca_config_t *cfg, int level, const char *fmt, ...)
{
    char line[512];
    va_list ap;

    if (cfg == NULL || cfg->log_cb == NULL)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    cfg->log_cb(cfg->log_udata, level, line);
}
