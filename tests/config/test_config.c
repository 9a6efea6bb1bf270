/* tests/config/test_config.c — the configuration tree: scalar syntaxes, positions, includes,
 * merging, overrides, declared keys and the unread-key check, and a catalogue of bad inputs
 * that must each give their expected message and never crash. */
#include "../test.h"
#include "config/config.h"
#include "util/log.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/bora-test-config-XXXXXX";

static const char *write_file(const char *name, const char *text, size_t len)
{
    static char path[4][512];
    static int slot;
    char *p = path[slot++ % 4];
    snprintf(p, sizeof path[0], "%s", name); /* the test runs inside dir */
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(text, 1, len, f) != len) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
    fclose(f);
    return p;
}

/* Every diagnostic as one text, in the order they are printed. */
static char *errors_of(bora_cfg *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    bora_cfg_print_errors(cfg, m);
    fclose(m);
    return buf;
}

/* Load text as a file (name) and expect a diagnostic containing expect. */
static void bad_file(const char *name, const char *text, size_t len, const char *expect)
{
    bora_cfg *cfg = bora_cfg_new();
    const char *path = write_file(name, text, len);
    CHECK(bora_cfg_load_file(cfg, path) == BORA_ERR_CONFIG);
    char *errs = errors_of(cfg);
    CHECK_CONTAINS(errs, expect);
    free(errs);
    bora_cfg_free(cfg);
}

static void test_scalars(void)
{
    int64_t i;
    CHECK(bora_parse_int("12", &i) == 0 && i == 12);
    CHECK(bora_parse_int("-3", &i) == 0 && i == -3);
    CHECK(bora_parse_int("1_000_000", &i) == 0 && i == 1000000);
    CHECK(bora_parse_int("0x40", &i) == 0 && i == 64);
    CHECK(bora_parse_int("1e6", &i) == 0 && i == 1000000);
    CHECK(bora_parse_int("9223372036854775807", &i) == 0 && i == INT64_MAX);
    CHECK(bora_parse_int("-9223372036854775808", &i) == 0 && i == INT64_MIN);
    CHECK(bora_parse_int("9223372036854775808", &i) != 0);
    CHECK(bora_parse_int("1.5", &i) != 0);
    CHECK(bora_parse_int("twelve", &i) != 0);
    CHECK(bora_parse_int("", &i) != 0);
    CHECK(bora_parse_int("_1", &i) != 0);
    CHECK(bora_parse_int("1__0", &i) != 0);
    /* Exponent and point forms are exact over all of int64, not only below 2^53. */
    CHECK(bora_parse_int("1e16", &i) == 0 && i == 10000000000000000);
    CHECK(bora_parse_int("4e18", &i) == 0 && i == 4000000000000000000);
    CHECK(bora_parse_int("1.5e3", &i) == 0 && i == 1500);
    CHECK(bora_parse_int("2.0", &i) == 0 && i == 2);
    CHECK(bora_parse_int("100.", &i) == 0 && i == 100);
    CHECK(bora_parse_int("0.5e1", &i) == 0 && i == 5);
    CHECK(bora_parse_int("-0e999999", &i) == 0 && i == 0);
    CHECK(bora_parse_int("9.223372036854775807e18", &i) == 0 && i == INT64_MAX);
    CHECK(bora_parse_int("-9.223372036854775808e18", &i) == 0 && i == INT64_MIN);
    CHECK(bora_parse_int("9007199254740993.0", &i) == 0 && i == 9007199254740993); /* 2^53+1 */
    CHECK(bora_parse_int("9.223372036854775808e18", &i) == BORA_PARSE_RANGE);
    CHECK(bora_parse_int("1e19", &i) == BORA_PARSE_RANGE);
    CHECK(bora_parse_int("1e999999999999", &i) == BORA_PARSE_RANGE);
    CHECK(bora_parse_int("99999999999999999999", &i) == BORA_PARSE_RANGE);
    CHECK(bora_parse_int("0x10000000000000000", &i) == BORA_PARSE_RANGE);
    CHECK(bora_parse_int("1.5", &i) == BORA_PARSE_NOT_WHOLE);
    CHECK(bora_parse_int("1.25e1", &i) == BORA_PARSE_NOT_WHOLE);
    CHECK(bora_parse_int("1e-3", &i) == BORA_PARSE_NOT_WHOLE);
    CHECK(bora_parse_int("1e", &i) == BORA_PARSE_SYNTAX);
    CHECK(bora_parse_int("1.2.3", &i) == BORA_PARSE_SYNTAX);
    CHECK(bora_parse_int(".e5", &i) == BORA_PARSE_SYNTAX);
    CHECK(bora_parse_int("99999999999999999999x", &i) == BORA_PARSE_SYNTAX);
    double d;
    CHECK(bora_parse_float("3e-4", &d) == 0 && d == 3e-4);
    CHECK(bora_parse_float("-.inf", &d) == 0 && isinf(d) && d < 0);
    CHECK(bora_parse_float(".nan", &d) == 0 && isnan(d));
    CHECK(bora_parse_float("0x1p3", &d) != 0);
    CHECK(bora_parse_float("infinity", &d) != 0);
    CHECK(bora_parse_float("1e999", &d) != 0);
    CHECK(bora_parse_float(" 1", &d) != 0);
    int b;
    CHECK(bora_parse_bool("True", &b) == 0 && b == 1);
    CHECK(bora_parse_bool("off", &b) == 0 && b == 0);
    CHECK(bora_parse_bool("maybe", &b) != 0);
    CHECK(bora_parse_duration("90s", &d) == 0 && d == 90);
    CHECK(bora_parse_duration("15m", &d) == 0 && d == 900);
    CHECK(bora_parse_duration("15min", &d) == 0 && d == 900);
    CHECK(bora_parse_duration("2h", &d) == 0 && d == 7200);
    CHECK(bora_parse_duration("1h30m", &d) == 0 && d == 5400);
    CHECK(bora_parse_duration("250ms", &d) == 0 && fabs(d - 0.25) < 1e-12);
    CHECK(bora_parse_duration("1d", &d) == 0 && d == 86400);
    CHECK(bora_parse_duration("42", &d) == 0 && d == 42);
    CHECK(bora_parse_duration("-5s", &d) != 0);
    CHECK(bora_parse_duration("10 parsecs", &d) != 0);
    CHECK(bora_parse_duration("m", &d) != 0);
    uint64_t u;
    CHECK(bora_parse_bytes("512MB", &u) == 0 && u == 512000000ull);
    CHECK(bora_parse_bytes("4GiB", &u) == 0 && u == 4ull << 30);
    CHECK(bora_parse_bytes("64K", &u) == 0 && u == 65536);
    CHECK(bora_parse_bytes("1.5GB", &u) == 0 && u == 1500000000ull);
    CHECK(bora_parse_bytes("100", &u) == 0 && u == 100);
    CHECK(bora_parse_bytes("lots", &u) != 0);
    CHECK(bora_parse_bytes("1MB2MB", &u) != 0);
    CHECK(bora_parse_bytes("99999999999TB", &u) != 0);
}

static const bora_key toy_keys[] = {
    {"num_layers", BORA_KEY_INT, 0, "12", "layers"},
    {"hidden_dim", BORA_KEY_INT, 0, NULL, "width (required)"},
    {"dropout", BORA_KEY_FLOAT, 0, "0.0", "dropout"},
    {"cache_size", BORA_KEY_BYTES, 0, "1GiB", "cache"},
    {"every", BORA_KEY_DURATION, 0, "15m", "interval"},
    {"tie", BORA_KEY_BOOL, 0, "true", "tie embeddings"},
    {"name", BORA_KEY_STRING, 0, "toy", "name"},
    {NULL, 0, 0, NULL, NULL},
};

static void test_positions_and_getters(void)
{
    bora_cfg *cfg = bora_cfg_new();
    const char *text = "# a comment\n"
                       "model:\n"
                       "  type: toy\n"
                       "  num_layers: 4\n"
                       "  dropout: 0.25\n"
                       "  cache_size: 512MB\n"
                       "  every: 90s\n"
                       "  tie: no\n"
                       "  name: \"12\"\n"
                       "  hidden_dim: 64\n"
                       "  nums: [1, 2, 3]\n";
    CHECK(bora_cfg_load_file(cfg, write_file("pos.yaml", text, strlen(text))) == BORA_OK);
    bora_config *root = bora_cfg_root(cfg);
    bora_config *model = bora_cfg_child(root, "model");
    CHECK(model && model->line == 3 && model->col == 3);
    bora_config *nl = bora_cfg_child(model, "num_layers");
    CHECK(nl && nl->line == 4 && nl->col == 15);
    int64_t i;
    double d;
    uint64_t u;
    int b;
    const char *s;
    size_t n;
    CHECK(bora_cfg_int(model, "num_layers", 0, &i) == BORA_OK && i == 4);
    CHECK(bora_cfg_int(model, "absent", 7, &i) == BORA_OK && i == 7);
    CHECK(bora_cfg_float(model, "dropout", 0, &d) == BORA_OK && d == 0.25);
    CHECK(bora_cfg_bytes(model, "cache_size", 0, &u) == BORA_OK && u == 512000000ull);
    CHECK(bora_cfg_duration(model, "every", 0, &d) == BORA_OK && d == 90);
    CHECK(bora_cfg_bool(model, "tie", 1, &b) == BORA_OK && b == 0);
    CHECK(bora_cfg_string(model, "name", NULL, &s) == BORA_OK && !strcmp(s, "12"));
    CHECK(bora_cfg_list_len(model, "nums", &n) == BORA_OK && n == 3);
    CHECK(bora_cfg_int(bora_cfg_at(bora_cfg_child(model, "nums"), 2), NULL, 0, &i) == BORA_OK &&
          i == 3);
    /* A wrong type is reported with the position and the path, and the default kept. */
    CHECK(bora_cfg_int(model, "type", 5, &i) == BORA_ERR_CONFIG && i == 5);
    CHECK_CONTAINS(bora_cfg_first_error(cfg),
                   "pos.yaml:3:9: model.type: expected an integer, got 'toy'");
    CHECK_CONTAINS(bora_error_get(), "model.type: expected an integer, got 'toy'");
    CHECK(bora_cfg_list_len(model, "num_layers", &n) == BORA_ERR_CONFIG);
    char path[64];
    bora_cfg_path(bora_cfg_at(bora_cfg_child(model, "nums"), 1), path, sizeof path);
    CHECK(!strcmp(path, "model.nums[1]"));
    bora_cfg_free(cfg);
}

static void test_declared_and_unread(void)
{
    bora_cfg *cfg = bora_cfg_new();
    const char *text = "model:\n"
                       "  num_layer: 4\n"  /* typo */
                       "  dropout: lots\n" /* wrong type */
                       "  every: 10 parsecs\n"
                       "  cache_size: heaps\n"
                       "modle: {}\n"; /* typo'd section */
    CHECK(bora_cfg_load_file(cfg, write_file("run.yaml", text, strlen(text))) == BORA_OK);
    bora_config *model = bora_cfg_child(bora_cfg_root(cfg), "model");
    bora_cfg_claim(model, "model (toy)", toy_keys);
    CHECK(bora_cfg_check_declared(model, toy_keys) == BORA_ERR_CONFIG);
    CHECK(bora_cfg_check_unread(cfg) == BORA_ERR_CONFIG);
    char *errs = errors_of(cfg);
    /* All of them, in file order, each with its position. */
    CHECK_CONTAINS(errs, "run.yaml:1:1: missing required key 'hidden_dim' in model (toy)\n"
                         "run.yaml:2:3: unknown key 'num_layer' in model (toy); did you mean "
                         "'num_layers'?\n"
                         "run.yaml:3:12: model.dropout: expected a number, got 'lots'\n"
                         "run.yaml:4:10: model.every: expected a duration such as 90s, 15m or "
                         "2h, got '10 parsecs'\n"
                         "run.yaml:5:15: model.cache_size: expected a size such as 512MB or "
                         "4GiB, got 'heaps'\n"
                         "run.yaml:6:1: unknown section 'modle'; did you mean 'model'?\n");
    CHECK(bora_cfg_error_count(cfg) == 6);
    free(errs);

    /* Defaults fill in, typed as declared, in the schema's order. */
    CHECK(bora_cfg_fill_defaults(model, toy_keys) == BORA_OK);
    int64_t i;
    int b;
    const char *s;
    CHECK(bora_cfg_int(model, "num_layers", 0, &i) == BORA_OK && i == 12);
    CHECK(bora_cfg_bool(model, "tie", 0, &b) == BORA_OK && b == 1);
    CHECK(bora_cfg_string(model, "name", NULL, &s) == BORA_OK && !strcmp(s, "toy"));
    /* A key present in the file is kept, not replaced by its default. */
    CHECK(bora_cfg_string(model, "cache_size", NULL, &s) == BORA_OK && !strcmp(s, "heaps"));
    CHECK(!strcmp(model->keys[0], "num_layers") && !strcmp(model->keys[1], "dropout"));
    bora_cfg_free(cfg);
}

static void test_includes_and_merge(void)
{
    const char *base = "model:\n  type: toy\n  num_layers: 2\ntrainer: !include trainer.yaml\n";
    const char *trainer = "num_train_steps: 10\nseed: 1\n";
    const char *more = "model:\n  num_layers: 6\ntrainer:\n  seed: 2\n";
    write_file("trainer.yaml", trainer, strlen(trainer));
    const char *b = write_file("base.yaml", base, strlen(base));
    const char *m = write_file("more.yaml", more, strlen(more));
    bora_cfg *cfg = bora_cfg_new();
    char *argv[] = {(char *)b,
                    "--config",
                    (char *)m,
                    "--trainer.num_train_steps",
                    "100",
                    "--data.train_urls=[a.jsonl, b.jsonl]",
                    "--model.extra.deep=x"};
    CHECK(bora_cfg_parse_args(cfg, 7, argv, NULL) == BORA_OK);
    bora_config *root = bora_cfg_root(cfg);
    int64_t i;
    const char *s;
    size_t n;
    bora_config *model = bora_cfg_child(root, "model"), *tr = bora_cfg_child(root, "trainer");
    CHECK(bora_cfg_int(model, "num_layers", 0, &i) == BORA_OK && i == 6); /* later file wins */
    CHECK(bora_cfg_string(model, "type", NULL, &s) == BORA_OK && !strcmp(s, "toy")); /* kept */
    CHECK(bora_cfg_int(tr, "seed", 0, &i) == BORA_OK && i == 2);
    CHECK(bora_cfg_int(tr, "num_train_steps", 0, &i) == BORA_OK && i == 100); /* override */
    bora_config *steps = bora_cfg_child(tr, "num_train_steps");
    CHECK(steps && !strcmp(steps->origin, "command-line override --trainer.num_train_steps"));
    bora_config *seed = bora_cfg_child(tr, "seed");
    CHECK(seed && strstr(seed->origin, "more.yaml") && seed->line == 4);
    CHECK(bora_cfg_list_len(bora_cfg_child(root, "data"), "train_urls", &n) == BORA_OK && n == 2);
    CHECK(bora_cfg_string(bora_cfg_child(bora_cfg_child(root, "model"), "extra"), "deep", NULL,
                          &s) == BORA_OK &&
          !strcmp(s, "x"));
    /* A value from an included file carries that file's position. */
    bora_cfg *inc = bora_cfg_new();
    CHECK(bora_cfg_load_file(inc, b) == BORA_OK);
    bora_config *tsteps =
        bora_cfg_child(bora_cfg_child(bora_cfg_root(inc), "trainer"), "num_train_steps");
    CHECK(tsteps && strstr(tsteps->origin, "trainer.yaml") && tsteps->line == 1);
    bora_cfg_free(inc);

    /* An override into a typed field with the wrong type is reported as an override. */
    CHECK(bora_cfg_override(cfg, "trainer.seed", "ten") == BORA_OK);
    CHECK(bora_cfg_int(tr, "seed", 0, &i) == BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_cfg_first_error(cfg),
                   "in command-line override --trainer.seed: trainer.seed: expected an integer, "
                   "got 'ten'");
    bora_cfg_free(cfg);

    /* List elements by index, and the empty string. */
    cfg = bora_cfg_new();
    CHECK(bora_cfg_override(cfg, "trainer.tracker", "[{type: jsonl}, {type: csv}]") == BORA_OK);
    CHECK(bora_cfg_override(cfg, "trainer.tracker.1.path", "m.csv") == BORA_OK);
    CHECK(bora_cfg_override(cfg, "data.cache_dir", "") == BORA_OK);
    tr = bora_cfg_child(bora_cfg_root(cfg), "trainer");
    CHECK(bora_cfg_string(bora_cfg_at(bora_cfg_child(tr, "tracker"), 1), "path", NULL, &s) ==
              BORA_OK &&
          !strcmp(s, "m.csv"));
    CHECK(bora_cfg_string(bora_cfg_child(bora_cfg_root(cfg), "data"), "cache_dir", "x", &s) ==
              BORA_OK &&
          !strcmp(s, ""));
    bora_cfg_free(cfg);
}

/* Override mistakes: each refused with its message. */
static void bad_override(const char *key, const char *value, const char *expect)
{
    bora_cfg *cfg = bora_cfg_new();
    const char *base = "model:\n  type: toy\ntrainer:\n  tracker: [{type: jsonl}]\n";
    CHECK(bora_cfg_load_string(cfg, "base.yaml", base, strlen(base)) == BORA_OK);
    CHECK(bora_cfg_override(cfg, key, value) == BORA_ERR_CONFIG);
    char *errs = errors_of(cfg);
    CHECK_CONTAINS(errs, expect);
    free(errs);
    bora_cfg_free(cfg);
}

static void bad_args(int argc, char **argv, const char *expect)
{
    bora_cfg *cfg = bora_cfg_new();
    CHECK(bora_cfg_parse_args(cfg, argc, argv, NULL) == BORA_ERR_CONFIG);
    char *errs = errors_of(cfg);
    CHECK_CONTAINS(errs, expect);
    free(errs);
    bora_cfg_free(cfg);
}

static void test_bad_inputs(void)
{
    int cases = 0;
#define BAD(name, text, expect) (bad_file(name, text, strlen(text), expect), cases++)
    BAD("syntax.yaml", "model: [a, b\ntrainer: {}\n", "syntax.yaml:2:8: while parsing a flow");
    BAD("tabs.yaml", "model:\n\ttype: gpt2\n",
        "tabs.yaml:2:1: while scanning for the next token found character that cannot start any "
        "token; a tab is not allowed for indentation in YAML: indent with spaces");
    BAD("dup.yaml", "model:\n  type: a\n  type: b\n",
        "dup.yaml:3:3: duplicate key 'type' (first given at line 2)");
    BAD("empty.yaml", "", "empty.yaml: the file is empty");
    BAD("empty2.yaml", "# only a comment\n", "the file is empty; a configuration is a mapping");
    BAD("list.yaml", "- a\n- b\n",
        "list.yaml:1:1: a configuration is a mapping of sections (model:, trainer:, ...), not a "
        "list");
    BAD("scalar.yaml", "just words\n", "not a single value");
    BAD("twodocs.yaml", "a: 1\n---\nb: 2\n", "twodocs.yaml:2:1: a second YAML document");
    BAD("alias.yaml", "a: *nothing\n", "alias.yaml:1:4: unknown alias '*nothing'");
    BAD("tag.yaml", "a: !frobnicate x\n",
        "tag.yaml:1:4: unknown tag '!frobnicate' (bora understands only !include)");
    BAD("complexkey.yaml", "? [a, b]\n: c\n", "complexkey.yaml:1:3: a key must be a plain name");
    BAD("include_missing.yaml", "model: !include nope.yaml\n",
        "include_missing.yaml:1:8: cannot include '");
    BAD("include_missing2.yaml", "model: !include nope.yaml\n",
        "nope.yaml': No such file or directory");
    BAD("include_dev.yaml", "model: !include /dev/stdin\n",
        "include_dev.yaml:1:8: cannot include '/dev/stdin': not a regular file");
    BAD("include_dir.yaml", "model: !include .\n", "cannot include '.': not a regular file");
    BAD("include_empty.yaml", "model: !include ''\n", "!include needs a file name");
    write_file("cycle_b.yaml", "x: !include cycle_a.yaml\n", 24);
    BAD("cycle_a.yaml", "y: !include cycle_b.yaml\n", "include cycle: ");
    BAD("self.yaml", "y: !include self.yaml\n", "self.yaml -> ");
    /* Invalid UTF-8 and binary garbage. */
    BAD("latin1.yaml", "name: caf\xe9\n",
        "latin1.yaml: not a UTF-8 text file: incomplete UTF-8 octet sequence at byte 9");
    {
        unsigned char junk[4096];
        unsigned x = 12345;
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
        bad_file("garbage.yaml", (const char *)junk, sizeof junk, "garbage.yaml");
        cases++;
    }
    bad_file("nul.yaml", "a: b\0c\n", 7,
             "nul.yaml:1: a NUL byte at offset 4; is this a text file?");
    cases++;
    /* Deep nesting stops at the limit instead of exhausting the stack. */
    {
        size_t depth = 100000;
        char *deep = malloc(depth + 1);
        memset(deep, '[', depth);
        deep[depth] = 0;
        bad_file("deep.yaml", deep, depth, "deep.yaml:1:66: nested more than 64 levels deep");
        free(deep);
        cases++;
    }
    {
        /* A map nested 200 levels, block style. */
        char *deep = malloc(200 * 204 + 1);
        size_t w = 0;
        for (int i = 0; i < 200; i++)
            w += (size_t)sprintf(deep + w, "%*sk:\n", i * 2 > 400 ? 400 : i, "");
        bad_file("deep2.yaml", deep, w, "nested more than 64 levels deep");
        free(deep);
        cases++;
    }
    /* A billion laughs: aliases that would expand past any memory. */
    BAD("laughs.yaml",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
        "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
        "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n",
        "more than 1000000 nodes (an alias expanded too many times?)");
    /* A file too large to be a configuration. */
    {
        size_t big = (16u << 20) + 10;
        char *huge = malloc(big);
        memset(huge, 'a', big);
        memcpy(huge, "k: ", 3);
        bad_file("huge.yaml", huge, big, "huge.yaml: cannot read: larger than 16 MiB");
        cases++;
        /* A huge scalar in a file of legal size loads, and a typed read of it says so briefly. */
        size_t n = 1u << 20;
        memcpy(huge, "n: ", 3);
        memset(huge + 3, '9', n);
        huge[n + 3] = '\n';
        bora_cfg *cfg = bora_cfg_new();
        CHECK(bora_cfg_load_file(cfg, write_file("bigscalar.yaml", huge, n + 4)) == BORA_OK);
        int64_t v;
        CHECK(bora_cfg_int(bora_cfg_root(cfg), "n", 0, &v) == BORA_ERR_CONFIG);
        CHECK_CONTAINS(bora_cfg_first_error(cfg), "bigscalar.yaml:1:4: n: expected an integer, "
                                                  "got '999999999999999999999999999999999999999"
                                                  "999999999999999999...'");
        cases++;
        bora_cfg_free(cfg);
        free(huge);
    }
    {
        bora_cfg *cfg = bora_cfg_new();
        CHECK(bora_cfg_load_file(cfg, "/nonexistent/run.yaml") == BORA_ERR_CONFIG);
        CHECK_CONTAINS(bora_cfg_first_error(cfg),
                       "in /nonexistent/run.yaml: cannot read: No such file or directory");
        bora_cfg_free(cfg);
        cases++;
    }
#undef BAD

    bad_override("trainer..seed", "1", "'trainer..seed' is not a key path");
    bad_override("trainer", "3", "'trainer' is a whole section; override one key");
    bad_override("model.type.name", "x",
                 "in command-line override --model.type.name: cannot set a key inside "
                 "'model.type': it is a single value (set at base.yaml:2:9)");
    bad_override("trainer.tracker.5.path", "x",
                 "'5' is not an index of the list it names (it has 1 items)");
    bad_override("trainer.seed", "[1, 2", "in command-line override --trainer.seed: ");
    cases += 5;
    char *a1[] = {"--trainer.seed"};
    bad_args(1, a1, "--trainer.seed needs a value: --trainer.seed=VALUE or --trainer.seed VALUE");
    char *a2[] = {"--config"};
    bad_args(1, a2, "--config needs a file");
    char *a3[] = {"-x"};
    bad_args(1, a3, "unexpected argument '-x'");
    /* An option without a dot is not an override: it does not take the next argument. */
    char *a4[] = {"--frobnicate", "base.yaml"};
    bad_args(2, a4, "in command line: unknown option '--frobnicate' (an override names a key");
    char *a5[] = {"--confg=x.yaml"};
    bad_args(1, a5, "in command line: unknown option '--confg'; did you mean '--config'?");
    /* Integers out of range or not whole, with file, line, column and key. */
    const char *range = "trainer:\n  seed: 1e19\n  steps: 2.5\n";
    bora_cfg *cfg = bora_cfg_new();
    CHECK(bora_cfg_load_file(cfg, write_file("range.yaml", range, strlen(range))) == BORA_OK);
    bora_config *tr = bora_cfg_child(bora_cfg_root(cfg), "trainer");
    int64_t v = 7;
    CHECK(bora_cfg_int(tr, "seed", 3, &v) == BORA_ERR_CONFIG && v == 3);
    CHECK(bora_cfg_int(tr, "steps", 3, &v) == BORA_ERR_CONFIG && v == 3);
    char *errs = errors_of(cfg);
    CHECK_CONTAINS(errs, "range.yaml:2:9: trainer.seed: expected an integer, got '1e19' (out of "
                         "range: an integer is at least -9223372036854775808 and at most "
                         "9223372036854775807)");
    CHECK_CONTAINS(errs, "range.yaml:3:10: trainer.steps: expected an integer, got '2.5' (not a "
                         "whole number)");
    free(errs);
    bora_cfg_free(cfg);
    cases += 3;
    printf("test_config: %d bad inputs checked\n", cases);
    CHECK(cases >= 15);
}

int main(void)
{
    if (!mkdtemp(dir) || chdir(dir) != 0) {
        perror(dir);
        return 1;
    }
    test_scalars();
    test_positions_and_getters();
    test_declared_and_unread();
    test_includes_and_merge();
    test_bad_inputs();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cd / && rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return test_summary("test_config");
}
