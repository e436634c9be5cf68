/* Tests for the launcher's fault drills: that bad options are refused with a
 * line naming them, and that each drill fires once, on the step and worker it
 * names, only while its target runs. */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

#include "drills.h"

static int alive[2][8]; /* [is_server][index]: what ps__running answers */

static int is_running(void *arg, int is_server, int index)
{
    (void)arg;
    return alive[is_server][index];
}

static void all_alive(void)
{
    for (int i = 0; i < 8; i++)
        alive[0][i] = alive[1][i] = 1;
}

static ps_drills *make(const char *kw, const char *pw, const char *ks, const char *sw)
{
    ps_drills_config cfg = {kw, pw, ks, sw, 3, 2, 1};
    ps_drills *d = NULL;
    char err[256];

    cr_assert_eq(ps_drills_init(&d, &cfg, err, sizeof(err)), 0, "%s", err);
    return d;
}

static void refused(const char *kw, const char *pw, const char *ks, const char *sw, int restore,
                    const char *option)
{
    ps_drills_config cfg = {kw, pw, ks, sw, 3, 2, restore};
    ps_drills *d = (ps_drills *)1;
    char err[256];

    cr_assert_eq(ps_drills_init(&d, &cfg, err, sizeof(err)), -EINVAL);
    cr_assert_null(d);
    cr_assert(strstr(err, option) != NULL, "'%s' does not name %s", err, option);
}

Test(drills, refuses_malformed_options)
{
    refused("1", NULL, NULL, NULL, 1, "--kill-worker");
    refused("3@10", NULL, NULL, NULL, 1, "--kill-worker"); /* rank past --workers 3 */
    refused("-1@10", NULL, NULL, NULL, 1, "--kill-worker");
    refused("1@-10", NULL, NULL, NULL, 1, "--kill-worker");
    refused("1@10x", NULL, NULL, NULL, 1, "--kill-worker");
    refused(NULL, "1@10", NULL, NULL, 1, "--pause-worker");
    refused(NULL, "5@10:3", NULL, NULL, 1, "--pause-worker");
    refused(NULL, NULL, "0@10", NULL, 0, "--kill-server"); /* no --checkpoint-dir */
    refused(NULL, NULL, "2@10", NULL, 1, "--kill-server");
    refused(NULL, NULL, NULL, "1:-5", 1, "--slow-worker");
    refused(NULL, NULL, NULL, "1", 1, "--slow-worker");
}

Test(drills, kill_worker_fires_once_at_its_step)
{
    ps_drills *d = make("1@20", NULL, NULL, NULL);
    ps_drill_action a[PS_DRILLS_MAX_ACTIONS];

    all_alive();
    cr_assert_eq(ps_drills_on_step(d, 1, 19, is_running, NULL, a), 0);
    cr_assert_eq(ps_drills_on_step(d, 0, 20, is_running, NULL, a), 0); /* another worker */
    cr_assert_eq(ps_drills_on_step(d, 1, 20, is_running, NULL, a), 1);
    cr_assert_eq(a[0].kind, PS_DRILL_KILL_WORKER);
    cr_assert_eq(a[0].target, 1);
    cr_assert_eq(ps_drills_on_step(d, 1, 21, is_running, NULL, a), 0);
    ps_drills_free(d);
}

Test(drills, kill_server_waits_for_its_target)
{
    ps_drills *d = make(NULL, NULL, "1@10", NULL);
    ps_drill_action a[PS_DRILLS_MAX_ACTIONS];

    all_alive();
    alive[1][1] = 0;
    cr_assert_eq(ps_drills_on_step(d, 0, 10, is_running, NULL, a), 0);
    alive[1][1] = 1;
    cr_assert_eq(ps_drills_on_step(d, 1, 12, is_running, NULL, a), 0); /* worker 0 counts */
    cr_assert_eq(ps_drills_on_step(d, 0, 11, is_running, NULL, a), 1);
    cr_assert_eq(a[0].kind, PS_DRILL_KILL_SERVER);
    cr_assert_eq(a[0].target, 1);
    cr_assert_eq(ps_drills_on_step(d, 0, 12, is_running, NULL, a), 0);
    ps_drills_free(d);
}

Test(drills, each_worker_reports_the_steps_its_drills_name)
{
    ps_drills *d = make("1@20", "2@40:30", "0@10", NULL);
    uint64_t s[PS_DRILLS_MAX_STEPS];

    cr_assert_eq(ps_drills_report_steps(d, 0, s), 2); /* --kill-server, and the pause's resume */
    cr_assert_eq(s[0], 10);
    cr_assert_eq(s[1], 70);
    cr_assert_eq(ps_drills_report_steps(d, 1, s), 2); /* --kill-worker, and the resume */
    cr_assert_eq(s[0], 20);
    cr_assert_eq(s[1], 70);
    cr_assert_eq(ps_drills_report_steps(d, 2, s), 1); /* the pause */
    cr_assert_eq(s[0], 40);
    ps_drills_free(d);
    d = make(NULL, NULL, NULL, "1:5");
    cr_assert_eq(ps_drills_report_steps(d, 1, s), 0);
    ps_drills_free(d);
}

Test(drills, pause_then_resume_once_another_is_ahead)
{
    ps_drills *d = make(NULL, "2@40:30", NULL, "0:50");
    ps_drill_action a[PS_DRILLS_MAX_ACTIONS];

    all_alive();
    cr_assert_eq(ps_drills_slow_ms(d, 0), 50);
    cr_assert_eq(ps_drills_slow_ms(d, 2), 0);
    cr_assert_eq(ps_drills_on_step(d, 0, 80, is_running, NULL, a), 0); /* not paused yet */
    cr_assert_eq(ps_drills_on_step(d, 2, 40, is_running, NULL, a), 1);
    cr_assert_eq(a[0].kind, PS_DRILL_STOP_WORKER);
    cr_assert_eq(a[0].target, 2);
    cr_assert_eq(ps_drills_on_step(d, 1, 69, is_running, NULL, a), 0);
    cr_assert_eq(ps_drills_on_step(d, 1, 70, is_running, NULL, a), 1);
    cr_assert_eq(a[0].kind, PS_DRILL_CONT_WORKER);
    cr_assert_eq(a[0].target, 2);
    cr_assert_eq(ps_drills_on_step(d, 2, 90, is_running, NULL, a), 0);
    ps_drills_free(d);
}
