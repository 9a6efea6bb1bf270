/* core/graph/build_sample.c — drawing a token per position from a model's own softmax
 * (bora_graph_api.sample, BORA_OP_SAMPLE): Sophia-G's Gauss-Newton-Bartlett estimate trains on
 * such labels. The op reads logits as (rows, vocab) and returns an i32 per row; this builder puts
 * the vocab axis last, merges the others into rows, and splits the rows back into them. A token
 * is an integer, so it has no gradient: autodiff treats the draw as a constant. */
#include "build.h"

bora_tensor *api_sample(bora_graph *gp, bora_tensor *logits, const char *axis, bora_tensor *counter,
                        uint64_t seed, uint64_t stream)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, logits, axis, counter);
    char dl[256], dc[256];
    g_describe(logits, dl, sizeof dl);
    g_describe(counter, dc, sizeof dc);
    int vi = g_axis_index(logits, axis);
    if (vi < 0) {
        g_fail(g, "sample: logits %s have no axis '%s'", dl, axis);
        return NULL;
    }
    if (!g_is_float(logits->dtype)) {
        g_fail(g, "sample: logits %s must be of a float dtype (f32, f64, bf16 or f16)", dl);
        return NULL;
    }
    if (counter->dtype != BORA_DTYPE_I64 || counter->ndim != 1 || counter->dims[0] != 2) {
        g_fail(g, "sample: counter %s must be a 1-d i64 tensor of 2 (step, first row)", dc);
        return NULL;
    }
    if (logits->dims[vi] > INT32_MAX) {
        g_fail(g, "sample: logits %s have more entries along '%s' than an i32 token can name", dl,
               axis);
        return NULL;
    }
    if (stream >> 32) {
        g_fail(g, "sample over %s: stream %llu does not fit Philox's 32-bit counter word", dl,
               (unsigned long long)stream);
        return NULL;
    }
    /* bf16 and f16 logits are widened: the draw is made in f64 either way */
    gval *x = logits->dtype == BORA_DTYPE_F32 || logits->dtype == BORA_DTYPE_F64
                  ? logits
                  : g_copy_as(g, logits, BORA_DTYPE_F32);
    /* (rows, vocab): the other axes in their order, merged, then the vocab axis */
    const char *order[BORA_MAX_DIMS];
    bora_axis others[BORA_MAX_DIMS];
    int n_others = 0;
    for (int i = 0; i < logits->ndim; i++)
        if (i != vi) {
            others[n_others] = (bora_axis){logits->names[i], logits->dims[i]};
            order[n_others++] = logits->names[i];
        }
    order[n_others] = logits->names[vi];
    gval *xp = x ? g_permute(g, x, logits->ndim, order) : NULL;
    gval *x2 = NULL;
    if (xp && n_others > 0)
        x2 = api_merge(gp, xp, n_others, order, "__rows");
    else if (xp)
        x2 = api_broadcast(gp, xp, (bora_axis){"__rows", 1});
    if (!x2)
        return NULL;
    gval *ins[2] = {x2, counter};
    gval *tokens = g_op1(g, BORA_OP_SAMPLE, 2, ins, BORA_DTYPE_I32, 1, x2->dims, x2->names);
    if (!tokens)
        return NULL;
    tokens->requires_grad = 0;
    tokens->node->opt.sample = (bora_opt_sample){sizeof(bora_opt_sample), 0, seed, stream};
    return api_split(gp, tokens, "__rows", n_others, others);
}
