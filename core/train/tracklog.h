/* core/train/tracklog.h — the trackers of a run, called from one logging thread.
 *
 * The training loop hands each call over (copied) and goes on; the thread makes the calls in
 * order, so a slow tracker never slows a step and nothing is dropped: finish waits until every
 * queued call has been made. A tracker's failed call is reported once per tracker and call
 * kind, then the run goes on. */
#ifndef BORA_TRACKLOG_H
#define BORA_TRACKLOG_H

#include <bora/tracker.h>

typedef struct bora_tracklog bora_tracklog;

/* One opened tracker: its ops, instance and name (for messages). */
typedef struct bora_tracklog_entry {
    const bora_tracker_ops *ops;
    bora_tracker *t;
    const char *name;
} bora_tracklog_entry;

/* Start the thread over n opened trackers (borrowed until bora_tracklog_finish returns). */
bora_status bora_tracklog_start(const bora_tracklog_entry *trackers, size_t n, bora_tracklog **out);
void bora_tracklog_hparams(bora_tracklog *l, const char *config_json);
/* The run's environment (host and plugin versions and hashes, CPU, threads, git commit), JSON;
 * to trackers that take it (log_environment, ABI 1.1). */
void bora_tracklog_environment(bora_tracklog *l, const char *environment_json);
void bora_tracklog_log(bora_tracklog *l, int64_t step, const bora_metric *m, size_t n);
void bora_tracklog_summary(bora_tracklog *l, const bora_metric *m, size_t n);
void bora_tracklog_artifact(bora_tracklog *l, const char *path, const char *name, const char *type);
/* Wait until every call queued so far has been made, then flush each tracker that can (ABI
 * 1.1): what was logged is durable. Returns how many calls were queued when it was called. */
size_t bora_tracklog_flush(bora_tracklog *l);
/* Queue finish(status), wait for every call to be made, stop the thread and free l. Says how
 * many calls are still queued when that is more than a few. NULL does nothing. */
void bora_tracklog_finish(bora_tracklog *l, int32_t status);

#endif
