/* core/data/http.c — http(s) sources through libcurl (see source.h): a HEAD for the identity
 * the cache keys on, and downloads that survive a dropped connection by asking for the rest
 * (a Range request) and that never pass on fewer bytes than the server announced. */
#include "source.h"

#include "../util/log.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Tries per request (the first and the retries), and the first pause between them, doubled
 * each time up to 8 s. BORA_HTTP_TRIES changes the tries. */
enum { TRIES = 6 };
static const double FIRST_PAUSE_S = 0.25;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void init_curl(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int bora_source_is_url(const char *s)
{
    return !strncmp(s, "http://", 7) || !strncmp(s, "https://", 8);
}

static int tries(void)
{
    const char *e = getenv("BORA_HTTP_TRIES");
    int n = e ? atoi(e) : TRIES;
    return n >= 1 && n <= 100 ? n : TRIES;
}

static void pause_before(int attempt)
{
    double s = FIRST_PAUSE_S;
    for (int i = 1; i < attempt && s < 8; i++)
        s *= 2;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static CURL *handle(const char *url, char *err)
{
    pthread_once(&curl_once, init_curl);
    if (curl_init_rc != CURLE_OK)
        return NULL;
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    err[0] = 0;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    /* a stalled transfer (under 1 byte/s for 60 s) fails and is retried */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "bora");
    /* the bytes as stored: gzip and zstd are undone by the reader, by content */
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, NULL);
    return h;
}

/* An HTTP status that no retry will change. */
static int permanent(long code)
{
    return code >= 400 && code < 500 && code != 408 && code != 429;
}

bora_status bora_http_stat(const char *url, uint64_t *size, int64_t *mtime_ns)
{
    char err[CURL_ERROR_SIZE];
    *size = 0;
    *mtime_ns = 0;
    for (int attempt = 1, n = tries();; attempt++) {
        CURL *h = handle(url, err);
        if (!h)
            return bora_error_set(BORA_ERR_NOMEM, "%s: cannot start libcurl", url);
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(h, CURLOPT_FILETIME, 1L);
        CURLcode rc = curl_easy_perform(h);
        long code = 0;
        curl_off_t len = -1, when = -1;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
        curl_easy_getinfo(h, CURLINFO_FILETIME_T, &when);
        curl_easy_cleanup(h);
        if (rc == CURLE_OK && code >= 200 && code < 300) {
            *size = len > 0 ? (uint64_t)len : 0;
            *mtime_ns = when > 0 ? (int64_t)when * 1000000000 : 0;
            return BORA_OK;
        }
        if (rc == CURLE_OK && code == 405)
            return BORA_OK; /* no HEAD: the identity is the address alone */
        char why[CURL_ERROR_SIZE + 64];
        if (rc != CURLE_OK)
            snprintf(why, sizeof why, "%s", *err ? err : curl_easy_strerror(rc));
        else
            snprintf(why, sizeof why, "HTTP status %ld%s", code, code == 404 ? " (not found)" : "");
        if (rc == CURLE_OK && permanent(code))
            return bora_error_set(BORA_ERR_NOT_FOUND, "%s: %s", url, why);
        if (attempt >= n)
            return bora_error_set(BORA_ERR_IO, "%s: %s (after %d tries)", url, why, attempt);
        bora_log(BORA_LOG_WARN, "data: %s: %s; trying again (%d of %d)", url, why, attempt + 1, n);
        pause_before(attempt);
    }
}

typedef struct buffer {
    char *data;
    size_t n, cap;
    int failed;
} buffer;

static size_t on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    buffer *b = ud;
    size_t k = size * nmemb;
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + k + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = 1;
            return 0; /* libcurl stops the transfer */
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->n, p, k);
    b->n += k;
    return k;
}

bora_status bora_http_get(const char *url, char **data, size_t *len)
{
    char err[CURL_ERROR_SIZE], range[64];
    buffer b = {0};
    int64_t total = -1; /* the size the server announced, once it has */
    int n = tries(), attempt = 1;
    for (;; attempt++) {
        CURL *h = handle(url, err);
        if (!h) {
            free(b.data);
            return bora_error_set(BORA_ERR_NOMEM, "%s: cannot start libcurl", url);
        }
        size_t before = b.n;
        if (before) {
            snprintf(range, sizeof range, "%zu-", before);
            curl_easy_setopt(h, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        CURLcode rc = curl_easy_perform(h);
        long code = 0;
        curl_off_t cl = -1;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        curl_easy_cleanup(h);
        if (b.failed) {
            free(b.data);
            return bora_error_set(BORA_ERR_NOMEM, "%s: out of memory after %zu bytes", url, b.n);
        }
        if (code == 200 && before) {
            /* the server ignored the range and sent it all again: keep the new copy */
            memmove(b.data, b.data + before, b.n - before);
            b.n -= before;
            before = 0;
        }
        if ((code == 200 || code == 206) && cl >= 0) {
            int64_t announced = (int64_t)before + (int64_t)cl;
            if (total >= 0 && announced != total) {
                free(b.data);
                return bora_error_set(BORA_ERR_IO,
                                      "%s: the server announced %lld bytes, then %lld (it "
                                      "changed while downloading)",
                                      url, (long long)total, (long long)announced);
            }
            total = announced;
        }
        int complete =
            rc == CURLE_OK && (code == 200 || code == 206) && (total < 0 || (int64_t)b.n == total);
        if (code == 416 && total >= 0 && (int64_t)b.n == total)
            complete = 1; /* asked for the bytes after the last */
        if (complete) {
            if (attempt > 1)
                bora_log(BORA_LOG_INFO, "data: %s: complete after %d tries (%zu bytes)", url,
                         attempt, b.n);
            if (!b.data && !(b.data = malloc(1)))
                return bora_error_set(BORA_ERR_NOMEM, "out of memory");
            *data = b.data;
            *len = b.n;
            return BORA_OK;
        }
        char why[CURL_ERROR_SIZE + 64];
        if (rc != CURLE_OK)
            snprintf(why, sizeof why, "%s", *err ? err : curl_easy_strerror(rc));
        else if (code == 200 || code == 206)
            snprintf(why, sizeof why, "the connection ended early");
        else
            snprintf(why, sizeof why, "HTTP status %ld%s", code, code == 404 ? " (not found)" : "");
        if ((rc == CURLE_OK && permanent(code) && code != 416) || attempt >= n) {
            free(b.data);
            if (total >= 0)
                return bora_error_set(BORA_ERR_IO,
                                      "%s: %s; %zu of %lld bytes after %d tries (nothing of it "
                                      "is used)",
                                      url, why, b.n, (long long)total, attempt);
            return bora_error_set(BORA_ERR_IO, "%s: %s (after %d tries)", url, why, attempt);
        }
        bora_log(BORA_LOG_WARN, "data: %s: %s at byte %zu%s; resuming (try %d of %d)", url, why,
                 b.n, total >= 0 ? " of the announced size" : "", attempt + 1, n);
        pause_before(attempt);
    }
}
