/* tests/abi/test_loader.c — the loader as a user meets it: `bora plugins` over directories of
 * good and broken plugins. Every broken plugin is refused in exactly one clear line, loading
 * goes on, and a component is fatal only when asked for by name.
 *
 * usage: test_loader BORA FIXTURES_DIR GOOD_PLUGINS_DIR */
#include "../test.h"

#include <bora/plugin.h>
#include <bora/tracker.h>
#include <unistd.h>

/* The ABI as the table prints it, e.g. "0.2". */
#define STR2(x) #x
#define STR(x) STR2(x)
#define ABI STR(BORA_ABI_MAJOR) "." STR(BORA_ABI_MINOR)

static const char *bora, *fixtures, *good;

/* Run `bora ARGS` with a clean plugin environment; returns the exit status. */
static int bora_run(char **out, const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "env -u BORA_PLUGIN_PATH '%s' %s", bora, args);
    return test_run(cmd, out);
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* A refusal case: listing succeeds, the reason appears once on stderr and once in the table. */
static void refused(const char *dir, const char *expect)
{
    char args[1024], *out;
    snprintf(args, sizeof args, "plugins --plugin-dir '%s/%s'", fixtures, dir);
    int rc = bora_run(&out, args);
    CHECK(rc == 0);
    CHECK_CONTAINS(out, expect);
    /* one warning line on stderr (the table repeats it under "Refused:") */
    if (count(out, "bora: warning: skipping") != 1) {
        fprintf(stderr, "case %s: expected one warning line:\n%s\n", dir, out);
        test_failures++;
    }
    CHECK(count(out, expect) == 2);
    free(out);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_loader BORA FIXTURES_DIR GOOD_PLUGINS_DIR\n");
        return 2;
    }
    bora = argv[1];
    fixtures = argv[2];
    good = argv[3];
    char args[4096], *out;

    /* One good plugin per kind: all listed, nothing refused. */
    snprintf(args, sizeof args, "plugins --plugin-dir '%s'", good);
    CHECK(bora_run(&out, args) == 0);
    CHECK_CONTAINS(out, "model      fixture          0.0.1      " ABI);
    CHECK_CONTAINS(out, "optimizer  fixture");
    CHECK_CONTAINS(out, "backend    fixture");
    CHECK_CONTAINS(out, "tracker    fixture");
    CHECK_CONTAINS(out, "tracker    jsonl"); /* the in-tree plugin, from the default directory */
    CHECK_LACKS(out, "warning");
    CHECK_LACKS(out, "Refused");
    free(out);

    /* The same through BORA_PLUGIN_PATH, with an empty and a missing entry ignored. */
    snprintf(args, sizeof args, "BORA_PLUGIN_PATH='::/nonexistent/dir:%s' '%s' plugins", good,
             bora);
    CHECK(test_run(args, &out) == 0);
    CHECK_CONTAINS(out, "backend    fixture");
    free(out);

    /* A --plugin-dir that does not exist is a user error. */
    CHECK(bora_run(&out, "plugins --plugin-dir /nonexistent/plugins") == 1);
    CHECK_CONTAINS(out, "plugin directory '/nonexistent/plugins': No such file or directory");
    free(out);

    /* One component in detail, with its declared keys. */
    snprintf(args, sizeof args, "plugins model fixture --plugin-dir '%s'", good);
    CHECK(bora_run(&out, args) == 0);
    CHECK_CONTAINS(out, "model fixture");
    CHECK_CONTAINS(out, "width");
    free(out);

    /* Unknown names suggest the close one, or list what exists. */
    snprintf(args, sizeof args, "plugins tracker fixtur --plugin-dir '%s'", good);
    CHECK(bora_run(&out, args) == 1);
    CHECK_CONTAINS(out, "no tracker named 'fixtur'; did you mean 'fixture'?");
    free(out);
    snprintf(args, sizeof args, "plugins tracker neptune --plugin-dir '%s'", good);
    CHECK(bora_run(&out, args) == 1);
    CHECK_CONTAINS(out, "no tracker named 'neptune'; available: ");
    free(out);
    CHECK(bora_run(&out, "plugins widget x") == 2);
    CHECK_CONTAINS(out, "unknown kind 'widget'");
    free(out);

    /* JSON output carries the same facts. */
    snprintf(args, sizeof args, "plugins --json --plugin-dir '%s'", good);
    CHECK(bora_run(&out, args) == 0);
    CHECK_CONTAINS(out, "\"kind\":\"backend\",\"name\":\"fixture\",\"plugin\":\"fixture-backend\","
                        "\"version\":\"0.0.1\",\"abi\":\"" ABI "\"");
    CHECK_CONTAINS(out, "\"refused\":[]");
    free(out);
    if (access("/usr/bin/python3", X_OK) == 0) {
        snprintf(args, sizeof args,
                 "env -u BORA_PLUGIN_PATH '%s' plugins --json --plugin-dir '%s/oversized' | "
                 "/usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); "
                 "assert len(d[\"refused\"]) == 1, d; print(\"json ok\")'",
                 bora, fixtures);
        CHECK(test_run(args, &out) == 0);
        CHECK_CONTAINS(out, "json ok");
        free(out);
    }

    /* Each broken plugin: refused in one line, with the reason. */
    char expect_major[128], expect_minor[128];
    snprintf(expect_major, sizeof expect_major,
             "plugin was built for ABI %d.%d; this host speaks %s", BORA_ABI_MAJOR + 2,
             BORA_ABI_MINOR, ABI);
    snprintf(expect_minor, sizeof expect_minor,
             "plugin was built for ABI %d.%d, newer than this host's %s; upgrade bora",
             BORA_ABI_MAJOR, BORA_ABI_MINOR + 3, ABI);
    refused("wrong_major", expect_major);
    refused("newer_minor", expect_minor);
    refused("no_entry", "not a bora plugin (no 'bora_plugin_entry' symbol)");
    char expect_size[200];
    snprintf(expect_size, sizeof expect_size,
             "tracker 'oversized': ops table is %zu bytes but this host knows %zu (built against "
             "a newer SDK?)",
             sizeof(bora_tracker_ops) + 2 * sizeof(void (*)(void)), sizeof(bora_tracker_ops));
    refused("oversized", expect_size);
    refused("missing_member", "tracker 'bad' lacks required member 'log'");
    refused("init_fails", "plugin 'initfails' init failed: initfails: no device here (fixture)");

    /* A duplicate (kind, name): the first file keeps it, the message names both files. */
    snprintf(args, sizeof args,
             "%s/duplicate/bora-tracker-dupb.so: duplicate tracker 'dup': "
             "%s/duplicate/bora-tracker-dupa.so already provides it (kept)",
             fixtures, fixtures);
    refused("duplicate", args);

    /* A file that fails to dlopen is skipped quietly and listed as unavailable ... */
    snprintf(args, sizeof args, "plugins --plugin-dir '%s/unloadable'", fixtures);
    CHECK(bora_run(&out, args) == 0);
    CHECK_LACKS(out, "warning");
    CHECK_CONTAINS(out, "Unavailable (needed only if a configuration names them):");
    CHECK_CONTAINS(out, "undefined symbol: bora_fixture_symbol_nobody_defines");
    free(out);
    /* ... said at debug level ... */
    snprintf(args, sizeof args, "-v plugins --plugin-dir '%s/unloadable'", fixtures);
    CHECK(bora_run(&out, args) == 0);
    CHECK_CONTAINS(out, "bora: debug: skipping");
    free(out);
    /* ... and fatal when its component is asked for. */
    snprintf(args, sizeof args, "plugins tracker unloadable --plugin-dir '%s/unloadable'",
             fixtures);
    CHECK(bora_run(&out, args) == 1);
    CHECK_CONTAINS(out, "bora: error: tracker 'unloadable' is not available: ");
    CHECK_CONTAINS(out, "bora-tracker-unloadable.so cannot be loaded: ");
    CHECK_CONTAINS(out, "undefined symbol");
    free(out);

    /* Not even an ELF file: unavailable with the loader's reason, never a crash. */
    char tmp[] = "/tmp/bora-test-loader-XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    snprintf(args, sizeof args,
             "printf 'garbage' > %s/bora-model-garbage.so && : > %s/bora-model-empty.so && "
             "head -c 4096 /dev/urandom > %s/bora-model-random.so && "
             "cp '%s/bora-tracker-fixture.so' %s/ && env -u BORA_PLUGIN_PATH '%s' plugins "
             "--plugin-dir %s --plugin-dir '%s'",
             tmp, tmp, tmp, good, tmp, bora, tmp, good);
    CHECK(test_run(args, &out) == 0);
    CHECK_CONTAINS(out, "bora-model-garbage.so: cannot be loaded: ");
    CHECK_CONTAINS(out, "bora-model-empty.so: cannot be loaded: ");
    CHECK_CONTAINS(out, "bora-model-random.so: cannot be loaded: ");
    /* The copy in the first directory shadows the same file name in the later one. */
    char expect[512];
    snprintf(expect, sizeof expect, "tracker    fixture          0.0.1      %-5s %s/", ABI, tmp);
    CHECK_CONTAINS(out, expect);
    CHECK_LACKS(out, "duplicate");
    free(out);
    snprintf(args, sizeof args, "rm -rf %s", tmp);
    CHECK(test_run(args, &out) == 0);
    free(out);

    return test_summary("test_loader");
}
