/* core/cli/cmd_plugins.c — `bora plugins`: what the search path offers, and what it refused. */
#include "../util/log.h"
#include "../util/str.h"
#include "bora_version.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bora_registry *bora_cli_load_plugins(const bora_cli *cli)
{
    bora_registry *reg = bora_registry_new();
    if (!reg) {
        bora_log(BORA_LOG_ERROR, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < cli->n_plugin_dirs; i++) {
        if (bora_registry_add_dir(reg, cli->plugin_dirs[i], 1) != BORA_OK) {
            bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
            bora_registry_free(reg);
            return NULL;
        }
    }
    const char *env = getenv("BORA_PLUGIN_PATH");
    char def[4096];
    if ((env && bora_registry_add_path_list(reg, env) != BORA_OK) ||
        (bora_default_plugin_dir(def, sizeof def) == BORA_OK &&
         bora_registry_add_dir(reg, def, 0) != BORA_OK)) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        bora_registry_free(reg);
        return NULL;
    }
    bora_registry_load(reg);
    return reg;
}

static int print_json(const bora_registry *reg)
{
    printf("{\"host\":{\"version\":");
    bora_json_string(stdout, BORA_VERSION);
    printf(",\"abi\":\"%d.%d\",\"commit\":", BORA_ABI_MAJOR, BORA_ABI_MINOR);
    bora_json_string(stdout, BORA_GIT_COMMIT);
    printf("},\n\"search_path\":[");
    for (size_t i = 0; i < reg->n_dirs; i++) {
        printf(i ? "," : "");
        bora_json_string(stdout, reg->dirs[i]);
    }
    printf("],\n\"components\":[");
    for (size_t i = 0; i < reg->n_entries; i++) {
        const bora_entry *e = &reg->entries[i];
        printf("%s\n{\"kind\":\"%s\",\"name\":", i ? "," : "", bora_kind_name(e->kind));
        bora_json_string(stdout, e->ops->name);
        printf(",\"plugin\":");
        bora_json_string(stdout, e->file->name);
        printf(",\"version\":");
        bora_json_string(stdout, e->file->version);
        printf(",\"abi\":\"%u.%u\",\"file\":", e->file->abi_major, e->file->abi_minor);
        bora_json_string(stdout, e->file->path);
        printf(",\"summary\":");
        bora_json_string(stdout, e->ops->summary ? e->ops->summary : "");
        printf("}");
    }
    printf("],\n\"unavailable\":[");
    int first = 1;
    for (size_t i = 0; i < reg->n_files; i++) {
        const bora_plugin_file *f = reg->files[i];
        if (f->state != BORA_FILE_UNAVAILABLE)
            continue;
        printf("%s\n{\"file\":", first ? "" : ",");
        bora_json_string(stdout, f->path);
        printf(",\"reason\":");
        bora_json_string(stdout, f->reason);
        printf("}");
        first = 0;
    }
    printf("],\n\"refused\":[");
    for (size_t i = 0; i < reg->n_refusals; i++) {
        printf("%s\n{\"file\":", i ? "," : "");
        bora_json_string(stdout, reg->refusals[i].path);
        printf(",\"reason\":");
        bora_json_string(stdout, reg->refusals[i].reason);
        printf("}");
    }
    printf("]}\n");
    return 0;
}

static int print_table(const bora_registry *reg)
{
    if (reg->n_entries == 0) {
        printf("No plugins found.\n");
    } else {
        printf("%-10s %-16s %-10s %-5s %s\n", "KIND", "NAME", "VERSION", "ABI", "FILE");
        /* Grouped by kind, in load order within a kind. */
        for (int kind = BORA_KIND_MODEL; kind <= BORA_KIND_TRACKER; kind++)
            for (size_t i = 0; i < reg->n_entries; i++) {
                const bora_entry *e = &reg->entries[i];
                if (e->kind != kind)
                    continue;
                char abi[32];
                snprintf(abi, sizeof abi, "%u.%u", e->file->abi_major, e->file->abi_minor);
                printf("%-10s %-16s %-10s %-5s %s\n", bora_kind_name(e->kind), e->ops->name,
                       e->file->version, abi, e->file->path);
            }
    }
    int header = 0;
    for (size_t i = 0; i < reg->n_files; i++) {
        const bora_plugin_file *f = reg->files[i];
        if (f->state != BORA_FILE_UNAVAILABLE)
            continue;
        if (!header++)
            printf("\nUnavailable (needed only if a configuration names them):\n");
        printf("  %s: %s\n", f->path, f->reason);
    }
    if (reg->n_refusals) {
        printf("\nRefused:\n");
        for (size_t i = 0; i < reg->n_refusals; i++)
            printf("  %s: %s\n", reg->refusals[i].path, reg->refusals[i].reason);
    }
    printf("\nSearch path:%s\n", reg->n_dirs ? "" : " (empty)");
    for (size_t i = 0; i < reg->n_dirs; i++)
        printf("  %s\n", reg->dirs[i]);
    return 0;
}

static int print_one(const bora_registry *reg, const char *kind_s, const char *name)
{
    int kind = bora_kind_parse(kind_s);
    if (!kind) {
        bora_log(BORA_LOG_ERROR, "unknown kind '%s' (model, optimizer, backend or tracker)",
                 kind_s);
        return 2;
    }
    const bora_entry *e = bora_registry_find(reg, kind, name);
    if (!e) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        return 1;
    }
    printf("%s %s\n", bora_kind_name(e->kind), e->ops->name);
    if (e->ops->summary)
        printf("  %s\n", e->ops->summary);
    printf("  plugin:  %s %s (ABI %u.%u)\n  file:    %s\n", e->file->name, e->file->version,
           e->file->abi_major, e->file->abi_minor, e->file->path);
    printf("  keys:\n");
    bora_cli_print_keys(stdout, e->ops->keys, "    ");
    return 0;
}

int bora_cmd_plugins(const bora_cli *cli)
{
    int json = 0;
    const char *pos[2];
    int n_pos = 0;
    for (int i = 0; i < cli->argc; i++) {
        if (strcmp(cli->argv[i], "--json") == 0) {
            json = 1;
        } else if (cli->argv[i][0] != '-' && n_pos < 2) {
            pos[n_pos++] = cli->argv[i];
        } else {
            bora_log(BORA_LOG_ERROR, "plugins: unexpected argument '%s' (see bora plugins --help)",
                     cli->argv[i]);
            return 2;
        }
    }
    if (n_pos == 1) {
        bora_log(BORA_LOG_ERROR,
                 "plugins: give both KIND and NAME, e.g. bora plugins tracker jsonl");
        return 2;
    }
    bora_registry *reg = bora_cli_load_plugins(cli);
    if (!reg)
        return 1;
    int rc;
    if (n_pos == 2)
        rc = print_one(reg, pos[0], pos[1]);
    else
        rc = json ? print_json(reg) : print_table(reg);
    bora_registry_free(reg);
    return rc;
}
