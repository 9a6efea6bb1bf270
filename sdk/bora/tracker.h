/* bora/tracker.h — experiment trackers (Levanter's five calls).
 *
 * The host calls trackers from a logging thread, so a slow tracker never stalls a training
 * step; a tracker that talks to a server should spool to disk and retry so nothing is lost.
 * A worked example, a complete tracker plugin that prints the loss:
 *
 *     #include <bora/tracker.h>
 *
 *     #include <string.h>
 *
 *     typedef struct { const bora_host *h; } printer;
 *
 *     static bora_status printer_create(const bora_host *h, const bora_config *cfg,
 *                                       const char *run_id, bora_tracker **out)
 *     {
 *         (void)cfg;
 *         (void)run_id;
 *         printer *p = h->alloc(h, sizeof *p, 16);
 *         if (!p)
 *             return h->fail(h, BORA_ERR_NOMEM, "out of memory");
 *         p->h = h;
 *         *out = (bora_tracker *)p;
 *         return BORA_OK;
 *     }
 *     static bora_status printer_log(bora_tracker *t, int64_t step, const bora_metric *m,
 *                                    size_t n)
 *     {
 *         printer *p = (printer *)t;
 *         for (size_t i = 0; i < n; i++)
 *             if (strcmp(m[i].name, "train/loss") == 0)
 *                 BORA_INFO(p->h, "step %lld loss %.4f", (long long)step, m[i].value);
 *         return BORA_OK;
 *     }
 *     static void printer_destroy(bora_tracker *t)
 *     {
 *         printer *p = (printer *)t;
 *         p->h->free(p->h, p);
 *     }
 *     static const bora_tracker_ops printer_ops = {
 *         .hdr = BORA_COMPONENT(bora_tracker_ops, BORA_KIND_TRACKER, "printer", "prints loss"),
 *         .create = printer_create,
 *         .log = printer_log,
 *         .destroy = printer_destroy,
 *     };
 *     static bora_status printer_init(const bora_host *h)
 *     {
 *         return h->add(h, &printer_ops.hdr);
 *     }
 *     BORA_PLUGIN_DEFINE("printer", "1.0.0", printer_init, NULL)
 */
#ifndef BORA_TRACKER_H
#define BORA_TRACKER_H

#include <bora/host.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bora_tracker bora_tracker; /* a tracker instance; owned by its plugin */

/* One named value, e.g. {"train/loss", 3.21}. Names are borrowed for the call. */
typedef struct bora_metric {
    const char *name;
    double value;
} bora_metric;

/* How a run ended, for finish(). */
typedef enum bora_run_status {
    BORA_RUN_FINISHED = 1,
    BORA_RUN_FAILED = 2,
    BORA_RUN_KILLED = 3
} bora_run_status;

typedef struct bora_tracker_ops {
    bora_component hdr;

    /* Open the tracker for a run (trainer.tracker entry as cfg). */
    bora_status (*create)(const bora_host *h, const bora_config *cfg, const char *run_id,
                          bora_tracker **out);
    /* (optional) The run's fully resolved configuration, as JSON text. */
    bora_status (*log_hparams)(bora_tracker *t, const char *config_json);
    /* Metrics of one step. */
    bora_status (*log)(bora_tracker *t, int64_t step, const bora_metric *metrics, size_t n);
    /* (optional) Final or summary values (best eval loss, total tokens). */
    bora_status (*log_summary)(bora_tracker *t, const bora_metric *metrics, size_t n);
    /* (optional) A file produced by the run: a checkpoint, a sample, a plot. */
    bora_status (*log_artifact)(bora_tracker *t, const char *path, const char *name,
                                const char *type);
    /* (optional) The run ended with status (a bora_run_status); flush everything. */
    bora_status (*finish)(bora_tracker *t, int32_t status);
    /* Free the instance. Called after finish(), or alone when the run never started. */
    void (*destroy)(bora_tracker *t);

    /* (optional, ABI 1.1) Where the run ran, as JSON text: {"record": what checkpoints record
     * (host version and hash, CPU, ISA, backend and threads, each plugin's version and hash,
     * data hash), "hostname", "pid", "cwd", "git": {"commit", "dirty"} of the working
     * directory or null}. Called once, after log_hparams. */
    bora_status (*log_environment)(bora_tracker *t, const char *environment_json);
    /* (optional, ABI 1.1) Make everything logged so far durable (commit a transaction, write out
     * a buffer): a process killed after it returns has lost none of it. Called before each
     * checkpoint is saved, so a run resumed from a checkpoint at step N has every step up to N
     * logged. */
    bora_status (*flush)(bora_tracker *t);
} bora_tracker_ops;

#ifdef __cplusplus
}
#endif
#endif /* BORA_TRACKER_H */
