/* core/cli/load.c — a trained model made ready to run (see load.h). */
#include "load.h"

#include "../ckpt/checkpoint.h"
#include "../hf/import.h"
#include "../util/log.h"

#include <string.h>

bora_status bora_load_model(const bora_cli *cli, const char *cmd, const char *checkpoint,
                            const char *hf, const char *tokenizer, bora_loaded *L)
{
    memset(L, 0, sizeof *L);
    L->checkpoint = checkpoint;
    L->hf = hf;
    L->reg = bora_cli_load_plugins(cli);
    L->cfg = bora_cfg_new();
    if (!L->reg || !L->cfg)
        return BORA_ERR_INVALID; /* reported */
    if (hf && bora_hf_apply_config(L->cfg, L->reg, hf) != BORA_OK) {
        bora_cfg_print_errors(L->cfg, stderr);
        return BORA_ERR_CONFIG;
    }
    if (!hf && bora_ckpt_load_config(checkpoint, L->cfg) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s: %s", cmd, bora_error_get());
        return BORA_ERR_CONFIG;
    }
    bora_config_check(L->cfg, L->reg, 1);
    if (bora_cfg_error_count(L->cfg)) {
        bora_cfg_print_errors(L->cfg, stderr);
        return BORA_ERR_CONFIG;
    }
    bora_config *root = bora_cfg_root(L->cfg), *mnode = bora_cfg_child(root, "model");
    bora_config *trainer = bora_cfg_child(root, "trainer");
    const char *tok_path = tokenizer, *backend_name = "auto";
    if (!tok_path)
        bora_cfg_string(bora_cfg_child(root, "data"), "tokenizer", "", &tok_path);
    bora_cfg_string(trainer, "backend", "auto", &backend_name);
    if (bora_tokenizer_load(tok_path, &L->tok) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s: the run's tokenizer: %s (--tokenizer PATH names it)", cmd,
                 bora_error_get());
        return BORA_ERR_CONFIG;
    }
    L->backend_entry = bora_registry_pick_backend(L->reg, backend_name);
    if (bora_config_select(mnode, BORA_KIND_MODEL, L->reg, &L->model_entry) != BORA_OK ||
        !L->backend_entry) {
        bora_log(BORA_LOG_ERROR, "%s: %s", cmd, bora_error_get());
        return BORA_ERR_CONFIG;
    }
    L->mops = (const bora_model_ops *)L->model_entry->ops;
    L->bops = (const bora_backend_ops *)L->backend_entry->ops;
    L->model_name = L->model_entry->ops->name;
    if (L->bops->create(&L->backend_entry->file->host, trainer, &L->be) != BORA_OK ||
        L->mops->create(&L->model_entry->file->host, mnode, &L->model) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s: %s", cmd, bora_error_get());
        return BORA_ERR_CONFIG;
    }
    L->store = g_store_new(L->bops, L->be, L->backend_entry->ops->name, 0);
    if (!L->store) {
        bora_log(BORA_LOG_ERROR, "out of memory");
        return BORA_ERR_NOMEM;
    }
    g_store_backend_abi(L->store, L->backend_entry->file->abi_minor);
    return BORA_OK;
}

bora_status bora_load_weights(bora_loaded *L, const char *cmd)
{
    bora_status st = g_store_materialize(L->store);
    if (st == BORA_OK)
        st = L->hf ? bora_hf_load_weights(L->store, L->hf, L->model_name, 1)
                   : bora_ckpt_load_model(L->store, L->checkpoint);
    if (st != BORA_OK)
        bora_log(BORA_LOG_ERROR, "%s: %s", cmd, bora_error_get());
    return st;
}

void bora_loaded_free(bora_loaded *L)
{
    bora_tokenizer_free(L->tok);
    g_store_free(L->store);
    if (L->model)
        L->mops->destroy(L->model);
    if (L->be)
        L->bops->destroy(L->be);
    bora_cfg_free(L->cfg);
    bora_registry_free(L->reg);
    memset(L, 0, sizeof *L);
}
