/* plugins/backends/cpu/kernels_t.h — the CPU kernels, written once for an element type T and
 * included by kernels.c for float (suffix f32) and double (suffix f64).
 *
 * Every kernel takes strided tensors. Work is split by a fixed static partition over output
 * rows; every sum runs sequentially in a fixed order inside one thread (reductions across rows,
 * as in a weight gradient, are split by column instead), so results never depend on the number
 * of threads. Sums accumulate in double. */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define K(name) CAT(name, SUFFIX)

/* ---- elementwise --------------------------------------------------------------------------- */

static T K(act)(int op, T x)
{
    switch (op) {
    case BORA_OP_NEG: return -x;
    case BORA_OP_EXP: return EXP(x);
    case BORA_OP_LOG: return LOG(x);
    case BORA_OP_SQRT: return SQRT(x);
    case BORA_OP_RSQRT: return (T)1 / SQRT(x);
    case BORA_OP_TANH: return TANH(x);
    case BORA_OP_SIGMOID: return (T)1 / ((T)1 + EXP(-x));
    case BORA_OP_RELU: return x > 0 ? x : 0;
    case BORA_OP_SILU: return x / ((T)1 + EXP(-x));
    case BORA_OP_GELU_TANH: {
        T c = (T)0.7978845608028654; /* sqrt(2/pi) */
        return (T)0.5 * x * ((T)1 + TANH(c * (x + (T)0.044715 * x * x * x)));
    }
    case BORA_OP_GELU_EXACT: return (T)0.5 * x * ((T)1 + ERF(x * (T)0.7071067811865476));
    default: return x;
    }
}

/* d act(x) / dx, times dy. */
static T K(act_grad)(int op, T x, T dy)
{
    switch (op) {
    case BORA_OP_TANH: {
        T t = TANH(x);
        return dy * ((T)1 - t * t);
    }
    case BORA_OP_SIGMOID: {
        T s = (T)1 / ((T)1 + EXP(-x));
        return dy * s * ((T)1 - s);
    }
    case BORA_OP_RELU: return x > 0 ? dy : 0;
    case BORA_OP_SILU: {
        T s = (T)1 / ((T)1 + EXP(-x));
        return dy * s * ((T)1 + x * ((T)1 - s));
    }
    case BORA_OP_GELU_TANH: {
        T c = (T)0.7978845608028654, a = (T)0.044715;
        T u = c * (x + a * x * x * x), t = TANH(u);
        T du = c * ((T)1 + (T)3 * a * x * x);
        return dy * ((T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * du);
    }
    case BORA_OP_GELU_EXACT: {
        T cdf = (T)0.5 * ((T)1 + ERF(x * (T)0.7071067811865476));
        T pdf = EXP((T)-0.5 * x * x) * (T)0.3989422804014327;
        return dy * (cdf + x * pdf);
    }
    default: return 0;
    }
}

static bora_status K(elementwise)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *o = &a->outputs[0];
    int op = (int)a->op, nin = (int)a->n_inputs;
    int act_op = op == BORA_OP_ACT_GRAD ? ((const bora_opt_act *)a->options)->op : 0;
    T value = op == BORA_OP_FILL || op == BORA_OP_SCALE
                  ? (T)((const bora_opt_scalar *)a->options)->value
                  : 0;
    walk w;
    walk_init(&w, o, a->inputs, nin);
    int64_t rows = w.rows, n = w.inner;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t off[5];
        walk_row(&w, r, off);
        T *out = (T *)o->data + off[0];
        const T *x = nin > 0 ? (const T *)a->inputs[0].data + off[1] : NULL;
        const T *y = nin > 1 ? (const T *)a->inputs[1].data + off[2] : NULL;
        const T *z = nin > 2 ? (const T *)a->inputs[2].data + off[3] : NULL;
        int64_t so = w.inner_stride[0], sx = w.inner_stride[1], sy = w.inner_stride[2],
                sz = w.inner_stride[3];
        for (int64_t i = 0; i < n; i++) {
            T r_;
            switch (op) {
            case BORA_OP_FILL: r_ = value; break;
            case BORA_OP_ADD: r_ = x[i * sx] + y[i * sy]; break;
            case BORA_OP_SUB: r_ = x[i * sx] - y[i * sy]; break;
            case BORA_OP_MUL: r_ = x[i * sx] * y[i * sy]; break;
            case BORA_OP_DIV: r_ = x[i * sx] / y[i * sy]; break;
            case BORA_OP_SCALE: r_ = x[i * sx] * value; break;
            case BORA_OP_SIN:
            case BORA_OP_COS:
            case BORA_OP_ABS:
            case BORA_OP_SIGN: r_ = K(elem)(op, x[i * sx], 0); break;
            case BORA_OP_MINIMUM:
            case BORA_OP_MAXIMUM:
            case BORA_OP_LESS:
            case BORA_OP_LESS_EQUAL:
            case BORA_OP_EQUAL:
            case BORA_OP_NOT_EQUAL: r_ = K(elem)(op, x[i * sx], y[i * sy]); break;
            case BORA_OP_WHERE: r_ = x[i * sx] != 0 ? y[i * sy] : z[i * sz]; break;
            case BORA_OP_ACT_GRAD:
                r_ = act_op == BORA_OP_MAX ? (x[i * sx] == y[i * sy] ? z[i * sz] : 0)
                                           : K(act_grad)(act_op, x[i * sx], y[i * sy]);
                break;
            default: r_ = K(act)(op, x[i * sx]); break;
            }
            out[i * so] = r_;
        }
    }
    return BORA_OK;
}

/* start + step·i along the one axis, computed in double and rounded once */
static bora_status K(iota)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *o = &a->outputs[0];
    const bora_opt_iota *opt = a->options;
    T *out = o->data;
    for (int64_t i = 0; i < o->dims[0]; i++)
        out[i * o->strides[0]] = (T)(opt->start + opt->step * (double)i);
    return BORA_OK;
}

/* ---- reductions ---------------------------------------------------------------------------- */

/* out (outer...) = reduce over the input's trailing n_reduced axes. */
static bora_status K(reduce)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    int nr = ((const bora_opt_reduce *)a->options)->n_reduced, outer_nd = x->ndim - nr;
    int is_max = a->op == BORA_OP_MAX;
    int64_t n_out = 1, n_red = 1;
    for (int i = 0; i < outer_nd; i++)
        n_out *= x->dims[i];
    for (int i = outer_nd; i < x->ndim; i++)
        n_red *= x->dims[i];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_out; r++) {
        int64_t xo = 0, oo = 0, rem = r;
        for (int i = outer_nd - 1; i >= 0; i--) {
            int64_t idx = rem % x->dims[i];
            rem /= x->dims[i];
            xo += idx * x->strides[i];
            oo += idx * o->strides[i];
        }
        double acc = is_max ? -INFINITY : 0.0;
        for (int64_t j = 0; j < n_red; j++) {
            int64_t xj = xo, rj = j;
            for (int i = x->ndim - 1; i >= outer_nd; i--) {
                xj += (rj % x->dims[i]) * x->strides[i];
                rj /= x->dims[i];
            }
            double v = (double)((const T *)x->data)[xj];
            acc = is_max ? (v > acc ? v : acc) : acc + v;
        }
        ((T *)o->data)[oo] = (T)acc;
    }
    return BORA_OK;
}

/* ---- rows: softmax, log-softmax, layernorm ------------------------------------------------- */

/* Offsets of row r of a tensor whose last axis is the row. */
static int64_t K(row_offset)(const bora_tensor_desc *t, int64_t r)
{
    int64_t off = 0;
    for (int i = t->ndim - 2; i >= 0; i--) {
        off += (r % t->dims[i]) * t->strides[i];
        r /= t->dims[i];
    }
    return off;
}

static bora_status K(softmax)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *x = &a->inputs[0], *o = &a->outputs[0];
    int64_t rows = cpu_rows_of(x), n = x->dims[x->ndim - 1];
    int64_t sx = x->strides[x->ndim - 1], so = o->strides[o->ndim - 1];
    int log_ = a->op == BORA_OP_LOG_SOFTMAX;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = (const T *)x->data + K(row_offset)(x, r);
        T *orow = (T *)o->data + K(row_offset)(o, r);
        double m = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; i++)
            m = (double)xr[i * sx] > m ? (double)xr[i * sx] : m;
        for (int64_t i = 0; i < n; i++)
            sum += exp((double)xr[i * sx] - m);
        double lse = m + log(sum);
        for (int64_t i = 0; i < n; i++)
            orow[i * so] = log_ ? (T)((double)xr[i * sx] - lse) : (T)exp((double)xr[i * sx] - lse);
    }
    return BORA_OK;
}

static bora_status K(layernorm)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *x = &a->inputs[0], *gm = &a->inputs[1], *bt = &a->inputs[2];
    const bora_tensor_desc *y = &a->outputs[0], *mu = &a->outputs[1], *rs = &a->outputs[2];
    double eps = ((const bora_opt_norm *)a->options)->eps;
    int64_t rows = cpu_rows_of(x), n = x->dims[x->ndim - 1];
    int64_t sx = x->strides[x->ndim - 1], sy = y->strides[y->ndim - 1];
    const T *gamma = gm->data, *beta = bt->data;
    int64_t sg = gm->strides[0], sb = bt->strides[0];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = (const T *)x->data + K(row_offset)(x, r);
        T *yr = (T *)y->data + K(row_offset)(y, r);
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; i++)
            mean += (double)xr[i * sx];
        mean /= (double)n;
        for (int64_t i = 0; i < n; i++) {
            double d = (double)xr[i * sx] - mean;
            var += d * d;
        }
        var /= (double)n;
        double rstd = 1.0 / sqrt(var + eps);
        for (int64_t i = 0; i < n; i++)
            yr[i * sy] = (T)(((double)xr[i * sx] - mean) * rstd * (double)gamma[i * sg] +
                             (double)beta[i * sb]);
        ((T *)mu->data)[r] = (T)mean; /* mean and rstd are fresh, dense values */
        ((T *)rs->data)[r] = (T)rstd;
    }
    return BORA_OK;
}

/* (x, gamma, mean, rstd, dy) -> dx, dgamma, dbeta. mean and rstd are dense per row. */
static bora_status K(layernorm_grad)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *x = &a->inputs[0], *gm = &a->inputs[1], *dyd = &a->inputs[4];
    const T *mean = a->inputs[2].data, *rstd = a->inputs[3].data, *gamma = gm->data;
    const bora_tensor_desc *dx = &a->outputs[0], *dg = &a->outputs[1], *db = &a->outputs[2];
    int64_t rows = cpu_rows_of(x), n = x->dims[x->ndim - 1];
    int64_t sx = x->strides[x->ndim - 1], sdy = dyd->strides[dyd->ndim - 1];
    int64_t sdx = dx->strides[dx->ndim - 1], sg = gm->strides[0];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = (const T *)x->data + K(row_offset)(x, r);
        const T *dyr = (const T *)dyd->data + K(row_offset)(dyd, r);
        T *dxr = (T *)dx->data + K(row_offset)(dx, r);
        double m = (double)mean[r], rs = (double)rstd[r], s1 = 0, s2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double xhat = ((double)xr[i * sx] - m) * rs;
            double g = (double)dyr[i * sdy] * (double)gamma[i * sg];
            s1 += g;
            s2 += g * xhat;
        }
        s1 /= (double)n;
        s2 /= (double)n;
        for (int64_t i = 0; i < n; i++) {
            double xhat = ((double)xr[i * sx] - m) * rs;
            double g = (double)dyr[i * sdy] * (double)gamma[i * sg];
            dxr[i * sdx] = (T)(rs * (g - s1 - xhat * s2));
        }
    }
    /* dgamma and dbeta sum over rows: split by column, rows in order. */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        double sg_ = 0, sb_ = 0;
        for (int64_t r = 0; r < rows; r++) {
            const T *xr = (const T *)x->data + K(row_offset)(x, r);
            const T *dyr = (const T *)dyd->data + K(row_offset)(dyd, r);
            double xhat = ((double)xr[i * sx] - (double)mean[r]) * (double)rstd[r];
            sg_ += (double)dyr[i * sdy] * xhat;
            sb_ += (double)dyr[i * sdy];
        }
        ((T *)dg->data)[i * dg->strides[0]] = (T)sg_;
        ((T *)db->data)[i * db->strides[0]] = (T)sb_;
    }
    return BORA_OK;
}

/* (x, [weight]) -> y, rstd: RMSNorm over the last axis, in double whatever T, y rounded once
 * after the scaling. Rows in parallel, each summed in order: the bits do not depend on the
 * number of threads. */
static bora_status K(rms_norm)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_opt_rms_norm *o = a->options;
    const bora_tensor_desc *x = &a->inputs[0], *wd = a->n_inputs > 1 ? &a->inputs[1] : NULL;
    const bora_tensor_desc *y = &a->outputs[0], *rs = &a->outputs[1];
    int64_t rows = cpu_rows_of(x), n = x->dims[x->ndim - 1];
    int64_t sx = x->strides[x->ndim - 1], sy = y->strides[y->ndim - 1];
    const T *w = wd ? wd->data : NULL;
    int64_t sw = wd ? wd->strides[0] : 0;
    double off = o->weight_offset;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = (const T *)x->data + K(row_offset)(x, r);
        T *yr = (T *)y->data + K(row_offset)(y, r);
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
            ss += (double)xr[i * sx] * (double)xr[i * sx];
        double rstd = 1.0 / sqrt(ss / (double)n + o->eps);
        for (int64_t i = 0; i < n; i++)
            yr[i * sy] = (T)((double)xr[i * sx] * rstd * (w ? (double)w[i * sw] + off : 1.0));
        ((T *)rs->data)[r] = (T)rstd; /* rstd is a fresh, dense value */
    }
    return BORA_OK;
}

/* (x, [weight], rstd, dy) -> dx, [dweight]. With g = dy · (weight + offset) and x̂ = x · rstd,
 * dx = rstd · (g - x̂ · mean(g · x̂)) and dweight = Σ over rows of dy · x̂. */
static bora_status K(rms_norm_grad)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_opt_rms_norm *o = a->options;
    int nw = a->n_inputs == 4;
    const bora_tensor_desc *x = &a->inputs[0], *wd = nw ? &a->inputs[1] : NULL;
    const T *rstd = a->inputs[1 + nw].data, *w = wd ? wd->data : NULL;
    const bora_tensor_desc *dyd = &a->inputs[2 + nw], *dx = &a->outputs[0];
    int64_t rows = cpu_rows_of(x), n = x->dims[x->ndim - 1];
    int64_t sx = x->strides[x->ndim - 1], sdy = dyd->strides[dyd->ndim - 1];
    int64_t sdx = dx->strides[dx->ndim - 1], sw = wd ? wd->strides[0] : 0;
    double off = o->weight_offset;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = (const T *)x->data + K(row_offset)(x, r);
        const T *dyr = (const T *)dyd->data + K(row_offset)(dyd, r);
        T *dxr = (T *)dx->data + K(row_offset)(dx, r);
        double rs = (double)rstd[r], s = 0;
        for (int64_t i = 0; i < n; i++)
            s += (double)dyr[i * sdy] * (w ? (double)w[i * sw] + off : 1.0) *
                 ((double)xr[i * sx] * rs);
        s /= (double)n;
        for (int64_t i = 0; i < n; i++) {
            double g = (double)dyr[i * sdy] * (w ? (double)w[i * sw] + off : 1.0);
            dxr[i * sdx] = (T)(rs * (g - (double)xr[i * sx] * rs * s));
        }
    }
    if (!nw)
        return BORA_OK;
    /* dweight sums over rows: split into blocks of 64 columns, each walking the rows in order
     * (a row's block at a time, not a column down every row) */
    const bora_tensor_desc *dw = &a->outputs[1];
    int64_t jobs = (n + 63) / 64;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        int64_t c0 = j * 64, width = n - c0 < 64 ? n - c0 : 64;
        double acc[64] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const T *xr = (const T *)x->data + K(row_offset)(x, r) + c0 * sx;
            const T *dyr = (const T *)dyd->data + K(row_offset)(dyd, r) + c0 * sdy;
            double rs = (double)rstd[r];
            for (int64_t i = 0; i < width; i++)
                acc[i] += (double)dyr[i * sdy] * ((double)xr[i * sx] * rs);
        }
        for (int64_t i = 0; i < width; i++)
            ((T *)dw->data)[(c0 + i) * dw->strides[0]] = (T)acc[i];
    }
    return BORA_OK;
}

/* ---- matmul -------------------------------------------------------------------------------- */

/* C (B,M,N) = A (B,M,K) B (B,K,N), naive with a double accumulator; blocks of rows in parallel. */
static bora_status K(matmul_naive)(bora_backend *bk, const bora_kernel_args *a)
{
    (void)bk;
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    int64_t nb = C->dims[0], M = C->dims[1], N = C->dims[2], Kd = A->dims[2];
#pragma omp parallel for schedule(static)
    for (int64_t bm = 0; bm < nb * M; bm++) {
        int64_t bi = bm / M, m = bm % M;
        const T *ar = (const T *)A->data + bi * A->strides[0] + m * A->strides[1];
        const T *bb = (const T *)B->data + bi * B->strides[0];
        T *cr = (T *)C->data + bi * C->strides[0] + m * C->strides[1];
        for (int64_t n = 0; n < N; n++) {
            double acc = 0;
            for (int64_t k = 0; k < Kd; k++)
                acc += (double)ar[k * A->strides[2]] *
                       (double)bb[k * B->strides[1] + n * B->strides[2]];
            cr[n * C->strides[2]] = (T)acc;
        }
    }
    return BORA_OK;
}

/* ---- cross-entropy ------------------------------------------------------------------------- */

static bora_status K(xent)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *x = &a->inputs[0], *t = &a->inputs[1];
    const bora_opt_xent *opt = a->options;
    int64_t rows = x->dims[0], V = x->dims[1];
    double *per_row = malloc(sizeof(double) * (size_t)(rows ? rows : 1));
    if (!per_row)
        return BORA_ERR_NOMEM;
    T *lse_out = a->outputs[1].data;
    int bad = 0;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = (const T *)x->data + r * x->strides[0];
        int32_t tgt = ((const int32_t *)t->data)[r * t->strides[0]];
        double m = -INFINITY, sum = 0;
        for (int64_t i = 0; i < V; i++)
            m = (double)xr[i * x->strides[1]] > m ? (double)xr[i * x->strides[1]] : m;
        for (int64_t i = 0; i < V; i++)
            sum += exp((double)xr[i * x->strides[1]] - m);
        double lse = m + log(sum);
        lse_out[r] = (T)lse;
        if (tgt == opt->ignore_index) {
            per_row[r] = 0;
        } else if (tgt < 0 || tgt >= V) {
            per_row[r] = 0;
#pragma omp atomic write
            bad = 1;
        } else {
            per_row[r] = lse - (double)xr[tgt * x->strides[1]] + opt->z_loss * lse * lse;
        }
    }
    double total = 0;
    for (int64_t r = 0; r < rows; r++) /* in order: the same sum whatever the threads */
        total += per_row[r];
    free(per_row);
    *(T *)a->outputs[0].data = (T)total;
    return bad ? BORA_ERR_INVALID : BORA_OK;
}

static bora_status K(xent_grad)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *x = &a->inputs[0], *t = &a->inputs[1], *o = &a->outputs[0];
    const T *lse = a->inputs[2].data;
    double dloss = (double)*(const T *)a->inputs[3].data;
    const bora_opt_xent *opt = a->options;
    int64_t rows = x->dims[0], V = x->dims[1];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const T *xr = (const T *)x->data + r * x->strides[0];
        T *orow = (T *)o->data + r * o->strides[0];
        int32_t tgt = ((const int32_t *)t->data)[r * t->strides[0]];
        int skip = tgt == opt->ignore_index || tgt < 0 || tgt >= V;
        double l = (double)lse[r], zf = 1.0 + 2.0 * opt->z_loss * l;
        for (int64_t i = 0; i < V; i++) {
            double p = exp((double)xr[i * x->strides[1]] - l);
            double g = skip ? 0.0 : dloss * (p * zf - (i == tgt ? 1.0 : 0.0));
            orow[i * o->strides[1]] = (T)g;
        }
    }
    return BORA_OK;
}

/* Both in one call: the loss and lse first, then the gradient, which may be the logits' own
 * storage (each element is read before the same element is written). */
static bora_status K(xent_fused)(bora_backend *b, const bora_kernel_args *a)
{
    bora_kernel_args f = *a, g = *a;
    f.n_inputs = 2;
    f.n_outputs = 2;
    bora_tensor_desc gin[4] = {a->inputs[0], a->inputs[1], a->outputs[1], a->inputs[2]};
    g.inputs = gin;
    g.n_inputs = 4;
    g.outputs = &a->outputs[2];
    g.n_outputs = 1;
    bora_status st = K(xent)(b, &f);
    return st != BORA_OK ? st : K(xent_grad)(b, &g);
}

/* ---- embedding ----------------------------------------------------------------------------- */

static bora_status K(gather)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *tb = &a->inputs[0], *ids = &a->inputs[1], *o = &a->outputs[0];
    int64_t rows = ids->dims[0], D = tb->dims[1], V = tb->dims[0];
    int bad = 0;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int32_t id = ((const int32_t *)ids->data)[r * ids->strides[0]];
        T *orow = (T *)o->data + r * o->strides[0];
        if (id < 0 || id >= V) {
#pragma omp atomic write
            bad = 1;
            continue;
        }
        const T *trow = (const T *)tb->data + id * tb->strides[0];
        for (int64_t i = 0; i < D; i++)
            orow[i * o->strides[1]] = trow[i * tb->strides[1]];
    }
    return bad ? BORA_ERR_INVALID : BORA_OK;
}

/* out (V, D) = Σ rows into the rows their ids name, onto zeros or (a third input) init's values;
 * columns in parallel, rows in order. */
static bora_status K(scatter_add)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *ids = &a->inputs[0], *src = &a->inputs[1], *o = &a->outputs[0];
    const bora_tensor_desc *init = a->n_inputs > 2 ? &a->inputs[2] : NULL;
    int64_t rows = ids->dims[0], V = o->dims[0], D = o->dims[1];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < D; i++) {
        for (int64_t v = 0; v < V; v++)
            ((T *)o->data)[v * o->strides[0] + i * o->strides[1]] =
                init ? ((const T *)init->data)[v * init->strides[0] + i * init->strides[1]] : 0;
        for (int64_t r = 0; r < rows; r++) {
            int32_t id = ((const int32_t *)ids->data)[r * ids->strides[0]];
            if (id < 0 || id >= V)
                continue;
            ((T *)o->data)[id * o->strides[0] + i * o->strides[1]] +=
                ((const T *)src->data)[r * src->strides[0] + i * src->strides[1]];
        }
    }
    return BORA_OK;
}

/* ---- attention ----------------------------------------------------------------------------- */

#define AT(d, b_, h_, t_, e_)                                                   \
    ((b_) * (d)->strides[0] + (h_) * (d)->strides[1] + (t_) * (d)->strides[2] + \
     (e_) * (d)->strides[3])

/* Where the optional inputs sit: segment ids, then the runtime key length. */
static int K(attn_extra)(const bora_kernel_args *a)
{
    return a->op == BORA_OP_ATTENTION ? 3 : 6;
}

/* The runtime key length L (S when there is none), within 0..S. */
static int64_t K(key_length)(const bora_kernel_args *a, int64_t S)
{
    const bora_opt_attention *opt = a->options;
    if (!opt->key_length)
        return S;
    const bora_tensor_desc *l = &a->inputs[K(attn_extra)(a) + (opt->segments ? 2 : 0)];
    int64_t L = *(const int32_t *)l->data;
    return L < 0 ? 0 : L > S ? S : L;
}

/* (ABI 1.12) the soft cap c (0: none): a score s becomes c·tanh(s / c) before the masks */
static double K(softcap)(const bora_kernel_args *a)
{
    const bora_opt_attention *opt = a->options;
    return opt->struct_size >= offsetof(bora_opt_attention, softcap) + sizeof(double) &&
                   opt->softcap > 0
               ? opt->softcap
               : 0.0;
}

static int K(allowed)(const bora_kernel_args *a, int64_t bi, int64_t t, int64_t s, int64_t L,
                      int64_t Tq)
{
    const bora_opt_attention *opt = a->options;
    if (s >= L || (opt->causal && s > L - Tq + t))
        return 0;
    if (opt->struct_size >= offsetof(bora_opt_attention, sliding_window) + sizeof(int64_t) &&
        opt->sliding_window > 0 && s <= L - Tq + t - opt->sliding_window)
        return 0; /* the sliding window (ABI 1.9) */
    if (opt->segments) {
        const bora_tensor_desc *sq = &a->inputs[K(attn_extra)(a)], *sk = sq + 1;
        int32_t qs = ((const int32_t *)sq->data)[bi * sq->strides[0] + t * sq->strides[1]];
        int32_t ks = ((const int32_t *)sk->data)[bi * sk->strides[0] + s * sk->strides[1]];
        return qs == ks;
    }
    return 1;
}

static bora_status K(attention)(bora_backend *bk, const bora_kernel_args *a)
{
    (void)bk;
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1], *v = &a->inputs[2];
    const bora_tensor_desc *o = &a->outputs[0], *l = &a->outputs[1];
    const bora_opt_attention *opt = a->options;
    int64_t B = q->dims[0], H = q->dims[1], Tq = q->dims[2], E = q->dims[3], S = k->dims[2];
    int64_t L = K(key_length)(a, S), G = H / k->dims[1]; /* query head h reads kv head h / G */
    double cap = K(softcap)(a);
#pragma omp parallel for schedule(static)
    for (int64_t bht = 0; bht < B * H * Tq; bht++) {
        int64_t bi = bht / (H * Tq), h = (bht / Tq) % H, t = bht % Tq, hk = h / G;
        double *p = malloc(sizeof(double) * (size_t)S);
        double m = -INFINITY, sum = 0;
        for (int64_t s = 0; s < S; s++) {
            p[s] = -INFINITY;
            if (!K(allowed)(a, bi, t, s, L, Tq))
                continue;
            double dot = 0;
            for (int64_t e = 0; e < E; e++)
                dot += (double)((const T *)q->data)[AT(q, bi, h, t, e)] *
                       (double)((const T *)k->data)[AT(k, bi, hk, s, e)];
            p[s] = cap > 0 ? cap * tanh(dot * opt->scale / cap) : dot * opt->scale;
            m = p[s] > m ? p[s] : m;
        }
        for (int64_t s = 0; s < S; s++)
            sum += p[s] == -INFINITY ? 0 : exp(p[s] - m);
        double lse = sum > 0 ? m + log(sum) : -INFINITY; /* no key visible: output 0 */
        ((T *)l->data)[bi * l->strides[0] + h * l->strides[1] + t * l->strides[2]] = (T)lse;
        for (int64_t e = 0; e < E; e++) {
            double acc = 0;
            for (int64_t s = 0; s < S; s++)
                if (p[s] != -INFINITY)
                    acc += exp(p[s] - lse) * (double)((const T *)v->data)[AT(v, bi, hk, s, e)];
            ((T *)o->data)[AT(o, bi, h, t, e)] = (T)acc;
        }
        free(p);
    }
    return BORA_OK;
}

/* (q, k, v, out, lse, dout, [seg_q, seg_k]) -> dq, dk, dv, recomputing the probabilities. */
static bora_status K(attention_grad)(bora_backend *bk, const bora_kernel_args *a)
{
    (void)bk;
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1], *v = &a->inputs[2];
    const bora_tensor_desc *o = &a->inputs[3], *l = &a->inputs[4], *dout = &a->inputs[5];
    const bora_tensor_desc *dq = &a->outputs[0], *dk = &a->outputs[1], *dv = &a->outputs[2];
    const bora_opt_attention *opt = a->options;
    int64_t B = q->dims[0], H = q->dims[1], Tq = q->dims[2], E = q->dims[3], S = k->dims[2];
    int64_t L = K(key_length)(a, S), Hk = k->dims[1], G = H / Hk;
    double cap = K(softcap)(a);
    /* one job per (batch, kv head): dK and dV sum over its G query heads, in order */
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < B * Hk; bh++) {
        int64_t bi = bh / Hk, hk = bh % Hk;
        double *P = calloc((size_t)(Tq * S), sizeof(double));
        double *dS = calloc((size_t)(Tq * S), sizeof(double));
        double *ak = calloc((size_t)(S * E), sizeof(double));
        double *av = calloc((size_t)(S * E), sizeof(double));
        for (int64_t h = hk * G; h < hk * G + G; h++) {
            for (int64_t t = 0; t < Tq; t++) {
                double lse = (double)((const T *)l->data)[bi * l->strides[0] + h * l->strides[1] +
                                                          t * l->strides[2]];
                double Dt = 0;
                for (int64_t e = 0; e < E; e++)
                    Dt += (double)((const T *)dout->data)[AT(dout, bi, h, t, e)] *
                          (double)((const T *)o->data)[AT(o, bi, h, t, e)];
                for (int64_t s = 0; s < S && lse > -INFINITY; s++) {
                    if (!K(allowed)(a, bi, t, s, L, Tq))
                        continue;
                    double dot = 0, dp = 0;
                    for (int64_t e = 0; e < E; e++) {
                        dot += (double)((const T *)q->data)[AT(q, bi, h, t, e)] *
                               (double)((const T *)k->data)[AT(k, bi, hk, s, e)];
                        dp += (double)((const T *)dout->data)[AT(dout, bi, h, t, e)] *
                              (double)((const T *)v->data)[AT(v, bi, hk, s, e)];
                    }
                    /* capped: d score = d capped · (1 - tanh²), the tanh recomputed */
                    double u = cap > 0 ? tanh(dot * opt->scale / cap) : 0;
                    P[t * S + s] = exp((cap > 0 ? cap * u : dot * opt->scale) - lse);
                    dS[t * S + s] = P[t * S + s] * (dp - Dt) * (cap > 0 ? 1 - u * u : 1);
                }
            }
            for (int64_t t = 0; t < Tq; t++)
                for (int64_t e = 0; e < E; e++) {
                    double acc = 0;
                    for (int64_t s = 0; s < S; s++)
                        acc += dS[t * S + s] * (double)((const T *)k->data)[AT(k, bi, hk, s, e)];
                    ((T *)dq->data)[AT(dq, bi, h, t, e)] = (T)(acc * opt->scale);
                }
            for (int64_t s = 0; s < S; s++)
                for (int64_t e = 0; e < E; e++) {
                    double sk = 0, sv = 0;
                    for (int64_t t = 0; t < Tq; t++) {
                        sk += dS[t * S + s] * (double)((const T *)q->data)[AT(q, bi, h, t, e)];
                        sv += P[t * S + s] * (double)((const T *)dout->data)[AT(dout, bi, h, t, e)];
                    }
                    ak[s * E + e] += sk * opt->scale;
                    av[s * E + e] += sv;
                }
            memset(P, 0, sizeof(double) * (size_t)(Tq * S));
            memset(dS, 0, sizeof(double) * (size_t)(Tq * S));
        }
        for (int64_t s = 0; s < S; s++)
            for (int64_t e = 0; e < E; e++) {
                ((T *)dk->data)[AT(dk, bi, hk, s, e)] = (T)ak[s * E + e];
                ((T *)dv->data)[AT(dv, bi, hk, s, e)] = (T)av[s * E + e];
            }
        free(P);
        free(dS);
        free(ak);
        free(av);
    }
    return BORA_OK;
}
#undef AT

/* ---- the primitives of the decompositions -------------------------------------------------- */

static bora_status K(one_hot)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_tensor_desc *ids = &a->inputs[0], *o = &a->outputs[0];
    int64_t rows = o->dims[0], V = o->dims[1];
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int32_t id = ((const int32_t *)ids->data)[r * ids->strides[0]];
        for (int64_t v = 0; v < V; v++)
            ((T *)o->data)[r * o->strides[0] + v * o->strides[1]] = v == id ? (T)1 : (T)0;
    }
    return BORA_OK;
}

/* (B, T, S): 0 where query t may see key s, -inf elsewhere. The optional inputs are at 0.. */
static bora_status K(attention_bias)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_opt_attention *opt = a->options;
    const bora_tensor_desc *o = &a->outputs[0];
    int64_t B = o->dims[0], Tq = o->dims[1], S = o->dims[2], L = S;
    if (opt->key_length) {
        L = *(const int32_t *)a->inputs[opt->segments ? 2 : 0].data;
        L = L < 0 ? 0 : L > S ? S : L;
    }
    const bora_tensor_desc *sq = opt->segments ? &a->inputs[0] : NULL, *sk = sq ? sq + 1 : NULL;
    /* (ABI 1.9) the sliding window: query t at position L - Tq + t sees keys past it minus W */
    int64_t W = opt->struct_size >=
                        offsetof(bora_opt_attention, sliding_window) + sizeof(opt->sliding_window)
                    ? opt->sliding_window
                    : 0;
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < B * Tq; bt++) {
        int64_t bi = bt / Tq, t = bt % Tq;
        for (int64_t s = 0; s < S; s++) {
            int ok = s < L && (!opt->causal || s <= L - Tq + t) && (W <= 0 || s > L - Tq + t - W);
            if (ok && sq)
                ok = ((const int32_t *)sq->data)[bi * sq->strides[0] + t * sq->strides[1]] ==
                     ((const int32_t *)sk->data)[bi * sk->strides[0] + s * sk->strides[1]];
            ((T *)o->data)[bi * o->strides[0] + t * o->strides[1] + s * o->strides[2]] =
                ok ? (T)0 : (T)-INFINITY;
        }
    }
    return BORA_OK;
}

/* ---- layout: pad, concat ------------------------------------------------------------------- */

/* Copy src into dst shifted by `start` along axis (the other axes equal). */
static void K(place)(const bora_tensor_desc *src, const bora_tensor_desc *dst, int axis,
                     int64_t start)
{
    bora_tensor_desc d = *dst;
    d.data = (T *)dst->data + start * dst->strides[axis];
    d.dims[axis] = src->dims[axis];
    walk w;
    walk_init(&w, &d, src, 1);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w.rows; r++) {
        int64_t off[5];
        walk_row(&w, r, off);
        T *out = (T *)d.data + off[0];
        const T *in = (const T *)src->data + off[1];
        if (w.inner_stride[0] == 1 && w.inner_stride[1] == 1) /* a dense run (may alias) */
            memmove(out, in, sizeof(T) * (size_t)w.inner);
        else
            for (int64_t i = 0; i < w.inner; i++)
                out[i * w.inner_stride[0]] = in[i * w.inner_stride[1]];
    }
}

static void K(zero)(const bora_tensor_desc *t)
{
    walk w;
    walk_init(&w, t, NULL, 0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < w.rows; r++) {
        int64_t off[5];
        walk_row(&w, r, off);
        if (w.inner_stride[0] == 1)
            memset((T *)t->data + off[0], 0, sizeof(T) * (size_t)w.inner);
        else
            for (int64_t i = 0; i < w.inner; i++)
                ((T *)t->data)[off[0] + i * w.inner_stride[0]] = 0;
    }
}

static bora_status K(pad)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_opt_pad *p = a->options;
    K(zero)(&a->outputs[0]);
    K(place)(&a->inputs[0], &a->outputs[0], p->axis, p->start);
    return BORA_OK;
}

static bora_status K(concat)(bora_backend *b, const bora_kernel_args *a)
{
    (void)b;
    const bora_opt_pad *p = a->options;
    int64_t at = 0;
    for (uint32_t i = 0; i < a->n_inputs; i++) {
        K(place)(&a->inputs[i], &a->outputs[0], p->axis, at);
        at += a->inputs[i].dims[p->axis];
    }
    return BORA_OK;
}

/* dst (in place) with value written from start along the axis: inputs dst, value, [start]. */
static bora_status K(write_slice)(bora_backend *b, const bora_kernel_args *a)
{
    const bora_opt_pad *p = a->options;
    const bora_tensor_desc *v = &a->inputs[1], *d = &a->outputs[0];
    int64_t start = a->n_inputs > 2 ? *(const int32_t *)a->inputs[2].data : 0;
    if (start < 0 || start > d->dims[p->axis] - v->dims[p->axis])
        return b->h->fail(
            b->h, BORA_ERR_INVALID, "write_slice: %lld rows from %lld do not fit in %lld",
            (long long)v->dims[p->axis], (long long)start, (long long)d->dims[p->axis]);
    K(place)(v, d, p->axis, start);
    return BORA_OK;
}

#undef K
#undef CAT
#undef CAT_
