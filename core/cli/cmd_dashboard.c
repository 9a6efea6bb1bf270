/* core/cli/cmd_dashboard.c — `bora dashboard [--db PATH] [--port N]`: a web page over the run
 * database the sqlite tracker writes (plugins/trackers/sqlite), served on 127.0.0.1 only.
 *
 * The page (dashboard_page.h) lists the runs, draws every metric of the runs ticked, overlaid,
 * with Chart.js as Debian's libjs-chart.js installs it (served from /usr/share/javascript, so
 * the page needs nothing from the internet), and shows a run's configuration and environment.
 * It polls the JSON endpoints every two seconds, so a run that is training grows on screen:
 *
 *   GET /api/runs                      {"db": PATH, "runs": [{id, model, status, started,
 *                                      updated, ended, num_train_steps, last_step, last_loss}]}
 *   GET /api/metrics?run=ID&since=N&max_points=P
 *                                      {"run": ID, "since": N, "last_step": S, "metrics":
 *                                      {NAME: [[step, value], ...]}}: the rows with step > N
 *                                      (since defaults to -1: all), value null where not finite;
 *                                      a metric with more than P rows (default and most 2,000)
 *                                      is thinned to every k-th row and its last, so a long
 *                                      run's answer stays small
 *   GET /api/run?run=ID                {"id": ID, ..., "config": {...}, "environment": {...},
 *                                      "summary": {NAME: value}}
 *
 * Errors are {"error": TEXT} with status 400 (a bad parameter), 403 (a Host header other than
 * 127.0.0.1:PORT or localhost:PORT: a page of another site reaching it through DNS rebinding),
 * 404 (no such run) or 503 (the database could not be read). The database is opened read-only: a training run may write it at
 * the same time (WAL; a read waits up to five seconds for a writer). One server thread answers
 * every request, so one connection serves them all. */
#include "../config/config.h"
#include "../util/log.h"
#include "cli.h"
#include "dashboard_page.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_DB "runs/bora.db"
#define DEFAULT_PORT 8090
#define MAX_POINTS 2000 /* per metric in one /api/metrics answer */
#define CHART_JS "/usr/share/javascript/chart.js/chart.min.js"

typedef struct dash {
    const char *db_path;
    sqlite3 *db;
    int port; /* the bound port, for the Host check */
} dash;

/* The status as `bora runs` shows it: a "running" run whose process is gone on this host died. */
static const char *live_status(const char *status, const char *hostname, long long pid)
{
    if (!status)
        return "?";
    if (strcmp(status, "running") != 0)
        return status;
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !hostname || strcmp(host, hostname) != 0)
        return "running";
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
        return "died";
    return "running";
}

static const char *col(sqlite3_stmt *q, int i)
{
    const unsigned char *t = sqlite3_column_text(q, i);
    return t ? (const char *)t : NULL;
}

static json_object *col_json(sqlite3_stmt *q, int i)
{
    switch (sqlite3_column_type(q, i)) {
    case SQLITE_NULL: return NULL;
    case SQLITE_INTEGER: return json_object_new_int64(sqlite3_column_int64(q, i));
    case SQLITE_FLOAT: {
        double v = sqlite3_column_double(q, i);
        return isfinite(v) ? json_object_new_double(v) : NULL;
    }
    default: return json_object_new_string(col(q, i));
    }
}

static int open_db(const char *path, sqlite3 **db)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        size_t len = strlen(path);
        bora_log(BORA_LOG_ERROR,
                 "dashboard: %s is a directory; --db takes the database file, e.g. %s%sbora.db",
                 path, path, len && path[len - 1] == '/' ? "" : "/");
        return 1;
    }
    if (access(path, F_OK) != 0) {
        bora_log(BORA_LOG_ERROR,
                 "dashboard: no run database at %s (runs are recorded there by the sqlite "
                 "tracker, the default; --db PATH serves another)",
                 path);
        return 1;
    }
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        bora_log(BORA_LOG_ERROR, "dashboard: cannot open %s: %s", path, sqlite3_errmsg(*db));
        return 1;
    }
    sqlite3_busy_timeout(*db, 5000);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(*db, "SELECT value FROM meta WHERE key = 'schema'", -1, &q, NULL) !=
            SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW) {
        bora_log(BORA_LOG_ERROR,
                 "dashboard: %s is not a bora run database (%s); --db names the file the sqlite "
                 "tracker writes",
                 path, sqlite3_errmsg(*db));
        sqlite3_finalize(q);
        return 1;
    }
    sqlite3_finalize(q);
    return 0;
}

/* Hand a JSON object to the connection (and free it). */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned code, json_object *o)
{
    const char *text =
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    json_object_put(o);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json; charset=utf-8");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
    BORA_PRINTF(3, 4);
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_object *o = json_object_new_object();
    json_object_object_add(o, "error", json_object_new_string(msg));
    return send_json(c, code, o);
}

static enum MHD_Result send_db_error(dash *d, struct MHD_Connection *c)
{
    return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "%s: %s", d->db_path, sqlite3_errmsg(d->db));
}

static enum MHD_Result api_runs(dash *d, struct MHD_Connection *c)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT id, model, status, started, updated, ended, num_train_steps,"
                           " last_step, last_loss, hostname, pid FROM runs ORDER BY started",
                           -1, &q, NULL) != SQLITE_OK)
        return send_db_error(d, c);
    json_object *o = json_object_new_object(), *runs = json_object_new_array();
    json_object_object_add(o, "db", json_object_new_string(d->db_path));
    json_object_object_add(o, "runs", runs);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        json_object *r = json_object_new_object();
        static const char *const names[] = {"id",       "model", "status",          "started",
                                            "updated",  "ended", "num_train_steps", "last_step",
                                            "last_loss"};
        for (int i = 0; i < 9; i++)
            json_object_object_add(r, names[i], col_json(q, i));
        json_object_object_add(r, "status",
                               json_object_new_string(live_status(
                                   col(q, 2), col(q, 9), (long long)sqlite3_column_int64(q, 10))));
        json_object_array_add(runs, r);
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        json_object_put(o);
        return send_db_error(d, c);
    }
    return send_json(c, MHD_HTTP_OK, o);
}

/* 0 when the run exists, else an answer has been queued in *ret. */
static int need_run(dash *d, struct MHD_Connection *c, const char *run, enum MHD_Result *ret)
{
    if (!run || !*run) {
        *ret = send_error(c, MHD_HTTP_BAD_REQUEST,
                          "give the run: ?run=ID (GET /api/runs lists "
                          "them)");
        return 1;
    }
    sqlite3_stmt *q = NULL;
    int rc = SQLITE_ERROR;
    if (sqlite3_prepare_v2(d->db, "SELECT 1 FROM runs WHERE id = ?1", -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, run, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(q);
    }
    sqlite3_finalize(q);
    if (rc == SQLITE_ROW)
        return 0;
    *ret = rc == SQLITE_DONE
               ? send_error(c, MHD_HTTP_NOT_FOUND, "no run '%s' in %s", run, d->db_path)
               : send_db_error(d, c);
    return 1;
}

/* Keep at most max points of each metric: every k-th, and always the last (the live end). */
static void thin(json_object *metrics, size_t max)
{
    json_object_object_foreach(metrics, name, points)
    {
        size_t n = json_object_array_length(points);
        if (n <= max)
            continue;
        size_t every = (n + max - 2) / (max - 1); /* (max - 1) strided points, then the last */
        json_object *kept = json_object_new_array();
        for (size_t i = 0; i + 1 < n; i += every)
            json_object_array_add(kept, json_object_get(json_object_array_get_idx(points, i)));
        json_object_array_add(kept, json_object_get(json_object_array_get_idx(points, n - 1)));
        json_object_object_add(metrics, name, kept);
    }
}

static enum MHD_Result api_metrics(dash *d, struct MHD_Connection *c)
{
    const char *run = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "run");
    const char *since_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
    const char *max_s = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "max_points");
    int64_t since = -1, max_points = MAX_POINTS;
    if (since_s && *since_s && bora_parse_int(since_s, &since))
        return send_error(c, MHD_HTTP_BAD_REQUEST,
                          "since: '%s' is not a step (give a whole number; -1 for all)", since_s);
    if (max_s && *max_s &&
        (bora_parse_int(max_s, &max_points) || max_points < 2 || max_points > MAX_POINTS))
        return send_error(c, MHD_HTTP_BAD_REQUEST,
                          "max_points: '%s' is not a number of points from 2 to %d", max_s,
                          MAX_POINTS);
    enum MHD_Result ret;
    if (need_run(d, c, run, &ret))
        return ret;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT name, step, value FROM metrics WHERE run = ?1 AND step > ?2"
                           " ORDER BY name, step",
                           -1, &q, NULL) != SQLITE_OK)
        return send_db_error(d, c);
    sqlite3_bind_text(q, 1, run, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(q, 2, since);
    json_object *o = json_object_new_object(), *metrics = json_object_new_object();
    int64_t last = since;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *name = col(q, 0);
        if (!name)
            continue;
        json_object *cur = NULL;
        if (!json_object_object_get_ex(metrics, name, &cur)) {
            cur = json_object_new_array();
            json_object_object_add(metrics, name, cur);
        }
        int64_t step = sqlite3_column_int64(q, 1);
        json_object *pair = json_object_new_array();
        json_object_array_add(pair, json_object_new_int64(step));
        json_object_array_add(pair, col_json(q, 2));
        json_object_array_add(cur, pair);
        if (step > last)
            last = step;
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE) {
        json_object_put(o);
        json_object_put(metrics);
        return send_db_error(d, c);
    }
    thin(metrics, (size_t)max_points);
    json_object_object_add(o, "run", json_object_new_string(run));
    json_object_object_add(o, "since", json_object_new_int64(since));
    json_object_object_add(o, "last_step", json_object_new_int64(last));
    json_object_object_add(o, "metrics", metrics);
    return send_json(c, MHD_HTTP_OK, o);
}

static enum MHD_Result api_run(dash *d, struct MHD_Connection *c)
{
    const char *run = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "run");
    enum MHD_Result ret;
    if (need_run(d, c, run, &ret))
        return ret;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(d->db,
                           "SELECT id, model, status, started, updated, ended, num_train_steps,"
                           " last_step, last_loss, hostname, pid, config, environment"
                           " FROM runs WHERE id = ?1",
                           -1, &q, NULL) != SQLITE_OK)
        return send_db_error(d, c);
    sqlite3_bind_text(q, 1, run, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) != SQLITE_ROW) {
        sqlite3_finalize(q);
        return send_db_error(d, c);
    }
    json_object *o = json_object_new_object();
    static const char *const names[] = {
        "id",        "model",     "status",   "started", "updated", "ended", "num_train_steps",
        "last_step", "last_loss", "hostname", "pid"};
    for (int i = 0; i < 11; i++)
        json_object_object_add(o, names[i], col_json(q, i));
    json_object_object_add(o, "status",
                           json_object_new_string(live_status(
                               col(q, 2), col(q, 9), (long long)sqlite3_column_int64(q, 10))));
    /* config and environment are JSON text as the tracker received them */
    json_object_object_add(o, "config", col(q, 11) ? json_tokener_parse(col(q, 11)) : NULL);
    json_object_object_add(o, "environment", col(q, 12) ? json_tokener_parse(col(q, 12)) : NULL);
    sqlite3_finalize(q);
    json_object *summary = json_object_new_object();
    json_object_object_add(o, "summary", summary);
    if (sqlite3_prepare_v2(d->db, "SELECT name, value FROM summary WHERE run = ?1 ORDER BY name",
                           -1, &q, NULL) == SQLITE_OK) {
        sqlite3_bind_text(q, 1, run, -1, SQLITE_TRANSIENT);
        while (sqlite3_step(q) == SQLITE_ROW)
            if (col(q, 0))
                json_object_object_add(summary, col(q, 0), col_json(q, 1));
    }
    sqlite3_finalize(q);
    return send_json(c, MHD_HTTP_OK, o);
}

static enum MHD_Result send_static(struct MHD_Connection *c, const char *body, size_t len,
                                   const char *type)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* Chart.js from where libjs-chart.js installs it. */
static enum MHD_Result send_chart_js(struct MHD_Connection *c)
{
    int fd = open(CHART_JS, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        if (fd >= 0)
            close(fd);
        static const char missing[] =
            "document.title = 'bora dashboard: " CHART_JS " is missing (apt-get install "
            "libjs-chart.js)';";
        return send_static(c, missing, sizeof missing - 1, "text/javascript");
    }
    struct MHD_Response *r = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
    if (!r) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/javascript");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Cache-Control", "max-age=3600");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls)
{
    (void)version, (void)upload, (void)con_cls;
    dash *d = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "%s: only GET is served", method);
    if (*upload_size)
        return MHD_NO;
    /* A page from another site can point a name it controls at 127.0.0.1 (DNS rebinding) and
     * read the answers as its own; its requests carry that name as Host, ours do not. */
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    char local[64], name[64];
    snprintf(local, sizeof local, "127.0.0.1:%d", d->port);
    snprintf(name, sizeof name, "localhost:%d", d->port);
    if (!host || (strcmp(host, local) != 0 && strcasecmp(host, name) != 0))
        return send_error(c, MHD_HTTP_FORBIDDEN,
                          "Host '%s' is not this dashboard: open http://%s/ (or localhost)",
                          host ? host : "", local);
    if (!strcmp(url, "/") || !strcmp(url, "/index.html"))
        return send_static(c, (const char *)dashboard_page, sizeof dashboard_page - 1,
                           "text/html; charset=utf-8");
    if (!strcmp(url, "/chart.js"))
        return send_chart_js(c);
    if (!strcmp(url, "/api/runs"))
        return api_runs(d, c);
    if (!strcmp(url, "/api/metrics"))
        return api_metrics(d, c);
    if (!strcmp(url, "/api/run"))
        return api_run(d, c);
    return send_error(c, MHD_HTTP_NOT_FOUND,
                      "no page %s (the page is /, the data /api/runs, /api/metrics?run=ID&since=N "
                      "and /api/run?run=ID)",
                      url);
}

/* A listening socket on 127.0.0.1:port (0: any free port), so a port in use is reported with
 * its reason before the server starts; *bound gets the port. */
static int listen_local(int64_t port, int *bound)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        bora_log(BORA_LOG_ERROR, "dashboard: cannot make a socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        bora_log(BORA_LOG_ERROR, "dashboard: cannot listen on 127.0.0.1:%lld: %s%s",
                 (long long)port, strerror(e),
                 e == EADDRINUSE ? " (another program has it; --port N picks another, --port 0 "
                                   "any free one)"
                 : e == EACCES   ? " (ports below 1024 need privileges; --port N picks another)"
                                 : "");
        close(fd);
        return -1;
    }
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    *bound = ntohs(a.sin_port);
    return fd;
}

int bora_cmd_dashboard(const bora_cli *cli)
{
    const char *db_path = DEFAULT_DB;
    int64_t port = DEFAULT_PORT;
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        if (!strcmp(a, "--db") || !strncmp(a, "--db=", 5)) {
            db_path = a[4] == '=' ? a + 5 : (i + 1 < cli->argc ? cli->argv[++i] : NULL);
            if (!db_path || !*db_path) {
                bora_log(BORA_LOG_ERROR, "dashboard: --db needs the database file (e.g. --db %s)",
                         DEFAULT_DB);
                return 2;
            }
        } else if (!strcmp(a, "--port") || !strncmp(a, "--port=", 7)) {
            const char *v = a[6] == '=' ? a + 7 : (i + 1 < cli->argc ? cli->argv[++i] : "");
            if (bora_parse_int(v, &port) || port < 0 || port > 65535) {
                bora_log(BORA_LOG_ERROR,
                         "dashboard: --port: '%s' is not a port (give 1..65535, or 0 for any "
                         "free one)",
                         v);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            static const char *const known[] = {"--db", "--port", BORA_CLI_GLOBAL_OPTIONS, NULL};
            return bora_cli_unknown_option("dashboard", a, known);
        } else {
            bora_log(BORA_LOG_ERROR,
                     "dashboard: unexpected argument '%s' (bora dashboard [--db PATH] [--port N])",
                     a);
            return 2;
        }
    }
    dash d = {.db_path = db_path};
    if (open_db(db_path, &d.db)) {
        sqlite3_close(d.db);
        return 1;
    }
    if (access(CHART_JS, R_OK) != 0)
        bora_log(BORA_LOG_WARN,
                 "dashboard: %s is missing: the page will list runs but draw no curves "
                 "(apt-get install libjs-chart.js)",
                 CHART_JS);
    int bound = 0, fd = listen_local(port, &bound);
    if (fd < 0) {
        sqlite3_close(d.db);
        return 1;
    }
    d.port = bound;
    /* SIGINT and SIGTERM are taken by sigwait below: blocked before the server's thread starts,
     * so that thread inherits the mask and only this one sees them */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    struct MHD_Daemon *mhd =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, NULL, NULL, handle, &d,
                         MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_END);
    if (!mhd) {
        bora_log(BORA_LOG_ERROR, "dashboard: the HTTP server did not start on 127.0.0.1:%d", bound);
        close(fd);
        sqlite3_close(d.db);
        return 1;
    }
    printf("bora dashboard: %s at http://127.0.0.1:%d/ (Ctrl-C stops)\n", db_path, bound);
    fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    MHD_stop_daemon(mhd);
    close(fd);
    sqlite3_close(d.db);
    return 0;
}
