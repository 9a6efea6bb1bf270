/* core/cli/cmd_train.c — `bora train CONFIG.yaml [--force] [overrides]`,
 * `bora eval CONFIG.yaml --checkpoint DIR | --hf DIR [--json] [--max-clips N] [overrides]` and
 * `bora cache CONFIG.yaml [--workers N] [--rebuild] [overrides]`. */
#include "../dist/dist.h"
#include "../train/trainer.h"
#include "../util/log.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each command's own options, for the suggestion when one is mistyped. */
static const char *const train_options[] = {"--force", BORA_CLI_GLOBAL_OPTIONS, NULL};
static const char *const eval_options[] = {"--checkpoint",          "--hf", "--json", "--max-clips",
                                           BORA_CLI_GLOBAL_OPTIONS, NULL};
static const char *const cache_options[] = {"--workers", "--rebuild", BORA_CLI_GLOBAL_OPTIONS,
                                            NULL};

/* Load the plugins, parse the configuration files and overrides in args, then run: its exit
 * status, or 1 when loading or parsing failed (reported). */
static int with_config(const bora_cli *cli, int n, char **args, const char *const *options,
                       int (*run)(bora_cfg *, bora_registry *, void *), void *ctx)
{
    int rc = 1;
    bora_registry *reg = bora_cli_load_plugins(cli);
    bora_cfg *cfg = bora_cfg_new();
    if (reg && cfg) {
        if (bora_cfg_parse_args(cfg, n, args, options) != BORA_OK && !bora_cfg_error_count(cfg))
            bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        else if (bora_cfg_error_count(cfg))
            bora_cfg_print_errors(cfg, stderr);
        else
            rc = run(cfg, reg, ctx);
    }
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}

static int run_train(bora_cfg *cfg, bora_registry *reg, void *opts)
{
    return bora_train(cfg, reg, opts);
}

typedef struct eval_args {
    const char *checkpoint, *hf;
    int json;
    int64_t max_clips; /* the word error rate's clips: -1 all, 0 none */
} eval_args;

static int run_eval(bora_cfg *cfg, bora_registry *reg, void *ctx)
{
    const eval_args *e = ctx;
    return e->hf ? bora_evaluate_hf(cfg, reg, e->hf, e->json, e->max_clips)
                 : bora_evaluate(cfg, reg, e->checkpoint, e->json, e->max_clips);
}

int bora_cmd_train(const bora_cli *cli)
{
    if (cli->argc < 1) {
        bora_log(BORA_LOG_ERROR, "train: give a configuration file (bora train run.yaml)");
        return 2;
    }
    bora_train_opts opts = {0};
    char **args = calloc((size_t)cli->argc + 1, sizeof *args);
    int n = 0;
    if (!args)
        return 1;
    for (int i = 0; i < cli->argc; i++) {
        if (!strcmp(cli->argv[i], "--force"))
            opts.force = 1;
        else
            args[n++] = cli->argv[i];
    }
    /* Under mpirun or srun, one of several processes (core/dist): rank 0 alone prints; a rank
     * that fails ends them all, its message printed first. */
    if (bora_dist_init() != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "train: %s", bora_error_get());
        free(args);
        return 1;
    }
    const bora_dist *dist = bora_dist_get();
    if (dist->rank > 0) {
        if (bora_log_level_get() > BORA_LOG_WARN)
            bora_log_set_level(BORA_LOG_WARN);
        if (!freopen("/dev/null", "w", stdout))
            bora_log(BORA_LOG_WARN, "rank %d: cannot quiet its standard output", dist->rank);
    }
    int rc = with_config(cli, n, args, train_options, run_train, &opts);
    free(args);
    if (rc != 0 && rc != 130 && dist->size > 1) {
        bora_log(BORA_LOG_ERROR, "rank %d of %d failed (exit status %d): ending every rank",
                 dist->rank, dist->size, rc);
        bora_dist_abort(rc);
    }
    bora_dist_finalize();
    return rc;
}

int bora_cmd_eval(const bora_cli *cli)
{
    const char *checkpoint = NULL, *hf = NULL;
    int json = 0, n = 0, rc = 1;
    int64_t max_clips = -1;
    char **args = calloc((size_t)cli->argc + 1, sizeof *args);
    if (!args)
        return 1;
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        if (!strcmp(a, "--checkpoint") || !strncmp(a, "--checkpoint=", 13)) {
            checkpoint = a[12] == '=' ? a + 13 : (i + 1 < cli->argc ? cli->argv[++i] : NULL);
            if (!checkpoint || !*checkpoint) {
                bora_log(BORA_LOG_ERROR, "eval: --checkpoint needs a directory");
                free(args);
                return 2;
            }
        } else if (!strcmp(a, "--hf") || !strncmp(a, "--hf=", 5)) {
            hf = a[4] == '=' ? a + 5 : (i + 1 < cli->argc ? cli->argv[++i] : NULL);
            if (!hf || !*hf) {
                bora_log(BORA_LOG_ERROR, "eval: --hf needs a Hugging Face folder");
                free(args);
                return 2;
            }
        } else if (!strcmp(a, "--max-clips") || !strncmp(a, "--max-clips=", 12)) {
            const char *v = a[11] == '=' ? a + 12 : i + 1 < cli->argc ? cli->argv[++i] : "";
            char *end = NULL;
            max_clips = strtoll(v, &end, 10);
            if (!*v || *end || max_clips < 0) {
                bora_log(BORA_LOG_ERROR,
                         "eval: --max-clips: '%s' is not a count of clips (0: no word error "
                         "rate)",
                         v);
                free(args);
                return 2;
            }
        } else if (!strcmp(a, "--json"))
            json = 1;
        else
            args[n++] = cli->argv[i];
    }
    if (n < 1 || !checkpoint == !hf) {
        bora_log(BORA_LOG_ERROR, "eval: give a configuration and a checkpoint or a Hugging Face "
                                 "folder (bora eval run.yaml --checkpoint DIR, or --hf DIR)");
        free(args);
        return 2;
    }
    eval_args e = {checkpoint, hf, json, max_clips};
    rc = with_config(cli, n, args, eval_options, run_eval, &e);
    free(args);
    return rc;
}

typedef struct cache_args {
    int64_t workers;
    int rebuild;
} cache_args;

static int run_cache(bora_cfg *cfg, bora_registry *reg, void *ctx)
{
    const cache_args *c = ctx;
    return bora_cache_build(cfg, reg, c->workers, c->rebuild);
}

int bora_cmd_cache(const bora_cli *cli)
{
    cache_args c = {0, 0};
    int n = 0;
    char **args = calloc((size_t)cli->argc + 1, sizeof *args);
    if (!args)
        return 1;
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        if (!strcmp(a, "--rebuild")) {
            c.rebuild = 1;
        } else if (!strcmp(a, "--workers") || !strncmp(a, "--workers=", 10)) {
            char *end = NULL;
            const char *v = a[9] == '=' ? a + 10 : i + 1 < cli->argc ? cli->argv[++i] : "";
            c.workers = strtoll(v, &end, 10);
            if (!*v || *end || c.workers < 1 || c.workers > 256) {
                bora_log(BORA_LOG_ERROR, "cache: --workers: '%s' is not a number in 1..256", v);
                free(args);
                return 2;
            }
        } else {
            args[n++] = cli->argv[i];
        }
    }
    if (n < 1) {
        bora_log(BORA_LOG_ERROR, "cache: give a configuration file (bora cache run.yaml)");
        free(args);
        return 2;
    }
    int rc = with_config(cli, n, args, cache_options, run_cache, &c);
    free(args);
    return rc;
}
