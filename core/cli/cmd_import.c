/* core/cli/cmd_import.c — `bora import HF_DIR --out CKPT_DIR`: a Hugging Face folder made into a
 * checkpoint directory (model.safetensors in f32, trainer.json with the model section its
 * config.json maps to and the folder's tokenizer, digests; no optimizer state) that bora eval,
 * bora generate, trainer.load_checkpoint and trainer.initialize_from_hf take. The checkpoint is
 * written beside --out and renamed into place at the end, so --out is whole or absent.
 *
 * Also what generate --hf shares: the model of a folder, built and loaded (bora_hf_open). */
#include "../ckpt/checkpoint.h"
#include "../config/schema.h"
#include "../hf/export.h"
#include "../hf/import.h"
#include "../util/log.h"
#include "../util/str.h"
#include "cli.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const import_options[] = {"--out", "--hf", "--print-config",
                                             BORA_CLI_GLOBAL_OPTIONS, NULL};

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* The model of the folder's config.json in cfg (checked, defaults filled), and its entry. */
static bora_status folder_config(bora_cfg *cfg, bora_registry *reg, const char *hf,
                                 const bora_entry **me)
{
    if (bora_hf_apply_config(cfg, reg, hf) != BORA_OK)
        return BORA_ERR_CONFIG;
    bora_config_check(cfg, reg, 1);
    if (bora_cfg_error_count(cfg))
        return BORA_ERR_CONFIG;
    bora_config *mnode = bora_cfg_child(bora_cfg_root(cfg), "model");
    if (bora_config_select(mnode, BORA_KIND_MODEL, reg, me) != BORA_OK)
        return bora_cfg_error(cfg, NULL, "%s", bora_error_get());
    return BORA_OK;
}

/* --print-config: the model section the folder's config.json maps to, checked and with its
 * defaults, as JSON on stdout; the model is made (so its plugin checks the values) but no weight
 * is read. */
static int print_model_section(const bora_cli *cli, const char *hf)
{
    int rc = 1;
    bora_registry *reg = bora_cli_load_plugins(cli);
    bora_cfg *cfg = bora_cfg_new();
    const bora_entry *me = NULL;
    bora_model *model = NULL;
    if (!reg || !cfg)
        goto out;
    if (folder_config(cfg, reg, hf, &me) != BORA_OK) {
        bora_cfg_print_errors(cfg, stderr);
        goto out;
    }
    bora_config *mnode = bora_cfg_child(bora_cfg_root(cfg), "model");
    const bora_model_ops *mops = (const bora_model_ops *)me->ops;
    if (mops->create(&me->file->host, mnode, &model) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "import: %s/config.json: model %s: %s", hf, me->ops->name,
                 bora_error_get());
        goto out;
    }
    mops->destroy(model);
    bora_cfg_write_json(mnode, stdout);
    putchar('\n');
    rc = 0;
out:
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}

int bora_cmd_import(const bora_cli *cli)
{
    const char *hf = NULL, *out = NULL;
    char out_buf[4096];
    int print_config = 0;
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        const char **dst = !strcmp(a, "--out") ? &out : !strcmp(a, "--hf") ? &hf : NULL;
        if (!strcmp(a, "--print-config")) {
            print_config = 1;
        } else if (dst) {
            if (i + 1 >= cli->argc || !*cli->argv[i + 1]) {
                bora_log(BORA_LOG_ERROR, "import: %s needs a directory", a);
                return 2;
            }
            *dst = cli->argv[++i];
        } else if (a[0] == '-') {
            return bora_cli_unknown_option("import", a, import_options);
        } else if (!hf) {
            hf = a;
        } else {
            bora_log(BORA_LOG_ERROR, "import: one folder at a time ('%s' and '%s')", hf, a);
            return 2;
        }
    }
    if (out)
        out = bora_hf_trim_slashes(out, out_buf, sizeof out_buf);
    if (hf && print_config)
        return print_model_section(cli, hf);
    if (!hf || !out) {
        bora_log(BORA_LOG_ERROR, "import: give a Hugging Face folder and where the checkpoint "
                                 "goes (bora import HF_DIR --out CKPT_DIR)");
        return 2;
    }
    struct stat sb;
    if (lstat(out, &sb) == 0) {
        bora_log(BORA_LOG_ERROR, "import: %s exists; give --out a new directory (or remove it)",
                 out);
        return 1;
    }
    int rc = 1;
    bora_registry *reg = bora_cli_load_plugins(cli);
    bora_cfg *cfg = bora_cfg_new();
    const bora_entry *me = NULL, *be_entry = NULL;
    bora_backend *be = NULL;
    bora_model *model = NULL;
    g_store *store = NULL;
    g_graph *g = NULL;
    char *json = NULL, tmp[4200] = "", made[4300];
    size_t json_len = 0;
    FILE *js = NULL;
    if (!reg || !cfg)
        goto out;
    if (folder_config(cfg, reg, hf, &me) != BORA_OK) {
        bora_cfg_print_errors(cfg, stderr);
        goto out;
    }
    bora_config *root = bora_cfg_root(cfg), *mnode = bora_cfg_child(root, "model");
    const bora_model_ops *mops = (const bora_model_ops *)me->ops;
    if (!(be_entry = bora_registry_pick_backend(reg, "auto"))) {
        bora_log(BORA_LOG_ERROR, "import: %s", bora_error_get());
        goto out;
    }
    const bora_backend_ops *bops = (const bora_backend_ops *)be_entry->ops;
    if (bops->create(&be_entry->file->host, bora_cfg_child(root, "trainer"), &be) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "import: backend %s: %s", be_entry->ops->name, bora_error_get());
        goto out;
    }
    if (mops->create(&me->file->host, mnode, &model) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "import: %s/config.json: model %s: %s", hf, me->ops->name,
                 bora_error_get());
        goto out;
    }
    /* the parameters are those the eval graph declares */
    store = g_store_new(bops, be, be_entry->ops->name, 0);
    g = store ? g_graph_new(store, BORA_MODE_EVAL) : NULL;
    bora_tensor *logits = NULL;
    if (!g) {
        bora_log(BORA_LOG_ERROR, "out of memory");
        goto out;
    }
    g_store_backend_abi(store, be_entry->file->abi_minor);
    if (mops->build(model, &g->pub, BORA_MODE_EVAL, &logits) != BORA_OK ||
        (g->output = logits, g_finalize(g)) != BORA_OK || g_store_materialize(store) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "import: model %s: %s", me->ops->name,
                 g->error[0] ? g->error : bora_error_get());
        goto out;
    }
    if (bora_hf_load_weights(store, hf, me->ops->name, 0) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "import: %s", bora_error_get());
        goto out;
    }
    /* trainer.json: what the folder was, and the configuration that reads it back */
    char *abs = realpath(hf, NULL);
    js = open_memstream(&json, &json_len);
    if (!js || !abs) {
        free(abs);
        bora_log(BORA_LOG_ERROR, "import: %s", strerror(errno));
        goto out;
    }
    fputs("{\"step\": 0, \"imported_from\": ", js);
    bora_json_string(js, abs);
    free(abs);
    fputs(", \"config\": ", js);
    bora_cfg_write_json(root, js);
    fputs("}", js);
    fclose(js);
    js = NULL;
    snprintf(tmp, sizeof tmp, "%s.tmp-import-%ld", out, (long)getpid());
    if (bora_ckpt_save(store, NULL, tmp, 0, json, made, sizeof made) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "import: %s", bora_error_get());
        goto out;
    }
    if (rename(made, out) != 0) {
        bora_log(BORA_LOG_ERROR, "import: cannot move the checkpoint to %s: %s", out,
                 strerror(errno));
        goto out;
    }
    size_t values = 0;
    for (size_t i = 0; i < store->n_slots; i++)
        values += store->slots[i].nbytes / sizeof(float);
    printf("imported %s (model %s, %zu parameters in %zu tensors) into %s\n", hf, me->ops->name,
           values, store->n_slots, out);
    rc = 0;
out:
    if (*tmp)
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (js)
        fclose(js);
    free(json);
    g_graph_free(g);
    g_store_free(store);
    if (model)
        ((const bora_model_ops *)me->ops)->destroy(model);
    if (be)
        ((const bora_backend_ops *)be_entry->ops)->destroy(be);
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}
