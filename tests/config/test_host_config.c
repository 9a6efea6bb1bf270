/* tests/config/test_host_config.c — configuration as a plugin reads it, through its own host
 * table: typed getters with positions in their errors, and components chosen by `type:`, one
 * or a list, looked up among the plugins that loaded.
 *
 * usage: test_host_config FIXTURE_PLUGIN_DIR IN_TREE_PLUGIN_DIR */
#include "../test.h"
#include "config/config.h"
#include "plugin/registry.h"
#include "util/log.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_host_config FIXTURE_PLUGIN_DIR IN_TREE_PLUGIN_DIR\n");
        return 2;
    }
    bora_registry *reg = bora_registry_new();
    CHECK(bora_registry_add_dir(reg, argv[1], 1) == BORA_OK);
    CHECK(bora_registry_add_dir(reg, argv[2], 1) == BORA_OK);
    bora_registry_load(reg);
    const bora_entry *model = bora_registry_find(reg, BORA_KIND_MODEL, "fixture");
    CHECK(model != NULL);
    if (!model)
        return test_summary("test_host_config");
    const bora_host *h = &model->file->host;

    bora_cfg *cfg = bora_cfg_new();
    const char *text =
        "model:\n"
        "  type: fixture\n"
        "  width: twelve\n"
        "  trackers: [{type: jsonl, path: a.jsonl}, {type: fixture, colour: red}, {type: jsnl}]\n"
        "  one: {type: fixture}\n"
        "  bad: 3\n";
    CHECK(bora_cfg_load_string(cfg, "run.yaml", text, strlen(text)) == BORA_OK);
    const bora_config *node = bora_cfg_child(bora_cfg_root(cfg), "model");

    /* The fixture model's create() reads width through the host: the error names the spot. */
    const bora_model_ops *ops = (const bora_model_ops *)model->ops;
    bora_model *m = NULL;
    CHECK(ops->create(h, node, &m) == BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_error_get(), "run.yaml:3:10: model.width: expected an integer, got "
                                     "'twelve'");

    /* Typed reads through the table. */
    const char *s;
    CHECK(h->config_string(h, node, "type", NULL, &s) == BORA_OK && !strcmp(s, "fixture"));
    size_t n;
    CHECK(h->config_list_len(h, node, "trackers", &n) == BORA_OK && n == 3);
    const bora_config *first = h->config_list_at(h, node, "trackers", 0);
    CHECK(h->config_string(h, first, "path", NULL, &s) == BORA_OK && !strcmp(s, "a.jsonl"));

    /* Components chosen by type, from a list ... */
    size_t count;
    const bora_component *c;
    const bora_config *sub;
    CHECK(h->config_component(h, node, "trackers", BORA_KIND_TRACKER, 0, &count, &c, &sub) ==
          BORA_OK);
    CHECK(count == 3 && c && !strcmp(c->name, "jsonl") && sub == first);
    CHECK(h->config_component(h, node, "trackers", BORA_KIND_TRACKER, 1, &count, &c, &sub) ==
          BORA_OK);
    CHECK(c && !strcmp(c->name, "fixture") && c->kind == BORA_KIND_TRACKER);
    CHECK(h->config_component(h, node, "trackers", BORA_KIND_TRACKER, 2, &count, &c, &sub) ==
          BORA_ERR_CONFIG);
    CHECK(c == NULL);
    CHECK_CONTAINS(bora_error_get(), "run.yaml:4:81: model.trackers[2].type: no tracker named "
                                     "'jsnl'; did you mean 'jsonl'?");
    CHECK(h->config_component(h, node, "trackers", BORA_KIND_TRACKER, 3, &count, &c, &sub) ==
              BORA_OK &&
          c == NULL);
    /* ... or a single map, of the kind asked for. */
    CHECK(h->config_component(h, node, "one", BORA_KIND_MODEL, 0, &count, &c, &sub) == BORA_OK);
    CHECK(count == 1 && c && c->kind == BORA_KIND_MODEL);
    CHECK(h->config_component(h, node, "absent", BORA_KIND_MODEL, 0, &count, &c, &sub) == BORA_OK &&
          count == 0);
    CHECK(h->config_component(h, node, "bad", BORA_KIND_MODEL, 0, &count, &c, &sub) ==
          BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_error_get(), "run.yaml:6:8: model.bad: expected {type: NAME, ...} or a "
                                     "list of them");

    /* The component's keys are known now: a typo under it is named against them. */
    CHECK(bora_cfg_check_unread(cfg) == BORA_ERR_CONFIG);
    char *errs = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&errs, &len);
    bora_cfg_print_errors(cfg, mem);
    fclose(mem);
    CHECK_CONTAINS(errs, "run.yaml:4:60: unknown key 'colour' in model.trackers[1] (fixture)");
    free(errs);
    bora_cfg_free(cfg);

    /* A component created with no section reads its defaults. */
    CHECK(ops->create(h, NULL, &m) == BORA_OK);
    ops->destroy(m);
    bora_registry_free(reg);
    return test_summary("test_host_config");
}
