/* tests/ckpt/test_safetensors.c — safetensors written and read back bit for bit (every dtype,
 * 0-d and empty tensors, metadata), and malformed files refused with their reason.
 *
 * usage: test_safetensors */
#include "../test.h"
#include "ckpt/safetensors.h"
#include "util/log.h"

#include <unistd.h>

static int cases;

/* A file: 8-byte length, header text, then data_len bytes of data. */
static void refused(const char *what, const char *header, size_t data_len, const char *expect)
{
    size_t hl = strlen(header), n = 8 + hl + data_len;
    unsigned char *buf = calloc(1, n + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    bora_safetensors *st = NULL;
    cases++;
    if (bora_st_open_memory("bad.safetensors", buf, n, &st) == BORA_OK) {
        fprintf(stderr, "%s: accepted\n", what);
        test_failures++;
        bora_st_close(st);
    } else if (!strstr(bora_error_get(), expect)) {
        fprintf(stderr, "%s: expected \"%s\" in \"%s\"\n", what, expect, bora_error_get());
        test_failures++;
    }
    free(buf);
}

int main(void)
{
    char dir[] = "/tmp/bora-st-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);

    float f[6] = {1.5f, -2.25f, 3e-8f, 0.0f, -0.0f, 1e30f};
    double d[2] = {3.141592653589793, -1e-300};
    int32_t ids[3] = {7, -8, 2147483647};
    uint16_t bf[4] = {0x3f80, 0xc000, 0x7f80, 0x0001};
    double scalar = 42.0;
    int64_t s23[2] = {2, 3}, s2[1] = {2}, s3[1] = {3}, s4[1] = {4}, s0[1] = {0};
    bora_st_entry e[] = {
        {"transformer.h.0.attn.c_attn.weight", BORA_DTYPE_F32, 2, s23, f},
        {"d", BORA_DTYPE_F64, 1, s2, d},
        {"ids", BORA_DTYPE_I32, 1, s3, ids},
        {"bf", BORA_DTYPE_BF16, 1, s4, bf},
        {"scalar", BORA_DTYPE_F64, 0, NULL, &scalar},
        {"empty", BORA_DTYPE_F32, 1, s0, f},
    };
    const char *meta[] = {"step", "12"};
    CHECK(bora_st_write(path, e, 6, meta, 1) == BORA_OK);
    bora_safetensors *st = NULL;
    CHECK(bora_st_open(path, &st) == BORA_OK);
    if (st) {
        CHECK(st->n_tensors == 6);
        CHECK(st->data_start % 8 == 0);
        CHECK(!strcmp(bora_st_meta(st, "format"), "pt") && !strcmp(bora_st_meta(st, "step"), "12"));
        for (int i = 0; i < 6; i++) {
            const bora_st_tensor *t = bora_st_find(st, e[i].name);
            CHECK(t && t->dtype == e[i].dtype && t->ndim == e[i].ndim);
            if (!t)
                continue;
            size_t n = (size_t)(t->end - t->begin);
            char *got = malloc(n + 1);
            CHECK(bora_st_read(st, t, got, n) == BORA_OK);
            CHECK(memcmp(got, e[i].data, n) == 0);
            free(got);
        }
        const bora_st_tensor *t = bora_st_find(st, "d");
        char small[4];
        CHECK(bora_st_read(st, t, small, 4) == BORA_ERR_INVALID);
        CHECK_CONTAINS(bora_error_get(), "tensor 'd' is 16 bytes, not 4");
        CHECK(bora_st_find(st, "nope") == NULL);
        bora_st_close(st);
    }
    /* More metadata than tensors. */
    const char *many[] = {"a", "1", "b", "2", "c", "3"};
    CHECK(bora_st_write(path, e, 1, many, 3) == BORA_OK);
    CHECK(bora_st_open(path, &st) == BORA_OK);
    if (st) {
        CHECK(st->n_meta == 4 && !strcmp(bora_st_meta(st, "c"), "3"));
        bora_st_close(st);
    }
    CHECK(bora_st_write(path, e, 6, meta, 1) == BORA_OK);

    /* A truncated copy of the same file is refused. */
    char cut[600];
    snprintf(cut, sizeof cut, "head -c 100 %s > %s/cut.safetensors", path, dir);
    CHECK(system(cut) == 0);
    snprintf(cut, sizeof cut, "%s/cut.safetensors", dir);
    CHECK(bora_st_open(cut, &st) == BORA_ERR_INVALID);
    cases++;
    CHECK(bora_st_open("/nonexistent.safetensors", &st) == BORA_ERR_NOT_FOUND);
    CHECK_CONTAINS(bora_error_get(), "/nonexistent.safetensors: No such file or directory");

    const char *t4 = "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
    char h[512];
    {
        unsigned char tiny[5] = {1, 0, 0, 0, 0};
        bora_safetensors *x;
        cases++;
        CHECK(bora_st_open_memory("tiny", tiny, 5, &x) == BORA_ERR_INVALID);
        CHECK_CONTAINS(bora_error_get(), "5 bytes is shorter than the 8-byte header length");
        unsigned char big[12] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
        cases++;
        CHECK(bora_st_open_memory("big", big, 12, &x) == BORA_ERR_INVALID);
        CHECK_CONTAINS(bora_error_get(), "the header length 200 does not fit a 12-byte file");
    }
    refused("not JSON", "{\"a\": [1,", 0, "the header is not JSON");
    refused("text after", "{} x", 0, "the header is not JSON");
    refused("not an object", "[1, 2]", 0, "the header is not a JSON object");
    snprintf(h, sizeof h, "{%s,%s}", t4, t4);
    refused("duplicate", h, 4, "the header names a tensor twice");
    refused("unknown dtype", "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}",
            1, "tensor 'a' has dtype 'F8_E4M3', which bora does not read");
    refused("size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
            "tensor 'a' has data_offsets [0, 4], but its shape and dtype take 8 bytes");
    refused("gap",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
            12, "tensor 'b' starts at byte 8 of the data, but the bytes before it end at 4");
    refused("overlap",
            "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
            8, "starts at byte 4 of the data, but another ends at 8");
    snprintf(h, sizeof h, "{%s}", t4);
    refused("trailing data", h, 12, "the tensors cover 4 bytes of data, but the file holds 12");
    refused("missing data", h, 2, "the tensors cover 4 bytes of data, but the file holds 2");
    snprintf(h, sizeof h, "{\"__metadata__\":{\"x\":1},%s}", t4);
    refused("metadata not a string", h, 4, "metadata 'x' is not a string");
    refused("no offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4,
            "tensor 'a' needs exactly dtype, shape and data_offsets");
    refused("negative size", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
            "tensor 'a' has a bad size in its shape");
    refused("invalid UTF-8 name",
            "{\"\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
            "the header is not JSON");
    snprintf(cut, sizeof cut, "rm -rf %s", dir);
    CHECK(system(cut) == 0);
    printf("test_safetensors: round trip of 6 tensors; %d malformed files refused\n", cases);
    CHECK(cases >= 10);
    return test_summary("test_safetensors");
}
