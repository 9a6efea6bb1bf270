/* tests/fuzz/fuzz_config.c — libFuzzer target for the YAML loader and the override parser.
 *
 * The first byte picks the mode: even loads the rest as a configuration file's text; 1 (mod 4)
 * reads "key\nvalue" and applies it as a command-line override onto a small base configuration;
 * 3 (mod 4) splits the rest at newlines into a command line (options, --a.b=v and --a.b v
 * overrides; files and --config are dropped so that nothing is read from disk) for
 * bora_cfg_parse_args. Either way every value is then read with every typed getter (an integer
 * read must print and read back as itself), the unread-key check runs, and the tree is written
 * out as YAML and JSON, so the whole path from bytes to messages is covered.
 * Build: cmake -DCMAKE_C_COMPILER=clang -DBORA_FUZZ=ON -DBORA_SANITIZE=address,undefined */
#include "config/config.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *sink;

static void read_everything(struct bora_config *node)
{
    int64_t i;
    double d;
    int b;
    const char *s;
    uint64_t u;
    size_t n;
    if (node->kind == BORA_NODE_MAP) {
        for (size_t k = 0; k < node->n; k++) {
            if (bora_cfg_int(node, node->keys[k], 0, &i) == BORA_OK) {
                /* exact: the value read is the one printed, whatever form it was written in */
                char text[32];
                int64_t again;
                snprintf(text, sizeof text, "%" PRId64, i);
                if (bora_parse_int(text, &again) != 0 || again != i)
                    __builtin_trap();
            }
            bora_cfg_float(node, node->keys[k], 0, &d);
            bora_cfg_bool(node, node->keys[k], 0, &b);
            bora_cfg_string(node, node->keys[k], NULL, &s);
            bora_cfg_duration(node, node->keys[k], 0, &d);
            bora_cfg_bytes(node, node->keys[k], 0, &u);
            bora_cfg_list_len(node, node->keys[k], &n);
            if (k % 2 == 0) /* leave some keys unread for the unread check */
                read_everything(bora_cfg_child(node, node->keys[k]));
        }
    } else if (node->kind == BORA_NODE_LIST) {
        for (size_t k = 0; k < node->n; k++)
            read_everything(bora_cfg_at(node, k));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    if (!sink)
        sink = fopen("/dev/null", "w");
    bora_cfg *cfg = bora_cfg_new();
    if (!cfg)
        return 0;
    if ((data[0] & 1) == 0) {
        bora_cfg_load_string(cfg, "fuzz.yaml", (const char *)data + 1, size - 1);
    } else if ((data[0] & 3) == 3) {
        static const char base[] = "model: {type: x, n: 1}\ntrainer: {seed: 1}\n";
        static const char *const options[] = {"--force", "--json", "--plugin-dir", NULL};
        bora_cfg_load_string(cfg, "base.yaml", base, sizeof base - 1);
        char *text = malloc(size);
        char **argv = calloc(size, sizeof *argv);
        int argc = 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        for (char *save = NULL, *a = strtok_r(text, "\n", &save); a;
             a = strtok_r(NULL, "\n", &save))
            if (a[0] == '-' && strncmp(a, "--config", 8) != 0)
                argv[argc++] = a;
        bora_cfg_parse_args(cfg, argc, argv, options);
        free(argv);
        free(text);
    } else {
        static const char base[] = "model:\n  type: x\n  n: [1, {a: b}]\ntrainer: {seed: 1}\n";
        bora_cfg_load_string(cfg, "base.yaml", base, sizeof base - 1);
        char *text = malloc(size);
        memcpy(text, data + 1, size - 1);
        text[size - 1] = 0;
        char *nl = strchr(text, '\n');
        if (nl) {
            *nl = 0;
            bora_cfg_override(cfg, text, nl + 1);
        }
        free(text);
    }
    struct bora_config *root = bora_cfg_root(cfg);
    bora_cfg_claim(root, NULL, NULL);
    read_everything(root);
    bora_cfg_check_unread(cfg);
    bora_cfg_write_yaml(root, sink);
    bora_cfg_write_json(root, sink);
    bora_cfg_print_errors(cfg, sink);
    bora_cfg_free(cfg);
    return 0;
}
