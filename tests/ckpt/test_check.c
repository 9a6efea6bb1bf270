/* tests/ckpt/test_check.c — the check every checkpoint load makes of a tensor's bytes: its
 * digest (xxh3-64, a known value), and finite values in every floating dtype, read through the
 * bits (the largest finite values pass, integers whose bits look like an infinity pass, unaligned
 * data is read), each failure naming the file and the tensor.
 *
 * usage: test_check */
#include "../test.h"
#include "ckpt/checkpoint.h"
#include "util/log.h"

/* check(..) == want, and a failure's message holds needle */
static void expect(const char *what, int32_t dtype, const void *p, size_t n, const char *digest,
                   bora_status want, const char *needle)
{
    bora_status got = bora_ckpt_check_tensor("dir/model.safetensors", "w", dtype, p, n, digest);
    if (got != want) {
        fprintf(stderr, "%s: status %d, want %d (%s)\n", what, got, want,
                got ? bora_error_get() : "");
        test_failures++;
    } else if (needle && !strstr(bora_error_get(), needle)) {
        fprintf(stderr, "%s: expected \"%s\" in \"%s\"\n", what, needle, bora_error_get());
        test_failures++;
    }
}

int main(void)
{
    /* XXH3-64 of "" and of "abc": the reference values of xxHash's own tests. */
    char d[BORA_CKPT_DIGEST_LEN];
    bora_ckpt_digest("", 0, d);
    CHECK(!strcmp(d, "xxh3-64:2d06800538d394c2"));
    bora_ckpt_digest("abc", 3, d);
    CHECK(!strcmp(d, "xxh3-64:78af5f94892f3950"));

    float f[4] = {1.0f, -3.4028235e38f, 1e-45f, 0.0f};
    bora_ckpt_digest(f, sizeof f, d);
    expect("f32 finite, its digest", BORA_DTYPE_F32, f, sizeof f, d, BORA_OK, NULL);
    expect("f32 finite, no digest", BORA_DTYPE_F32, f, sizeof f, NULL, BORA_OK, NULL);
    f[0] = 1.00000012f; /* the next float after 1: one bit */
    expect("f32 changed", BORA_DTYPE_F32, f, sizeof f, d, BORA_ERR_INVALID,
           "dir/model.safetensors: tensor 'w' does not match the digest");
    expect("unknown digest", BORA_DTYPE_F32, f, sizeof f, "sha256:00", BORA_ERR_INVALID,
           "of a kind bora does not know");
    uint32_t inf32 = 0x7f800000u, nan32 = 0x7fc00001u;
    unsigned char raw[1 + 4 * 4] = {0};
    memcpy(raw + 1 + 8, &inf32, 4); /* unaligned, element 2 */
    expect("f32 inf", BORA_DTYPE_F32, raw + 1, 16, NULL, BORA_ERR_INVALID,
           "tensor 'w' holds an infinity at element 2");
    memcpy(raw + 1 + 8, &nan32, 4);
    expect("f32 nan", BORA_DTYPE_F32, raw + 1, 16, NULL, BORA_ERR_INVALID,
           "holds NaN at element 2");
    expect("i32 with inf's bits", BORA_DTYPE_I32, raw + 1, 16, NULL, BORA_OK, NULL);

    uint64_t f64[2] = {0x7fefffffffffffffull, 0x7ff0000000000001ull}; /* max, NaN */
    expect("f64 nan", BORA_DTYPE_F64, f64, 16, NULL, BORA_ERR_INVALID, "holds NaN at element 1");
    expect("f64 max", BORA_DTYPE_F64, f64, 8, NULL, BORA_OK, NULL);
    uint16_t h[3] = {0x7bff, 0xfbff, 0xfc00}; /* f16 max, -max, -inf */
    expect("f16 -inf", BORA_DTYPE_F16, h, 6, NULL, BORA_ERR_INVALID, "infinity at element 2");
    expect("f16 max", BORA_DTYPE_F16, h, 4, NULL, BORA_OK, NULL);
    uint16_t b[3] = {0x7f7f, 0xff7f, 0x7f81}; /* bf16 max, -max, NaN */
    expect("bf16 nan", BORA_DTYPE_BF16, b, 6, NULL, BORA_ERR_INVALID, "holds NaN at element 2");
    expect("bf16 max", BORA_DTYPE_BF16, b, 4, NULL, BORA_OK, NULL);
    expect("empty", BORA_DTYPE_F32, f, 0, NULL, BORA_OK, NULL);
    return test_summary("test_check");
}
