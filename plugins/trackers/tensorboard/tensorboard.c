/* plugins/trackers/tensorboard — a tracker that writes TensorBoard event files.
 *
 * Each process that logs a run writes one file, LOGDIR/RUN_ID/events.out.tfevents.TIME.HOST, a
 * sequence of TFRecords: an 8-byte little-endian length, the masked CRC-32C of those 8 bytes,
 * the data, the masked CRC-32C of the data. Each record is one serialized tensorboard.Event,
 * encoded here by hand (only the fields below), so the plugin needs no protobuf library.
 *
 * What a file holds, in order:
 *   - file_version "brain.Event:2" (TensorBoard reads SessionLog only from version 2 on);
 *   - at step 0: the resolved configuration as a text summary (tag "config", plugin "text"),
 *     the hparams plugin's session_start_info (every configuration key, flattened with dots)
 *     and the environment as a text summary (tag "environment");
 *   - before the first step it logs: SessionLog START at that step. On reading it TensorBoard
 *     drops everything it read earlier in the run's files at that step or later (its purge of
 *     orphaned data), so a run killed after its last checkpoint and resumed from it shows each
 *     step once, with the resumed run's values;
 *   - one event per logged step, each metric a scalar;
 *   - the summary (final loss, tokens) as scalars at the last step logged, and at finish the
 *     hparams plugin's session_end_info.
 *
 * Scalars are written as TensorBoard's current summaries: a rank-0 DT_FLOAT tensor with the
 * scalars plugin's metadata and data_class DATA_CLASS_SCALAR, which is what tf.summary.scalar
 * writes and what TensorBoard turns the older simple_value into when it loads one; the tensor
 * form also carries the plugin name, so no reader has to guess.
 *
 * The .proto fields written, with their numbers:
 *   tensorboard.Event (event.proto): wall_time = 1 (double), step = 2 (int64),
 *     file_version = 3 (string), summary = 5, session_log = 7, source_metadata = 10
 *   SourceMetadata: writer = 1;  SessionLog: status = 1 (START = 1)
 *   Summary (summary.proto): value = 1 (repeated Value)
 *   Summary.Value: tag = 1, tensor = 8, metadata = 9
 *   SummaryMetadata: plugin_data = 1, data_class = 4 (SCALAR = 1, TENSOR = 2)
 *   SummaryMetadata.PluginData: plugin_name = 1, content = 2
 *   TensorProto (tensor.proto): dtype = 1 (DT_FLOAT = 1, DT_STRING = 7), tensor_shape = 2
 *     (TensorShapeProto, empty: a scalar), float_val = 5 (packed), string_val = 8
 *   tensorboard.hparams.HParamsPluginData (plugin_data.proto): version = 1,
 *     session_start_info = 3, session_end_info = 4
 *   SessionStartInfo: hparams = 1 (map<string, google.protobuf.Value>: key = 1, value = 2),
 *     start_time_secs = 5;  SessionEndInfo: status = 1 (api.proto Status: UNKNOWN = 0,
 *     SUCCESS = 1, FAILURE = 2), end_time_secs = 2
 *   google.protobuf.Value (struct.proto): number_value = 2, string_value = 3, bool_value = 4 */
#define _POSIX_C_SOURCE 200809L
#include <bora/tracker.h>

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct tb {
    const bora_host *h;
    FILE *out;
    char path[4096];
    uint32_t crc_table[256];
    int started;       /* SessionLog START written */
    int64_t last_step; /* the last step logged by this process, for the summary */
    char *last_names;  /* "\n"-separated names logged at last_step; the summary skips them */
    size_t last_len;
} tb;

static const bora_key tb_keys[] = {
    {"logdir", BORA_KEY_STRING, 0, "runs/tensorboard",
     "directory for event files: each run writes into LOGDIR/RUN_ID/ (point tensorboard "
     "--logdir at LOGDIR)"},
    {NULL, 0, 0, NULL, NULL},
};

/* ---- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) and TFRecord's mask ---------- */

static void crc_init(uint32_t table[256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

static uint32_t crc32c(const uint32_t table[256], const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* TFRecord stores a CRC rotated and offset, so a CRC of data holding CRCs stays strong. */
static uint32_t masked(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ---- protobuf, the few wire types needed -------------------------------------------------- */

typedef struct pb {
    unsigned char *p;
    size_t n, cap;
    int oom; /* a failed allocation: everything after it is dropped, the caller reports */
} pb;

static void pb_put(pb *b, const void *data, size_t len)
{
    if (b->oom || len == 0)
        return;
    if (len > SIZE_MAX / 2 - b->n) {
        b->oom = 1;
        return;
    }
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + len)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, len);
    b->n += len;
}

static void pb_free(pb *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void pb_varint(pb *b, uint64_t v)
{
    unsigned char buf[10];
    size_t n = 0;
    do {
        buf[n++] = (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_put(b, buf, n);
}

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static void pb_key(pb *b, unsigned field, unsigned wire)
{
    pb_varint(b, (uint64_t)field << 3 | wire);
}

static void pb_uint(pb *b, unsigned field, uint64_t v)
{
    pb_key(b, field, WIRE_VARINT);
    pb_varint(b, v);
}

static void pb_double(pb *b, unsigned field, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(bits >> (8 * i));
    pb_key(b, field, WIRE_FIXED64);
    pb_put(b, le, sizeof le);
}

static void pb_bytes(pb *b, unsigned field, const void *data, size_t len)
{
    pb_key(b, field, WIRE_LEN);
    pb_varint(b, len);
    pb_put(b, data, len);
}

static void pb_string(pb *b, unsigned field, const char *s)
{
    pb_bytes(b, field, s, strlen(s));
}

/* A nested message: sub is appended as field and freed. */
static void pb_message(pb *b, unsigned field, pb *sub)
{
    if (sub->oom)
        b->oom = 1;
    pb_bytes(b, field, sub->p, sub->n);
    pb_free(sub);
}

/* ---- summaries ---------------------------------------------------------------------------- */

enum { DT_FLOAT = 1, DT_STRING = 7 };
enum { DATA_CLASS_SCALAR = 1, DATA_CLASS_TENSOR = 2 };

/* A rank-0 DT_FLOAT TensorProto holding v. */
static void tensor_float(pb *t, float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    unsigned char le[4] = {(unsigned char)bits, (unsigned char)(bits >> 8),
                           (unsigned char)(bits >> 16), (unsigned char)(bits >> 24)};
    pb_uint(t, 1, DT_FLOAT);
    pb_bytes(t, 2, NULL, 0); /* tensor_shape: no dims, a scalar */
    pb_bytes(t, 5, le, sizeof le);
}

/* Append one Summary.Value to summary: tag, metadata naming plugin (with content, which may be
 * empty) and data_class, and tensor. */
static void summary_value(pb *summary, const char *tag, const char *plugin, pb *content,
                          int data_class, pb *tensor)
{
    pb plugin_data = {0}, metadata = {0}, value = {0};
    pb_string(&plugin_data, 1, plugin);
    if (content && content->n)
        pb_bytes(&plugin_data, 2, content->p, content->n);
    if (content && content->oom)
        plugin_data.oom = 1;
    pb_message(&metadata, 1, &plugin_data);
    pb_uint(&metadata, 4, (uint64_t)data_class);
    pb_string(&value, 1, tag);
    pb_message(&value, 8, tensor);
    pb_message(&value, 9, &metadata);
    pb_message(summary, 1, &value);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bora_status write_failed(tb *t)
{
    return t->h->fail(t->h, BORA_ERR_IO, "cannot write '%s': %s", t->path,
                      errno ? strerror(errno) : "write error");
}

/* One TFRecord holding data. */
static bora_status write_record(tb *t, const pb *data)
{
    if (data->oom)
        return t->h->fail(t->h, BORA_ERR_NOMEM, "%s: out of memory for an event", t->path);
    unsigned char head[12], foot[4];
    uint64_t len = data->n;
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(len >> (8 * i));
    uint32_t c = masked(crc32c(t->crc_table, head, 8));
    for (int i = 0; i < 4; i++)
        head[8 + i] = (unsigned char)(c >> (8 * i));
    c = masked(crc32c(t->crc_table, data->p, data->n));
    for (int i = 0; i < 4; i++)
        foot[i] = (unsigned char)(c >> (8 * i));
    errno = 0;
    if (fwrite(head, 1, sizeof head, t->out) != sizeof head ||
        (data->n && fwrite(data->p, 1, data->n, t->out) != data->n) ||
        fwrite(foot, 1, sizeof foot, t->out) != sizeof foot)
        return write_failed(t);
    return BORA_OK;
}

/* An Event at step with one `what` field (what is consumed). */
static bora_status write_event(tb *t, int64_t step, unsigned what_field, pb *what)
{
    pb ev = {0};
    pb_double(&ev, 1, now_s());
    if (step)
        pb_uint(&ev, 2, (uint64_t)step);
    pb_message(&ev, what_field, what);
    bora_status st = write_record(t, &ev);
    pb_free(&ev);
    return st;
}

/* A text summary (plugin "text": a rank-0 DT_STRING tensor of Markdown) at step 0. */
static bora_status write_text(tb *t, const char *tag, const char *markdown)
{
    pb tensor = {0}, summary = {0};
    pb_uint(&tensor, 1, DT_STRING);
    pb_bytes(&tensor, 2, NULL, 0);
    pb_string(&tensor, 8, markdown);
    summary_value(&summary, tag, "text", NULL, DATA_CLASS_TENSOR, &tensor);
    return write_event(t, 0, 5, &summary);
}

/* JSON shown as a Markdown code block (each line indented by four spaces), pretty-printed where
 * it parses, as given where it does not. NULL when out of memory. */
static char *json_block(const char *json)
{
    json_object *obj = json_tokener_parse(json);
    const char *text =
        obj ? json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED)
            : json;
    size_t lines = 1, len = strlen(text);
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    char *out = NULL;
    if (lines <= (SIZE_MAX - len - 1) / 4)
        out = malloc(len + 4 * lines + 1);
    if (out) {
        char *w = out;
        int at_start = 1;
        for (const char *p = text; *p; p++) {
            if (at_start) {
                memcpy(w, "    ", 4);
                w += 4;
            }
            *w++ = *p;
            at_start = *p == '\n';
        }
        *w = 0;
    }
    json_object_put(obj);
    return out;
}

/* The hparams plugin's summary (tag _hparams_/NAME, data at HParamsPluginData field). Its value
 * is a float 0: TensorBoard gives hparams summaries that tensor when it loads one without. */
static bora_status write_hparams(tb *t, const char *name, unsigned field, pb *data)
{
    pb content = {0}, tensor = {0}, summary = {0};
    char tag[64];
    snprintf(tag, sizeof tag, "_hparams_/%s", name);
    pb_uint(&content, 1, 0); /* version 0 */
    pb_message(&content, field, data);
    tensor_float(&tensor, 0.0f);
    summary_value(&summary, tag, "hparams", &content, DATA_CLASS_TENSOR, &tensor);
    pb_free(&content);
    return write_event(t, 0, 5, &summary);
}

/* Append the configuration's leaves under prefix to a SessionStartInfo as hparams entries:
 * maps are flattened with dots (model.hidden_dim), lists become their JSON text, nulls are
 * left out (the text summary "config" keeps them). */
static void add_hparams(pb *info, const char *prefix, json_object *obj)
{
    if (json_object_get_type(obj) == json_type_object) {
        json_object_object_foreach(obj, key, child)
        {
            size_t n = strlen(prefix) + strlen(key) + 2;
            char *name = malloc(n);
            if (!name) {
                info->oom = 1;
                return;
            }
            snprintf(name, n, "%s%s%s", prefix, *prefix ? "." : "", key);
            add_hparams(info, name, child);
            free(name);
        }
        return;
    }
    pb value = {0}, entry = {0};
    switch (json_object_get_type(obj)) {
    case json_type_null: return;
    case json_type_boolean: pb_uint(&value, 4, (uint64_t)json_object_get_boolean(obj)); break;
    case json_type_int:
    case json_type_double: pb_double(&value, 2, json_object_get_double(obj)); break;
    case json_type_string: pb_string(&value, 3, json_object_get_string(obj)); break;
    default:
        pb_string(&value, 3, json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN));
        break;
    }
    pb_string(&entry, 1, prefix);
    pb_message(&entry, 2, &value);
    pb_message(info, 1, &entry);
}

/* ---- the tracker -------------------------------------------------------------------------- */

/* Create dir_path and every missing parent (dir_path ends in '/'). */
static bora_status mkdirs(const bora_host *h, const char *dir_path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", dir_path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return h->fail(h, BORA_ERR_IO, "cannot create directory '%s': %s", dir,
                           strerror(errno));
        *p = '/';
    }
    return BORA_OK;
}

/* Open a new file in dir; a name already taken (a second process in the same second) gets a
 * suffix, which sorts after it as TensorBoard reads files in name order. */
static bora_status open_new_file(tb *t, const char *dir)
{
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    for (char *p = host; *p; p++)
        if (*p == '/')
            *p = '_';
    long long secs = (long long)time(NULL);
    for (int k = 0; k < 100; k++) {
        char suffix[8] = "";
        if (k)
            snprintf(suffix, sizeof suffix, ".%d", k);
        int n = snprintf(t->path, sizeof t->path, "%sevents.out.tfevents.%010lld.%s%s", dir, secs,
                         host, suffix);
        if (n < 0 || (size_t)n >= sizeof t->path)
            return t->h->fail(t->h, BORA_ERR_CONFIG, "logdir: the path '%s...' is too long", dir);
        int fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno == EEXIST)
            continue;
        if (fd < 0 || !(t->out = fdopen(fd, "wb"))) {
            bora_status st =
                t->h->fail(t->h, BORA_ERR_IO, "cannot create '%s': %s", t->path, strerror(errno));
            if (fd >= 0)
                close(fd);
            return st;
        }
        return BORA_OK;
    }
    return t->h->fail(t->h, BORA_ERR_IO, "cannot create an event file in '%s': 100 names taken",
                      dir);
}

static void tb_destroy(bora_tracker *tr)
{
    tb *t = (tb *)tr;
    if (t->out)
        fclose(t->out);
    free(t->last_names);
    t->h->free(t->h, t);
}

static bora_status tb_create(const bora_host *h, const bora_config *cfg, const char *run_id,
                             bora_tracker **out)
{
    const char *logdir;
    bora_status st = h->config_string(h, cfg, "logdir", tb_keys[0].default_value, &logdir);
    if (st != BORA_OK)
        return st;
    if (!*logdir)
        return h->fail(h, BORA_ERR_CONFIG,
                       "logdir is empty: give a directory for the event files, e.g. "
                       "runs/tensorboard");
    tb *t = h->alloc(h, sizeof *t, 16);
    if (!t)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    t->h = h;
    crc_init(t->crc_table);
    char dir[4096];
    int n = snprintf(dir, sizeof dir, "%s/%s/", logdir, run_id && *run_id ? run_id : "run");
    if (n < 0 || (size_t)n >= sizeof dir - 64) {
        tb_destroy((bora_tracker *)t);
        return h->fail(h, BORA_ERR_CONFIG, "logdir: the path '%s' is too long", logdir);
    }
    if ((st = mkdirs(h, dir)) != BORA_OK || (st = open_new_file(t, dir)) != BORA_OK) {
        tb_destroy((bora_tracker *)t);
        return st;
    }
    pb source = {0}, ev = {0};
    pb_string(&source, 1, "bora");
    pb_double(&ev, 1, now_s());
    pb_string(&ev, 3, "brain.Event:2");
    pb_message(&ev, 10, &source);
    st = write_record(t, &ev);
    pb_free(&ev);
    if (st == BORA_OK && fflush(t->out) != 0)
        st = write_failed(t);
    if (st != BORA_OK) {
        tb_destroy((bora_tracker *)t);
        return st;
    }
    *out = (bora_tracker *)t;
    return BORA_OK;
}

static bora_status tb_log_hparams(bora_tracker *tr, const char *config_json)
{
    tb *t = (tb *)tr;
    const char *json = config_json && *config_json ? config_json : "{}";
    char *block = json_block(json);
    if (!block)
        return t->h->fail(t->h, BORA_ERR_NOMEM, "out of memory");
    bora_status st = write_text(t, "config", block);
    free(block);
    if (st != BORA_OK)
        return st;
    json_object *obj = json_tokener_parse(json);
    if (!obj)
        return t->h->fail(t->h, BORA_ERR_INVALID, "the configuration is not JSON");
    pb info = {0};
    add_hparams(&info, "", obj);
    json_object_put(obj);
    pb_double(&info, 5, now_s());
    return write_hparams(t, "session_start_info", 3, &info);
}

static bora_status tb_log_environment(bora_tracker *tr, const char *environment_json)
{
    tb *t = (tb *)tr;
    char *block = json_block(environment_json ? environment_json : "{}");
    if (!block)
        return t->h->fail(t->h, BORA_ERR_NOMEM, "out of memory");
    bora_status st = write_text(t, "environment", block);
    free(block);
    return st;
}

/* One event at step with each metric as a scalar. */
static bora_status write_scalars(tb *t, int64_t step, const bora_metric *m, size_t n)
{
    pb summary = {0};
    for (size_t i = 0; i < n; i++) {
        pb tensor = {0};
        tensor_float(&tensor, (float)m[i].value);
        summary_value(&summary, m[i].name, "scalars", NULL, DATA_CLASS_SCALAR, &tensor);
    }
    return write_event(t, step, 5, &summary);
}

static bora_status tb_log(bora_tracker *tr, int64_t step, const bora_metric *m, size_t n)
{
    tb *t = (tb *)tr;
    if (!t->started) {
        pb session = {0};
        pb_uint(&session, 1, 1); /* SessionLog.START */
        bora_status st = write_event(t, step, 7, &session);
        if (st != BORA_OK)
            return st;
        t->started = 1;
    }
    if (step != t->last_step)
        t->last_len = 0;
    t->last_step = step;
    for (size_t i = 0; i < n; i++) { /* remember the names, for tb_log_summary */
        size_t len = strlen(m[i].name);
        char *names = realloc(t->last_names, t->last_len + len + 2);
        if (!names)
            return t->h->fail(t->h, BORA_ERR_NOMEM, "out of memory");
        t->last_names = names;
        names[t->last_len] = '\n';
        memcpy(names + t->last_len + 1, m[i].name, len + 1);
        t->last_len += len + 1;
    }
    bora_status st = write_scalars(t, step, m, n);
    /* Flushed to the OS (not synced) each step, so a live TensorBoard sees it now. */
    if (st == BORA_OK && fflush(t->out) != 0)
        st = write_failed(t);
    return st;
}

/* Whether name was logged at last_step. */
static int logged_last(const tb *t, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = t->last_names; p && (p = strstr(p, name)); p++)
        if (p > t->last_names && p[-1] == '\n' && (p[len] == '\n' || p[len] == 0))
            return 1;
    return 0;
}

/* The summary at the last step, less what that step logged already (the final eval): TensorBoard
 * would show two points for it. */
static bora_status tb_log_summary(bora_tracker *tr, const bora_metric *m, size_t n)
{
    tb *t = (tb *)tr;
    bora_metric *keep = malloc((n ? n : 1) * sizeof *keep);
    if (!keep)
        return t->h->fail(t->h, BORA_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!logged_last(t, m[i].name))
            keep[k++] = m[i];
    bora_status st = k ? write_scalars(t, t->last_step, keep, k) : BORA_OK;
    free(keep);
    return st;
}

static bora_status tb_flush(bora_tracker *tr)
{
    tb *t = (tb *)tr;
    errno = 0;
    if (fflush(t->out) != 0 || ferror(t->out))
        return write_failed(t);
    if (fsync(fileno(t->out)) != 0)
        return t->h->fail(t->h, BORA_ERR_IO, "cannot sync '%s': %s", t->path, strerror(errno));
    return BORA_OK;
}

static bora_status tb_finish(bora_tracker *tr, int32_t status)
{
    tb *t = (tb *)tr;
    pb info = {0};
    /* A killed run may be resumed: neither success nor failure yet. */
    pb_uint(&info, 1, status == BORA_RUN_FINISHED ? 1 : status == BORA_RUN_FAILED ? 2 : 0);
    pb_double(&info, 2, now_s());
    bora_status st = write_hparams(t, "session_end_info", 4, &info);
    bora_status fl = tb_flush(tr);
    return st != BORA_OK ? st : fl;
}

static const bora_tracker_ops tb_ops = {
    .hdr = {sizeof(bora_tracker_ops), BORA_KIND_TRACKER, "tensorboard",
            "TensorBoard event files (scalars, hparams, the configuration as text)", tb_keys},
    .create = tb_create,
    .log_hparams = tb_log_hparams,
    .log = tb_log,
    .log_summary = tb_log_summary,
    .finish = tb_finish,
    .destroy = tb_destroy,
    .log_environment = tb_log_environment,
    .flush = tb_flush,
};

static bora_status tb_init(const bora_host *h)
{
    return h->add(h, &tb_ops.hdr);
}

BORA_PLUGIN_DEFINE("tensorboard", "0.1.0", tb_init, NULL)
