/* tests/core/drive_tracker.c — loads the plugins of a directory and drives one tracker through
 * all five calls, as the training loop will: create, log_hparams, log x3, log_summary,
 * log_artifact, finish, destroy. Optional calls the tracker lacks are skipped. The caller
 * checks what the tracker wrote.
 *
 * With CONFIG.yaml, the tracker is created from that file's top-level mapping through the host's
 * configuration getters, and keys it did not read are reported as they will be for a run.
 *
 * usage: drive_tracker PLUGIN_DIR TRACKER_NAME RUN_ID [CONFIG.yaml] */
#include "config/config.h"
#include "plugin/registry.h"
#include "util/log.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: drive_tracker PLUGIN_DIR TRACKER_NAME RUN_ID [CONFIG.yaml]\n");
        return 2;
    }
    bora_registry *reg = bora_registry_new();
    if (!reg || bora_registry_add_dir(reg, argv[1], 1) != BORA_OK) {
        fprintf(stderr, "drive_tracker: %s\n", bora_error_get());
        return 1;
    }
    bora_registry_load(reg);
    const bora_entry *e = bora_registry_find(reg, BORA_KIND_TRACKER, argv[2]);
    if (!e) {
        fprintf(stderr, "drive_tracker: %s\n", bora_error_get());
        bora_registry_free(reg);
        return 1;
    }
    const bora_tracker_ops *ops = (const bora_tracker_ops *)e->ops;
    bora_tracker *t = NULL;
    bora_cfg *cfg = bora_cfg_new();
    bora_config *node = NULL;
    if (argc == 5) {
        if (!cfg || bora_cfg_load_file(cfg, argv[4]) != BORA_OK) {
            bora_cfg_print_errors(cfg, stderr);
            return 1;
        }
        node = bora_cfg_root(cfg);
        bora_cfg_claim(node, "tracker", e->ops->keys);
    }
    bora_status st = ops->create(&e->file->host, node, argv[3], &t);
    if (st == BORA_OK && node && bora_cfg_check_unread(cfg) != BORA_OK)
        st = BORA_ERR_CONFIG;
    if (st != BORA_OK && bora_cfg_error_count(cfg)) {
        bora_cfg_print_errors(cfg, stderr);
        if (t)
            ops->destroy(t);
        bora_cfg_free(cfg);
        bora_registry_free(reg);
        return 1;
    }
    if (st == BORA_OK && ops->log_hparams)
        st = ops->log_hparams(t, "{\"model\":{\"type\":\"gpt2\"}}");
    for (int step = 0; step < 3 && st == BORA_OK; step++) {
        bora_metric m[2] = {{"train/loss", 4.0 - step * 0.5}, {"optim/learning_rate", 1e-3}};
        st = ops->log(t, step, m, 2);
    }
    bora_metric summary = {"eval/loss", 2.25};
    if (st == BORA_OK && ops->log_summary)
        st = ops->log_summary(t, &summary, 1);
    if (st == BORA_OK && ops->log_artifact)
        st = ops->log_artifact(t, "ckpt/step-3", "step-3", "checkpoint");
    if (st == BORA_OK && ops->finish)
        st = ops->finish(t, BORA_RUN_FINISHED);
    if (t)
        ops->destroy(t);
    if (st != BORA_OK)
        fprintf(stderr, "drive_tracker: %s (%s)\n", bora_error_get(), bora_status_name(st));
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return st == BORA_OK ? 0 : 1;
}
