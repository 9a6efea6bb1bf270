/* core/cli/main.c — `bora <command>`: global options, dispatch, help and version. */
#include "../config/config.h"
#include "../util/log.h"
#include "../util/str.h"
#include "bora_version.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(const bora_cli *cli); /* NULL: not available in this version */
    const char *summary;
    const char *usage; /* the command's --help text after its usage line */
} command;

static const command commands[] = {
    {"train", bora_cmd_train, "train a model from a YAML configuration",
     "bora train CONFIG.yaml [--config MORE.yaml ...] [--section.key=value ...] [--force]\n"
     "\n"
     "Trains the model the configuration describes, printing a line per step (loss, learning\n"
     "rate, gradient norm, tokens/s) and saving checkpoints to\n"
     "{trainer.checkpointer.base_path}/{trainer.id}/step-N. A run id that already has\n"
     "checkpoints resumes from the latest one, to the same bits as a run never stopped.\n"
     "Ctrl-C (or SIGTERM) finishes the step, saves a checkpoint and exits.\n"
     "\n"
     "One process trains a run id at a time: a second is refused, naming the first's pid and\n"
     "host.\n"
     "\n"
     "  --force   resume even where the checkpoint was made by a different configuration,\n"
     "            thread count, CPU or build (the result is then not bitwise the same; every\n"
     "            tensor must still keep its shape); and where the latest checkpoint fails\n"
     "            its checks (digests, finite values, step), resume from the newest earlier\n"
     "            one that passes (each newer one is kept aside as step-N.damaged)\n"},
    {"eval", bora_cmd_eval, "loss and bits per byte of a checkpoint on the validation set",
     "bora eval CONFIG.yaml --checkpoint DIR | --hf DIR [--json] [--max-clips N]\n"
     "          [--section.key=value ...]\n"
     "\n"
     "Loads the model weights of a checkpoint (a step-N directory, or a run directory for its\n"
     "latest) into the model CONFIG.yaml describes and runs it over the validation set\n"
     "(with --hf, a Hugging Face folder's weights into the model its config.json describes,\n"
     "with its tokenizer unless data.tokenizer names one; a model: key given must agree)\n"
     "(data.validation_urls; trainer.max_eval_batches batches of train_batch_size sequences,\n"
     "or all of it). Prints the mean loss per predicted token (nats) and bits per byte: the\n"
     "summed loss in bits over the UTF-8 bytes those tokens stand for. --json prints them as\n"
     "one JSON object at full precision (null for a value that is not finite).\n"
     "\n"
     "A speech model (data.type: audio) is also scored by its word error rate: each validation\n"
     "clip transcribed greedily, as bora transcribe does, and compared with its text (both\n"
     "lower-cased, accents and punctuation removed; docs/design.md), the edits over all clips\n"
     "divided by their reference words (eval/wer in --json). --max-clips N transcribes only\n"
     "the first N clips (0: no word error rate); the loss still covers the whole set.\n"},
    {"generate", bora_cmd_generate, "sample text from a checkpoint",
     "bora generate --checkpoint DIR | --hf DIR --prompt TEXT [--max-tokens N]\n"
     "              [--temperature T]\n"
     "              [--top-k K] [--top-p P] [--seed S] [--tokenizer PATH] [--ids]\n"
     "              [--no-cache]\n"
     "\n"
     "Loads the model of a checkpoint (its configuration from trainer.json, its weights from\n"
     "model.safetensors; with --hf, of a Hugging Face folder: config.json, its safetensors and\n"
     "its tokenizer.json), prints the prompt and continues it token by token until --max-tokens\n"
     "(64) or the end-of-text token, then the tokens per second on stderr. Each token is\n"
     "sampled at --temperature (0.8; 0 takes the most likely token) from the --top-k (40; 0:\n"
     "all) most likely tokens, cut to the smallest set whose probability reaches --top-p (1.0).\n"
     "The same --seed (0) gives the same text. The tokenizer is the run's (data.tokenizer)\n"
     "unless --tokenizer names another. The context is the model's seq_len: beyond it, the\n"
     "last seq_len tokens. --ids also prints every token id (prompt and generated) on stderr.\n"
     "\n"
     "With the model's KV cache (GPT-2 and the Llama family have one), the prompt runs once and\n"
     "each new token costs one position until the context is full; past it, each token runs the\n"
     "whole window of the last seq_len tokens again. --no-cache runs the whole window for every\n"
     "token: the same\n"
     "tokens, slower; a check of the cache.\n"},
    {"transcribe", bora_cmd_transcribe, "transcribe audio clips with a speech model",
     "bora transcribe --checkpoint DIR | --hf DIR CLIP [CLIP ...] [--max-tokens N]\n"
     "              [--language L] [--task transcribe|translate] [--timestamps]\n"
     "              [--tokenizer PATH] [--no-cache] [--ids]\n"
     "\n"
     "Loads a speech model (model.type: whisper) as bora generate loads one and prints each\n"
     "clip's transcript as 'path<TAB>text'. A clip (WAV, FLAC, OGG, anything libsndfile reads;\n"
     "or an http(s) URL) is mixed to mono, resampled to 16 kHz and made into the log-mel\n"
     "features of the model's mel bins and frames (num_mel_bins, 2 x max_source_positions);\n"
     "a clip longer than the frames hold is refused, by name, and the others still run (exit\n"
     "status 1). The decoder starts from Whisper's start sequence (<|startoftranscript|>, the\n"
     "language and task tokens where the tokenizer has them and a language is given, then\n"
     "<|notimestamps|> unless --timestamps) and takes the most likely token each step until\n"
     "<|endoftext|>, --max-tokens new tokens or the decoder's max_target_positions. The text\n"
     "leaves out special and timestamp tokens. --language and --task default to the run's\n"
     "data.language and data.task. --ids also prints each clip's token ids on stderr.\n"
     "\n"
     "With the model's KV cache, the features and the start sequence run once (prefill,\n"
     "which also keeps the encoder's keys and values for cross-attention) and each token costs\n"
     "one decode step; --no-cache runs the encoder and the whole decoder window for every\n"
     "token instead: the same tokens, slower; a check of the cache.\n"},
    {"export", bora_cmd_export, "write a checkpoint as a Hugging Face folder",
     "bora export --checkpoint DIR --out HF_DIR [--dtype f32|bf16|f16]\n"
     "              [--max-shard-size SIZE] [--tokenizer PATH] [--force]\n"
     "\n"
     "Writes the model of a checkpoint (a step-N directory, or a run directory for its latest)\n"
     "as the folder Hugging Face's from_pretrained reads: config.json (the model's, with\n"
     "torch_dtype and the tokenizer's bos/eos ids), generation_config.json, model.safetensors\n"
     "(tied weights once, as transformers writes them) and the tokenizer's files. The weights\n"
     "are checked as every load checks them (digests, finite values) before anything is written.\n"
     "\n"
     "  --dtype             f32 (the default: the checkpoint's values exactly), bf16 or f16,\n"
     "                      rounded to nearest, ties to even; a value beyond f16's range\n"
     "                      (65504) is refused, naming the tensor, rather than written as inf\n"
     "  --max-shard-size    above it, shards model-00001-of-0000N.safetensors and\n"
     "                      model.safetensors.index.json; bytes, or KB/MB/GB (powers of 1000)\n"
     "                      or KiB/MiB/GiB (of 1024): 5GB (the default, as transformers), 2MiB\n"
     "  --tokenizer PATH    the tokenizer to write (else the run's data.tokenizer): "
     "tokenizer.json\n"
     "                      with tokenizer_config.json and special_tokens_map.json, or GPT-2's\n"
     "                      encoder.json + vocab.bpe as vocab.json + merges.txt; where the run's\n"
     "                      cannot be read, the folder is written without, and a warning says so\n"
     "  --force             replace an existing HF_DIR that an earlier export wrote\n"
     "                      (config.json and *.safetensors); never the checkpoint or the\n"
     "                      tokenizer, nor a folder holding them\n"
     "\n"
     "The folder is written beside HF_DIR under a hidden name and renamed into place at the end:\n"
     "a failed export leaves nothing.\n"},
    {"import", bora_cmd_import, "read a Hugging Face folder into a checkpoint",
     "bora import HF_DIR --out CKPT_DIR\n"
     "bora import HF_DIR --print-config\n"
     "\n"
     "Reads a Hugging Face model folder (config.json, and model.safetensors or the shards\n"
     "model.safetensors.index.json lists; F32, BF16 or F16) and writes a checkpoint directory\n"
     "that bora eval --checkpoint, bora generate --checkpoint and trainer.load_checkpoint take:\n"
     "model.safetensors in f32 and a trainer.json holding the model section config.json maps\n"
     "to (config.json's model_type is the model's type) and data.tokenizer naming the folder\n"
     "when it holds a tokenizer.json or vocab.json + merges.txt. A config.json key the model does "
     "not read (such as\n"
     "quantization_config), a missing, extra or misshapen tensor, and a damaged shard are\n"
     "refused by name. CKPT_DIR must not exist; it appears only once complete.\n"
     "bora eval --hf, bora generate --hf and trainer.initialize_from_hf read a folder\n"
     "directly.\n"
     "  --print-config      print the model section config.json maps to (checked, with its\n"
     "                      defaults) as JSON, and read no weights\n"},
    {"cache", bora_cmd_cache, "build the tokenized data cache of a configuration",
     "bora cache CONFIG.yaml [--workers N] [--rebuild] [overrides]\n"
     "\n"
     "Tokenizes data.train_urls (and data.validation_urls) into the token cache that bora train\n"
     "reads, showing files, documents, tokens, tokens/s and the time left, then where it is.\n"
     "One shard per source file, built by --workers threads (data.cache_workers; the cache is\n"
     "the same for any number) at idle priority; finished shards are kept, so a build that was\n"
     "stopped goes on where it was. bora train does the same in the background and starts\n"
     "when the first window is ready. --rebuild (data.cache_rebuild) makes again what differs\n"
     "instead of refusing it: a data.cache_dir made for another tokenizer or other sources is\n"
     "emptied, a source whose content changed or a corrupt shard is tokenized again alone, and\n"
     "shards whose source's content is the same are kept.\n"},
    {"config", bora_cmd_config, "show a resolved configuration, or the documented keys",
     "bora config show CONFIG.yaml [--config MORE.yaml ...] [--section.key=value ...] [--json]\n"
     "       bora config keys [SECTION | KIND NAME]\n"
     "\n"
     "show: merges the files in order, applies the overrides, checks every key against what\n"
     "      reads it (bora's sections and the chosen plugins), and prints the result with every\n"
     "      default filled in; or every error found, each with its file, line and column.\n"
     "keys: the documented keys of a section (trainer, data, trainer.checkpointer, model,\n"
     "      optimizer) or of a plugin's component (model gpt2, tracker jsonl).\n"
     "\n"
     "Overrides: --trainer.num_train_steps=100 or --trainer.num_train_steps 100; values are\n"
     "YAML, so lists and maps work: --data.train_urls '[a.jsonl, b.jsonl]'.\n"},
    {"tokenize", bora_cmd_tokenize, "tokenize UTF-8 lines from stdin into JSON arrays of ids",
     "bora tokenize --tokenizer PATH [--special] [--decode]\n"
     "\n"
     "Reads UTF-8 lines on stdin and writes one JSON array of token ids per line, exactly as\n"
     "Hugging Face's tokenizer would. PATH is a tokenizer.json (or .json.gz), a folder holding\n"
     "one, or GPT-2's encoder.json (with vocab.bpe beside it).\n"
     "\n"
     "  --special   add the special tokens of the tokenizer's template (a BOS)\n"
     "  --decode    read JSON arrays of ids instead, and write their text\n"},
    {"mel", bora_cmd_mel, "a clip's Whisper log-mel features: shape, range, raw f32",
     "bora mel FILE [--n-mels 80] [--seconds 30 | --n-samples N] [--cut] [--out F.bin]\n"
     "\n"
     "Decodes FILE (a path or http(s) URL; WAV, FLAC, Ogg/Vorbis, whatever libsndfile reads) to\n"
     "16 kHz mono, as training will, and computes the log-mel features Hugging Face's\n"
     "WhisperFeatureExtractor gives: prints the clip's rate, channels and length, then the\n"
     "features' shape and range.\n"
     "\n"
     "  --n-mels N      mel bins (80; 128 for Whisper large-v3)\n"
     "  --seconds S     the window, zero-padded to (30; 3,000 frames)\n"
     "  --n-samples N   the window in 16 kHz samples instead (480000)\n"
     "  --cut           cut a clip longer than the window (else it is refused)\n"
     "  --out F.bin     write the features: (n_mels, frames) float32, row-major, native order\n"},
    {"runs", bora_cmd_runs, "list, show and compare recorded runs",
     "bora runs [--db PATH] [show ID | compare ID ID]\n"
     "\n"
     "Reads the run database the sqlite tracker (the default) writes, runs/bora.db unless\n"
     "--db names another. Without arguments, lists every run: id, model, steps done of the\n"
     "total, last loss, status (running, finished, failed, killed, or died when its process is\n"
     "gone) and start time. show: one run's status, machine, backend, git commit, summary, a\n"
     "plot of its loss and its configuration. compare: the configuration keys where two runs\n"
     "differ, and each metric's last value side by side. An id may be shortened to a unique\n"
     "prefix.\n"},
    {"dashboard", bora_cmd_dashboard, "a web page of the recorded runs and their curves",
     "bora dashboard [--db PATH] [--port N]\n"
     "\n"
     "Serves a page over the run database the sqlite tracker (the default) writes, runs/bora.db\n"
     "unless --db names another, at http://127.0.0.1:N/ (8090; --port 0 takes any free port;\n"
     "only this machine can connect). It lists the runs, draws every metric of the runs ticked,\n"
     "overlaid (loss, eval loss, bits per byte, learning rate, throughput, ...), and shows a\n"
     "run's summary, configuration and environment when its id is clicked. It reads the\n"
     "database again every two seconds, so a run that is training grows on the page. Its data\n"
     "is JSON: /api/runs, /api/metrics?run=ID&since=STEP (the steps after STEP) and\n"
     "/api/run?run=ID. The database is only read. Ctrl-C stops the server.\n"},
    {"viz-logprobs", bora_cmd_viz_logprobs, "a page of a text's tokens coloured by log-probability",
     "bora viz-logprobs --checkpoint DIR --data FILE [--out PAGE] [--max-docs N]\n"
     "\n"
     "Runs the model of a checkpoint (a step-N directory, or a run directory for its latest) over\n"
     "FILE (.jsonl or .txt, read as bora eval reads data.validation_urls: tokenized with the\n"
     "run's tokenizer, documents joined with end-of-text, cut into seq_len windows) and writes\n"
     "PAGE (logprobs.html), one HTML file that needs nothing else: each token of the first\n"
     "--max-docs (16) windows coloured by its log-probability under the model, green likely,\n"
     "red unlikely; hovering a token shows the value and the five tokens the model found most\n"
     "likely there. Over the same windows the mean log-probability is minus bora eval's loss.\n"},
    {"graph", bora_cmd_graph, "build a configuration's graphs and report their memory",
     "bora graph CONFIG.yaml [--config MORE.yaml ...] [--section.key=value ...]\n"
     "\n"
     "Builds the model's train graph (differentiated) and eval graph on the configured backend,\n"
     "as bora train builds them (the tokenizer's vocabulary unless model.vocab_size is given;\n"
     "a graph reading an input bora does not fill is refused), initialises the parameters, and\n"
     "prints the vocabulary, the parameter count, the nodes and kernels of each graph, and its\n"
     "arena against the naive sum of every intermediate.\n"},
    {"wandb", bora_cmd_wandb, "upload a run's W&B spool (tracker wandb) left behind",
     "bora wandb sync RUN [--dir DIR] [--timeout DURATION]\n"
     "\n"
     "Uploads what the wandb tracker of run RUN (its trainer.id) kept in its spool and the\n"
     "server has not acknowledged: an offline run (mode: offline), or one whose server was\n"
     "down when it ended. Lines go to the offsets they had, so running it again, or after a\n"
     "partial upload, sends no step twice. WANDB_API_KEY must be set; WANDB_BASE_URL, if set,\n"
     "replaces the server the run used.\n"
     "\n"
     "  --dir       the spool directory (the tracker's dir key; runs/RUN/wandb by default)\n"
     "  --timeout   how long to keep trying before giving up (10m); exit status 1 then, and\n"
     "              the spool is kept\n"},
    {"plugins", bora_cmd_plugins, "list the components of every plugin found",
     "bora plugins [--json] [KIND NAME]\n"
     "\n"
     "Lists every component (kind, name, version, ABI, file) of the plugins on the search path,\n"
     "then the files that could not be used and why. With KIND NAME, shows that one component\n"
     "and its configuration keys, and fails with the reason when it is not available.\n"
     "\n"
     "  --json   the same as one JSON object on stdout\n"},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const char global_options[] =
    "Options for every command:\n"
    "  --plugin-dir DIR   search DIR for plugins first (repeatable)\n"
    "  -v, --verbose      print debug messages (e.g. plugins that could not be loaded)\n"
    "  -q, --quiet        print errors only\n"
    "  -h, --help         show help (bora COMMAND --help for a command)\n"
    "  --version          show the version, the plugin ABI and the git commit\n"
    "\n"
    "Plugins are searched in each --plugin-dir, then each directory of BORA_PLUGIN_PATH\n"
    "(colon-separated), then the plugin directory of this installation.\n";

static void print_help(FILE *out)
{
    fprintf(out, "bora %s — train foundation models from one YAML file\n\n", BORA_VERSION);
    fprintf(out, "Usage: bora [options] COMMAND [arguments]\n\nCommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-10s %s%s\n", commands[i].name, commands[i].summary,
                commands[i].run ? "" : " (not available yet)");
    fprintf(out, "\n%s", global_options);
}

static void print_version(void)
{
    printf("bora %s (plugin ABI %d.%d, commit %s)\n", BORA_VERSION, BORA_ABI_MAJOR, BORA_ABI_MINOR,
           BORA_GIT_COMMIT);
}

static void print_command_help(const command *c)
{
    printf("Usage: %s", c->usage);
    printf("\n%s.\n", c->summary);
    if (!c->run)
        printf("This command is not available in bora %s yet.\n", BORA_VERSION);
    printf("\n%s", global_options);
}

int bora_cli_unknown_option(const char *cmd, const char *arg, const char *const *known)
{
    const char *near = bora_cfg_closest_option(arg, known);
    int len = (int)strcspn(arg, "=");
    if (near)
        bora_log(BORA_LOG_ERROR,
                 "%s: unknown option '%.*s'; did you mean '%s'? (see bora %s --help)", cmd, len,
                 arg, near, cmd);
    else
        bora_log(BORA_LOG_ERROR, "%s: unknown option '%.*s' (see bora %s --help)", cmd, len, arg,
                 cmd);
    return 2;
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    bora_cli cli = {0};
    cli.plugin_dirs = calloc((size_t)argc, sizeof *cli.plugin_dirs);
    cli.argv = calloc((size_t)argc + 1, sizeof *cli.argv);
    if (!cli.plugin_dirs || !cli.argv) {
        fprintf(stderr, "bora: out of memory\n");
        return 1;
    }
    const char *cmd_name = NULL;
    int want_help = 0, want_version = 0, status = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            while (++i < argc)
                cli.argv[cli.argc++] = argv[i];
            break;
        } else if (strcmp(a, "--plugin-dir") == 0 || strncmp(a, "--plugin-dir=", 13) == 0) {
            const char *v = a[12] == '=' ? a + 13 : (i + 1 < argc ? argv[++i] : NULL);
            if (!v || !*v) {
                fprintf(stderr, "bora: --plugin-dir needs a directory\n");
                status = 2;
                goto out;
            }
            cli.plugin_dirs[cli.n_plugin_dirs++] = v;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            bora_log_set_level(BORA_LOG_DEBUG);
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            bora_log_set_level(BORA_LOG_ERROR);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            want_help = 1;
        } else if (strcmp(a, "--version") == 0) {
            want_version = 1;
        } else if (!cmd_name && a[0] != '-') {
            cmd_name = a;
        } else if (!cmd_name) {
            static const char *const known[] = {BORA_CLI_GLOBAL_OPTIONS, NULL};
            const char *near = bora_cfg_closest_option(a, known);
            fprintf(stderr, "bora: unknown option '%s'", a);
            if (near)
                fprintf(stderr, "; did you mean '%s'?", near);
            fprintf(stderr, " (see bora --help)\n");
            status = 2;
            goto out;
        } else {
            cli.argv[cli.argc++] = argv[i];
        }
    }
    if (want_version && !cmd_name) {
        print_version();
        goto out;
    }
    if (!cmd_name) {
        print_help(want_help ? stdout : stderr);
        status = want_help ? 0 : 2;
        goto out;
    }
    const command *c = strcmp(cmd_name, "help") == 0 && cli.argc > 0 ? find_command(cli.argv[0])
                                                                     : find_command(cmd_name);
    if (strcmp(cmd_name, "help") == 0 && cli.argc == 0) {
        print_help(stdout);
        goto out;
    }
    if (!c) {
        const char *close = NULL;
        for (size_t i = 0; i < N_COMMANDS; i++)
            if (bora_edit_distance(cmd_name, commands[i].name) <= 2)
                close = commands[i].name;
        fprintf(stderr, "bora: unknown command '%s'", cmd_name);
        if (close)
            fprintf(stderr, "; did you mean '%s'?", close);
        fprintf(stderr, " (see bora --help)\n");
        status = 2;
        goto out;
    }
    if (want_help || strcmp(cmd_name, "help") == 0) {
        print_command_help(c);
        goto out;
    }
    if (!c->run) {
        fprintf(stderr, "bora %s: not available in bora %s yet\n", c->name, BORA_VERSION);
        status = 1;
        goto out;
    }
    status = c->run(&cli);
out:
    free(cli.plugin_dirs);
    free(cli.argv);
    return status;
}
