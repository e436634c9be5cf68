/* The children's environment (see child_env.h). */
#include "child_env.h"

#include <stdlib.h>
#include <string.h>

char **ps_child_env(char *const *env)
{
    size_t n = 0, k = 0;
    char **out;

    while (env[n])
        n++;
    out = calloc(n + 1, sizeof(*out));
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(env[i], "SHARDPS_", 8) != 0)
            out[k++] = env[i];
    return out;
}
