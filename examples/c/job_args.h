/* The C examples' command line, read as shardps-worker reads its own:
 *   --servers HOST:PORT,HOST:PORT   the job's servers, in index order (127.0.0.1:7000)
 *   --rank R --workers W            this worker's rank among W (0 of 1)
 *   --steps N                       steps to train (the example's default)
 * each also from the environment as SHARDPS_SERVERS, SHARDPS_RANK,
 * SHARDPS_WORKERS, SHARDPS_STEPS (a flag wins), plus --out FILE where an
 * example writes one. Included by each example (a header, so that one
 * `cc example.c` builds it). */
#ifndef EXAMPLE_JOB_ARGS_H
#define EXAMPLE_JOB_ARGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOB_MAX_SERVERS 64

typedef struct {
    const char *servers[JOB_MAX_SERVERS]; /* point into list */
    char list[4096];
    int n_servers, rank, workers, steps;
    const char *out; /* NULL unless --out was given */
} job_args;

/* A non-negative decimal int, or -1. */
static int job_int(const char *s)
{
    char *end;
    long v = s ? strtol(s, &end, 10) : -1;

    return s && *s && *end == '\0' && v >= 0 && v <= 1 << 30 ? (int)v : -1;
}

/* Fills a from argv, the environment and the defaults. Returns 0, or prints
 * the usage and returns 2 (the programs' exit status for a bad command line). */
static int job_args_parse(job_args *a, int argc, char **argv, int steps, int needs_out)
{
    static const char *defaults[] = {"127.0.0.1:7000", "0", "1", NULL};
    static const char *flags[] = {"--servers", "--rank", "--workers", "--steps", "--out"};
    static const char *envs[] = {"SHARDPS_SERVERS", "SHARDPS_RANK", "SHARDPS_WORKERS",
                                 "SHARDPS_STEPS", NULL};
    const char *v[5] = {NULL};
    int k;

    for (int i = 1; i < argc; i += 2) {
        for (k = 0; k < 5 && strcmp(argv[i], flags[k]) != 0; k++)
            ;
        if (k == 5 || i + 1 == argc)
            goto usage;
        v[k] = argv[i + 1];
    }
    for (k = 0; k < 4; k++)
        if (v[k] == NULL && (v[k] = getenv(envs[k])) == NULL)
            v[k] = defaults[k];
    memset(a, 0, sizeof(*a));
    a->rank = job_int(v[1]), a->workers = job_int(v[2]), a->out = v[4];
    a->steps = v[3] ? job_int(v[3]) : steps;
    /* The library checks each address; only the commas are split here. */
    if (v[0] && strlen(v[0]) < sizeof(a->list)) {
        strcpy(a->list, v[0]);
        for (char *s = strtok(a->list, ","); s; s = strtok(NULL, ","))
            if (a->n_servers++ < JOB_MAX_SERVERS)
                a->servers[a->n_servers - 1] = s;
    }
    if (a->n_servers > 0 && a->n_servers <= JOB_MAX_SERVERS && a->rank >= 0 && a->workers > 0 &&
        a->steps >= 0 && (a->out || !needs_out))
        return 0;
usage:
    fprintf(
        stderr,
        "usage: %s [--servers HOST:PORT[,HOST:PORT...]] [--rank R] [--workers W] [--steps N]%s\n"
        "(or SHARDPS_SERVERS, SHARDPS_RANK, SHARDPS_WORKERS, SHARDPS_STEPS)\n",
        argv[0], needs_out ? " --out FILE" : "");
    return 2;
}

#endif
