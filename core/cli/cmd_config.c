/* core/cli/cmd_config.c — `bora config show` (the resolved configuration, defaults filled in)
 * and `bora config keys` (the documented keys of a section or a component). */
#include "../config/schema.h"
#include "../util/log.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char *key_type_name(int t)
{
    static const char *const names[] = {"?",        "int",   "float", "bool", "string",
                                        "duration", "bytes", "list",  "map",  "component"};
    return t > 0 && t < (int)(sizeof names / sizeof names[0]) ? names[t] : "?";
}

void bora_cli_print_keys(FILE *out, const bora_key *keys, const char *indent)
{
    if (!keys || !keys->name) {
        fprintf(out, "%s(no keys)\n", indent);
        return;
    }
    int wn = 4, wd = 7;
    for (const bora_key *k = keys; k->name; k++) {
        if ((int)strlen(k->name) > wn)
            wn = (int)strlen(k->name);
        if (k->default_value && (int)strlen(k->default_value) > wd)
            wd = (int)strlen(k->default_value);
    }
    fprintf(out, "%s%-*s  %-9s  %-*s  %s\n", indent, wn, "KEY", "TYPE", wd, "DEFAULT", "MEANING");
    for (const bora_key *k = keys; k->name; k++)
        fprintf(out, "%s%-*s  %-9s  %-*s  %s\n", indent, wn, k->name, key_type_name(k->type), wd,
                k->default_value ? k->default_value : "(required)", k->doc ? k->doc : "");
}

static int config_show(const bora_cli *cli, int argc, char **argv)
{
    int json = 0, n = 0;
    char **rest = argv; /* compacted in place: what is not ours goes to the parser */
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else
            rest[n++] = argv[i];
    }
    if (n == 0) {
        bora_log(BORA_LOG_ERROR, "config show: give a configuration file (bora config show "
                                 "run.yaml [--section.key=value ...])");
        return 2;
    }
    bora_registry *reg = bora_cli_load_plugins(cli);
    if (!reg)
        return 1;
    bora_cfg *cfg = bora_cfg_new();
    if (!cfg) {
        bora_registry_free(reg);
        return 1;
    }
    /* Syntax errors stop here; otherwise every problem of every file is collected. */
    static const char *const options[] = {"--json", BORA_CLI_GLOBAL_OPTIONS, NULL};
    if (bora_cfg_parse_args(cfg, n, rest, options) == BORA_OK)
        bora_config_check(cfg, reg, 1);
    int rc = 0;
    if (bora_cfg_error_count(cfg)) {
        bora_cfg_print_errors(cfg, stderr);
        fprintf(stderr, "bora: %zu error%s in the configuration\n", bora_cfg_error_count(cfg),
                bora_cfg_error_count(cfg) == 1 ? "" : "s");
        rc = 1;
    } else if (json) {
        bora_cfg_write_json(bora_cfg_root(cfg), stdout);
        fputc('\n', stdout);
    } else {
        bora_cfg_write_yaml(bora_cfg_root(cfg), stdout);
    }
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}

static int config_keys(const bora_cli *cli, int argc, char **argv)
{
    if (argc == 0) {
        printf("Sections (bora config keys SECTION):\n");
        for (const bora_section *s = bora_sections(); s->name; s++)
            printf("  %-22s %s\n", s->name, s->summary);
        printf("\nComponents (bora config keys KIND NAME; bora plugins lists them):\n"
               "  model NAME, optimizer NAME, tracker NAME, backend NAME\n");
        return 0;
    }
    if (argc == 1) {
        const bora_section *s = bora_section_find(argv[0]);
        if (!s) {
            bora_log(BORA_LOG_ERROR,
                     "config keys: no section '%s' (see bora config keys); for a plugin's keys "
                     "give its kind and name, e.g. bora config keys model gpt2",
                     argv[0]);
            return 2;
        }
        printf("%s: %s\n", s->name, s->summary);
        bora_cli_print_keys(stdout, s->keys, "  ");
        if (s->kind)
            printf("  ... and the keys of the chosen %s: bora config keys %s NAME\n", s->name,
                   s->name);
        return 0;
    }
    if (argc != 2) {
        bora_log(BORA_LOG_ERROR, "config keys: expected SECTION or KIND NAME");
        return 2;
    }
    int kind = bora_kind_parse(argv[0]);
    if (!kind) {
        bora_log(BORA_LOG_ERROR,
                 "config keys: unknown kind '%s' (model, optimizer, backend or "
                 "tracker)",
                 argv[0]);
        return 2;
    }
    bora_registry *reg = bora_cli_load_plugins(cli);
    if (!reg)
        return 1;
    const bora_entry *e = bora_registry_find(reg, kind, argv[1]);
    int rc = 0;
    if (!e) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        rc = 1;
    } else {
        printf("%s %s: %s\n", bora_kind_name(kind), e->ops->name,
               e->ops->summary ? e->ops->summary : "");
        bora_cli_print_keys(stdout, e->ops->keys, "  ");
    }
    bora_registry_free(reg);
    return rc;
}

int bora_cmd_config(const bora_cli *cli)
{
    if (cli->argc < 1) {
        bora_log(BORA_LOG_ERROR, "config: expected 'show' or 'keys' (see bora config --help)");
        return 2;
    }
    const char *sub = cli->argv[0];
    if (!strcmp(sub, "show"))
        return config_show(cli, cli->argc - 1, cli->argv + 1);
    if (!strcmp(sub, "keys"))
        return config_keys(cli, cli->argc - 1, cli->argv + 1);
    bora_log(BORA_LOG_ERROR, "config: unknown subcommand '%s' (show or keys)", sub);
    return 2;
}
