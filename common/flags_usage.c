/* --help (see flags_usage.h): text only, from the table's entries
 * (flag_table.h). */
#include "flags_usage.h"

#include <string.h>

void ps_flags_usage(FILE *out, const ps_flag *flags, int n, const char *prog, const char *summary)
{
    int has_file = 0;

    for (int i = 0; i < n; i++)
        has_file |= strcmp(flags[i].name, "cluster") == 0;
    fprintf(out, "Usage: %s [options]\n%s\n\nOptions (each also read from SHARDPS_<NAME>%s):\n",
            prog, summary,
            has_file ? ", and from the --cluster file; a flag wins over the environment, which "
                       "wins over the file"
                     : "; a flag wins");
    for (int i = 0; i < n; i++) {
        const ps_flag *f = &flags[i];
        char left[64], words[128], value[64];

        if (f->type == PS_FLAG_BOOL && f->words)
            snprintf(left, sizeof(left), "--%s [%.*s]", f->name, (int)strcspn(f->words, "="),
                     f->words);
        else if (f->type == PS_FLAG_BOOL)
            snprintf(left, sizeof(left), "--%s", f->name);
        else
            snprintf(left, sizeof(left), "--%s %s", f->name, f->metavar ? f->metavar : "VALUE");
        fprintf(out, "  %-26s %s", left, f->help);
        switch (f->type) {
        case PS_FLAG_INT:
        case PS_FLAG_DOUBLE:
            fprintf(out, " [%s %.15g..%.15g%s, default %s]",
                    f->type == PS_FLAG_INT ? "integer" : "number", f->min, f->max,
                    ps_flag_words_text(f, words, sizeof(words)),
                    ps_flag_value_text(f, value, sizeof(value)));
            break;
        case PS_FLAG_STRING:
            if (*(const char **)f->dest)
                fprintf(out, " [default %s]", *(const char **)f->dest);
            break;
        case PS_FLAG_CHOICE:
            fprintf(out, " [%s, default %s]", f->choices,
                    *(const char **)f->dest ? *(const char **)f->dest : "none");
            break;
        case PS_FLAG_BOOL:
            fprintf(out, " [switch%s, default %s]", ps_flag_words_text(f, words, sizeof(words)),
                    ps_flags_value_word(f->words, *(int *)f->dest, value, sizeof(value))
                        ? value
                        : (*(int *)f->dest ? "on" : "off"));
            break;
        }
        fputc('\n', out);
    }
    fprintf(out, "  %-26s %s\n", "--help", "show this help and exit");
    if (!has_file)
        return;
    fprintf(out, "\nCluster file (INI, shared by every server and worker of a job):\n");
    for (int i = 0; i < n; i++) {
        int first = flags[i].section != NULL;
        for (int j = 0; j < i && first; j++)
            first = flags[j].section == NULL || strcmp(flags[j].section, flags[i].section) != 0;
        if (first) {
            char keys[512];
            ps_flag_section_keys(flags, n, flags[i].section, keys, sizeof(keys));
            fprintf(out, "  [%s] %s\n", flags[i].section, keys);
        }
    }
    fprintf(out, "  [server], [worker]: any other option of that program, by its name\n"
                 "  (\"heartbeat-timeout = 5\"); each program skips the other's section.\n");
}
