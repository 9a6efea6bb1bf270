/* plugins/trackers/sqlite — the default tracker: every run in one SQLite database.
 *
 * Tables (schema version 1, in meta):
 *   runs(id, model, status, started, updated, ended, num_train_steps, last_step, last_loss,
 *        hostname, pid, config, environment)   status: running, finished, failed, killed
 *   metrics(run, step, name, value)            one row per logged value
 *   summary(run, name, value)
 *   artifacts(run, path, name, type, logged)
 * Times are Unix seconds. WAL mode with synchronous=NORMAL; writes go into one open
 * transaction committed at least once a second (and at finish), so a killed process loses at
 * most its last second of metrics and a reader (`bora runs`) never waits on the writer. A run
 * started again under the same id (a resume) reopens its row: status running, metrics kept
 * (a step logged twice keeps its latest values). */
#define _POSIX_C_SOURCE 200809L
#include <bora/tracker.h>

#include <errno.h>
#include <json-c/json.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct sqlt {
    const bora_host *h;
    sqlite3 *db;
    char path[4096], run_id[256];
    int in_tx;
    double last_commit;
    sqlite3_stmt *put_metric, *put_progress;
} sqlt;

static const bora_key sqlite_keys[] = {
    {"path", BORA_KEY_STRING, 0, "runs/bora.db",
     "the database file (created with its directory); one file holds every run"},
    {NULL, 0, 0, NULL, NULL},
};

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);"
    "INSERT OR IGNORE INTO meta VALUES('schema', '1');"
    "CREATE TABLE IF NOT EXISTS runs(id TEXT PRIMARY KEY, model TEXT, status TEXT NOT NULL,"
    " started REAL, updated REAL, ended REAL, num_train_steps INTEGER, last_step INTEGER,"
    " last_loss REAL, hostname TEXT, pid INTEGER, config TEXT, environment TEXT);"
    "CREATE TABLE IF NOT EXISTS metrics(run TEXT NOT NULL, step INTEGER NOT NULL,"
    " name TEXT NOT NULL, value REAL, PRIMARY KEY(run, name, step)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS summary(run TEXT NOT NULL, name TEXT NOT NULL, value REAL,"
    " PRIMARY KEY(run, name)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS artifacts(run TEXT NOT NULL, path TEXT, name TEXT, type TEXT,"
    " logged REAL);";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bora_status fail_db(sqlt *s, const char *what)
{
    return s->h->fail(s->h, BORA_ERR_IO, "%s: %s: %s", s->path, what, sqlite3_errmsg(s->db));
}

static bora_status exec(sqlt *s, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        bora_status st = s->h->fail(s->h, BORA_ERR_IO, "%s: %s", s->path, err ? err : "error");
        sqlite3_free(err);
        return st;
    }
    return BORA_OK;
}

static bora_status begin(sqlt *s)
{
    if (s->in_tx)
        return BORA_OK;
    bora_status st = exec(s, "BEGIN");
    s->in_tx = st == BORA_OK;
    return st;
}

static bora_status commit(sqlt *s)
{
    if (!s->in_tx)
        return BORA_OK;
    s->in_tx = 0;
    s->last_commit = now_s();
    return exec(s, "COMMIT");
}

/* Commit when the open transaction is a second old. */
static bora_status maybe_commit(sqlt *s)
{
    return now_s() - s->last_commit >= 1.0 ? commit(s) : BORA_OK;
}

static bora_status mkdirs(sqlt *s)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", s->path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return s->h->fail(s->h, BORA_ERR_IO, "cannot create directory '%s': %s", dir,
                              strerror(errno));
        *p = '/';
    }
    return BORA_OK;
}

static void sqlt_close(sqlt *s)
{
    sqlite3_finalize(s->put_metric);
    sqlite3_finalize(s->put_progress);
    if (s->db)
        sqlite3_close(s->db);
    s->h->free(s->h, s);
}

static bora_status sqlt_create(const bora_host *h, const bora_config *cfg, const char *run_id,
                               bora_tracker **out)
{
    const char *path;
    bora_status st = h->config_string(h, cfg, "path", sqlite_keys[0].default_value, &path);
    if (st != BORA_OK)
        return st;
    sqlt *s = h->alloc(h, sizeof *s, 16);
    if (!s)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    memset(s, 0, sizeof *s);
    s->h = h;
    snprintf(s->path, sizeof s->path, "%s", path);
    snprintf(s->run_id, sizeof s->run_id, "%s", run_id);
    if ((st = mkdirs(s)) != BORA_OK) {
        sqlt_close(s);
        return st;
    }
    if (sqlite3_open_v2(s->path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        st = fail_db(s, "cannot open the database");
        sqlt_close(s);
        return st;
    }
    sqlite3_busy_timeout(s->db, 10000);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = 0;
    sqlite3_stmt *run = NULL;
    if ((st = exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")) != BORA_OK ||
        (st = exec(s, schema)) != BORA_OK) {
        sqlt_close(s);
        return st;
    }
    if (sqlite3_prepare_v2(s->db,
                           "INSERT INTO runs(id, status, started, updated, hostname, pid)"
                           " VALUES(?1, 'running', ?2, ?2, ?3, ?4) ON CONFLICT(id) DO UPDATE"
                           " SET status = 'running', updated = ?2, ended = NULL,"
                           " hostname = ?3, pid = ?4",
                           -1, &run, NULL) != SQLITE_OK ||
        sqlite3_bind_text(run, 1, s->run_id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_double(run, 2, now_s()) != SQLITE_OK ||
        sqlite3_bind_text(run, 3, host, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_int64(run, 4, (sqlite3_int64)getpid()) != SQLITE_OK ||
        sqlite3_step(run) != SQLITE_DONE ||
        sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO metrics VALUES(?1, ?2, ?3, ?4)", -1,
                           &s->put_metric, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db,
                           "UPDATE runs SET last_step = ?2, updated = ?3,"
                           " last_loss = coalesce(?4, last_loss) WHERE id = ?1",
                           -1, &s->put_progress, NULL) != SQLITE_OK) {
        st = fail_db(s, "cannot record the run");
        sqlite3_finalize(run);
        sqlt_close(s);
        return st;
    }
    sqlite3_finalize(run);
    s->last_commit = now_s();
    *out = (bora_tracker *)s;
    return BORA_OK;
}

/* UPDATE runs SET <column> = text WHERE id = run. */
static bora_status set_text(sqlt *s, const char *column, const char *text)
{
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE runs SET %s = ?2 WHERE id = ?1", column);
    sqlite3_stmt *q = NULL;
    bora_status st = BORA_OK;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK ||
        sqlite3_bind_text(q, 1, s->run_id, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_bind_text(q, 2, text, -1, SQLITE_STATIC) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_DONE)
        st = fail_db(s, column);
    sqlite3_finalize(q);
    return st;
}

static bora_status sqlt_log_hparams(bora_tracker *t, const char *config_json)
{
    sqlt *s = (sqlt *)t;
    bora_status st = begin(s);
    if (st == BORA_OK)
        st = set_text(s, "config", config_json);
    /* model.type and trainer.num_train_steps, for listings */
    json_object *o = json_tokener_parse(config_json), *sec, *v;
    if (st == BORA_OK && o) {
        if (json_object_object_get_ex(o, "model", &sec) &&
            json_object_object_get_ex(sec, "type", &v) && json_object_is_type(v, json_type_string))
            st = set_text(s, "model", json_object_get_string(v));
        if (st == BORA_OK && json_object_object_get_ex(o, "trainer", &sec) &&
            json_object_object_get_ex(sec, "num_train_steps", &v)) {
            char n[32];
            snprintf(n, sizeof n, "%lld", (long long)json_object_get_int64(v));
            st = set_text(s, "num_train_steps", n);
        }
    }
    json_object_put(o);
    return st == BORA_OK ? commit(s) : st;
}

static bora_status sqlt_log_environment(bora_tracker *t, const char *environment_json)
{
    sqlt *s = (sqlt *)t;
    bora_status st = begin(s);
    if (st == BORA_OK)
        st = set_text(s, "environment", environment_json);
    return st == BORA_OK ? commit(s) : st;
}

static bora_status sqlt_log(bora_tracker *t, int64_t step, const bora_metric *m, size_t n)
{
    sqlt *s = (sqlt *)t;
    bora_status st = begin(s);
    if (st != BORA_OK)
        return st;
    int loss = -1;
    for (size_t i = 0; i < n; i++) {
        sqlite3_stmt *q = s->put_metric;
        sqlite3_reset(q);
        sqlite3_bind_text(q, 1, s->run_id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(q, 2, step);
        sqlite3_bind_text(q, 3, m[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_double(q, 4, m[i].value); /* NaN is stored as NULL */
        if (sqlite3_step(q) != SQLITE_DONE)
            return fail_db(s, "cannot store a metric");
        if (strcmp(m[i].name, "train/loss") == 0)
            loss = (int)i;
    }
    sqlite3_stmt *q = s->put_progress;
    sqlite3_reset(q);
    sqlite3_bind_text(q, 1, s->run_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, step);
    sqlite3_bind_double(q, 3, now_s());
    if (loss >= 0)
        sqlite3_bind_double(q, 4, m[loss].value);
    else
        sqlite3_bind_null(q, 4);
    if (sqlite3_step(q) != SQLITE_DONE)
        return fail_db(s, "cannot store the run's progress");
    return maybe_commit(s);
}

static bora_status sqlt_log_summary(bora_tracker *t, const bora_metric *m, size_t n)
{
    sqlt *s = (sqlt *)t;
    bora_status st = begin(s);
    sqlite3_stmt *q = NULL;
    if (st == BORA_OK &&
        sqlite3_prepare_v2(s->db, "INSERT OR REPLACE INTO summary VALUES(?1, ?2, ?3)", -1, &q,
                           NULL) != SQLITE_OK)
        st = fail_db(s, "summary");
    for (size_t i = 0; st == BORA_OK && i < n; i++) {
        sqlite3_reset(q);
        sqlite3_bind_text(q, 1, s->run_id, -1, SQLITE_STATIC);
        sqlite3_bind_text(q, 2, m[i].name, -1, SQLITE_STATIC);
        sqlite3_bind_double(q, 3, m[i].value);
        if (sqlite3_step(q) != SQLITE_DONE)
            st = fail_db(s, "summary");
    }
    sqlite3_finalize(q);
    return st == BORA_OK ? maybe_commit(s) : st;
}

static bora_status sqlt_log_artifact(bora_tracker *t, const char *path, const char *name,
                                     const char *type)
{
    sqlt *s = (sqlt *)t;
    bora_status st = begin(s);
    sqlite3_stmt *q = NULL;
    if (st == BORA_OK &&
        (sqlite3_prepare_v2(s->db, "INSERT INTO artifacts VALUES(?1, ?2, ?3, ?4, ?5)", -1, &q,
                            NULL) != SQLITE_OK ||
         sqlite3_bind_text(q, 1, s->run_id, -1, SQLITE_STATIC) != SQLITE_OK ||
         sqlite3_bind_text(q, 2, path, -1, SQLITE_STATIC) != SQLITE_OK ||
         sqlite3_bind_text(q, 3, name, -1, SQLITE_STATIC) != SQLITE_OK ||
         sqlite3_bind_text(q, 4, type, -1, SQLITE_STATIC) != SQLITE_OK ||
         sqlite3_bind_double(q, 5, now_s()) != SQLITE_OK || sqlite3_step(q) != SQLITE_DONE))
        st = fail_db(s, "artifact");
    sqlite3_finalize(q);
    return st == BORA_OK ? maybe_commit(s) : st;
}

static bora_status sqlt_finish(bora_tracker *t, int32_t status)
{
    sqlt *s = (sqlt *)t;
    const char *name = status == BORA_RUN_FINISHED ? "finished"
                       : status == BORA_RUN_KILLED ? "killed"
                                                   : "failed";
    bora_status st = begin(s);
    sqlite3_stmt *q = NULL;
    if (st == BORA_OK &&
        (sqlite3_prepare_v2(s->db,
                            "UPDATE runs SET status = ?2, ended = ?3, updated = ?3"
                            " WHERE id = ?1",
                            -1, &q, NULL) != SQLITE_OK ||
         sqlite3_bind_text(q, 1, s->run_id, -1, SQLITE_STATIC) != SQLITE_OK ||
         sqlite3_bind_text(q, 2, name, -1, SQLITE_STATIC) != SQLITE_OK ||
         sqlite3_bind_double(q, 3, now_s()) != SQLITE_OK || sqlite3_step(q) != SQLITE_DONE))
        st = fail_db(s, "cannot record how the run ended");
    sqlite3_finalize(q);
    bora_status c = commit(s);
    return st == BORA_OK ? c : st;
}

static bora_status sqlt_flush(bora_tracker *t)
{
    return commit((sqlt *)t);
}

static void sqlt_destroy(bora_tracker *t)
{
    sqlt *s = (sqlt *)t;
    commit(s);
    sqlt_close(s);
}

static const bora_tracker_ops sqlite_ops = {
    .hdr = {sizeof(bora_tracker_ops), BORA_KIND_TRACKER, "sqlite",
            "every run in one SQLite database (the default; read it with bora runs)", sqlite_keys},
    .create = sqlt_create,
    .log_hparams = sqlt_log_hparams,
    .log = sqlt_log,
    .log_summary = sqlt_log_summary,
    .log_artifact = sqlt_log_artifact,
    .finish = sqlt_finish,
    .destroy = sqlt_destroy,
    .log_environment = sqlt_log_environment,
    .flush = sqlt_flush,
};

static bora_status sqlite_init(const bora_host *h)
{
    return h->add(h, &sqlite_ops.hdr);
}

BORA_PLUGIN_DEFINE("sqlite", "0.1.0", sqlite_init, NULL)
