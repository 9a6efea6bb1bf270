/* core/cli/cmd_graph.c — `bora graph CONFIG.yaml`: build a configuration's graphs (the model's
 * train graph, differentiated, and its eval graph) on its backend, as bora train builds them
 * (the tokenizer's vocabulary, the inputs the host fills checked), and report what they take:
 * parameters, nodes, kernels, and the arena against the naive sum of every intermediate. */
#include "../config/schema.h"
#include "../data/tokenizer.h"
#include "../graph/graph.h"
#include "../train/inputs.h"
#include "../train/trainer.h"
#include "../util/log.h"
#include "cli.h"

#include <stdio.h>
#include <string.h>

static void human(char *buf, size_t cap, size_t bytes)
{
    if (bytes >= (1u << 20))
        snprintf(buf, cap, "%.1f MiB", (double)bytes / (1 << 20));
    else if (bytes >= 1024)
        snprintf(buf, cap, "%.1f KiB", (double)bytes / 1024);
    else
        snprintf(buf, cap, "%zu B", bytes);
}

static void report(const char *what, const g_graph *g)
{
    size_t kernels = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        kernels += g->nodes[i]->kernel != NULL;
    char arena[32], naive[32];
    human(arena, sizeof arena, g->arena_bytes);
    human(naive, sizeof naive, g->naive_bytes);
    printf("%-6s graph: %zu nodes, %zu kernels; arena %s against %s without reuse\n", what,
           g->n_nodes, kernels, arena, naive);
}

int bora_cmd_graph(const bora_cli *cli)
{
    if (cli->argc < 1) {
        bora_log(BORA_LOG_ERROR, "graph: give a configuration file (bora graph run.yaml)");
        return 2;
    }
    int rc = 1;
    bora_registry *reg = bora_cli_load_plugins(cli);
    bora_cfg *cfg = bora_cfg_new();
    bora_backend *be = NULL;
    const bora_backend_ops *bops = NULL;
    bora_model *model = NULL;
    const bora_model_ops *mops = NULL;
    g_store *store = NULL;
    g_graph *train = NULL, *eval = NULL;
    bora_tokenizer *tok = NULL;
    if (!reg || !cfg)
        goto out;
    /* The model gets the tokenizer's vocabulary size as bora train gives it. */
    int vocab_source = BORA_VOCAB_NONE;
    int64_t vocab = 0;
    static const char *const options[] = {BORA_CLI_GLOBAL_OPTIONS, NULL};
    if (bora_cfg_parse_args(cfg, cli->argc, cli->argv, options) == BORA_OK) {
        if (bora_model_vocab(cfg, reg, &tok, &vocab_source, &vocab) != BORA_OK) {
            bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
            goto out;
        }
        bora_config_check(cfg, reg, 0);
    }
    bora_config *root = bora_cfg_root(cfg);
    bora_config *mnode = bora_cfg_child(root, "model");
    if (!mnode && !bora_cfg_error_count(cfg))
        bora_cfg_error(cfg, NULL, "the configuration has no model section (model: {type: ...})");
    if (bora_cfg_error_count(cfg)) {
        bora_cfg_print_errors(cfg, stderr);
        goto out;
    }
    const bora_entry *me;
    if (bora_config_select(mnode, BORA_KIND_MODEL, reg, &me) != BORA_OK) {
        bora_cfg_print_errors(cfg, stderr);
        goto out;
    }
    mops = (const bora_model_ops *)me->ops;
    bora_config *trainer = bora_cfg_child(root, "trainer");
    const char *backend_name = "auto";
    int64_t seed = 0, batch = 512, micro = -1;
    bora_cfg_string(trainer, "backend", "auto", &backend_name);
    bora_cfg_int(trainer, "seed", 0, &seed);
    /* the micro-batch, as bora train reads it: the sequences each run of the graphs holds */
    bora_cfg_int(trainer, "train_batch_size", 512, &batch);
    bora_cfg_int(trainer, "per_device_parallelism", -1, &micro);
    if (micro == -1 || micro > batch)
        micro = batch;
    if (batch < 1 || micro < 1 || batch % micro) {
        bora_log(BORA_LOG_ERROR,
                 "trainer.per_device_parallelism (%lld) must divide trainer.train_batch_size "
                 "(%lld), both 1 or more",
                 (long long)micro, (long long)batch);
        goto out;
    }
    const bora_entry *be_entry = bora_registry_pick_backend(reg, backend_name);
    if (!be_entry) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    bops = (const bora_backend_ops *)be_entry->ops;
    /* The backend reads its keys (num_threads) from the trainer section. */
    if (bops->create(&be_entry->file->host, trainer, &be) != BORA_OK ||
        mops->create(&me->file->host, mnode, &model) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    store = g_store_new(bops, be, be_entry->ops->name, (uint64_t)seed);
    /* trainer.mp's compute and residual dtypes, as bora train reads them */
    const char *mp = "p=f32,c=f32";
    char mp_err[256];
    bora_cfg_string(trainer, "mp", "p=f32,c=f32", &mp);
    bora_mp mixed;
    if (bora_mp_parse(mp, &mixed, mp_err, sizeof mp_err)) {
        bora_log(BORA_LOG_ERROR, "%s", mp_err);
        goto out;
    }
    if (store)
        g_store_mixed(store, mixed.compute, mixed.residual, be_entry->file->abi_minor);
    train = store ? g_graph_new(store, BORA_MODE_TRAIN) : NULL;
    eval = store ? g_graph_new(store, BORA_MODE_EVAL) : NULL;
    if (!train || !eval) {
        bora_log(BORA_LOG_ERROR, "out of memory");
        goto out;
    }
    train->batch = eval->batch = micro;
    train->grads_write = batch == micro;
    bora_tensor *loss = NULL, *logits = NULL;
    char keys[512];
    if (mops->build(model, &train->pub, BORA_MODE_TRAIN, &loss) != BORA_OK ||
        mops->build(model, &eval->pub, BORA_MODE_EVAL, &logits) != BORA_OK) {
        bora_size_keys(root, train->status ? train : eval, keys, sizeof keys);
        bora_log(BORA_LOG_ERROR, "model %s: %s%s%s", me->ops->name, bora_error_get(),
                 keys[0] ? "; " : "", keys);
        goto out;
    }
    if (bora_inputs_check(train, BORA_MODE_TRAIN, me->ops->name) != BORA_OK ||
        bora_inputs_check(eval, BORA_MODE_EVAL, me->ops->name) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    train->output = loss;
    eval->output = logits;
    if (g_autodiff(train, loss) || g_finalize(train) || g_finalize(eval)) {
        bora_size_keys(root, train->status ? train : eval, keys, sizeof keys);
        bora_log(BORA_LOG_ERROR, "model %s: %s%s%s", me->ops->name,
                 train->status ? train->error : eval->error, keys[0] ? "; " : "", keys);
        goto out;
    }
    if (g_store_materialize(store) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        goto out;
    }
    size_t values = 0;
    for (size_t i = 0; i < store->n_slots; i++)
        values += store->slots[i].nbytes / bora_dtype_size(store->slots[i].dtype);
    char pbytes[32], shared[32];
    human(pbytes, sizeof pbytes, store->param_bytes);
    human(shared, sizeof shared, store->arena_bytes);
    printf("model %s (%s %s) on backend %s\n", me->ops->name, me->file->name, me->file->version,
           be_entry->ops->name);
    if (vocab_source == BORA_VOCAB_TOKENIZER)
        printf("vocabulary: %lld tokens, data.tokenizer's (as bora train gives it)\n",
               (long long)vocab);
    else if (vocab_source == BORA_VOCAB_GIVEN && vocab > 0)
        printf("vocabulary: %lld tokens, model.vocab_size\n", (long long)vocab);
    else if (vocab_source == BORA_VOCAB_DEFAULT)
        printf("vocabulary: %lld tokens, the model's default (no data.tokenizer)\n",
               (long long)vocab);
    printf("graphs built for a micro-batch of %lld sequences (train_batch_size %lld%s)\n",
           (long long)micro, (long long)batch,
           micro < batch ? ", the gradients added over micro-batches" : "");
    printf("parameters: %zu tensors, %zu values, %s (and as much for gradients)\n", store->n_slots,
           values, pbytes);
    if (store->shadows) {
        char half[32];
        human(half, sizeof half, store->param_bytes / 2);
        printf("bf16 copies of the parameters (trainer.mp c=bf16): %s, written by the optimizer's "
               "pass\n",
               half);
    }
    if (mixed.residual == BORA_DTYPE_BF16)
        printf("residual stream (trainer.mp r=bf16): %d values kept in bf16 per micro-batch%s\n",
               train->residuals, train->residuals ? "" : " (the model marks none: it stays f32)");
    report("train", train);
    report("eval", eval);
    printf("shared arena: %s\n", shared);
    rc = 0;
out:
    g_graph_free(train);
    g_graph_free(eval);
    g_store_free(store);
    if (model)
        mops->destroy(model);
    if (be)
        bops->destroy(be);
    bora_tokenizer_free(tok);
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}
