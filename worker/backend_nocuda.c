/* The CUDA backend of a build made without the CUDA toolkit (CMake found no
 * nvcc, or was told PS_CUDA=OFF): it only explains itself, so --device auto
 * falls back to the CPU and --device cuda fails with a line that says why. */
#include <errno.h>
#include <stdio.h>

#include "backend_impl.h"

int ps__backend_cuda_init(ps_backend **out, const ps_model_desc *desc, const ps_model_spec *spec,
                          const ps_backend_config *cfg, char *why, size_t why_len)
{
    (void)desc;
    (void)spec;
    (void)cfg;
    *out = NULL;
    snprintf(why, why_len, "this shardps was built without CUDA (no CUDA toolkit, or PS_CUDA=OFF)");
    return -ENODEV;
}
