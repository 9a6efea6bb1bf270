/* core/cli/cmd_train.c — `bora train CONFIG.yaml [--force] [overrides]`. */
#include "../train/trainer.h"
#include "../util/log.h"
#include "cli.h"

#include <stdlib.h>
#include <string.h>

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
    int rc = 1;
    bora_registry *reg = bora_cli_load_plugins(cli);
    bora_cfg *cfg = bora_cfg_new();
    if (reg && cfg) {
        if (bora_cfg_parse_args(cfg, n, args) != BORA_OK && !bora_cfg_error_count(cfg))
            bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        else if (bora_cfg_error_count(cfg))
            bora_cfg_print_errors(cfg, stderr);
        else
            rc = bora_train(cfg, reg, &opts);
    }
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    free(args);
    return rc;
}
