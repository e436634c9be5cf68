/* The environment a shardps program gives the processes it starts (the
 * launcher its servers and workers, the benchmarks theirs): its own without
 * any SHARDPS_* variable. Every setting reaches a child as a flag, and a
 * SHARDPS_CLUSTER (or any other SHARDPS_ variable) meant for the parent must
 * not reach the child behind its back. */
#ifndef PS_CHILD_ENV_H
#define PS_CHILD_ENV_H

/* A NULL-terminated copy of the array env without its SHARDPS_* entries. The
 * strings are env's, borrowed for as long as env lives unchanged; only the
 * array is the caller's, to free(). Returns NULL when out of memory. */
char **ps_child_env(char *const *env);

#endif
