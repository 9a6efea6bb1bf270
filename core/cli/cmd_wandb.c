/* core/cli/cmd_wandb.c — `bora wandb sync RUN`: upload the W&B spool a run left behind.
 *
 * The wandb tracker plugin owns the spool's format and the protocol; this command only creates
 * that tracker for the run with `sync: true` (upload what the spool holds, as the run recorded
 * it) and finishes it, waiting up to --timeout. Running it again is safe: the spool records
 * what the server acknowledged, and lines go to the offsets they had. */
#include "../config/config.h"
#include "../util/log.h"
#include "cli.h"

#include <bora/tracker.h>

#include <stdio.h>
#include <string.h>

static int sync_run(const bora_cli *cli, const char *run, const char *dir, const char *timeout)
{
    bora_registry *reg = bora_cli_load_plugins(cli);
    if (!reg)
        return 1;
    int rc = 1;
    bora_cfg *cfg = NULL;
    const bora_entry *e = bora_registry_find(reg, BORA_KIND_TRACKER, "wandb");
    if (!e) {
        bora_log(BORA_LOG_ERROR, "wandb sync: no wandb tracker plugin on the search path (see "
                                 "bora plugins)");
        goto out;
    }
    char text[8192];
    int n = snprintf(text, sizeof text, "sync: true\nfinish_timeout: \"%s\"\n", timeout);
    if (dir)
        n += snprintf(text + n, sizeof text - (size_t)n, "dir: \"%s\"\n", dir);
    if (n >= (int)sizeof text || strpbrk(timeout, "\"\\\n") || (dir && strpbrk(dir, "\"\\\n"))) {
        bora_log(BORA_LOG_ERROR, "wandb sync: --dir and --timeout take a path and a duration");
        goto out;
    }
    cfg = bora_cfg_new();
    if (!cfg || bora_cfg_load_string(cfg, "bora wandb sync", text, strlen(text)) != BORA_OK) {
        bora_cfg_print_errors(cfg, stderr);
        goto out;
    }
    bora_config *node = bora_cfg_root(cfg);
    bora_cfg_claim(node, "tracker", e->ops->keys);
    const bora_tracker_ops *ops = (const bora_tracker_ops *)e->ops;
    bora_tracker *t = NULL;
    if (ops->create(&e->file->host, node, run, &t) != BORA_OK) {
        if (bora_cfg_error_count(cfg))
            bora_cfg_print_errors(cfg, stderr);
        else
            bora_log(BORA_LOG_ERROR, "wandb sync: %s", bora_error_get());
        goto out;
    }
    bora_status st = ops->finish ? ops->finish(t, BORA_RUN_FINISHED) : BORA_OK;
    if (st != BORA_OK)
        bora_log(BORA_LOG_ERROR, "wandb sync: %s", bora_error_get());
    else
        printf("wandb sync: run %s uploaded\n", run);
    ops->destroy(t);
    rc = st == BORA_OK ? 0 : 1;
out:
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}

int bora_cmd_wandb(const bora_cli *cli)
{
    static const char *const known[] = {"--dir", "--timeout", BORA_CLI_GLOBAL_OPTIONS, NULL};
    const char *run = NULL, *dir = NULL, *timeout = "10m";
    if (cli->argc < 1 || strcmp(cli->argv[0], "sync") != 0) {
        bora_log(BORA_LOG_ERROR, "wandb: usage: bora wandb sync RUN [--dir DIR] [--timeout T] "
                                 "(see bora wandb --help)");
        return 2;
    }
    for (int i = 1; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        const char **slot = strcmp(a, "--dir") == 0 || strncmp(a, "--dir=", 6) == 0 ? &dir
                            : strcmp(a, "--timeout") == 0 || strncmp(a, "--timeout=", 10) == 0
                                ? &timeout
                                : NULL;
        if (slot) {
            const char *eq = strchr(a, '=');
            const char *v = eq ? eq + 1 : (i + 1 < cli->argc ? cli->argv[++i] : NULL);
            if (!v || !*v) {
                bora_log(BORA_LOG_ERROR, "wandb sync: %.*s needs a value", (int)strcspn(a, "="), a);
                return 2;
            }
            *slot = v;
        } else if (a[0] == '-') {
            return bora_cli_unknown_option("wandb sync", a, known);
        } else if (!run) {
            run = a;
        } else {
            bora_log(BORA_LOG_ERROR, "wandb sync: one run at a time ('%s' and '%s')", run, a);
            return 2;
        }
    }
    if (!run) {
        bora_log(BORA_LOG_ERROR, "wandb sync: which run? bora wandb sync RUN (its trainer.id)");
        return 2;
    }
    return sync_run(cli, run, dir, timeout);
}
