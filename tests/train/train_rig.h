/* tests/train/train_rig.h — what the in-process training tests share: run bora_train on a YAML
 * text with the plugins of a directory, and read back the loss of each step a jsonl tracker
 * logged. */
#ifndef BORA_TEST_TRAIN_RIG_H
#define BORA_TEST_TRAIN_RIG_H

#include "config/config.h"
#include "plugin/registry.h"
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bora_train's exit status for the configuration in yaml (1 when it does not parse). */
static inline int train_yaml(const char *plugin_dir, const char *name, const char *yaml)
{
    bora_registry *reg = bora_registry_new();
    bora_registry_add_dir(reg, plugin_dir, 1);
    bora_registry_load(reg);
    bora_cfg *cfg = bora_cfg_new();
    int rc = 1;
    if (bora_cfg_load_string(cfg, name, yaml, strlen(yaml)) == BORA_OK)
        rc = bora_train(cfg, reg, NULL);
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}

/* The train/loss values of a jsonl tracker's file, in order; how many were read. */
static inline int read_losses(const char *path, double *out, int cap)
{
    char line[4096];
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "\"train/loss\":");
        if (at && n < cap)
            out[n++] = strtod(at + 13, NULL);
    }
    if (f)
        fclose(f);
    return n;
}

#endif
