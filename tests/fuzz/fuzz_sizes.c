/* tests/fuzz/fuzz_sizes.c — libFuzzer target for sizes: a configuration's text, whose model and
 * trainer sizes may be any integers (2^62, products past 2^64), through the GPT-2 model, the
 * graph builder, differentiation and planning, as bora graph takes them, and the naming of the
 * keys behind a tensor too large. What it finds is a crash, a leak or a signed overflow (UBSan
 * stops there); graph.sizes checks the messages. Nothing is allocated for the graphs:
 * the backend is a stub whose buffers always fail, so a planned arena of exabytes costs nothing.
 * num_layers past 4 is skipped (a graph's build time grows with it, not its sizes).
 * Build: cmake -DCMAKE_C_COMPILER=clang -DBORA_FUZZ=ON -DBORA_SANITIZE=address,undefined */
#include "../../plugins/models/gpt2/gpt2.c"
#include "config/config.h"
#include "graph/graph.h"
#include "plugin/host.h"
#include "train/trainer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bora_status stub_run(bora_backend *b, const bora_kernel_args *a)
{
    (void)b, (void)a;
    return BORA_OK;
}
static bora_kernel_fn stub_kernel(bora_backend *b, uint32_t op, const int32_t *dtypes, uint32_t n)
{
    (void)b, (void)op, (void)dtypes, (void)n;
    return stub_run;
}
static bora_status stub_alloc(bora_backend *b, size_t size, size_t align, bora_buffer **out)
{
    (void)b, (void)size, (void)align, (void)out;
    return BORA_ERR_NOMEM;
}
static void stub_free(bora_backend *b, bora_buffer *buf)
{
    (void)b, (void)buf;
}
static const bora_backend_ops stub = {
    .hdr = BORA_COMPONENT(bora_backend_ops, BORA_KIND_BACKEND, "stub", "kernels that do nothing"),
    .buffer_alloc = stub_alloc,
    .buffer_free = stub_free,
    .kernel = stub_kernel,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 12)
        return 0;
    static bora_plugin_file file;
    if (!file.name) {
        file.name = "gpt2";
        file.version = "0.1.0";
        bora_host_init_for_plugin(&file.host, &file);
    }
    bora_cfg *cfg = bora_cfg_new();
    if (!cfg)
        return 0;
    bora_config *root = NULL, *mnode = NULL, *trainer = NULL;
    int64_t layers = 12, batch = 512, micro = -1;
    if (bora_cfg_load_string(cfg, "fuzz.yaml", (const char *)data, size) == BORA_OK) {
        root = bora_cfg_root(cfg);
        mnode = bora_cfg_child(root, "model");
        trainer = bora_cfg_child(root, "trainer");
        bora_cfg_int(mnode, "num_layers", 12, &layers);
        bora_cfg_int(trainer, "train_batch_size", 512, &batch);
        bora_cfg_int(trainer, "per_device_parallelism", -1, &micro);
    }
    if (micro == -1 || micro > batch)
        micro = batch;
    bora_model *model = NULL;
    if (!root || layers > 4 || micro < 1 || gpt2_ops.create(&file.host, mnode, &model) != BORA_OK) {
        bora_cfg_free(cfg);
        return 0;
    }
    g_store *store = g_store_new(&stub, NULL, "stub", 0);
    g_graph *train = store ? g_graph_new(store, BORA_MODE_TRAIN) : NULL;
    g_graph *eval = store ? g_graph_new(store, BORA_MODE_EVAL) : NULL;
    if (train && eval) {
        train->batch = eval->batch = micro;
        bora_tensor *loss = NULL, *logits = NULL;
        if (gpt2_ops.build(model, &train->pub, BORA_MODE_TRAIN, &loss) == BORA_OK &&
            gpt2_ops.build(model, &eval->pub, BORA_MODE_EVAL, &logits) == BORA_OK) {
            train->output = loss;
            eval->output = logits;
            if (g_autodiff(train, loss) == BORA_OK && g_finalize(train) == BORA_OK)
                g_finalize(eval);
        }
        char keys[512];
        bora_size_keys(root, train->status ? train : eval, keys, sizeof keys);
    }
    g_graph_free(train);
    g_graph_free(eval);
    g_store_free(store);
    gpt2_ops.destroy(model);
    bora_cfg_free(cfg);
    return 0;
}
