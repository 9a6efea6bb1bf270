/* tests/fuzz/fuzz_config.c — libFuzzer target for the YAML loader and the override parser.
 *
 * The first byte picks the mode: even loads the rest as a configuration file's text; odd reads
 * "key\nvalue" and applies it as a command-line override onto a small base configuration.
 * Either way every value is then read with every typed getter, the unread-key check runs, and
 * the tree is written out as YAML and JSON, so the whole path from bytes to messages is covered.
 * Build: cmake -DCMAKE_C_COMPILER=clang -DBORA_FUZZ=ON -DBORA_SANITIZE=address,undefined */
#include "config/config.h"

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
            bora_cfg_int(node, node->keys[k], 0, &i);
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
