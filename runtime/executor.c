/* executor.c: the runtime's executors by target (rt_impl.h): the one place
 * that names the targets a model can have. */
#include "runtime/rt_impl.h"

#include <string.h>

static const rt_executor *const executors[] = {&rt_cpu_executor, &rt_cuda_executor};

const rt_executor *rt_executor_of(const char *target)
{
    for (size_t i = 0; target && i < sizeof executors / sizeof executors[0]; i++)
        if (strcmp(executors[i]->target, target) == 0)
            return executors[i];
    return NULL;
}
