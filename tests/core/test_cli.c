/* tests/core/test_cli.c — the command line as a user meets it: help, version, unknown and
 * not-yet-available commands, and their exit codes.
 *
 * usage: test_cli BORA */
#include "../test.h"

#include <bora/plugin.h>

static const char *bora;

static int run(char **out, const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s", bora, args);
    return test_run(cmd, out);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_cli BORA\n");
        return 2;
    }
    bora = argv[1];
    char *out;

    CHECK(run(&out, "--version") == 0);
    char expect[128];
    snprintf(expect, sizeof expect, "bora 0.1.0 (plugin ABI %d.%d, commit ", BORA_ABI_MAJOR,
             BORA_ABI_MINOR);
    CHECK_CONTAINS(out, expect);
    CHECK_LACKS(out, "commit )");
    free(out);

    CHECK(run(&out, "--help") == 0);
    CHECK_CONTAINS(out, "Usage: bora [options] COMMAND");
    CHECK_CONTAINS(out, "  plugins    list the components of every plugin found\n");
    CHECK_CONTAINS(out, "  train      train a model from a YAML configuration\n");
    CHECK_CONTAINS(out,
                   "  eval       loss and bits per byte of a checkpoint on the validation set\n");
    CHECK_CONTAINS(out, "  export     write a checkpoint as a Hugging Face folder\n");
    CHECK_CONTAINS(out, "  import     read a Hugging Face folder into a checkpoint\n");
    CHECK_LACKS(out, "not available");
    CHECK_CONTAINS(out, "BORA_PLUGIN_PATH");
    free(out);

    /* No command: usage on stderr, exit 2. */
    CHECK(run(&out, "") == 2);
    CHECK_CONTAINS(out, "Usage: bora");
    free(out);

    CHECK(run(&out, "plugins --help") == 0);
    CHECK_CONTAINS(out, "Usage: bora plugins [--json] [KIND NAME]");
    free(out);
    CHECK(run(&out, "help plugins") == 0);
    CHECK_CONTAINS(out, "Usage: bora plugins [--json] [KIND NAME]");
    free(out);

    CHECK(run(&out, "import --help") == 0);
    CHECK_CONTAINS(out, "Usage: bora import HF_DIR --out CKPT_DIR");
    CHECK_LACKS(out, "not available");
    free(out);
    CHECK(run(&out, "export --help") == 0);
    CHECK_CONTAINS(out, "Usage: bora export --checkpoint DIR --out HF_DIR");
    CHECK_LACKS(out, "not available");
    free(out);
    CHECK(run(&out, "eval --help") == 0);
    CHECK_CONTAINS(out, "Usage: bora eval CONFIG.yaml --checkpoint DIR");
    free(out);
    CHECK(run(&out, "train --help") == 0);
    CHECK_CONTAINS(out, "Usage: bora train CONFIG.yaml");
    CHECK_CONTAINS(out, "--force");
    free(out);

    CHECK(run(&out, "plugin") == 2);
    CHECK_CONTAINS(out, "bora: unknown command 'plugin'; did you mean 'plugins'?");
    free(out);
    CHECK(run(&out, "--frobnicate plugins") == 2);
    CHECK_CONTAINS(out, "bora: unknown option '--frobnicate'");
    free(out);
    CHECK(run(&out, "plugins --plugin-dir") == 2);
    CHECK_CONTAINS(out, "--plugin-dir needs a directory");
    free(out);
    CHECK(run(&out, "plugins --frobnicate") == 2);
    CHECK_CONTAINS(out, "plugins: unexpected argument '--frobnicate'");
    free(out);
    CHECK(run(&out, "plugins tracker") == 2);
    CHECK_CONTAINS(out, "give both KIND and NAME");
    free(out);

    return test_summary("test_cli");
}
