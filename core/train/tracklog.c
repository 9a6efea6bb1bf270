/* core/train/tracklog.c — the logging thread (see tracklog.h). */
#include "tracklog.h"

#include "../util/log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { EV_HPARAMS, EV_ENVIRONMENT, EV_LOG, EV_SUMMARY, EV_ARTIFACT, EV_FLUSH, EV_FINISH, EV_KINDS };

typedef struct event {
    struct event *next;
    int kind;
    int64_t step;
    int32_t status;
    size_t n;
    bora_metric *m; /* names point into text */
    char *text;     /* hparams/environment JSON, metric names, or path\0name\0type */
    const char *s2, *s3;
    int *done; /* EV_FLUSH: set under the lock when delivered */
} event;

struct bora_tracklog {
    const bora_tracklog_entry *trackers;
    size_t n_trackers;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv, flushed;
    event *head, *tail;
    size_t queued;
    event *finish;           /* allocated up front: finishing never fails for want of memory */
    int failed[8][EV_KINDS]; /* a failure is reported once per tracker and call kind */
};

static const char *const kind_names[EV_KINDS] = {
    "log_hparams", "log_environment", "log", "log_summary", "log_artifact", "flush", "finish"};

static void report(bora_tracklog *l, size_t i, int kind)
{
    if (i < 8 && l->failed[i][kind]++)
        return;
    bora_log(BORA_LOG_WARN, "tracker %s: %s failed: %s", l->trackers[i].name, kind_names[kind],
             bora_error_get());
}

static void deliver(bora_tracklog *l, const event *e)
{
    for (size_t i = 0; i < l->n_trackers; i++) {
        const bora_tracker_ops *ops = l->trackers[i].ops;
        bora_tracker *t = l->trackers[i].t;
        bora_status st = BORA_OK;
        switch (e->kind) {
        case EV_HPARAMS:
            if (ops->log_hparams)
                st = ops->log_hparams(t, e->text);
            break;
        case EV_ENVIRONMENT:
            if (ops->log_environment) /* the registry's copy: NULL from an ABI 1.0 plugin */
                st = ops->log_environment(t, e->text);
            break;
        case EV_LOG: st = ops->log(t, e->step, e->m, e->n); break;
        case EV_SUMMARY:
            if (ops->log_summary)
                st = ops->log_summary(t, e->m, e->n);
            break;
        case EV_ARTIFACT:
            if (ops->log_artifact)
                st = ops->log_artifact(t, e->text, e->s2, e->s3);
            break;
        case EV_FLUSH:
            if (ops->flush)
                st = ops->flush(t);
            break;
        default:
            if (ops->finish)
                st = ops->finish(t, e->status);
            break;
        }
        if (st != BORA_OK)
            report(l, i, e->kind);
    }
}

static void *run(void *arg)
{
    bora_tracklog *l = arg;
    /* The lowest priority (nice 19, this thread only): on a small machine the logging thread
     * must not stall the compute threads' barriers, yet it keeps a small share of a busy CPU
     * where SCHED_IDLE would starve it and let calls pile up. */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    for (;;) {
        pthread_mutex_lock(&l->mu);
        while (!l->head)
            pthread_cond_wait(&l->cv, &l->mu);
        event *e = l->head;
        l->head = e->next;
        if (!l->head)
            l->tail = NULL;
        pthread_mutex_unlock(&l->mu);
        deliver(l, e);
        int done = e->kind == EV_FINISH;
        int *flushed = e->done;
        free(e->m);
        free(e->text);
        free(e);
        pthread_mutex_lock(&l->mu);
        l->queued--;
        if (flushed) {
            *flushed = 1;
            pthread_cond_broadcast(&l->flushed);
        }
        pthread_mutex_unlock(&l->mu);
        if (done)
            return NULL;
    }
}

bora_status bora_tracklog_start(const bora_tracklog_entry *trackers, size_t n, bora_tracklog **out)
{
    *out = NULL;
    bora_tracklog *l = calloc(1, sizeof *l);
    if (!l)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    l->trackers = trackers;
    l->n_trackers = n;
    l->finish = calloc(1, sizeof *l->finish);
    if (!l->finish) {
        free(l);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    l->finish->kind = EV_FINISH;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    pthread_cond_init(&l->flushed, NULL);
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        pthread_cond_destroy(&l->flushed);
        free(l->finish);
        free(l);
        return bora_error_set(BORA_ERR_IO, "cannot start the logging thread");
    }
    *out = l;
    return BORA_OK;
}

static void push(bora_tracklog *l, event *e)
{
    pthread_mutex_lock(&l->mu);
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
    l->queued++;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* An event with a copy of n metrics (names included); NULL when out of memory. */
static event *with_metrics(int kind, const bora_metric *m, size_t n)
{
    size_t names = 0;
    for (size_t i = 0; i < n; i++)
        names += strlen(m[i].name) + 1;
    event *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->kind = kind;
    e->n = n;
    e->m = malloc(sizeof *e->m * (n ? n : 1));
    e->text = malloc(names ? names : 1);
    if (!e->m || !e->text) {
        free(e->m);
        free(e->text);
        free(e);
        return NULL;
    }
    char *p = e->text;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(m[i].name) + 1;
        memcpy(p, m[i].name, len);
        e->m[i].name = p;
        e->m[i].value = m[i].value;
        p += len;
    }
    return e;
}

static void lost(const char *what)
{
    bora_log(BORA_LOG_WARN, "trackers: out of memory, %s not logged", what);
}

static void push_text(bora_tracklog *l, int kind, const char *text)
{
    if (!l)
        return;
    event *e = calloc(1, sizeof *e);
    if (!e || !(e->text = strdup(text ? text : "{}"))) {
        free(e);
        lost(kind_names[kind]);
        return;
    }
    e->kind = kind;
    push(l, e);
}

void bora_tracklog_hparams(bora_tracklog *l, const char *config_json)
{
    push_text(l, EV_HPARAMS, config_json);
}

void bora_tracklog_environment(bora_tracklog *l, const char *environment_json)
{
    push_text(l, EV_ENVIRONMENT, environment_json);
}

void bora_tracklog_log(bora_tracklog *l, int64_t step, const bora_metric *m, size_t n)
{
    if (!l)
        return;
    event *e = with_metrics(EV_LOG, m, n);
    if (!e) {
        lost("a step's metrics");
        return;
    }
    e->step = step;
    push(l, e);
}

void bora_tracklog_summary(bora_tracklog *l, const bora_metric *m, size_t n)
{
    if (!l)
        return;
    event *e = with_metrics(EV_SUMMARY, m, n);
    if (!e) {
        lost("the summary");
        return;
    }
    push(l, e);
}

void bora_tracklog_artifact(bora_tracklog *l, const char *path, const char *name, const char *type)
{
    if (!l)
        return;
    size_t a = strlen(path) + 1, b = strlen(name) + 1, c = strlen(type) + 1;
    event *e = calloc(1, sizeof *e);
    if (!e || !(e->text = malloc(a + b + c))) {
        free(e);
        lost("an artifact");
        return;
    }
    memcpy(e->text, path, a);
    memcpy(e->text + a, name, b);
    memcpy(e->text + a + b, type, c);
    e->s2 = e->text + a;
    e->s3 = e->text + a + b;
    e->kind = EV_ARTIFACT;
    push(l, e);
}

size_t bora_tracklog_flush(bora_tracklog *l)
{
    if (!l)
        return 0;
    int done = 0;
    event *e = calloc(1, sizeof *e);
    if (!e) {
        lost("a flush");
        return 0;
    }
    e->kind = EV_FLUSH;
    e->done = &done;
    pthread_mutex_lock(&l->mu);
    size_t backlog = l->queued;
    pthread_mutex_unlock(&l->mu);
    push(l, e);
    pthread_mutex_lock(&l->mu);
    while (!done)
        pthread_cond_wait(&l->flushed, &l->mu);
    pthread_mutex_unlock(&l->mu);
    return backlog;
}

void bora_tracklog_finish(bora_tracklog *l, int32_t status)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    size_t backlog = l->queued;
    pthread_mutex_unlock(&l->mu);
    if (backlog > 4)
        bora_log(BORA_LOG_INFO, "trackers: %zu calls still to make, waiting for them", backlog);
    l->finish->status = status;
    push(l, l->finish);
    pthread_join(l->thread, NULL); /* the thread frees the finish event */
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pthread_cond_destroy(&l->flushed);
    free(l);
}
