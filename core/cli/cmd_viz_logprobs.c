/* core/cli/cmd_viz_logprobs.c — `bora viz-logprobs --checkpoint DIR --data FILE [--out PAGE]
 * [--max-docs N]`: one self-contained HTML page where every token of the first windows of a
 * text is coloured by its log-probability under a checkpoint's model, so a reader sees what the
 * model finds hard; hovering a token shows its value and the model's most likely alternatives.
 *
 * The text is read as `bora eval` reads its validation set: documents tokenized with the run's
 * tokenizer into the token cache, joined with end-of-text and cut into seq_len windows, each
 * window run once through the model's eval graph. Token t+1 of a window is scored by the logits
 * at position t; the token after an end-of-text starts a new document and is not predicted, as
 * in eval's loss. So over the same windows the mean log-probability of the page is minus the
 * loss `bora eval` reports. */
#include "../ckpt/checkpoint.h"
#include "../config/schema.h"
#include "../data/loader.h"
#include "../data/tokenizer.h"
#include "../eval/logits.h"
#include "../graph/graph.h"
#include "../train/inputs.h"
#include "../util/log.h"
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOP_K 5 /* alternatives shown on hover */

typedef struct viz_opts {
    const char *checkpoint, *data, *out;
    int64_t max_docs;
} viz_opts;

static int parse_opts(const bora_cli *cli, viz_opts *o)
{
    *o = (viz_opts){NULL, NULL, "logprobs.html", 16};
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        size_t n = strcspn(a, "=");
        const char *v = a[n] == '=' ? a + n + 1 : (i + 1 < cli->argc ? cli->argv[i + 1] : NULL);
        const char **dst = !strncmp(a, "--checkpoint", n) && n == 12 ? &o->checkpoint
                           : !strncmp(a, "--data", n) && n == 6      ? &o->data
                           : !strncmp(a, "--out", n) && n == 5       ? &o->out
                                                                     : NULL;
        int is_max = !strncmp(a, "--max-docs", n) && n == 10;
        if (!dst && !is_max) {
            static const char *const known[] = {
                "--checkpoint", "--data", "--out", "--max-docs", BORA_CLI_GLOBAL_OPTIONS, NULL};
            if (a[0] == '-')
                return bora_cli_unknown_option("viz-logprobs", a, known);
            bora_log(BORA_LOG_ERROR,
                     "viz-logprobs: unexpected argument '%s' (bora viz-logprobs --checkpoint "
                     "DIR --data FILE [--out PAGE] [--max-docs N])",
                     a);
            return 2;
        }
        if (!v || !*v) {
            bora_log(BORA_LOG_ERROR, "viz-logprobs: %.*s needs a value", (int)n, a);
            return 2;
        }
        if (a[n] != '=')
            i++;
        if (dst)
            *dst = v;
        else if (bora_parse_int(v, &o->max_docs) || o->max_docs < 1 || o->max_docs > 1000000) {
            bora_log(BORA_LOG_ERROR,
                     "viz-logprobs: --max-docs: '%s' is not a number of windows in 1..1000000", v);
            return 2;
        }
    }
    if (!o->checkpoint || !o->data) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: give --checkpoint DIR and --data FILE (bora "
                                 "viz-logprobs --help)");
        return 2;
    }
    return 0;
}

/* Text as HTML (attr: inside a double-quoted attribute too): & < > " ' escaped, a byte that does
 * not start valid UTF-8 shown as \xNN, other control characters than newline and tab as \u. */
static void put_html(FILE *f, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t len = c < 0x80             ? 1
                     : (c & 0xe0) == 0xc0 ? 2
                     : (c & 0xf0) == 0xe0 ? 3
                     : (c & 0xf8) == 0xf0 ? 4
                                          : 0;
        int ok = len > 0 && i + len <= n && !(len == 2 && c < 0xc2);
        for (size_t k = 1; ok && k < len; k++)
            ok = (p[i + k] & 0xc0) == 0x80;
        if (!ok) {
            fprintf(f, "\\x%02x", c);
            i++;
            continue;
        }
        if (len > 1)
            fwrite(p + i, 1, len, f);
        else if (c == '&')
            fputs("&amp;", f);
        else if (c == '<')
            fputs("&lt;", f);
        else if (c == '>')
            fputs("&gt;", f);
        else if (c == '"')
            fputs("&quot;", f);
        else if (c == '\'')
            fputs("&#39;", f);
        else if (c < 0x20 && c != '\n' && c != '\t')
            fprintf(f, "\\u%04x", c);
        else
            fputc((int)c, f);
        i += len;
    }
}

/* The text of shown[at], escaped. A token may end inside a UTF-8 character ("日" is three
 * bytes, often two tokens): decoded alone it would read as U+FFFD. So the tokens from *from to
 * at are decoded together, and while they end inside a character (and more follow) nothing is
 * written yet: the token completing it writes the whole character. With mid_char (a window
 * after the first, whose first tokens may end the character the window before it ends with),
 * leading bytes that begin no character are left out: that window shows the character whole. */
static void put_token(FILE *f, const bora_tokenizer *tok, const int32_t *shown, size_t *from,
                      size_t at, int last, int mid_char)
{
    char *text = NULL;
    size_t len = 0;
    if (bora_tokenizer_decode(tok, shown + *from, at + 1 - *from, &text, &len) != BORA_OK) {
        fprintf(f, "[%d]", shown[at]);
        *from = at + 1;
        return;
    }
    /* a character is at most 4 bytes, so a run longer than 4 tokens is not one being completed */
    int partial = len >= 3 && !memcmp(text + len - 3, "\xef\xbf\xbd", 3) && at - *from < 4;
    if (!partial || last) {
        size_t skip = 0;
        while (mid_char && *from == 0 && len - skip >= 3 && !memcmp(text + skip, "\xef\xbf\xbd", 3))
            skip += 3;
        put_html(f, text + skip, len - skip);
        *from = at + 1;
    }
    free(text);
}

/* Red (unlikely) to green (likely): the hue follows the log-probability over [-10, 0]. */
static void put_color(FILE *f, double lp)
{
    double x = lp < -10 ? 1 : lp > 0 ? 0 : -lp / 10;
    fprintf(f, "hsl(%.0f,75%%,%.0f%%)", 120 * (1 - x), 82 - 10 * x);
}

static const char page_head[] =
    "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<title>log-probabilities</title>\n<style>\n"
    "body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }\n"
    ".doc { font: 13px/1.9 ui-monospace, monospace; white-space: pre-wrap; "
    "border: 1px solid #ddd; padding: .6em; margin: .8em 0; }\n"
    ".doc h2 { font: bold 13px system-ui, sans-serif; margin: 0 0 .3em; white-space: normal; }\n"
    ".t { border-radius: 2px; }\n.t[data-lp] { cursor: help; }\n.t[data-lp]:hover { outline: "
    "1px solid #000; }\n"
    ".u { color: #999; }\n.legend span { padding: 0 .5em; }\n"
    "</style>\n</head>\n<body>\n";

int bora_cmd_viz_logprobs(const bora_cli *cli)
{
    viz_opts o;
    int rc = parse_opts(cli, &o);
    if (rc)
        return rc;
    rc = 1;
    bora_registry *reg = bora_cli_load_plugins(cli);
    bora_cfg *cfg = bora_cfg_new();
    bora_backend *be = NULL;
    const bora_backend_ops *bops = NULL;
    bora_model *model = NULL;
    const bora_model_ops *mops = NULL;
    g_store *store = NULL;
    bora_logits lg = {0};
    bora_tokenizer *tok = NULL;
    bora_loader *loader = NULL;
    int32_t *ids = NULL, *targets = NULL, *segs = NULL, *shown = NULL;
    double *lps = NULL;
    int32_t(*alts)[TOP_K] = NULL;
    float(*alt_lp)[TOP_K] = NULL;
    int64_t *steps = NULL;
    size_t n_steps = 0;
    FILE *f = NULL;
    char dir[4200], tmp[4200];
    tmp[0] = 0;
    if (!reg || !cfg)
        goto out;
    /* a run directory means its latest checkpoint */
    snprintf(dir, sizeof dir, "%s", o.checkpoint);
    if (bora_ckpt_list(o.checkpoint, &steps, &n_steps) == BORA_OK && n_steps)
        snprintf(dir, sizeof dir, "%s/step-%" PRId64, o.checkpoint, steps[n_steps - 1]);
    if (bora_ckpt_load_config(dir, cfg) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: %s", bora_error_get());
        goto out;
    }
    bora_config_check(cfg, reg, 1);
    if (bora_cfg_error_count(cfg)) {
        bora_cfg_print_errors(cfg, stderr);
        goto out;
    }
    bora_config *root = bora_cfg_root(cfg), *mnode = bora_cfg_child(root, "model");
    bora_config *trainer = bora_cfg_child(root, "trainer"), *data = bora_cfg_child(root, "data");
    const char *tok_path = "", *backend_name = "auto", *text_key = "text", *txt_docs = "blocks";
    bora_cfg_string(data, "tokenizer", "", &tok_path);
    bora_cfg_string(data, "text_key", "text", &text_key);
    bora_cfg_string(data, "txt_documents", "blocks", &txt_docs);
    bora_cfg_string(trainer, "backend", "auto", &backend_name);
    if (bora_tokenizer_load(tok_path, &tok) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: the run's tokenizer (data.tokenizer): %s",
                 bora_error_get());
        goto out;
    }
    const bora_entry *me, *be_entry = bora_registry_pick_backend(reg, backend_name);
    if (bora_config_select(mnode, BORA_KIND_MODEL, reg, &me) != BORA_OK || !be_entry) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: %s", bora_error_get());
        goto out;
    }
    mops = (const bora_model_ops *)me->ops;
    bops = (const bora_backend_ops *)be_entry->ops;
    if (bops->create(&be_entry->file->host, trainer, &be) != BORA_OK ||
        mops->create(&me->file->host, mnode, &model) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: %s", bora_error_get());
        goto out;
    }
    if (!(store = g_store_new(bops, be, be_entry->ops->name, 0))) {
        bora_log(BORA_LOG_ERROR, "out of memory");
        goto out;
    }
    g_store_backend_abi(store, be_entry->file->abi_minor);
    if (bora_logits_build(store, mops, model, me->ops->name, BORA_MODE_EVAL, &lg) != BORA_OK ||
        g_store_materialize(store) != BORA_OK || bora_ckpt_load_model(store, dir) != BORA_OK ||
        bora_logits_layout(&lg, me->ops->name) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: %s", bora_error_get());
        goto out;
    }
    int64_t T = lg.T, V = lg.V;
    /* the text, as eval reads a validation set */
    const char *urls[1] = {o.data};
    bora_loader_opts lo = {.urls = urls,
                           .n_urls = 1,
                           .text_key = text_key,
                           .tok = tok,
                           .seq_len = T,
                           .what = "--data",
                           .txt_whole = !strcmp(txt_docs, "file")};
    if (bora_loader_open(&lo, &loader) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: %s", bora_error_get());
        goto out;
    }
    int64_t W = bora_loader_windows(loader);
    if (W < 1) {
        bora_log(BORA_LOG_ERROR,
                 "viz-logprobs: %s holds fewer than %lld tokens (one window of the model's "
                 "seq_len, and one more): give a longer text",
                 o.data, (long long)T + 1);
        goto out;
    }
    int64_t docs = W < o.max_docs ? W : o.max_docs;
    if ((uint64_t)docs > SIZE_MAX / (uint64_t)T / sizeof *alt_lp) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: --max-docs %lld is too many", (long long)docs);
        goto out;
    }
    size_t cells = (size_t)(docs * T);
    ids = malloc(cells * sizeof *ids);
    targets = malloc(cells * sizeof *targets);
    segs = malloc(cells * sizeof *segs);
    lps = malloc(cells * sizeof *lps);
    alts = malloc(cells * sizeof *alts);
    alt_lp = malloc(cells * sizeof *alt_lp);
    shown = malloc(((size_t)T + 1) * sizeof *shown); /* one window's tokens, as written */
    if (!ids || !targets || !segs || !lps || !alts || !alt_lp || !shown) {
        bora_log(BORA_LOG_ERROR, "out of memory");
        goto out;
    }
    /* every window through the model: the log-probability of each target and the top tokens */
    double sum = 0;
    int64_t predicted = 0;
    for (int64_t w = 0; w < docs; w++) {
        int32_t *in = ids + w * T, *tg = targets + w * T, *sg = segs + w * T;
        int64_t count = 0;
        bora_status st = bora_loader_rows(loader, w, 1, 0, 1, in, tg, sg, &count);
        size_t bytes = sizeof(int32_t) * (size_t)T;
        if (st == BORA_OK)
            st = g_set_input(lg.g, "input_ids", in, bytes);
        if (st == BORA_OK && bora_inputs_reads(lg.g, "segment_ids"))
            st = g_set_input(lg.g, "segment_ids", sg, bytes);
        if (st == BORA_OK)
            st = bora_logits_run_all(&lg);
        if (st != BORA_OK) {
            bora_log(BORA_LOG_ERROR, "viz-logprobs: window %lld: %s", (long long)w,
                     bora_error_get());
            goto out;
        }
        for (int64_t t = 0; t < T; t++) {
            size_t at = (size_t)(w * T + t);
            double mx = -INFINITY, z = 0;
            int32_t *top = alts[at];
            float *top_v = alt_lp[at];
            int n_top = 0;
            for (int64_t v = 0; v < V; v++) {
                float x = bora_logits_at(&lg, t, v);
                mx = fmax(mx, x);
                /* insertion into the TOP_K largest, kept in descending order */
                if (n_top < TOP_K || x > top_v[n_top - 1]) {
                    int k = n_top < TOP_K ? n_top++ : TOP_K - 1;
                    while (k > 0 && top_v[k - 1] < x) {
                        top_v[k] = top_v[k - 1], top[k] = top[k - 1];
                        k--;
                    }
                    top_v[k] = x, top[k] = (int32_t)v;
                }
            }
            for (int64_t v = 0; v < V; v++)
                z += exp((double)bora_logits_at(&lg, t, v) - mx);
            double lse = mx + log(z);
            for (int k = 0; k < n_top; k++)
                top_v[k] = (float)(top_v[k] - lse);
            for (int k = n_top; k < TOP_K; k++)
                top[k] = -1;
            lps[at] = NAN;
            if (tg[t] >= 0 && tg[t] < V) {
                lps[at] = bora_logits_at(&lg, t, tg[t]) - lse;
                sum += lps[at];
                predicted++;
            }
        }
    }
    /* the page, written beside --out and renamed over it when whole */
    snprintf(tmp, sizeof tmp, "%s.tmp", o.out);
    if (!(f = fopen(tmp, "w"))) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: cannot write %s: %s", tmp, strerror(errno));
        tmp[0] = 0;
        goto out;
    }
    double mean = predicted ? sum / (double)predicted : NAN;
    fputs(page_head, f);
    fputs("<h1>Log-probabilities of ", f);
    put_html(f, dir, strlen(dir));
    fputs(" on ", f);
    put_html(f, o.data, strlen(o.data));
    fprintf(f,
            "</h1>\n<p id=\"summary\" data-windows=\"%lld\" data-tokens=\"%lld\" "
            "data-mean-logprob=\"%.9g\">The first %lld of the text's %lld windows of %lld tokens; "
            "%lld tokens predicted, mean log-probability %.4f nats (the loss bora eval reports "
            "is minus this). Hover over a token for its log-probability and the model's most "
            "likely tokens there; grey tokens are not predicted (a window's first, or a "
            "document's first after end-of-text).</p>\n",
            (long long)docs, (long long)predicted, mean, (long long)docs, (long long)W,
            (long long)T, (long long)predicted, mean);
    fputs("<p class=\"legend\">log-probability:", f);
    for (int k = 0; k <= 10; k += 2) {
        fputs(" <span style=\"background:", f);
        put_color(f, -k);
        fprintf(f, "\">%d</span>", -k);
    }
    fputs("</p>\n", f);
    for (int64_t w = 0; w < docs; w++) {
        const int32_t *in = ids + w * T, *tg = targets + w * T;
        fprintf(f,
                "<div class=\"doc\" data-window=\"%lld\"><h2>window %lld (tokens %lld to %lld)"
                "</h2>",
                (long long)w, (long long)w, (long long)(w * T), (long long)(w * T + T));
        size_t n_shown = 0, from = 0;
        shown[n_shown++] = in[0];
        fputs("<span class=\"t u\">", f);
        put_token(f, tok, shown, &from, 0, T == 0, w > 0);
        fputs("</span>", f);
        for (int64_t t = 0; t < T; t++) {
            size_t at = (size_t)(w * T + t);
            /* the token at t + 1: the target, or the next input where t predicts nothing */
            int32_t next = tg[t] >= 0 ? tg[t] : t + 1 < T ? in[t + 1] : -1;
            if (next < 0)
                continue;
            shown[n_shown++] = next;
            int last = t + 1 == T || (t + 2 == T && tg[t + 1] < 0);
            if (isnan(lps[at])) {
                fputs("<span class=\"t u\">", f);
                put_token(f, tok, shown, &from, n_shown - 1, last, w > 0);
                fputs("</span>", f);
                continue;
            }
            fprintf(f, "<span class=\"t\" data-lp=\"%.6f\" style=\"background:", lps[at]);
            put_color(f, lps[at]);
            fprintf(f, "\" title=\"log-prob %.4f (p = %.4f)&#10;most likely:", lps[at],
                    exp(lps[at]));
            for (int k = 0; k < TOP_K && alts[at][k] >= 0; k++) {
                fputs("&#10;  ", f);
                char *text = NULL;
                size_t len = 0;
                if (bora_tokenizer_decode(tok, &alts[at][k], 1, &text, &len) == BORA_OK) {
                    fputc('\'', f);
                    put_html(f, text, len);
                    fputc('\'', f);
                }
                free(text);
                fprintf(f, " %.4f", alt_lp[at][k]);
            }
            fputs("\">", f);
            put_token(f, tok, shown, &from, n_shown - 1, last, w > 0);
            fputs("</span>", f);
        }
        fputs("</div>\n", f);
    }
    fputs("</body>\n</html>\n", f);
    if (ferror(f) | fclose(f)) {
        f = NULL;
        bora_log(BORA_LOG_ERROR, "viz-logprobs: writing %s failed: %s", tmp, strerror(errno));
        goto out;
    }
    f = NULL;
    if (rename(tmp, o.out) != 0) {
        bora_log(BORA_LOG_ERROR, "viz-logprobs: cannot rename %s to %s: %s", tmp, o.out,
                 strerror(errno));
        goto out;
    }
    tmp[0] = 0;
    printf("viz-logprobs: %s: %lld windows, %lld tokens predicted, mean log-probability %.4f\n",
           o.out, (long long)docs, (long long)predicted, mean);
    rc = 0;
out:
    if (f)
        fclose(f);
    if (tmp[0])
        remove(tmp);
    free(steps);
    free(ids);
    free(targets);
    free(segs);
    free(lps);
    free(alts);
    free(alt_lp);
    free(shown);
    bora_loader_free(loader);
    bora_tokenizer_free(tok);
    bora_logits_free(&lg);
    g_store_free(store);
    if (model)
        mops->destroy(model);
    if (be)
        bops->destroy(be);
    bora_cfg_free(cfg);
    bora_registry_free(reg);
    return rc;
}
