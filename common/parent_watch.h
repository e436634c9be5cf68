/* A process started by shardps-cluster dies with it, even when the launcher
 * is killed with SIGKILL and cannot pass the word on.
 *
 * The launcher starts its children through libuv, which offers no hook
 * between fork and exec, so the child arms the kernel's parent-death signal
 * itself, first thing in main, from --parent-pid. A launcher that died in
 * the moment between the fork and that call has already handed the child to
 * another parent: comparing getppid() with the pid given closes that race. */
#ifndef PS_PARENT_WATCH_H
#define PS_PARENT_WATCH_H

/* Asks the kernel to send this process SIGTERM (a server writes its final
 * checkpoint on it) when its parent thread exits, and checks that the parent
 * is still parent_pid. Returns 0, -ESRCH when the parent is already gone (the
 * caller should exit), or -errno when the kernel refuses (not Linux). */
int ps_parent_watch(long parent_pid);

#endif
