#include "provider/verbs_layout.h"

#include <dlfcn.h>
#include <stddef.h>

/* The verb each ops layout brought with it, within one PABI. */
static const struct {
  int pabi;
  int layout;
  const char* marker; /* NULL: the PABI's first layout */
} ibemu_layouts[] = {
    {34, 36, "ibv_query_qp_data_in_order"},
    {34, 35, NULL},
    {57, 57, NULL},
    {59, 62, "ibv_query_port_speed"},
    {59, 59, NULL},
    {64, 64, NULL},
    {65, 65, NULL},
};

int ibemu_verbs_ops_layout(int pabi, ibemu_has_verb_fn has_verb, void* arg) {
  for (size_t i = 0; i < sizeof(ibemu_layouts) / sizeof(ibemu_layouts[0]); i++) {
    if (ibemu_layouts[i].pabi != pabi) continue;
    if (!ibemu_layouts[i].marker || has_verb(ibemu_layouts[i].marker, arg))
      return ibemu_layouts[i].layout;
  }
  return 0;
}

static bool ibemu_library_has(const char* name, void* library) {
  return dlsym(library, name) != NULL;
}

int ibemu_running_verbs_ops_layout(int pabi) {
  /* The program may have loaded libibverbs privately (Python's extension
   * modules do), so ask that library, not the global scope. */
  void* library = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!library) return 0;
  int layout = ibemu_verbs_ops_layout(pabi, ibemu_library_has, library);
  dlclose(library);
  return layout;
}
