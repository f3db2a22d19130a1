/*
 * What rdma-core's <rdma/rdma_cma.h> and <rdma/rsocket.h> declare beyond
 * Debian 12's (rdma-core 44): the calls of version nodes RDMACM_1.4
 * (rdma-core 60) and RDMACM_1.5 (rdma-core 65), their event types and flags.
 *
 * The library exports these calls whatever headers it is built with, so
 * each declaration here stands only where the system's headers lack it: the
 * build finds out which they have (IBEMU_SYSTEM_HAS_* from
 * provider/compat/rdmacm/CMakeLists.txt, through the ibemu_rdmacm_newer_api
 * target) and uses theirs where they have it. Names, values and signatures
 * are rdma-core's. C, so that test programs include it too.
 */
#ifndef IBEMU_RDMA_CMA_NEWER_H
#define IBEMU_RDMA_CMA_NEWER_H

#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdint.h>
#include <sys/epoll.h>

#ifdef __cplusplus
extern "C" {
#endif

/* enum rdma_cm_event_type's values after RDMA_CM_EVENT_TIMEWAIT_EXIT (15).
 * An enum cannot be extended from outside: older headers get constants of
 * the same names and values. A user event's argument is then
 * rdma_cm_event.param's first 8 bytes (rdma-core's param.arg). */
#ifndef IBEMU_SYSTEM_HAS_ADDRINFO_EVENTS
enum { RDMA_CM_EVENT_ADDRINFO_RESOLVED = 16, RDMA_CM_EVENT_ADDRINFO_ERROR = 17 };
#endif
#ifndef IBEMU_SYSTEM_HAS_USER_EVENTS
enum { RDMA_CM_EVENT_USER = 18, RDMA_CM_EVENT_INTERNAL = 19 };
#endif

/* rdma_addrinfo.ai_flags: how rdma_resolve_addrinfo and rdma_getaddrinfo
 * resolve (mutually exclusive; DNS when neither is set). */
#ifndef RAI_SA
#define RAI_SA 0x00000010
#endif
#ifndef RAI_DNS
#define RAI_DNS 0x00000020
#endif

/* RDMACM_1.4 */
#ifndef IBEMU_SYSTEM_HAS_RDMA_RESOLVE_ADDRINFO
int rdma_resolve_addrinfo(struct rdma_cm_id* id, const char* node, const char* service,
                          const struct rdma_addrinfo* hints);
#endif
#ifndef IBEMU_SYSTEM_HAS_RDMA_QUERY_ADDRINFO
int rdma_query_addrinfo(struct rdma_cm_id* id, struct rdma_addrinfo** info);
#endif
#ifndef IBEMU_SYSTEM_HAS_RDMA_WRITE_CM_EVENT
int rdma_write_cm_event(struct rdma_cm_id* id, enum rdma_cm_event_type event, int status,
                        uint64_t arg);
#endif

/* RDMACM_1.5 */
#ifndef IBEMU_SYSTEM_HAS_REPOLL_CREATE
int repoll_create(int flags);
#endif
#ifndef IBEMU_SYSTEM_HAS_REPOLL_CTL
int repoll_ctl(int epfd, int op, int fd, struct epoll_event* event);
#endif
#ifndef IBEMU_SYSTEM_HAS_REPOLL_WAIT
int repoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout);
#endif

#ifdef __cplusplus
}
#endif

#endif /* IBEMU_RDMA_CMA_NEWER_H */
