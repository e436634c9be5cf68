/* The worker's training loop: one worker's part of a data-parallel job. Each
 * step pulls the weights, computes the gradient of its slice of the global
 * batch on the compute backend, and pushes it; the push of step t and the
 * pull of step t+1 travel together. Rank 0 also evaluates on the test set
 * after every epoch (and every --eval-every steps). A lost server is rejoined
 * at the job's current clock.
 *
 * Data sharding: every worker derives the same shuffled order for an epoch;
 * global batch t is elements [t*W*B, (t+1)*W*B) of it and worker r takes the
 * r-th slice of B. So W workers with batch B see exactly the samples that one
 * worker with batch W*B would, which is what makes sync mode comparable to a
 * single process.
 *
 * Lifecycle: ps_trainer_init (backend, data, connection to every server),
 * ps_trainer_run (every step, the last evaluation, the report), then
 * ps_trainer_free (says goodbye to the servers only after a finished run, so
 * a failed worker keeps its place and may be restarted). */
#ifndef PS_TRAINER_H
#define PS_TRAINER_H

#include <signal.h>
#include <stddef.h>

#include "model_desc.h"

typedef struct {
    /* The model, parsed but not resolved (copied): the trainer resolves it
     * against the data's sample shape and class count, which gives the
     * tensor table the servers are told in the handshake. */
    ps_model_desc desc;
    /* "host:port" in server-index order; the array and strings are borrowed
     * until ps_trainer_free. */
    const char *const *servers;
    int n_servers;
    int rank, workers, seed;
    int batch;  /* samples per step on this worker */
    int epochs; /* passes over the data */
    int steps;  /* stop after this many steps in all (0: every epoch) */
    /* The strings below are borrowed until ps_trainer_free; NULL: not used. */
    const char *data_dir;        /* the data (dataset.h) */
    const char *device;          /* "auto", "cpu" or "cuda" */
    const char *dump_weights;    /* write the final weights here */
    const char *save_model;      /* rank 0: write the trained model here (model_file.h) */
    const char *metrics_file;    /* JSON lines, see train_metrics.h */
    const char *auth_token_file; /* shared secret with the servers */
    int tf32;                    /* CUDA: TF32 matrix products */
    const char *precision;       /* "fp32" or "bf16" (CUDA only); NULL: fp32 */
    int threads;                 /* CPU: BLAS threads (0: the library's default) */
    int eval;                    /* evaluate on the test set (rank 0) */
    int eval_every;              /* also every N steps (0: once per epoch) */
    int report_fd;               /* the launcher's pipe (-1: log progress instead) */
    int progress_every;          /* a progress report every N steps */
    /* Steps to report the moment they are reached (the launcher's fault
     * drills), ascending; borrowed until ps_trainer_free. */
    const uint64_t *report_steps;
    int n_report_steps;
    int slow_ms;        /* wait this long every step (straggler experiments) */
    int max_reconnects; /* rejoin at most this many times */
    /* Stop once every chunk we pushed was refused for this many steps in a
     * row (0: never); a NaN or infinite loss stops the run at once. */
    int max_rejected_steps;
    /* Set (to the signal's number) by a SIGTERM/SIGINT handler: the run
     * stops at the end of the step in progress, so every server is left at
     * the same step boundary, where its checkpoint resumes exactly.
     * Borrowed; NULL: never. */
    volatile sig_atomic_t *stop;
    double clip_norm; /* per-tensor L2 clip (0: off) */
    size_t chunk_bytes, max_payload;
    double connect_timeout; /* seconds to keep trying to reach the servers */
    double request_timeout; /* seconds a server may owe an answer (0: from its heartbeats) */
    const char *compress;   /* "none", "fp16" or "bf16" (borrowed) */
    /* The job's settings for the servers to compare (ps_job_settings_format);
     * borrowed until ps_trainer_free; NULL: none sent. */
    const char *job_settings;
} ps_trainer_config;

typedef struct ps_trainer ps_trainer;

/* Loads the data (every split: the class count is the largest label of
 * both), resolves the model against it, sets up the backend and joins the
 * job. Returns 0 or a negative code, having logged why;
 * -PS_EREJECTED when a server refused us (the caller may log its own side). */
int ps_trainer_init(ps_trainer **out, const ps_trainer_config *cfg);

/* Trains to the planned step, evaluates, writes --dump-weights, --save-model
 * (rank 0) and the final report. Returns 0, -EINTR when cfg.stop ended it at
 * a step boundary, or another negative code, having logged why. Call once. */
int ps_trainer_run(ps_trainer *t);

/* NULL is allowed. */
void ps_trainer_free(ps_trainer *t);

#endif
