/* core/cli/cmd_runs.c — `bora runs [--db PATH] [show ID | compare ID ID]`: the run database the
 * sqlite tracker writes (plugins/trackers/sqlite), read-only. */
#include "../util/log.h"
#include "cli.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_DB "runs/bora.db"

static void when(double t, char *buf, size_t cap)
{
    if (t <= 0) {
        snprintf(buf, cap, "-");
        return;
    }
    time_t s = (time_t)t;
    struct tm tm;
    localtime_r(&s, &tm);
    strftime(buf, cap, "%Y-%m-%d %H:%M", &tm);
}

/* The status as it stands: a "running" run whose process is gone on this host died. */
static const char *live_status(const char *status, const char *hostname, long long pid)
{
    if (!status)
        return "?";
    if (strcmp(status, "running") != 0)
        return status;
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !hostname || strcmp(host, hostname) != 0)
        return "running"; /* another machine's run: cannot tell */
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return "died";
    return "running";
}

static const char *col(sqlite3_stmt *q, int i)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    return t ? (const char *)t : NULL;
}

static int open_db(const char *path, sqlite3 **db)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        /* sqlite would call it a disk I/O error */
        size_t len = strlen(path);
        bora_log(BORA_LOG_ERROR,
                 "runs: %s is a directory; --db takes the database file, e.g. %s%sbora.db", path,
                 path, len && path[len - 1] == '/' ? "" : "/");
        return 1;
    }
    if (access(path, F_OK) != 0) {
        bora_log(BORA_LOG_ERROR,
                 "runs: no run database at %s (runs are recorded there by the sqlite tracker, "
                 "the default; --db PATH reads another)",
                 path);
        return 1;
    }
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        bora_log(BORA_LOG_ERROR, "runs: cannot open %s: %s", path, sqlite3_errmsg(*db));
        return 1;
    }
    sqlite3_busy_timeout(*db, 5000);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(*db, "SELECT value FROM meta WHERE key = 'schema'", -1, &q, NULL) !=
            SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW) {
        bora_log(BORA_LOG_ERROR, "runs: %s is not a bora run database (%s)", path,
                 sqlite3_errmsg(*db));
        sqlite3_finalize(q);
        return 1;
    }
    sqlite3_finalize(q);
    return 0;
}

static int list_runs(sqlite3 *db)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, model, last_step, num_train_steps, last_loss, status,"
                           " started, hostname, pid FROM runs ORDER BY started",
                           -1, &q, NULL) != SQLITE_OK) {
        bora_log(BORA_LOG_ERROR, "runs: %s", sqlite3_errmsg(db));
        return 1;
    }
    printf("%-24s %-8s %13s %9s  %-9s %s\n", "id", "model", "steps", "loss", "status", "started");
    int n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        char steps[40], loss[32], started[32];
        snprintf(steps, sizeof steps, "%lld/%lld", (long long)sqlite3_column_int64(q, 2),
                 (long long)sqlite3_column_int64(q, 3));
        if (sqlite3_column_type(q, 4) == SQLITE_NULL)
            snprintf(loss, sizeof loss, "-");
        else
            snprintf(loss, sizeof loss, "%.4f", sqlite3_column_double(q, 4));
        when(sqlite3_column_double(q, 6), started, sizeof started);
        printf("%-24s %-8s %13s %9s  %-9s %s\n", col(q, 0), col(q, 1) ? col(q, 1) : "-", steps,
               loss, live_status(col(q, 5), col(q, 7), sqlite3_column_int64(q, 8)), started);
        n++;
    }
    sqlite3_finalize(q);
    if (!n)
        printf("(no runs yet)\n");
    return 0;
}

/* Every value of one metric of a run, in step order. */
static int series(sqlite3 *db, const char *run, const char *name, int64_t **steps, double **values,
                  size_t *n)
{
    *steps = NULL;
    *values = NULL;
    *n = 0;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT step, value FROM metrics WHERE run = ?1 AND name = ?2"
                           " AND value IS NOT NULL ORDER BY step",
                           -1, &q, NULL) != SQLITE_OK)
        return 1;
    sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, name, -1, SQLITE_STATIC);
    size_t cap = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            int64_t *s = realloc(*steps, cap * sizeof *s);
            double *v = realloc(*values, cap * sizeof *v);
            if (s)
                *steps = s;
            if (v)
                *values = v;
            if (!s || !v) {
                sqlite3_finalize(q);
                return 1;
            }
        }
        (*steps)[*n] = sqlite3_column_int64(q, 0);
        (*values)[*n] = sqlite3_column_double(q, 1);
        (*n)++;
    }
    sqlite3_finalize(q);
    return 0;
}

/* A text plot of y over x: `rows` lines of `width` columns, the y range on the left. */
static void plot(const int64_t *x, const double *y, size_t n, int width, int rows)
{
    if (n < 2) {
        printf("  (fewer than two points)\n");
        return;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        lo = fmin(lo, y[i]);
        hi = fmax(hi, y[i]);
    }
    if (hi - lo < 1e-12)
        hi = lo + 1;
    char *grid = malloc((size_t)(width * rows));
    if (!grid)
        return;
    memset(grid, ' ', (size_t)(width * rows));
    int64_t x0 = x[0], x1 = x[n - 1] > x0 ? x[n - 1] : x0 + 1;
    /* each column shows the mean of the points that fall in it */
    for (int c = 0; c < width; c++) {
        double sum = 0;
        int cnt = 0;
        for (size_t i = 0; i < n; i++) {
            int ci = (int)((double)(x[i] - x0) / (double)(x1 - x0) * (width - 1) + 0.5);
            if (ci == c) {
                sum += y[i];
                cnt++;
            }
        }
        if (!cnt)
            continue;
        int r = (int)((hi - sum / cnt) / (hi - lo) * (rows - 1) + 0.5);
        grid[r * width + c] = '*';
    }
    for (int r = 0; r < rows; r++) {
        double v = hi - (hi - lo) * r / (rows - 1);
        if (r == 0 || r == rows - 1 || r == rows / 2)
            printf("  %9.4f |", v);
        else
            printf("  %9s |", "");
        fwrite(grid + r * width, 1, (size_t)width, stdout);
        putchar('\n');
    }
    printf("  %9s +", "");
    for (int c = 0; c < width; c++)
        putchar('-');
    printf("\n  %9s  step %-10lld%*lld\n", "", (long long)x0, width - 15, (long long)x[n - 1]);
    free(grid);
}

/* The last value of every metric of a run, into a JSON object name -> [step, value]. */
static json_object *final_metrics(sqlite3 *db, const char *run)
{
    json_object *o = json_object_new_object();
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT name, step, value FROM metrics m WHERE run = ?1 AND step ="
                           " (SELECT max(step) FROM metrics WHERE run = ?1 AND name = m.name)"
                           " ORDER BY name",
                           -1, &q, NULL) != SQLITE_OK)
        return o;
    sqlite3_bind_text(q, 1, run, -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW) {
        json_object *pair = json_object_new_array();
        json_object_array_add(pair, json_object_new_int64(sqlite3_column_int64(q, 1)));
        json_object_array_add(pair, sqlite3_column_type(q, 2) == SQLITE_NULL
                                        ? NULL
                                        : json_object_new_double(sqlite3_column_double(q, 2)));
        json_object_object_add(o, col(q, 0), pair);
    }
    sqlite3_finalize(q);
    return o;
}

typedef struct run_row {
    char *id, *model, *status, *config, *env, *hostname;
    double started, ended, updated, last_loss;
    long long last_step, steps, pid;
    int has_loss;
} run_row;

static void run_row_free(run_row *r)
{
    free(r->id);
    free(r->model);
    free(r->status);
    free(r->config);
    free(r->env);
    free(r->hostname);
}

static char *dup_col(sqlite3_stmt *q, int i)
{
    const char *t = col(q, i);
    return t ? strdup(t) : NULL;
}

/* A run by id, or by a unique prefix of its id. */
static int find_run(sqlite3 *db, const char *id, run_row *r)
{
    memset(r, 0, sizeof *r);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db,
                           "SELECT id, model, status, config, environment, hostname, started,"
                           " ended, updated, last_loss, last_step, num_train_steps, pid"
                           " FROM runs WHERE id = ?1 OR substr(id, 1, length(?1)) = ?1"
                           " ORDER BY id = ?1 DESC",
                           -1, &q, NULL) != SQLITE_OK) {
        bora_log(BORA_LOG_ERROR, "runs: %s", sqlite3_errmsg(db));
        return 1;
    }
    sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
    int found = 0, exact = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        if (found && exact)
            break;
        if (found) {
            bora_log(BORA_LOG_ERROR, "runs: '%s' names more than one run (%s, %s, ...)", id, r->id,
                     col(q, 0));
            run_row_free(r);
            sqlite3_finalize(q);
            return 1;
        }
        found = 1;
        exact = strcmp(col(q, 0), id) == 0;
        r->id = dup_col(q, 0);
        r->model = dup_col(q, 1);
        r->status = dup_col(q, 2);
        r->config = dup_col(q, 3);
        r->env = dup_col(q, 4);
        r->hostname = dup_col(q, 5);
        r->started = sqlite3_column_double(q, 6);
        r->ended = sqlite3_column_double(q, 7);
        r->updated = sqlite3_column_double(q, 8);
        r->has_loss = sqlite3_column_type(q, 9) != SQLITE_NULL;
        r->last_loss = sqlite3_column_double(q, 9);
        r->last_step = sqlite3_column_int64(q, 10);
        r->steps = sqlite3_column_int64(q, 11);
        r->pid = sqlite3_column_int64(q, 12);
    }
    sqlite3_finalize(q);
    if (!found) {
        bora_log(BORA_LOG_ERROR, "runs: no run '%s' in the database (bora runs lists them)", id);
        return 1;
    }
    return 0;
}

static const char *env_string(json_object *env, const char *a, const char *b)
{
    json_object *x = env, *y;
    if (a && (!json_object_object_get_ex(x, a, &y) || !(x = y)))
        return NULL;
    if (b && (!json_object_object_get_ex(x, b, &y) || !(x = y)))
        return NULL;
    return json_object_is_type(x, json_type_string) ? json_object_get_string(x) : NULL;
}

/* Flatten a JSON config into "a.b.c" -> value text, into an object. */
static void flatten(json_object *o, const char *prefix, json_object *out)
{
    if (json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, k, v)
        {
            char key[1024];
            snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", k);
            flatten(v, key, out);
        }
        return;
    }
    json_object_object_add(
        out, prefix,
        json_object_new_string(o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_NOSLASHESCAPE)
                                 : "null"));
}

static int show_run(sqlite3 *db, const char *id)
{
    run_row r;
    if (find_run(db, id, &r))
        return 1;
    char started[32], ended[32];
    when(r.started, started, sizeof started);
    when(r.ended, ended, sizeof ended);
    printf("run %s\n", r.id);
    printf("  model     %s\n", r.model ? r.model : "-");
    printf("  status    %s\n", live_status(r.status, r.hostname, r.pid));
    printf("  steps     %lld of %lld\n", r.last_step, r.steps);
    if (r.has_loss)
        printf("  loss      %.4f (last logged)\n", r.last_loss);
    printf("  started   %s\n", started);
    if (r.ended > 0)
        printf("  ended     %s (%.0f s)\n", ended, r.ended - r.started);
    json_object *env = r.env ? json_tokener_parse(r.env) : NULL;
    if (env) {
        const char *v;
        if ((v = env_string(env, "hostname", NULL)))
            printf("  machine   %s, %s\n", v,
                   env_string(env, "record", "cpu") ? env_string(env, "record", "cpu") : "?");
        if ((v = env_string(env, "record", "backend")))
            printf("  backend   %s\n", v);
        if ((v = env_string(env, "record", "host")))
            printf("  bora      %s\n", v);
        json_object *git;
        if (json_object_object_get_ex(env, "git", &git) && git) {
            json_object *c, *d;
            if (json_object_object_get_ex(git, "commit", &c) &&
                json_object_object_get_ex(git, "dirty", &d))
                printf("  git       %s%s (in %s)\n", json_object_get_string(c),
                       json_object_get_boolean(d) ? " with uncommitted changes" : "",
                       env_string(env, "cwd", NULL) ? env_string(env, "cwd", NULL) : "?");
        }
    }
    json_object_put(env);
    /* summary */
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "SELECT name, value FROM summary WHERE run = ?1 ORDER BY name", -1,
                           &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, r.id, -1, SQLITE_STATIC);
        int first = 1;
        while (sqlite3_step(q) == SQLITE_ROW) {
            if (first)
                printf("\nsummary\n");
            first = 0;
            printf("  %-32s %.6g\n", col(q, 0), sqlite3_column_double(q, 1));
        }
    }
    sqlite3_finalize(q);
    /* the loss */
    int64_t *steps;
    double *values;
    size_t n;
    if (series(db, r.id, "train/loss", &steps, &values, &n) == 0 && n) {
        printf("\ntrain/loss\n");
        plot(steps, values, n, 60, 12);
    }
    free(steps);
    free(values);
    /* the configuration, one resolved key per line */
    json_object *cfg = r.config ? json_tokener_parse(r.config) : NULL,
                *flat = json_object_new_object();
    if (cfg) {
        flatten(cfg, "", flat);
        printf("\nconfiguration\n");
        json_object_object_foreach(flat, k, v) printf("  %s: %s\n", k, json_object_get_string(v));
    }
    json_object_put(flat);
    json_object_put(cfg);
    run_row_free(&r);
    return 0;
}

static int compare_runs(sqlite3 *db, const char *a, const char *b)
{
    run_row ra, rb;
    if (find_run(db, a, &ra))
        return 1;
    if (find_run(db, b, &rb)) {
        run_row_free(&ra);
        return 1;
    }
    json_object *ca = json_object_new_object(), *cb = json_object_new_object();
    json_object *ja = ra.config ? json_tokener_parse(ra.config) : NULL;
    json_object *jb = rb.config ? json_tokener_parse(rb.config) : NULL;
    flatten(ja, "", ca);
    flatten(jb, "", cb);
    printf("%-40s %-24s %-24s\n", "", ra.id, rb.id);
    printf("configuration (the keys that differ)\n");
    int diffs = 0;
    json_object_object_foreach(ca, k, va)
    {
        json_object *vb = NULL;
        const char *sa = json_object_get_string(va);
        const char *sb = json_object_object_get_ex(cb, k, &vb) ? json_object_get_string(vb) : "-";
        if (strcmp(sa, sb) != 0 && strcmp(k, "trainer.id") != 0) {
            printf("  %-38s %-24s %-24s\n", k, sa, sb);
            diffs++;
        }
    }
    json_object_object_foreach(cb, k2, vb2)
    {
        if (!json_object_object_get_ex(ca, k2, NULL)) {
            printf("  %-38s %-24s %-24s\n", k2, "-", json_object_get_string(vb2));
            diffs++;
        }
    }
    if (!diffs)
        printf("  (the same configuration)\n");
    printf("final metrics (value at the last step logged)\n");
    json_object *fa = final_metrics(db, ra.id), *fb = final_metrics(db, rb.id);
    json_object *names = json_object_new_object();
    json_object_object_foreach(fa, n1, v1)
    {
        (void)v1;
        json_object_object_add(names, n1, NULL);
    }
    json_object_object_foreach(fb, n2, v2)
    {
        (void)v2;
        json_object_object_add(names, n2, NULL);
    }
    json_object_object_foreach(names, name, unused)
    {
        (void)unused;
        char va_s[48] = "-", vb_s[48] = "-";
        json_object *p, *v;
        if (json_object_object_get_ex(fa, name, &p) && (v = json_object_array_get_idx(p, 1)))
            snprintf(va_s, sizeof va_s, "%.6g (step %lld)", json_object_get_double(v),
                     (long long)json_object_get_int64(json_object_array_get_idx(p, 0)));
        if (json_object_object_get_ex(fb, name, &p) && (v = json_object_array_get_idx(p, 1)))
            snprintf(vb_s, sizeof vb_s, "%.6g (step %lld)", json_object_get_double(v),
                     (long long)json_object_get_int64(json_object_array_get_idx(p, 0)));
        printf("  %-38s %-24s %-24s\n", name, va_s, vb_s);
    }
    json_object_put(names);
    json_object_put(fa);
    json_object_put(fb);
    json_object_put(ca);
    json_object_put(cb);
    json_object_put(ja);
    json_object_put(jb);
    run_row_free(&ra);
    run_row_free(&rb);
    return 0;
}

int bora_cmd_runs(const bora_cli *cli)
{
    const char *db_path = DEFAULT_DB, *args[3] = {NULL, NULL, NULL};
    int n = 0;
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        if (!strcmp(a, "--db") || !strncmp(a, "--db=", 5)) {
            db_path = a[4] == '=' ? a + 5 : (i + 1 < cli->argc ? cli->argv[++i] : NULL);
            if (!db_path || !*db_path) {
                bora_log(BORA_LOG_ERROR, "runs: --db needs the database file (e.g. --db %s)",
                         DEFAULT_DB);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            static const char *const known[] = {"--db", BORA_CLI_GLOBAL_OPTIONS, NULL};
            return bora_cli_unknown_option("runs", a, known);
        } else if (n == 3) {
            bora_log(BORA_LOG_ERROR,
                     "runs: unexpected argument '%s' (bora runs [--db PATH] "
                     "[show ID | compare ID ID])",
                     a);
            return 2;
        } else
            args[n++] = a;
    }
    int bad =
        n && !((n == 2 && !strcmp(args[0], "show")) || (n == 3 && !strcmp(args[0], "compare")));
    if (bad) {
        bora_log(BORA_LOG_ERROR, "runs: usage: bora runs [--db PATH] [show ID | compare ID ID]");
        return 2;
    }
    sqlite3 *db = NULL;
    int rc = open_db(db_path, &db);
    if (!rc)
        rc = n == 0   ? list_runs(db)
             : n == 2 ? show_run(db, args[1])
                      : compare_runs(db, args[1], args[2]);
    sqlite3_close(db);
    return rc;
}
