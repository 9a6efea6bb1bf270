/* core/cli/cli.h — what subcommands share: options common to all, and the plugin registry. */
#ifndef BORA_CORE_CLI_H
#define BORA_CORE_CLI_H

#include "../plugin/registry.h"

#include <stdio.h>

typedef struct bora_cli {
    const char **plugin_dirs; /* --plugin-dir, in order */
    size_t n_plugin_dirs;
    int argc; /* the command's own arguments, after the global options were taken out */
    char **argv;
} bora_cli;

/* The options main() takes for every command, for commands to list with their own when they
 * suggest the closest to an unknown one. */
#define BORA_CLI_GLOBAL_OPTIONS "--plugin-dir", "--verbose", "--quiet", "--help", "--version"

/* Report an option a command does not take, with the closest of known (NULL-terminated)
 * suggested: "bora runs: unknown option '--bd'; did you mean '--db'?". Returns 2. */
int bora_cli_unknown_option(const char *cmd, const char *arg, const char *const *known);

/* Build the search path (--plugin-dir, BORA_PLUGIN_PATH, this executable's plugin directory)
 * and load every plugin on it. NULL with the error printed when a --plugin-dir is missing. */
bora_registry *bora_cli_load_plugins(const bora_cli *cli);

int bora_cmd_plugins(const bora_cli *cli);
int bora_cmd_config(const bora_cli *cli);
int bora_cmd_graph(const bora_cli *cli);
int bora_cmd_tokenize(const bora_cli *cli);
int bora_cmd_train(const bora_cli *cli);
int bora_cmd_eval(const bora_cli *cli);
int bora_cmd_cache(const bora_cli *cli);
int bora_cmd_runs(const bora_cli *cli);
int bora_cmd_generate(const bora_cli *cli);
int bora_cmd_transcribe(const bora_cli *cli);
int bora_cmd_export(const bora_cli *cli);
int bora_cmd_import(const bora_cli *cli);
int bora_cmd_dashboard(const bora_cli *cli);
int bora_cmd_viz_logprobs(const bora_cli *cli);
int bora_cmd_wandb(const bora_cli *cli);
int bora_cmd_mel(const bora_cli *cli);

/* Print declared keys as an aligned table, one per line. */
void bora_cli_print_keys(FILE *out, const bora_key *keys, const char *indent);

#endif
