/* core/train/eval.c — the validation loss (see eval.h). */
#include "eval.h"

#include "inputs.h"

#include "../util/log.h"
#include "../util/str.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct bora_eval {
    g_graph *g;
    int64_t rows, seq_len;
    int32_t *ids, *targets, *segs;
    float *feats; /* (rows, mel, frame), when the graph reads input_features */
    size_t feat_row;
};

bora_status bora_eval_new(g_store *store, const bora_model_ops *mops, bora_model *model,
                          int64_t rows, bora_eval **out)
{
    *out = NULL;
    bora_eval *e = calloc(1, sizeof *e);
    if (!e || !(e->g = g_graph_new(store, BORA_MODE_TRAIN))) {
        free(e);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    e->rows = rows;
    e->g->batch = rows;
    bora_tensor *loss_sum = NULL;
    if (mops->build(model, &e->g->pub, BORA_MODE_TRAIN, &loss_sum) != BORA_OK ||
        bora_graph_status(&e->g->pub) != BORA_OK) {
        bora_status st = bora_error_set(BORA_ERR_INVALID, "eval graph: %s",
                                        e->g->status ? e->g->error : bora_error_get());
        bora_eval_free(e);
        return st;
    }
    e->g->output = loss_sum;
    if (bora_inputs_check(e->g, BORA_MODE_TRAIN, NULL) != BORA_OK) {
        bora_status st = bora_error_set(BORA_ERR_INVALID, "eval graph: %s", bora_error_get());
        bora_eval_free(e);
        return st;
    }
    if (g_finalize(e->g) != BORA_OK) {
        bora_status st = bora_error_set(BORA_ERR_INVALID, "eval graph: %s", e->g->error);
        bora_eval_free(e);
        return st;
    }
    for (size_t i = 0; i < e->g->n_inputs; i++) {
        const gval *v = e->g->inputs[i].value;
        if (v->label && !strcmp(v->label, "input_ids") && v->ndim == 2)
            e->seq_len = v->dims[1];
    }
    size_t n = (size_t)(rows * e->seq_len);
    e->ids = malloc(n * sizeof(int32_t));
    e->targets = malloc(n * sizeof(int32_t));
    e->segs = malloc(n * sizeof(int32_t));
    int mels;
    int64_t frames;
    if (bora_inputs_features(e->g, &mels, &frames)) {
        size_t cells;
        if (__builtin_mul_overflow((size_t)mels, (size_t)frames, &e->feat_row) ||
            __builtin_mul_overflow(e->feat_row, (size_t)rows, &cells) ||
            !(e->feats = malloc(cells * sizeof(float)))) {
            bora_eval_free(e);
            return bora_error_set(BORA_ERR_NOMEM, "eval graph: out of memory for its features");
        }
    }
    if (!e->seq_len || !e->ids || !e->targets || !e->segs) {
        bora_eval_free(e);
        return bora_error_set(BORA_ERR_NOMEM, "eval graph: no input_ids, or out of memory");
    }
    *out = e;
    return BORA_OK;
}

void bora_eval_free(bora_eval *e)
{
    if (!e)
        return;
    g_graph_free(e->g);
    free(e->ids);
    free(e->targets);
    free(e->segs);
    free(e->feats);
    free(e);
}

int bora_eval_features(const bora_eval *e, int *n_mels, int64_t *frames)
{
    return bora_inputs_features(e->g, n_mels, frames);
}

size_t bora_eval_input_bytes(const bora_eval *e)
{
    return g_input_bytes(e->g) + (size_t)(e->rows * e->seq_len) * 3 * sizeof(int32_t) +
           (size_t)e->rows * e->feat_row * sizeof(float);
}

int64_t bora_eval_seq_len(const bora_eval *e)
{
    return e->seq_len;
}

bora_status bora_eval_run(bora_eval *e, bora_loader *val, const bora_tokenizer *tok,
                          int64_t max_sequences, bora_eval_result *r)
{
    memset(r, 0, sizeof *r);
    double t0 = bora_now_s();
    int64_t W = bora_loader_windows(val), L = e->seq_len, R = e->rows;
    if (W < 1)
        return bora_error_set(BORA_ERR_INVALID, "the validation set has no window of %lld tokens",
                              (long long)L);
    int64_t todo = max_sequences > 0 && max_sequences < W ? max_sequences : W;
    size_t bytes = (size_t)(R * L) * sizeof(int32_t);
    double sum = 0; /* nats, summed in double across pieces */
    for (int64_t k = 0; k * R < todo; k++) {
        int64_t count = 0, valid = todo - k * R < R ? todo - k * R : R;
        /* Windows k*R .. k*R+valid-1 in file order: rows of batch k (of R) of the unshuffled
         * loader; rows past the set read token 0 and predict nothing. */
        bora_status st = bora_loader_rows(val, k, R, 0, valid, e->ids, e->targets, e->segs, &count);
        if (st != BORA_OK)
            return st;
        size_t used = (size_t)(valid * L), pad = (size_t)((R - valid) * L);
        memset(e->ids + used, 0, pad * sizeof *e->ids);
        memset(e->segs + used, 0, pad * sizeof *e->segs);
        for (size_t i = used; i < used + pad; i++)
            e->targets[i] = -100;
        if (e->feats) { /* the clips' features; rows past the set hear silence */
            size_t fr = e->feat_row;
            if ((st = bora_loader_features(val, k, R, 0, valid, e->feats)) != BORA_OK)
                return st;
            memset(e->feats + (size_t)valid * fr, 0, (size_t)(R - valid) * fr * sizeof(float));
            if ((st = g_set_input(e->g, "input_features", e->feats,
                                  (size_t)R * fr * sizeof(float))) != BORA_OK)
                return bora_error_set(st, "eval: %s", bora_error_get());
        }
        for (size_t i = 0; i < used; i++)
            if (e->targets[i] >= 0)
                r->bytes += bora_tokenizer_token_bytes(tok, e->targets[i]);
        float part = 0;
        if ((st = g_set_input(e->g, "input_ids", e->ids, bytes)) != BORA_OK ||
            (st = g_set_input(e->g, "targets", e->targets, bytes)) != BORA_OK ||
            (bora_inputs_reads(e->g, "segment_ids") &&
             (st = g_set_input(e->g, "segment_ids", e->segs, bytes)) != BORA_OK) ||
            (st = g_run(e->g)) != BORA_OK ||
            (st = g_read(e->g, e->g->output, &part, sizeof part)) != BORA_OK)
            return bora_error_set(st, "eval: %s", e->g->status ? e->g->error : bora_error_get());
        sum += part;
        r->tokens += count;
        r->sequences += valid;
    }
    r->loss = r->tokens ? sum / (double)r->tokens : NAN;
    r->bpb = r->bytes ? sum / log(2.0) / (double)r->bytes : NAN;
    r->seconds = bora_now_s() - t0;
    return BORA_OK;
}
