/* tests/graph/test_rope.c — the host's rotary tables (core/graph/rope.c): values pinned by hand
 * from transformers' formulas, the two layouts, the f32 rounding, and refusals that name the
 * field and its Hugging Face key. With --dump it prints realistic configurations and what the C
 * computes for them, for rope_reference.py to check against its own float64 formulas.
 * usage: test_rope [--dump] */
#include "../../core/graph/rope.h"
#include "../../core/util/log.h"
#include "../test.h"

#include <math.h>
#include <stdint.h>

/* Hand-pinned values must agree to this relative error (double, a few ulps of pow and log). */
#define REL 1e-13

static int near(double got, double want)
{
    return fabs(got - want) <= REL * fabs(want);
}

#define CHECK_NEAR(got, want)                                                                     \
    do {                                                                                          \
        double g_ = (got), w_ = (want);                                                           \
        if (!near(g_, w_)) {                                                                      \
            fprintf(stderr, "%s:%d: %s = %.17g, want %.17g\n", __FILE__, __LINE__, #got, g_, w_); \
            test_failures++;                                                                      \
        }                                                                                         \
    } while (0)

static bora_rope_spec spec(bora_rope_kind kind, double theta, int64_t dims)
{
    bora_rope_spec s = bora_rope_spec_default();
    s.kind = kind;
    s.theta = theta;
    s.rotary_dims = dims;
    return s;
}

static bora_rope_spec llama31(void)
{
    bora_rope_spec s = spec(BORA_ROPE_LLAMA3, 500000, 128);
    s.factor = 8;
    s.low_freq_factor = 1;
    s.high_freq_factor = 4;
    s.original_max_position_embeddings = 8192;
    return s;
}

static bora_rope_spec qwen_yarn(void)
{
    bora_rope_spec s = spec(BORA_ROPE_YARN, 1e6, 128);
    s.factor = 4;
    s.original_max_position_embeddings = 32768;
    s.beta_fast = 32;
    s.beta_slow = 1;
    return s;
}

/* Values written out from the formulas (the comment says which), not from rope.c. */
static void test_pinned(void)
{
    double f[64], af = 0;
    bora_rope_spec s = spec(BORA_ROPE_DEFAULT, 10000, 128);
    CHECK(bora_rope_inv_freq(&s, f, &af) == BORA_OK);
    CHECK_NEAR(f[0], 1.0);
    CHECK_NEAR(f[1], 0.8659643233600653);      /* 10000^(-2/128) */
    CHECK_NEAR(f[32], 0.01);                   /* 10000^(-64/128) */
    CHECK_NEAR(f[63], 0.00011547819846894582); /* 10000^(-126/128) */
    CHECK_NEAR(af, 1.0);

    s.kind = BORA_ROPE_LINEAR;
    s.factor = 4;
    CHECK(bora_rope_inv_freq(&s, f, &af) == BORA_OK);
    CHECK_NEAR(f[32], 0.0025); /* 0.01 / 4 */

    /* dynamic: below the original context nothing changes; at 8192 of 4096 with factor 2 the
     * base is 10000 * (2 * 8192/4096 - 1)^(128/126). */
    s.kind = BORA_ROPE_DYNAMIC;
    s.factor = 2;
    s.original_max_position_embeddings = 4096;
    s.seq_len = 100;
    CHECK(bora_rope_inv_freq(&s, f, &af) == BORA_OK);
    CHECK_NEAR(f[1], 0.8659643233600653);
    s.seq_len = 8192;
    CHECK(bora_rope_inv_freq(&s, f, &af) == BORA_OK);
    CHECK_NEAR(f[1], 0.8509942913412162); /* (10000 * 3^(64/63))^(-1/64) */

    /* llama3 (Llama 3.1): wavelengths under 8192/4 = 2048 are kept, over 8192/1 divided by 8,
     * and dim 30 (wavelength 2948) blended with smooth = (8192/2948.3 - 1) / 3. */
    s = llama31();
    CHECK(bora_rope_inv_freq(&s, f, &af) == BORA_OK);
    CHECK_NEAR(f[0], 1.0);
    CHECK_NEAR(f[20], pow(500000, -40.0 / 128)); /* wavelength 1.5e3: high frequency, kept */
    CHECK_NEAR(f[30], 0.0013718935677611381);
    CHECK_NEAR(f[63], 3.068925988914511e-07); /* 500000^(-126/128) / 8 */
    CHECK_NEAR(af, 1.0);

    /* yarn (Qwen2.5 style): the correction range is floor(23.6) .. ceil(39.65) = 23 .. 40; dims
     * up to 23 keep their frequency, from 40 on divide it by 4, and dim 30 ramps by 7/17. */
    s = qwen_yarn();
    CHECK(bora_rope_inv_freq(&s, f, &af) == BORA_OK);
    CHECK_NEAR(f[0], 1.0);
    CHECK_NEAR(f[23], pow(1e6, -46.0 / 128));
    CHECK_NEAR(f[30], 0.0010643609812470017);
    CHECK_NEAR(f[40], pow(1e6, -80.0 / 128) / 4);
    CHECK_NEAR(af, 1.138629436111989); /* 0.1 ln 4 + 1 */
    s.beta_fast = s.beta_slow = 0;     /* unset: 32 and 1 */
    double g[64];
    CHECK(bora_rope_inv_freq(&s, g, NULL) == BORA_OK);
    CHECK(!memcmp(f, g, sizeof f));
    /* DeepSeek style: (0.1 * 1.0 * ln 40 + 1) / (0.1 * 0.707 * ln 40 + 1). */
    s.factor = 40;
    s.mscale = 1.0;
    s.mscale_all_dim = 0.707;
    CHECK(bora_rope_inv_freq(&s, NULL, &af) == BORA_OK);
    CHECK_NEAR(af, 1.0857263992561355);
    s.attention_factor = 1.25; /* given: used as is */
    CHECK(bora_rope_inv_freq(&s, NULL, &af) == BORA_OK);
    CHECK_NEAR(af, 1.25);
}

/* The tables: cos/sin(p * inv_freq) times the attention factor, the f32 table is the double one
 * rounded, and the layouts repeat each value over halves or over pairs. */
static void test_tables(void)
{
    bora_rope_spec s = spec(BORA_ROPE_DEFAULT, 10000, 8);
    double c[3 * 4], sn[3 * 4];
    CHECK(bora_rope_table(&s, 5, 3, c, sn) == BORA_OK);
    CHECK_NEAR(c[0], cos(5.0));
    CHECK_NEAR(sn[0], sin(5.0));
    CHECK_NEAR(c[4 + 1], cos(6.0 * 0.1)); /* position 6, 10000^(-2/8) = 0.1 */
    CHECK_NEAR(sn[8 + 2], sin(7.0 * 0.01));

    s = qwen_yarn();
    double yc[64], ys[64];
    CHECK(bora_rope_table(&s, 0, 1, yc, ys) == BORA_OK);
    CHECK_NEAR(yc[17], 1.138629436111989); /* position 0: the attention factor itself */
    CHECK(ys[17] == 0.0);

    s = spec(BORA_ROPE_DEFAULT, 10000, 8);
    float fc[3 * 8], fs[3 * 8];
    CHECK(bora_rope_table_f32(&s, 5, 3, BORA_ROPE_COMPACT, fc, fs) == BORA_OK);
    for (int i = 0; i < 12; i++)
        CHECK(fc[i] == (float)c[i] && fs[i] == (float)sn[i]);
    CHECK(bora_rope_table_f32(&s, 5, 3, BORA_ROPE_ROTATE_HALF, fc, fs) == BORA_OK);
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < 4; i++) {
            CHECK(fc[p * 8 + i] == (float)c[p * 4 + i] && fc[p * 8 + 4 + i] == (float)c[p * 4 + i]);
            CHECK(fs[p * 8 + i] == (float)sn[p * 4 + i] &&
                  fs[p * 8 + 4 + i] == (float)sn[p * 4 + i]);
        }
    CHECK(bora_rope_table_f32(&s, 5, 3, BORA_ROPE_INTERLEAVED, fc, fs) == BORA_OK);
    for (int p = 0; p < 3; p++)
        for (int i = 0; i < 4; i++) {
            CHECK(fc[p * 8 + 2 * i] == (float)c[p * 4 + i] &&
                  fc[p * 8 + 2 * i + 1] == (float)c[p * 4 + i]);
            CHECK(fs[p * 8 + 2 * i] == (float)sn[p * 4 + i] &&
                  fs[p * 8 + 2 * i + 1] == (float)sn[p * 4 + i]);
        }

    size_t n = 0;
    CHECK(bora_rope_table_elems(&s, 3, BORA_ROPE_COMPACT, &n) == BORA_OK && n == 12);
    CHECK(bora_rope_table_elems(&s, 3, BORA_ROPE_INTERLEAVED, &n) == BORA_OK && n == 24);
    CHECK(bora_rope_table_elems(&s, 0, BORA_ROPE_ROTATE_HALF, &n) == BORA_OK && n == 0);
}

/* A refused range: an error naming what is wrong and the keys behind it, nothing written. */
static void refused_range(const bora_rope_spec *s, int64_t first, int64_t positions,
                          const char *needle1, const char *needle2)
{
    float c[4] = {7, 7, 7, 7}, sn[4] = {7, 7, 7, 7};
    bora_error_clear();
    CHECK(bora_rope_table_f32(s, first, positions, BORA_ROPE_COMPACT, c, sn) == BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_error_get(), needle1);
    CHECK_CONTAINS(bora_error_get(), needle2);
    CHECK(c[0] == 7 && sn[0] == 7);
}

/* A refused spec: the same from every entry point, the frequencies untouched too. */
static void refused(const bora_rope_spec *s, const char *needle1, const char *needle2)
{
    refused_range(s, 0, 1, needle1, needle2);
    double f[2] = {7, 7}, af = 7;
    bora_error_clear();
    CHECK(bora_rope_inv_freq(s, f, &af) == BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_error_get(), needle1);
    CHECK(f[0] == 7 && af == 7);
}

static void test_refusals(void)
{
    bora_rope_spec s = spec(BORA_ROPE_DEFAULT, 0, 4);
    refused(&s, "theta (rope_theta) is 0", "positive");
    s.theta = NAN;
    refused(&s, "rope_theta", "positive");
    s = spec(BORA_ROPE_DEFAULT, 10000, 7);
    refused(&s, "rotary_dims (head_dim * partial_rotary_factor) is 7", "even");
    s.rotary_dims = 0;
    refused(&s, "partial_rotary_factor", "is 0");
    s = spec((bora_rope_kind)9, 10000, 4);
    refused(&s, "rope_scaling.rope_type", "llama3");
    s = spec(BORA_ROPE_LINEAR, 10000, 4);
    s.factor = 0;
    refused(&s, "factor (rope_scaling.factor) is 0 for rope_type linear", "positive");
    s.factor = -2;
    refused(&s, "rope_scaling.factor", "is -2");

    s = spec(BORA_ROPE_DYNAMIC, 10000, 2);
    s.factor = 2;
    s.original_max_position_embeddings = 4096;
    refused(&s, "rope_type dynamic needs at least 4", "head_dim");
    s.rotary_dims = 4;
    s.original_max_position_embeddings = 0;
    refused(&s, "original_max_position_embeddings (max_position_embeddings) is 0", "positive");

    s = llama31();
    s.low_freq_factor = 4;
    s.high_freq_factor = 1;
    refused(&s, "low_freq_factor (rope_scaling.low_freq_factor, 4) must be less than",
            "high_freq_factor (rope_scaling.high_freq_factor, 1)");
    s.low_freq_factor = s.high_freq_factor = 4;
    refused(&s, "low_freq_factor", "less than");
    s = llama31();
    s.low_freq_factor = 0;
    refused(&s, "low_freq_factor (rope_scaling.low_freq_factor) is 0", "positive");
    s = llama31();
    s.high_freq_factor = INFINITY;
    refused(&s, "high_freq_factor (rope_scaling.high_freq_factor) is inf", "positive");
    s = llama31();
    s.original_max_position_embeddings = -1;
    refused(&s, "rope_scaling.original_max_position_embeddings", "is -1");

    s = qwen_yarn();
    s.beta_fast = -1;
    refused(&s, "beta_fast (rope_scaling.beta_fast) is -1", "positive");
    s = qwen_yarn();
    s.beta_slow = NAN;
    refused(&s, "beta_slow (rope_scaling.beta_slow)", "positive");
    s = qwen_yarn();
    s.attention_factor = -1;
    refused(&s, "attention_factor (rope_scaling.attention_factor) is -1", "positive");
    s = qwen_yarn();
    s.mscale = 1;
    s.mscale_all_dim = -10 / log(4.0); /* 0.1 * mscale_all_dim * ln 4 + 1 = 0 */
    refused(&s, "mscale (rope_scaling.mscale)", "mscale_all_dim (rope_scaling.mscale_all_dim)");
    s = qwen_yarn();
    s.theta = 1;
    refused(&s, "theta (rope_theta) is 1", "yarn");

    /* Sizes: every product checked. */
    s = spec(BORA_ROPE_DEFAULT, 10000, (int64_t)1 << 20);
    size_t n = 0;
    bora_error_clear();
    CHECK(bora_rope_table_elems(&s, (int64_t)1 << 53, BORA_ROPE_ROTATE_HALF, &n) ==
          BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_error_get(), "does not fit in memory");
    CHECK(n == 0);
    s.rotary_dims = ((int64_t)1 << 20) + 2;
    refused(&s, "rotary_dims", "between 2 and");
    s = spec(BORA_ROPE_DEFAULT, 10000, 4);
    refused_range(&s, 0, -1, "-1 positions", "between 0");
    refused_range(&s, -5, 1, "from position -5", "0 .. 2^53");
    refused_range(&s, INT64_MAX, 1, "from position", "0 .. 2^53");
    bora_error_clear();
    CHECK(bora_rope_table_elems(&s, 1, (bora_rope_layout)7, &n) == BORA_ERR_CONFIG);
    CHECK_CONTAINS(bora_error_get(), "layout 7");
}

static void test_names(void)
{
    CHECK(bora_rope_kind_parse("llama3") == BORA_ROPE_LLAMA3);
    CHECK(bora_rope_kind_parse("yarn") == BORA_ROPE_YARN);
    CHECK(bora_rope_kind_parse("longrope") == -1);
    CHECK(!strcmp(bora_rope_kind_name(BORA_ROPE_DYNAMIC), "dynamic"));
}

/* ---- the reference cases ------------------------------------------------------------------ */

/* A configuration as a Hugging Face config states it; rotary_dims = int(head_dim * partial). */
typedef struct rope_case {
    const char *name;
    bora_rope_kind kind;
    double theta, partial_rotary_factor, factor, low, high, beta_fast, beta_slow, mscale,
        mscale_all_dim, attention_factor;
    int64_t head_dim, original, seq_len, high_first;
    int truncate;
} rope_case;

static const rope_case cases[] = {
    {"llama2", BORA_ROPE_DEFAULT, 10000, 1, 1, 0, 0, 0, 0, 0, 0, 0, 128, 0, 0, 4080, 1},
    {"llama3.1", BORA_ROPE_LLAMA3, 500000, 1, 8, 1, 4, 0, 0, 0, 0, 0, 128, 8192, 0, 131056, 1},
    {"linear4", BORA_ROPE_LINEAR, 10000, 1, 4, 0, 0, 0, 0, 0, 0, 0, 128, 0, 0, 16368, 1},
    {"dynamic2", BORA_ROPE_DYNAMIC, 10000, 1, 2, 0, 0, 0, 0, 0, 0, 0, 128, 4096, 10000, 9984, 1},
    {"dynamic_short", BORA_ROPE_DYNAMIC, 10000, 1, 2, 0, 0, 0, 0, 0, 0, 0, 128, 4096, 1000, 984, 1},
    {"yarn_qwen", BORA_ROPE_YARN, 1e6, 1, 4, 0, 0, 32, 1, 0, 0, 0, 128, 32768, 0, 131056, 1},
    {"yarn_deepseek", BORA_ROPE_YARN, 10000, 1, 40, 0, 0, 32, 1, 1.0, 0.707, 0, 64, 4096, 0, 163824,
     1},
    {"yarn_untruncated", BORA_ROPE_YARN, 150000, 1, 32, 0, 0, 32, 1, 0, 0, 0, 64, 4096, 0, 131056,
     0},
    {"yarn_attention", BORA_ROPE_YARN, 10000, 1, 8, 0, 0, 0, 0, 0, 0, 1.5, 128, 2048, 0, 16368, 1},
    {"partial_half", BORA_ROPE_DEFAULT, 10000, 0.5, 1, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0, 2032, 1},
    {"partial_yarn", BORA_ROPE_YARN, 10000, 0.5, 4, 0, 0, 32, 1, 0, 0, 0, 128, 4096, 0, 16368, 1},
};
#define N_CASES ((int)(sizeof cases / sizeof *cases))
#define ROWS 16

static void dump_values(const char *key, const double *v, size_t n)
{
    printf("%s", key);
    for (size_t i = 0; i < n; i++)
        printf(" %.17g", v[i]);
    printf("\n");
}

/* Print each case: its config, then what rope.c computes (inv_freq, attention_factor, and the
 * compact cos/sin tables for ROWS positions from 0 and from high_first). */
static int dump(void)
{
    for (int k = 0; k < N_CASES; k++) {
        const rope_case *c = &cases[k];
        bora_rope_spec s = bora_rope_spec_default();
        s.kind = c->kind;
        s.theta = c->theta;
        s.rotary_dims = (int64_t)((double)c->head_dim * c->partial_rotary_factor);
        s.factor = c->factor;
        s.low_freq_factor = c->low;
        s.high_freq_factor = c->high;
        s.original_max_position_embeddings = c->original;
        s.beta_fast = c->beta_fast;
        s.beta_slow = c->beta_slow;
        s.mscale = c->mscale;
        s.mscale_all_dim = c->mscale_all_dim;
        s.attention_factor = c->attention_factor;
        s.truncate = c->truncate;
        s.seq_len = c->seq_len;
        int64_t half = s.rotary_dims / 2;
        double f[512], af, tc[ROWS * 512], ts[ROWS * 512];
        if (half > 512 || bora_rope_inv_freq(&s, f, &af) != BORA_OK) {
            fprintf(stderr, "case %s: %s\n", c->name, bora_error_get());
            return 1;
        }
        printf("case %s\nrope_type %s\nrope_theta %.17g\nhead_dim %lld\n"
               "partial_rotary_factor %.17g\nfactor %.17g\nlow_freq_factor %.17g\n"
               "high_freq_factor %.17g\noriginal_max_position_embeddings %lld\nbeta_fast %.17g\n"
               "beta_slow %.17g\nmscale %.17g\nmscale_all_dim %.17g\nattention_factor_given %.17g\n"
               "truncate %d\nseq_len %lld\n",
               c->name, bora_rope_kind_name(c->kind), c->theta, (long long)c->head_dim,
               c->partial_rotary_factor, c->factor, c->low, c->high, (long long)c->original,
               c->beta_fast, c->beta_slow, c->mscale, c->mscale_all_dim, c->attention_factor,
               c->truncate, (long long)c->seq_len);
        dump_values("inv_freq", f, (size_t)half);
        dump_values("attention_factor", &af, 1);
        int64_t firsts[2] = {0, c->high_first};
        for (int r = 0; r < 2; r++) {
            if (bora_rope_table(&s, firsts[r], ROWS, tc, ts) != BORA_OK) {
                fprintf(stderr, "case %s: %s\n", c->name, bora_error_get());
                return 1;
            }
            printf("first %lld\n", (long long)firsts[r]);
            dump_values("cos", tc, (size_t)(ROWS * half));
            dump_values("sin", ts, (size_t)(ROWS * half));
        }
        printf("end\n");
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--dump"))
        return dump();
    test_pinned();
    test_tables();
    test_refusals();
    test_names();
    return test_summary("test_rope");
}
