/* core/cli/cmd_export.c — `bora export --checkpoint DIR --out HF_DIR [...]`: a checkpoint's model
 * as a Hugging Face folder (core/hf/export.h). The model is built from the checkpoint's
 * trainer.json as bora generate builds it, and its weights come through the checkpoint loader, so
 * they are checked as every load checks them (digests, finite values, shapes) before any file is
 * written. */
#include "../ckpt/checkpoint.h"
#include "../config/schema.h"
#include "../graph/graph.h"
#include "../hf/export.h"
#include "../util/log.h"
#include "../util/str.h"
#include "cli.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct export_opts {
    const char *checkpoint, *out, *tokenizer;
    char out_buf[4096]; /* --out without trailing slashes */
    bora_hf_export hf;
} export_opts;

static int parse_opts(const bora_cli *cli, export_opts *o)
{
    memset(o, 0, sizeof *o);
    o->hf.dtype = BORA_DTYPE_F32;
    o->hf.max_shard_bytes = BORA_HF_DEFAULT_SHARD_BYTES;
    static const char *const known[] = {
        "--checkpoint",          "--out", "--tokenizer", "--dtype", "--force", "--max-shard-size",
        BORA_CLI_GLOBAL_OPTIONS, NULL};
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i], *v = i + 1 < cli->argc ? cli->argv[i + 1] : NULL;
        int takes = strcmp(a, "--force") != 0 && !strncmp(a, "--", 2);
        for (const char *const *k = known; takes && *k; k++)
            if (!strcmp(a, *k))
                takes = 2;
        if (takes == 2) {
            if (!v) {
                bora_log(BORA_LOG_ERROR, "export: %s needs a value", a);
                return 2;
            }
            i++;
        }
        if (!strcmp(a, "--checkpoint"))
            o->checkpoint = v;
        else if (!strcmp(a, "--out"))
            o->out = bora_hf_trim_slashes(v, o->out_buf, sizeof o->out_buf);
        else if (!strcmp(a, "--tokenizer"))
            o->tokenizer = v;
        else if (!strcmp(a, "--force"))
            o->hf.force = 1;
        else if (!strcmp(a, "--dtype") || !strcmp(a, "--max-shard-size")) {
            bora_status st = a[2] == 'd' ? bora_hf_parse_dtype(v, &o->hf.dtype)
                                         : bora_hf_parse_size(v, &o->hf.max_shard_bytes);
            if (st != BORA_OK) {
                bora_log(BORA_LOG_ERROR, "export: %s", bora_error_get());
                return 2;
            }
        } else
            return bora_cli_unknown_option("export", a, known);
    }
    if (!o->checkpoint || !o->out) {
        bora_log(BORA_LOG_ERROR,
                 "export: give --checkpoint DIR and --out DIR (bora export --help)");
        return 2;
    }
    return 0;
}

int bora_cmd_export(const bora_cli *cli)
{
    export_opts o;
    int rc = parse_opts(cli, &o);
    if (rc)
        return rc;
    rc = 1;
    /* --out is checked first: a refusal should not wait for the model to load */
    if (bora_hf_check_out(o.out, o.hf.force, o.checkpoint, o.tokenizer) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "export: %s", bora_error_get());
        return 1;
    }
    bora_registry *reg = bora_cli_load_plugins(cli);
    bora_cfg *cfg = bora_cfg_new();
    bora_backend *be = NULL;
    const bora_backend_ops *bops = NULL;
    bora_model *model = NULL;
    const bora_model_ops *mops = NULL;
    g_store *store = NULL;
    g_graph *g = NULL;
    char *block = NULL, *hf_config = NULL;
    bora_st_entry *tensors = NULL;
    char dir[4200];
    int64_t *steps = NULL;
    size_t n_steps = 0;
    if (!reg || !cfg)
        goto out;
    /* A run directory means its latest checkpoint, as bora eval takes it. */
    snprintf(dir, sizeof dir, "%s", o.checkpoint);
    if (bora_ckpt_list(o.checkpoint, &steps, &n_steps) == BORA_OK && n_steps)
        snprintf(dir, sizeof dir, "%s/step-%" PRId64, o.checkpoint, steps[n_steps - 1]);
    free(steps);
    if (bora_ckpt_load_config(dir, cfg) != BORA_OK) {
        bora_log(BORA_LOG_ERROR,
                 "export: checkpoint %s: %s; give a step-N directory bora train wrote, or its "
                 "run directory for the latest",
                 dir, bora_error_get());
        goto out;
    }
    bora_config_check(cfg, reg, 1);
    if (bora_cfg_error_count(cfg)) {
        bora_cfg_print_errors(cfg, stderr);
        goto out;
    }
    bora_config *root = bora_cfg_root(cfg), *mnode = bora_cfg_child(root, "model");
    bora_config *trainer = bora_cfg_child(root, "trainer");
    const char *backend_name = "auto", *run_tok = "";
    bora_cfg_string(trainer, "backend", "auto", &backend_name);
    bora_cfg_string(bora_cfg_child(root, "data"), "tokenizer", "", &run_tok);
    o.hf.out = o.out;
    o.hf.checkpoint = o.checkpoint;
    o.hf.tokenizer = o.tokenizer ? o.tokenizer : *run_tok ? run_tok : NULL;
    o.hf.tokenizer_required = o.tokenizer != NULL;
    const bora_entry *me, *be_entry = bora_registry_pick_backend(reg, backend_name);
    if (bora_config_select(mnode, BORA_KIND_MODEL, reg, &me) != BORA_OK || !be_entry) {
        bora_log(BORA_LOG_ERROR, "export: %s", bora_error_get());
        goto out;
    }
    mops = (const bora_model_ops *)me->ops;
    bops = (const bora_backend_ops *)be_entry->ops;
    if (!mops->hf_config) {
        bora_log(BORA_LOG_ERROR,
                 "export: model %s has no Hugging Face configuration (its plugin gives no "
                 "hf_config), so it cannot be exported",
                 me->ops->name);
        goto out;
    }
    if (bops->create(&be_entry->file->host, trainer, &be) != BORA_OK ||
        mops->create(&me->file->host, mnode, &model) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "export: %s", bora_error_get());
        goto out;
    }
    store = g_store_new(bops, be, be_entry->ops->name, 0);
    if (!store || !(g = g_graph_new(store, BORA_MODE_EVAL))) {
        bora_log(BORA_LOG_ERROR, "out of memory");
        goto out;
    }
    g_store_backend_abi(store, be_entry->file->abi_minor);
    /* the eval graph declares every parameter; it is never run */
    bora_tensor *logits = NULL;
    if (mops->build(model, &g->pub, BORA_MODE_EVAL, &logits) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "export: model %s: %s", me->ops->name, bora_error_get());
        goto out;
    }
    if (g_store_materialize(store) != BORA_OK || bora_ckpt_load_model(store, dir) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "export: %s", bora_error_get());
        goto out;
    }
    /* config.json into a buffer grown until it fits: a plugin may refuse a buffer too small
     * rather than give the size it needs */
    bora_status st = BORA_ERR_INTERNAL;
    for (size_t cap = 1 << 14, len = 0; st != BORA_OK && cap <= (1u << 26); cap *= 2) {
        free(hf_config);
        if (!(hf_config = malloc(cap)))
            break;
        st = mops->hf_config(model, hf_config, cap, &len);
        if (st == BORA_OK && len >= cap)
            st = BORA_ERR_INTERNAL;
    }
    block = malloc(store->param_bytes ? store->param_bytes : 1);
    tensors = calloc(store->n_slots ? store->n_slots : 1, sizeof *tensors);
    if (!hf_config || !block || !tensors) {
        bora_log(BORA_LOG_ERROR, "export: out of memory");
        goto out;
    }
    if (st != BORA_OK ||
        bops->copy_out(be, block, store->params, 0, store->param_bytes) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "export: %s", bora_error_get());
        goto out;
    }
    int64_t params = 0;
    for (size_t i = 0; i < store->n_slots; i++) {
        const g_slot *sl = &store->slots[i];
        tensors[i] = (bora_st_entry){sl->name, sl->dtype, sl->ndim, sl->dims, block + sl->offset};
        int64_t c = 1;
        for (int d = 0; d < sl->ndim; d++)
            c *= sl->dims[d];
        params += c;
    }
    bora_log(BORA_LOG_INFO, "export: %s, model %s: %zu tensors, %" PRId64 " parameters, as %s", dir,
             me->ops->name, store->n_slots, params, bora_st_dtype_name(o.hf.dtype));
    if (bora_hf_write(&o.hf, hf_config, tensors, store->n_slots) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "export: %s; nothing was written to %s", bora_error_get(), o.out);
        goto out;
    }
    printf("export: wrote %s (%s, %" PRId64 " parameters) from %s\n", o.out,
           bora_st_dtype_name(o.hf.dtype), params, dir);
    rc = 0;
out:
    free(tensors);
    free(block);
    free(hf_config);
    g_graph_free(g);
    g_store_free(store);
    if (model)
        mops->destroy(model);
    if (be)
        bops->destroy(be);
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}
