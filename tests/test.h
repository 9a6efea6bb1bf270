/* tests/test.h — the few helpers bora's test programs share: checks that count failures, and
 * running a command with its output captured. */
#ifndef BORA_TEST_H
#define BORA_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int test_failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            test_failures++;                                                         \
        }                                                                            \
    } while (0)

/* Check that text contains needle, printing the text when it does not. */
#define CHECK_CONTAINS(text, needle)                                                        \
    do {                                                                                    \
        if (!strstr((text), (needle))) {                                                    \
            fprintf(stderr, "%s:%d: expected to find \"%s\" in:\n%s\n", __FILE__, __LINE__, \
                    (needle), (text));                                                      \
            test_failures++;                                                                \
        }                                                                                   \
    } while (0)

#define CHECK_LACKS(text, needle)                                                         \
    do {                                                                                  \
        if (strstr((text), (needle))) {                                                   \
            fprintf(stderr, "%s:%d: did not expect \"%s\" in:\n%s\n", __FILE__, __LINE__, \
                    (needle), (text));                                                    \
            test_failures++;                                                              \
        }                                                                                 \
    } while (0)

/* Run a shell command, returning its exit status and its stdout+stderr in out (malloc'ed). */
static inline int test_run(const char *cmd, char **out)
{
    char full[8192];
    snprintf(full, sizeof full, "(%s) 2>&1", cmd);
    FILE *p = popen(full, "r");
    if (!p) {
        *out = strdup("");
        return -1;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown)
                break;
            buf = grown;
        }
    }
    if (buf)
        buf[len] = 0;
    int status = pclose(p);
    *out = buf ? buf : strdup("");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static inline int test_summary(const char *name)
{
    if (test_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
    else
        printf("%s: all checks passed\n", name);
    return test_failures ? 1 : 0;
}

#endif
