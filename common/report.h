/* The worker's reports to the launcher: one JSON object per line on the pipe
 * given by --report-fd. Both sides use this module, so the schema is written
 * once: a struct per kind of message, a table of its fields, and a writer and
 * a strict parser generated from that table.
 *
 * A line is a flat object whose "event" names the kind and whose other keys
 * are exactly that kind's fields below, each once: integers in range, numbers
 * (a non-finite one travels as null), booleans (int fields 0 or 1 here, true
 * or false on the line). The parser refuses anything
 * else, saying what, so a report can only be read as what it was written. */
#ifndef PS_REPORT_H
#define PS_REPORT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    PS_REPORT_START,    /* "start": joined the job */
    PS_REPORT_PROGRESS, /* "progress": a progress interval ended */
    PS_REPORT_STEP,     /* "step": reached a step the launcher asked about (--report-steps) */
    PS_REPORT_EVAL,     /* "eval": a test-set evaluation at the end of an epoch or the run */
    PS_REPORT_DONE,     /* "done": every step done */
} ps_report_kind;

typedef struct {
    uint64_t step;       /* the clock the worker joined at */
    uint64_t steps;      /* the step it stops at */
    int steps_per_epoch; /* steps per pass over the data */
} ps_report_start;

/* A program on libshardps (lib/handle/job_report.h) knows no epochs and, unless
 * told, not the run's length: it says epoch 0 and steps 0 for "not known",
 * in "start" (steps, steps_per_epoch) and "progress" (epoch, steps). */
typedef struct {
    int epoch;     /* 1-based epoch of step */
    uint64_t step; /* steps done by the job as this worker knows it */
    uint64_t steps;
    double loss;               /* mean training loss over the interval */
    double samples_per_second; /* this worker's, over the interval */
    double staleness_mean;     /* of this worker's applied pushes so far */
    uint64_t staleness_max;
    uint64_t dropped;  /* chunks the servers did not apply (late or rejected), so far */
    uint64_t rejected; /* of those, chunks refused: NaN/Inf, over --max-grad-norm */
} ps_report_progress;

typedef struct {
    uint64_t step; /* steps done by the job as this worker knows it */
} ps_report_step;

typedef struct {
    int epoch; /* 1-based epoch of step */
    uint64_t step;
    double test_accuracy, test_loss;
    int epoch_end; /* 1: step ends epoch; 0: the run stopped inside it (--steps) */
} ps_report_eval;

typedef struct {
    uint64_t steps;       /* steps this worker computed */
    double samples;       /* samples it trained on */
    double seconds;       /* wall time of its training */
    double test_accuracy; /* its last evaluation, -1 when it evaluated none */
    uint64_t dropped;     /* chunks the servers did not apply (late or rejected) */
    uint64_t rejected;    /* of those, chunks refused: NaN/Inf, over --max-grad-norm */
    uint64_t bytes_pushed, bytes_pulled;
} ps_report_done;

typedef struct {
    ps_report_kind kind;
    int rank; /* the worker's */
    union {
        ps_report_start start;
        ps_report_progress progress;
        ps_report_step step;
        ps_report_eval eval;
        ps_report_done done;
    } u;
} ps_report;

/* The longest line, newline included; the parser refuses longer ones. */
#define PS_REPORT_MAX_LINE 1024

/* Writes r as one line, '\n' and NUL included, into buf[len]. Returns the
 * line's length without the NUL, or -ENOSPC. */
int ps_report_format(const ps_report *r, char *buf, size_t len);

/* Writes r to fd in one write (a socket's send without SIGPIPE: a reader
 * gone is -EPIPE). Returns 0, -EIO for a short write, or -errno. */
int ps_report_write(int fd, const ps_report *r);

/* Reads one line (without its '\n') into out. Returns 0, or -EINVAL with the
 * reason in err (always NUL-terminated). */
int ps_report_parse(const char *line, ps_report *out, char *err, size_t errlen);

#endif
