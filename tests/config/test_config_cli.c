/* tests/config/test_config_cli.c — `bora config show` and `bora config keys` as a user runs
 * them, with the fixture plugins: every error of a configuration in one run, each with its
 * position; defaults filled in; overrides applied; components checked against the keys their
 * plugins declare.
 *
 * usage: test_config_cli BORA FIXTURE_PLUGIN_DIR FIXTURES_DIR */
#include "../test.h"

#include <unistd.h>

static const char *bora, *plugins, *fixtures;
static char dir[] = "/tmp/bora-test-config-cli-XXXXXX";

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

/* Run `bora ARGS` in the temporary directory with the fixture plugins. */
static int run(char **out, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && env -u BORA_PLUGIN_PATH '%s' --plugin-dir '%s' %s", dir,
             bora, plugins, args);
    return test_run(cmd, out);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_config_cli BORA FIXTURE_PLUGIN_DIR FIXTURES_DIR\n");
        return 2;
    }
    bora = argv[1];
    plugins = argv[2];
    fixtures = argv[3];
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char *out;

    /* A good configuration: printed resolved, with defaults, overrides and an include. */
    put("trainer.yaml", "num_train_steps: 20\nseed: 7\n");
    put("run.yaml", "model:\n"
                    "  type: fixture\n"
                    "  width: 32\n"
                    "optimizer: {type: fixture}\n"
                    "trainer: !include trainer.yaml\n"
                    "data:\n"
                    "  train_urls: [a.jsonl]\n");
    CHECK(run(&out, "config show run.yaml --trainer.seed 9 --data.train_urls='[x.jsonl, "
                    "y.jsonl]' --trainer.checkpointer.save_interval=1h") == 0);
    CHECK_CONTAINS(out, "model:\n  type: fixture\n  width: 32\noptimizer:\n  type: fixture\n");
    CHECK_CONTAINS(out, "trainer:\n  num_train_steps: 20\n  train_batch_size: 512\n");
    CHECK_CONTAINS(out, "  seed: 9\n");
    CHECK_CONTAINS(out, "  tracker:\n    - type: sqlite\n      path: runs/bora.db\n");
    CHECK_CONTAINS(out, "  checkpointer:\n    base_path: checkpoints\n    save_interval: 1h\n");
    CHECK_CONTAINS(out, "data:\n  type: text\n  train_urls:\n    - x.jsonl\n    - y.jsonl\n");
    free(out);

    /* The shown configuration is itself a valid configuration that shows the same. */
    CHECK(run(&out, "config show run.yaml > shown.yaml && env -u BORA_PLUGIN_PATH") == 0);
    free(out);
    char args[1024];
    snprintf(args, sizeof args, "config show shown.yaml > again.yaml && cmp shown.yaml again.yaml");
    CHECK(run(&out, args) == 0);
    free(out);

    /* JSON for machines. */
    if (access("/usr/bin/python3", X_OK) == 0) {
        CHECK(run(&out,
                  "config show run.yaml --json | /usr/bin/python3 -c 'import json,sys; "
                  "d=json.load(sys.stdin); assert d[\"trainer\"][\"seed\"] == 7; "
                  "assert d[\"trainer\"][\"crash_on_nan\"] is True; print(\"json ok\")'") == 0);
        CHECK_CONTAINS(out, "json ok");
        free(out);
    }

    /* Many mistakes: all reported at once, in file order, overrides last. The CUDA backend is
     * built (and listed) where the CUDA toolkit was found. */
#if BORA_TEST_CUDA
#define CUDA_TOO ", cuda"
#else
#define CUDA_TOO ""
#endif
    put("bad.yaml", "model:\n"
                    "  type: fixture\n"
                    "  widht: 3\n"
                    "optimizer:\n"
                    "  type: fixtur\n"
                    "trainer:\n"
                    "  num_train_steps: twelve\n"
                    "  checkpointer: {save_interval: soon}\n"
                    "  tracker: [{type: jsonl, pth: m.jsonl}]\n"
                    "  backend: quantum\n"
                    "dat:\n"
                    "  train_urls: []\n");
    CHECK(run(&out, "config show bad.yaml --trainer.num_train_step=5") == 1);
    CHECK_CONTAINS(out, "bad.yaml:3:3: unknown key 'widht' in model (fixture); did you mean "
                        "'width'?\n"
                        "bad.yaml:5:9: optimizer.type: no optimizer named 'fixtur'; did you mean "
                        "'fixture'?\n"
                        "bad.yaml:7:20: trainer.num_train_steps: expected an integer, got "
                        "'twelve'\n"
                        "bad.yaml:8:33: trainer.checkpointer.save_interval: expected a duration "
                        "such as 90s, 15m or 2h, got 'soon'\n"
                        "bad.yaml:9:27: unknown key 'pth' in trainer.tracker[0] (jsonl); did you "
                        "mean 'path'?\n"
                        "bad.yaml:10:12: trainer.backend: no backend named 'quantum'; available: "
                        "fixture, cpu" CUDA_TOO "\n"
                        "bad.yaml:11:1: unknown section 'dat'; did you mean 'data'?\n"
                        "in command-line override --trainer.num_train_step: unknown key "
                        "'num_train_step' in trainer; did you mean 'num_train_steps'?\n"
                        "bora: 8 errors in the configuration\n");
    free(out);

    /* A component whose plugin failed to load: the configuration names it, so it is fatal. */
    put("unl.yaml", "trainer:\n  tracker: {type: unloadable}\n");
    snprintf(args, sizeof args, "--plugin-dir '%s/unloadable' config show unl.yaml", fixtures);
    CHECK(run(&out, args) == 1);
    CHECK_CONTAINS(out, "unl.yaml:2:19: trainer.tracker.type: tracker 'unloadable' is not "
                        "available: ");
    CHECK_CONTAINS(out, "bora-tracker-unloadable.so cannot be loaded: ");
    free(out);

    /* A model without a type, and a type that does not exist. */
    put("notype.yaml", "model:\n  width: 3\n");
    CHECK(run(&out, "config show notype.yaml") == 1);
    CHECK_CONTAINS(out, "notype.yaml:1:1: missing required key 'type' in model (which model to "
                        "use)\nbora: 1 error in the configuration");
    free(out);
    put("gpt9.yaml", "model: {type: mamba}\n");
    CHECK(run(&out, "config show gpt9.yaml") == 1);
    CHECK_CONTAINS(out, "gpt9.yaml:1:15: model.type: no model named 'mamba'; available: fixture, ");
    CHECK_CONTAINS(out, ", gpt2, "); /* in order among the in-tree models */
    free(out);
    put("scalar.yaml", "model: gpt2\n");
    CHECK(run(&out, "config show scalar.yaml") == 1);
    CHECK_CONTAINS(out,
                   "scalar.yaml:1:8: model: expected a mapping with a type, e.g. {type: NAME}");
    free(out);

    /* Syntax errors stop before the checks. */
    put("syntax.yaml", "model: {type: fixture\n");
    CHECK(run(&out, "config show syntax.yaml") == 1);
    CHECK_CONTAINS(out, "syntax.yaml:2:1: while parsing a flow mapping did not find expected ',' "
                        "or '}'");
    CHECK_CONTAINS(out, "bora: 1 error in the configuration");
    free(out);
    CHECK(run(&out, "config show missing.yaml") == 1);
    CHECK_CONTAINS(out, "in missing.yaml: cannot read: No such file or directory");
    free(out);
    CHECK(run(&out, "config show") == 2);
    CHECK_CONTAINS(out, "config show: give a configuration file");
    free(out);

    /* Documented keys. */
    CHECK(run(&out, "config keys trainer") == 0);
    CHECK_CONTAINS(out, "num_train_steps");
    CHECK_CONTAINS(out, "optimizer steps to train for");
    free(out);
    CHECK(run(&out, "config keys trainer.checkpointer") == 0);
    CHECK_CONTAINS(out, "save_interval");
    free(out);
    CHECK(run(&out, "config keys model fixture") == 0);
    CHECK_CONTAINS(out, "model fixture: test fixture");
    CHECK_CONTAINS(out, "width");
    free(out);
    CHECK(run(&out, "config keys tracker jsonl") == 0);
    CHECK_CONTAINS(out, "runs/{run_id}/metrics.jsonl");
    free(out);
    CHECK(run(&out, "config keys") == 0);
    CHECK_CONTAINS(out, "trainer.checkpointer");
    free(out);
    CHECK(run(&out, "config keys trainr") == 2);
    CHECK_CONTAINS(out, "no section 'trainr'");
    free(out);
    CHECK(run(&out, "config keys model gpt9") == 1);
    CHECK_CONTAINS(out, "no model named 'gpt9'");
    free(out);
    CHECK(run(&out, "config frob") == 2);
    CHECK_CONTAINS(out, "config: unknown subcommand 'frob'");
    free(out);

    /* bora graph: the configuration's graphs built on the CPU backend, with their memory. */
    put("graph.yaml",
        "model: {type: fixture, width: 16}\ntrainer: {backend: cpu, num_threads: 1}\n");
    CHECK(run(&out, "graph graph.yaml") == 0);
    CHECK_CONTAINS(out, "model fixture (fixture-model 0.0.1) on backend cpu\n");
    CHECK_CONTAINS(out, "parameters: 2 tensors, 51 values, 256 B (and as much for gradients)\n");
    CHECK_CONTAINS(out, "graphs built for a micro-batch of 512 sequences (train_batch_size 512)\n");
    CHECK_CONTAINS(out, "train  graph: ");
    CHECK_CONTAINS(out, " without reuse\neval   graph: ");
    free(out);
    /* at the configured micro-batch, as bora train builds them */
    CHECK(run(&out, "graph graph.yaml --trainer.train_batch_size=8 "
                    "--trainer.per_device_parallelism=2") == 0);
    CHECK_CONTAINS(out, "graphs built for a micro-batch of 2 sequences (train_batch_size 8, the "
                        "gradients added over micro-batches)\n");
    free(out);
    CHECK(run(&out, "graph graph.yaml --trainer.train_batch_size=8 "
                    "--trainer.per_device_parallelism=3") == 1);
    CHECK_CONTAINS(out,
                   "trainer.per_device_parallelism (3) must divide trainer.train_batch_size (8)");
    free(out);
    /* under r=bf16 it says how much of the residual stream the model marked (this one: none) */
    CHECK(run(&out, "graph graph.yaml --trainer.mp=p=f32,c=bf16,r=bf16") == 0);
    CHECK_CONTAINS(out, "residual stream (trainer.mp r=bf16): 0 values kept in bf16 per "
                        "micro-batch (the model marks none: it stays f32)\n");
    free(out);
    CHECK(run(&out, "graph graph.yaml --model.width=0") == 1);
    CHECK_CONTAINS(out, "bora: error: fixture-model: width must be >= 1, not 0");
    free(out);
    CHECK(run(&out, "graph graph.yaml --model.widht=3") == 1);
    CHECK_CONTAINS(out, "unknown key 'widht' in model (fixture); did you mean 'width'?");
    free(out);
    put("nomodel.yaml", "trainer: {seed: 1}\n");
    CHECK(run(&out, "graph nomodel.yaml") == 1);
    CHECK_CONTAINS(out, "the configuration has no model section");
    free(out);

    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    CHECK(test_run(args, &out) == 0);
    free(out);
    return test_summary("test_config_cli");
}
