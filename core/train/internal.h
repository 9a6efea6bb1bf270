/* core/train/internal.h — the trainer's state, shared by the files of core/train: trainer.c
 * (building and the loop), settings.c (the configuration's keys), resume.c (checkpoints: what
 * they record, saving, resuming) and data.c (the loaders and `bora cache`). */
#ifndef BORA_CORE_TRAIN_INTERNAL_H
#define BORA_CORE_TRAIN_INTERNAL_H

#include "../data/loader.h"
#include "../data/tokenizer.h"
#include "../graph/graph.h"
#include "../plugin/registry.h"
#include "apply.h"
#include "eval.h"
#include "groups.h"
#include "hessian.h"
#include "model_metrics.h"
#include "schedule.h"
#include "tracklog.h"
#include "trainer.h"
#include <stdio.h>

typedef struct keep_rule {
    int64_t every, until; /* until < 0: forever */
} keep_rule;

typedef struct trainer {
    bora_cfg *cfg;
    bora_registry *reg;
    /* settings */
    int64_t steps, batch, micro, seed;
    int crash_on_nan;
    bora_mp mp; /* trainer.mp: the compute and residual stream dtypes */
    const char *run_id, *base_path, *load_checkpoint;
    const char *hf_dir; /* trainer.initialize_from_hf, or bora eval --hf: a Hugging Face folder */
    char run_dir[4096], id_buf[64];
    double save_interval, max_grad_norm;
    keep_rule *keep;
    size_t n_keep;
    bora_schedule sched;
    /* components */
    const bora_entry *be_entry, *model_entry, *opt_entry;
    bora_backend *be;
    bora_model *model;
    bora_optimizer *opt;
    bora_opt_groups groups; /* optimizer.groups: who updates which parameter */
    g_store *store;
    g_graph *train;
    bora_eval *eval;              /* when there is a validation set */
    struct bora_transcriber *wer; /* bora eval of an audio model: greedy transcription */
    int64_t wer_clips; /* bora eval --max-clips, trainer.eval_wer_clips: -1 all, 0 none */
    bora_apply apply;
    int apply_built;
    bora_hessian hess; /* the optimizer's second-order estimate, when it asks for one */
    int hess_built;
    bora_metric step_metrics[2 * TR_MAX_METRICS + 1]; /* the optimizer's, this step */
    tr_model_metrics model_metrics;                   /* the model's (bora_graph_api.metric) */
    size_t n_step_metrics;
    bora_tokenizer *tok;
    bora_loader *loader, *val;
    int64_t steps_per_eval, max_eval_batches;
    int has_val, has_val_urls, eval_only;
    int64_t held_out;       /* data.validation_windows, when there are no validation_urls */
    double wait_s;          /* the last step's wait for its batch */
    double flops_per_token; /* 6N + 12 L d T */
    double peak_gflops;     /* the backend's measured peak, 0 if unknown */
    bora_eval_result last_eval;
    int live, line_open; /* stdout is a terminal: one progress line redrawn in place */
    bora_tracklog_entry *trackers;
    size_t n_trackers;
    bora_tracklog *log;
    /* one step's rows */
    int64_t seq_len;
    int32_t *ids, *targets, *segs;
    float *feats;    /* an audio model's: the step's clips' features, (batch, mel, frame) */
    size_t feat_row; /* floats per row of them */
    /* what a checkpoint records */
    char *config_json, *record_json; /* the record without the data's digest */
    char *determinism_json;          /* with it: made at the first save or a resume */
    int force;
    /* data parallel (parallel.c): this process's rank of world (1: a plain run) */
    int rank, world;
    int dp_stop;         /* a rank was interrupted: every rank stops after this step */
    bora_buffer *dp_acc; /* this rank's slice of the step's summed gradients */
    void *dp_zero;       /* zeros, the slice's bytes */
    size_t dp_count;     /* the gradient block's f32 elements */
    double *dp_rows;     /* the step's per-micro-batch loss and metrics, of every rank */
    double dp_comm_s;    /* the last step's time in the gradients' collectives */
    /* trainer.shard_optimizer (zero.c): whether this run shards the optimizer (several
     * processes), who owns each parameter, and where each rank's parameters start */
    int shard, zero;
    unsigned char *zero_owned; /* per parameter: this rank's */
    int *zero_owner;           /* per parameter: its rank */
    size_t *zero_bounds;       /* world + 1 byte offsets: rank r's parameters are [b_r, b_r+1) */
    size_t *zero_nsq;          /* per rank: its trainable parameters (norm parts) */
    size_t *zero_local;        /* per parameter: its index among its rank's trainable ones */
    double *zero_buf;          /* the step's gathered norm parts and reports */
    struct tr_report *zero_reports; /* every rank's reports, in one process's order */
    int64_t *zero_order;            /* ... as (rank, index) into zero_buf's reports */
    size_t zero_total_reports, zero_max_sq, zero_max_rep;
    int64_t cache_workers; /* bora cache --workers */
    int cache_rebuild;     /* bora cache --rebuild */
} trainer;

/* settings.c: check the configuration and read the settings; 0 when something was reported. */
int tr_configure(trainer *t, bora_config *root);
/* Whether the checkpoint of step stays (the last step, or a keep rule's). */
int tr_permanent(const trainer *t, int64_t step);

/* resume.c */
void tr_cpu_model(char *buf, size_t cap);
/* "key": "value" (and ", " when comma). */
void tr_json_kv(FILE *f, const char *key, const char *value, int comma);
/* What a checkpoint records of this run (host, plugins) and its configuration as JSON; the
 * digest of the data's content is added when first needed (tr_save, tr_restore). */
bora_status tr_make_record(trainer *t);
bora_status tr_save(trainer *t, int64_t step);
/* Resume from the run's latest checkpoint, or start from load_checkpoint, or from scratch.
 * *start gets the last step already done. */
bora_status tr_restore(trainer *t, int64_t *start);

/* data.c: the training loader and the validation one. */
bora_status tr_open_data(trainer *t, bora_config *root);

/* parallel.c: data parallel over the process group (core/dist), when world > 1 */
/* Check the run can be split (whole micro-batches per rank, a backend with collectives, no
 * second-order estimate) and join the backend to the group; after build. */
bora_status tr_dp_setup(trainer *t);
/* tr_open_data, rank 0 first: it builds the token caches while the others wait. */
bora_status tr_dp_open_data(trainer *t, bora_config *root);
/* Every rank takes rank 0's parameters and optimizer state (after rank 0's tr_restore; *start
 * becomes rank 0's). */
bora_status tr_dp_sync(trainer *t, int64_t *start);
/* One optimizer step of the group: this rank's micro-batches, the gradients summed in
 * micro-batch order, the apply graph. */
bora_status tr_dp_step(trainer *t, int64_t step, double lr, double *loss, double *norm);
void tr_dp_free(trainer *t);

/* zero.c: trainer.shard_optimizer over the process group */
/* Decide who owns which parameter and build the sharded apply graph (in build, before the store
 * is materialised); t->zero says whether the run shards. */
bora_status tr_zero_build(trainer *t);
/* After build: every rank's reports' places, the memory line. */
bora_status tr_zero_setup(trainer *t);
/* The step's apply: the norm from every rank's parts, this rank's update, the parameters
 * gathered; *norm and the optimizer metrics as one process would have them. */
bora_status tr_zero_apply(trainer *t, int64_t step, double lr, double *norm);
/* Around a checkpoint: rank 0 gets the whole state on the host (store->state_host) to save, or
 * to load into before tr_zero_scatter gives every rank its share. */
bora_status tr_zero_gather(trainer *t);
bora_status tr_zero_host_state(trainer *t);
bora_status tr_zero_scatter(trainer *t);
void tr_zero_free(trainer *t);
/* trainer.c: the backend, model and graphs (eval_only: the eval graph alone), the store
 * materialised. */
bora_status tr_build(trainer *t, bora_config *root);

/* wer_eval.c: the word error rate on audio validation clips (bora eval, and the trainer's
 * evaluations on rank 0). tr_wer_build builds the transcription graphs (before the store is
 * materialised; nothing for a text model or with wer_clips 0), tr_wer_run transcribes the clips
 * (the weights loaded). */
struct bora_wer;
bora_status tr_wer_build(trainer *t);
bora_status tr_wer_run(trainer *t, struct bora_wer *w, double *seconds);

/* trainer.c */
int tr_interrupted(void); /* Ctrl-C or SIGTERM came */
void tr_duration_text(double s, char *buf, size_t cap);
void tr_end_live_line(trainer *t);
void tr_teardown(trainer *t);

#endif
