/* core/cli/cmd_tokenize.c — `bora tokenize`: UTF-8 lines on stdin to JSON arrays of ids on
 * stdout (or, with --decode, arrays back to text), so any corpus can be checked against
 * another tokenizer line by line. */
#include "../data/tokenizer.h"
#include "../util/log.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parse "[1, 2, 3]" into ids; 0 on success. */
static int parse_ids(const char *line, bora_ids *ids)
{
    const char *p = line;
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p++ != '[')
        return -1;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ']')
            break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || bora_ids_push(ids, (int32_t)v) != BORA_OK)
            return -1;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ',')
            p++;
        else if (*p != ']')
            return -1;
    }
    p++;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return *p ? -1 : 0;
}

int bora_cmd_tokenize(const bora_cli *cli)
{
    const char *path = NULL;
    int special = 0, decode = 0;
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        if (!strcmp(a, "--tokenizer") && i + 1 < cli->argc)
            path = cli->argv[++i];
        else if (!strncmp(a, "--tokenizer=", 12))
            path = a + 12;
        else if (!strcmp(a, "--special"))
            special = 1;
        else if (!strcmp(a, "--decode"))
            decode = 1;
        else {
            bora_log(BORA_LOG_ERROR,
                     "tokenize: unexpected argument '%s' (see bora tokenize --help)", a);
            return 2;
        }
    }
    if (!path) {
        bora_log(BORA_LOG_ERROR, "tokenize: give --tokenizer PATH (a tokenizer.json or a folder)");
        return 2;
    }
    bora_tokenizer *t;
    if (bora_tokenizer_load(path, &t) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lineno = 0;
    int rc = 0;
    bora_ids ids = {0};
    while ((n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (n && line[n - 1] == '\n')
            line[--n] = 0;
        ids.n = 0;
        if (decode) {
            char *text;
            size_t len;
            if (parse_ids(line, &ids) ||
                bora_tokenizer_decode(t, ids.ids, ids.n, &text, &len) != BORA_OK) {
                bora_log(BORA_LOG_ERROR, "stdin:%ld: %s", lineno,
                         ids.n || line[0] == '[' ? bora_error_get()
                                                 : "expected a JSON array of ids");
                rc = 1;
                break;
            }
            fwrite(text, 1, len, stdout);
            fputc('\n', stdout);
            free(text);
            continue;
        }
        if (bora_tokenizer_encode(t, line, (size_t)n, special, &ids) != BORA_OK) {
            bora_log(BORA_LOG_ERROR, "stdin:%ld: %s", lineno, bora_error_get());
            rc = 1;
            break;
        }
        fputc('[', stdout);
        for (size_t i = 0; i < ids.n; i++)
            printf(i ? ",%d" : "%d", ids.ids[i]);
        fputs("]\n", stdout);
    }
    free(line);
    bora_ids_free(&ids);
    bora_tokenizer_free(t);
    if (fflush(stdout) != 0)
        rc = 1;
    return rc;
}
