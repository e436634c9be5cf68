/* The parent-death signal (see parent_watch.h). */
#include "parent_watch.h"

#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

int ps_parent_watch(long parent_pid)
{
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
        return -errno;
    /* Armed only now: a parent that died before this call sent nothing, but
     * the child has been re-parented by then. */
    if ((long)getppid() != parent_pid)
        return -ESRCH;
    return 0;
}
