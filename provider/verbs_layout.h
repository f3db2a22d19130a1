/*
 * Which struct verbs_context_ops the running libibverbs expects. The PABI in
 * verbs_register_driver_<N> keeps a provider of another ABI from loading at
 * all, but rdma-core v36 and v62 added ops without a new PABI: a provider
 * built against v59 and loaded by v62 would hand libibverbs a table whose
 * ops sit one slot off. The provider checks the running library's release
 * against its own (IBEMU_VERBS_OPS_LAYOUT) before it registers.
 */
#ifndef IBEMU_VERBS_LAYOUT_H
#define IBEMU_VERBS_LAYOUT_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the running libibverbs exports the public verb `name`. */
typedef bool (*ibemu_has_verb_fn)(const char* name, void* arg);

/* The first rdma-core release with the ops layout of a libibverbs of private
 * ABI `pabi` that exports what has_verb says: 35, 36, 57, 59, 62, 64 or 65. */
int ibemu_verbs_ops_layout(int pabi, ibemu_has_verb_fn has_verb, void* arg);

/* The layout of the libibverbs this process has loaded; 0 if it cannot be
 * found. */
int ibemu_running_verbs_ops_layout(int pabi);

#ifdef __cplusplus
}
#endif

#endif
