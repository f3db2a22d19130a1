/*
 * Middleware loads librdmacm with its own plugins and unloads it with them
 * (Open MPI's ofi component takes libfabric, and libfabric librdmacm, at
 * MPI_Finalize). A librdmacm that keeps a thread must stay mapped after the
 * last dlclose, or the thread runs into unmapped code:
 *   cm_unload
 * loads librdmacm.so.1, uses it (an event channel and an id), unloads it and
 * checks its code is still mapped. Exits 0 when it is.
 */
#include <dlfcn.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int mapped(const char* name) {
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  int found = 0;
  while (maps && fgets(line, sizeof line, maps)) found |= strstr(line, name) != NULL;
  if (maps) fclose(maps);
  return found;
}

int main(void) {
  void* lib = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  struct rdma_event_channel* (*create_channel)(void) = dlsym(lib, "rdma_create_event_channel");
  int (*create_id)(struct rdma_event_channel*, struct rdma_cm_id**, void*, enum rdma_port_space) =
      dlsym(lib, "rdma_create_id");
  int (*destroy_id)(struct rdma_cm_id*) = dlsym(lib, "rdma_destroy_id");
  void (*destroy_channel)(struct rdma_event_channel*) = dlsym(lib, "rdma_destroy_event_channel");
  struct rdma_event_channel* channel = create_channel();
  struct rdma_cm_id* id = NULL;
  if (!channel || create_id(channel, &id, NULL, RDMA_PS_TCP)) {
    perror("rdma_create_id");
    return 1;
  }
  destroy_id(id);
  destroy_channel(channel);
  dlclose(lib);
  usleep(100 * 1000);  // what the library's threads do after the unload
  if (!mapped("librdmacm")) {
    printf("librdmacm was unmapped by dlclose\n");
    return 1;
  }
  printf("ok librdmacm stays mapped after dlclose\n");
  return 0;
}
