/* plugins/trackers/wandb/wandb.h — what the tracker (wandb.c) and its sender thread (send.c)
 * share: the run's spool on disk and the state both threads read under one lock.
 *
 * The spool, in `dir` (runs/{run_id}/wandb by default), is the source of truth:
 *   run.json       the UpsertBucket variables (entity, project, name, config, tags, ...) and
 *                  the base URL; rewritten when the configuration arrives
 *   history.jsonl  one W&B history line per step ({metrics..., "_step", "_runtime",
 *                  "_timestamp"}); line k is file_stream offset k
 *   summary.json   the run's summary (the last value of every metric, and log_summary's)
 *   state          what the server has acknowledged: "sent N" history lines, "summary 1"
 *                  once it holds the summary as summary.json has it, "exitcode E" once the
 *                  run ended, "complete 1" once the server was told
 * The sender posts only what the server has not acknowledged, at the offsets the spool gives,
 * so a line resent after a lost answer lands on the same offset and is never counted twice. */
#ifndef BORA_WANDB_H
#define BORA_WANDB_H

#include <bora/tracker.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Metric names and values, one value per name. */
typedef struct wandb_values {
    char **names;
    double *values;
    size_t n, cap;
} wandb_values;

typedef struct wandb {
    const bora_host *h;
    char dir[4096], run_id[256];
    char base_url[1024], api_key[256];
    double timeout_s, finish_timeout_s;
    int offline, disabled, sync;

    FILE *history;       /* appended by the logging thread */
    int lock_fd;         /* dir/lock, held while this tracker writes the spool; -1 none */
    int64_t loaded_step; /* the last step the spool held when the tracker started; -1 none */
    int64_t last_step;   /* the last step written to the spool; -1 when none */
    int skipped_reported;
    double runtime_base_s, started_s; /* _runtime continues across resumes */
    off_t sent_bytes;                 /* where line `sent` starts in history.jsonl, at load */

    /* The step being logged: calls for the same step (train metrics, then eval) merge into
     * one history line, written when a later step arrives or at flush. */
    int64_t row_step; /* -1 when none */
    double row_runtime_s, row_stamp_s;
    wandb_values row;

    wandb_values sum; /* the summary: each metric's latest value */

    /* Under mu, shared with the sender. */
    pthread_mutex_t mu;
    pthread_cond_t wake, progress;
    int64_t spooled, sent; /* history lines written / acknowledged */
    int64_t upsert_gen, upserted;
    int32_t exitcode, ended; /* ended: finish() recorded exitcode */
    int completed;           /* the server has {"complete": true} */
    int stop;                /* the sender must return now */
    int gave_up;             /* a refusal that retrying cannot mend (401, 404) */
    char *summary_text;      /* the summary line to send with history, or NULL */
    int64_t summary_gen;     /* bumped each time summary_text changes */
    int64_t summary_acked;   /* the generation the server has taken */
    char entity[256], project[256], wandb_id[256]; /* the file_stream path */
    char last_error[512];
    int sender_running;
    pthread_t sender;
} wandb;

/* Whether the server lacks the current summary; call with mu held. */
static inline int wandb_summary_dirty(const wandb *w)
{
    return w->summary_acked != w->summary_gen;
}

/* The sender thread: posts the spool until stop (send.c). */
void *wandb_sender_main(void *arg);

/* Write state atomically (tmp + rename); call with mu held. */
int wandb_state_write(wandb *w, int durable);

/* Join dir and name into buf. */
void wandb_path(const wandb *w, const char *name, char *buf, size_t cap);

#endif
