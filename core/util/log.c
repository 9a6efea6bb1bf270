/* core/util/log.c — message printing and the per-thread last error. */
#include "log.h"

#include <stdio.h>
#include <string.h>

static int g_level = BORA_LOG_INFO;
static _Thread_local char t_error[2048];

void bora_log_set_level(int level)
{
    g_level = level;
}
int bora_log_level_get(void)
{
    return g_level;
}

static const char *level_word(int level)
{
    switch (level) {
    case BORA_LOG_ERROR: return "error: ";
    case BORA_LOG_WARN: return "warning: ";
    case BORA_LOG_DEBUG: return "debug: ";
    default: return "";
    }
}

void bora_logv(int level, const char *prefix, const char *fmt, va_list ap)
{
    if (level > g_level)
        return;
    /* One fprintf per line so concurrent messages do not interleave mid-line. */
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "bora: %s%s%s%s\n", level_word(level), prefix ? prefix : "", prefix ? ": " : "",
            msg);
}

void bora_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bora_logv(level, NULL, fmt, ap);
    va_end(ap);
}

bora_status bora_error_setv(bora_status code, const char *prefix, const char *fmt, va_list ap)
{
    /* Formatted apart first: the arguments may include the current message, to wrap it. */
    char buf[sizeof t_error];
    int n = 0;
    if (prefix)
        n = snprintf(buf, sizeof buf, "%s: ", prefix);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = 0;
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    memcpy(t_error, buf, sizeof buf);
    return code < 0 ? code : BORA_ERR_INTERNAL;
}

bora_status bora_error_set(bora_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bora_status st = bora_error_setv(code, NULL, fmt, ap);
    va_end(ap);
    return st;
}

const char *bora_error_get(void)
{
    return t_error[0] ? t_error : "unknown error";
}
void bora_error_clear(void)
{
    t_error[0] = 0;
}

const char *bora_status_name(bora_status code)
{
    switch (code) {
    case BORA_OK: return "ok";
    case BORA_ERR_INVALID: return "invalid argument";
    case BORA_ERR_NOMEM: return "out of memory";
    case BORA_ERR_IO: return "i/o error";
    case BORA_ERR_UNSUPPORTED: return "unsupported";
    case BORA_ERR_NOT_FOUND: return "not found";
    case BORA_ERR_CONFIG: return "configuration error";
    case BORA_ERR_VERSION: return "version mismatch";
    case BORA_ERR_DEVICE: return "device error";
    case BORA_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
    }
}
