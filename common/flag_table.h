/* One entry of a program's option table (see flags.h for the table as a
 * whole): what an option is (type, bounds, words, cluster-file section), how
 * a text becomes its value, and how its value reads as text again.
 *
 * The flags modules build on it: flags.c applies the layers, flags_file.c
 * the cluster file, flags_usage.c --help, flags_help.c --print-config. Each takes one
 * value through ps_flag_set, so a value is checked the same way, with the
 * same one-line error, whichever layer it comes from. */
#ifndef PS_FLAG_TABLE_H
#define PS_FLAG_TABLE_H

#include <stddef.h>

typedef enum {
    PS_FLAG_INT,    /* int *, bounded by [min, max] */
    PS_FLAG_DOUBLE, /* double *, bounded by [min, max] */
    PS_FLAG_STRING, /* const char **, points into argv/environ or the context (not copied) */
    PS_FLAG_BOOL, /* int *, set to 1 by --name, no value (or one of its words: "--restore auto") */
    PS_FLAG_CHOICE, /* const char **, one of the '|'-separated words in choices */
} ps_flag_type;

typedef struct {
    const char *name; /* without the leading "--" */
    ps_flag_type type;
    void *dest;
    const char *metavar;
    const char *help;
    double min, max;     /* INT, DOUBLE */
    const char *choices; /* CHOICE: "sync|async|ssp" */
    /* INT, DOUBLE, BOOL: words also accepted as values, "all=0" or "auto=-1|off=0";
     * --help and --print-config show the word for its value. NULL: none. */
    const char *words;
    /* The cluster-file section every process of the job reads this option
     * from ("cluster", "model", "optimizer"), or NULL: only the program's own
     * section ([server] or [worker]) may set it. */
    const char *section;
} ps_flag;

/* Sets f's variable from value (NULL: a switch given without one). STRING
 * and CHOICE variables point at value itself, so it must outlive them.
 * Returns 0, or -PS_EUSAGE with the reason in err (cut to len): "origin: 'v'
 * is out of range (accepted: 0 to 1000)", where origin says how the user gave
 * it ("--lr", "SHARDPS_LR", "c.ini:3: lr", "option lr"); nothing is printed,
 * so a library can keep the sentence for its caller. */
int ps_flag_check_set(const ps_flag *f, const char *value, const char *origin, char *err,
                      size_t len);
/* ps_flag_check_set for a program: the reason goes to stderr as one line,
 * "prog: <reason>; see prog --help". */
int ps_flag_set(const ps_flag *f, const char *value, const char *prog, const char *origin);

/* The index of the option called name in flags[0..n), or -ENOENT. */
int ps_flag_find(const ps_flag *flags, int n, const char *name);

/* Whether word is one of f's words; its number into *out when it is. */
int ps_flag_word_value(const ps_flag *f, const char *word, double *out);
/* The word that stands for value v in words ("auto=2|off=0"), copied into
 * buf; NULL when none does. */
const char *ps_flags_value_word(const char *words, double v, char *buf, size_t len);
/* " or all, auto": f's words for a range in messages and --help, into buf
 * (empty without words); returns buf. */
const char *ps_flag_words_text(const ps_flag *f, char *buf, size_t len);
/* f's value as text: its word, its number, true/false, or the string
 * (borrowed from the variable); buf backs what is formatted. */
const char *ps_flag_value_text(const ps_flag *f, char *buf, size_t len);

/* Whether v is one of the '|'-separated words of list (NULL: none is). */
int ps_flag_in_list(const char *list, const char *v);
/* The environment variable of option name: "chunk-bytes" ->
 * "SHARDPS_CHUNK_BYTES", into buf. */
void ps_flag_env_name(const char *name, char *buf, size_t len);
/* "servers workers mode": the names of the options every process reads from
 * [section], space-separated, into buf (cut at len). */
void ps_flag_section_keys(const ps_flag *flags, int n, const char *section, char *buf, size_t len);

#endif
