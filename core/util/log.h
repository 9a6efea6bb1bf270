/* core/util/log.h — the host's messages: levels, and the last error of the current thread. */
#ifndef BORA_CORE_LOG_H
#define BORA_CORE_LOG_H

#include <bora/host.h>
#include <stdarg.h>

/* Messages at or below this level are printed to stderr (default BORA_LOG_INFO). */
void bora_log_set_level(int level);
int bora_log_level_get(void);

/* Print "bora: <level>: <prefix>: message" (prefix may be NULL). */
void bora_logv(int level, const char *prefix, const char *fmt, va_list ap) BORA_PRINTF(3, 0);
void bora_log(int level, const char *fmt, ...) BORA_PRINTF(2, 3);

/* The calling thread's last error message: set by bora_error_set() and by plugins' fail(). */
bora_status bora_error_set(bora_status code, const char *fmt, ...) BORA_PRINTF(2, 3);
bora_status bora_error_setv(bora_status code, const char *prefix, const char *fmt, va_list ap)
    BORA_PRINTF(3, 0);
const char *bora_error_get(void);
void bora_error_clear(void);

/* A short name for a status code ("io error", "out of memory"). */
const char *bora_status_name(bora_status code);

#endif
