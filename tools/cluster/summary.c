/* The launcher's end-of-job summary (see summary.h). */
#include "summary.h"

#include <inttypes.h>
#include <math.h>

void ps_summary_print(const ps_summary *s, int json, FILE *out)
{
    double sps = s->seconds > 0 ? s->samples / s->seconds : 0;

    fprintf(out, "\n%s summary\n", s->prog);
    fprintf(out, "  mode              %s\n", s->mode);
    fprintf(out, "  servers, workers  %d, %d\n", s->servers, s->workers);
    fprintf(out, "  steps             %" PRIu64 " (the most any worker computed)\n", s->steps);
    if (isnan(s->test_accuracy))
        fprintf(out, "  test accuracy     not evaluated\n");
    else
        fprintf(out, "  test accuracy     %.4f\n", s->test_accuracy);
    fprintf(out, "  wall time         %.1f s\n", s->wall_seconds);
    fprintf(out, "  samples/s         %.0f (all workers, training only)\n", sps);
    fprintf(out, "  pushed            %.1f MB (all workers' gradient payloads, --compress %s)\n",
            s->bytes_pushed / 1e6, s->compress);
    fprintf(out,
            "  staleness         mean %.2f, max %.0f (steps, of the workers' applied pushes)\n",
            s->staleness_mean, s->staleness_max);
    fprintf(out,
            "  not applied       %" PRIu64 " chunks rejected (NaN/Inf, --max-grad-norm), %" PRIu64
            " late (their step was applied without them)\n",
            s->rejected, s->dropped - s->rejected);
    fprintf(out, "  workers lost      %d (did not finish)\n", s->lost);
    if (s->metrics_dir)
        fprintf(out, "  metrics           %s/ (server-I.jsonl, worker-R.jsonl)\n", s->metrics_dir);
    if (json) {
        char acc[32] = "null";
        if (!isnan(s->test_accuracy))
            snprintf(acc, sizeof(acc), "%.6f", s->test_accuracy);
        fprintf(out,
                "{\"test_accuracy\":%s,\"wall_seconds\":%.3f,\"samples_per_second\":%.1f,"
                "\"mode\":\"%s\",\"servers\":%d,\"workers\":%d,\"steps\":%" PRIu64
                ",\"bytes_pushed\":%.0f,"
                "\"compress\":\"%s\",\"steps_per_epoch\":%d,\"chunks_dropped\":%" PRIu64
                ",\"chunks_rejected\":%" PRIu64 ",\"chunks_late\":%" PRIu64
                ",\"workers_lost\":%d}\n",
                acc, s->wall_seconds, sps, s->mode, s->servers, s->workers, s->steps,
                s->bytes_pushed, s->compress, s->steps_per_epoch, s->dropped, s->rejected,
                s->dropped - s->rejected, s->lost);
    }
    fflush(out);
}
