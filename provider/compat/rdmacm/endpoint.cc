// The simpler, synchronous face of rdma_cm: rdma_getaddrinfo, and endpoints
// (rdma_create_ep / rdma_get_request / rdma_destroy_ep) whose calls wait
// for their own events.
#include <netdb.h>
#include <rdma/rdma_verbs.h>

#include <cstdlib>
#include <cstring>

#include "provider/compat/rdmacm/connection.h"
#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/sockaddr_util.h"

using namespace ibemu::rdmacm;

namespace {

sockaddr* copy_address(const sockaddr* a, socklen_t len) {
  auto* out = static_cast<sockaddr*>(malloc(len));
  if (out) std::memcpy(out, a, len);
  return out;
}

constexpr int kResolveTimeoutMs = 2000;

}  // namespace

extern "C" {

IBEMU_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
  while (res) {
    rdma_addrinfo* next = res->ai_next;
    free(res->ai_src_addr);
    free(res->ai_dst_addr);
    free(res->ai_src_canonname);
    free(res->ai_dst_canonname);
    free(res->ai_route);
    free(res->ai_connect);
    free(res);
    res = next;
  }
}

// Addresses given only in the hints (libfabric's verbs provider asks so)
// come back as given, with the hints' flags, family, QP type and port space.
static int addrinfo_from_hints(const rdma_addrinfo& hints, rdma_addrinfo** res) {
  auto* r = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (!r) {
    errno = ENOMEM;
    return -1;
  }
  r->ai_flags = hints.ai_flags;
  r->ai_family = hints.ai_family;
  r->ai_qp_type = hints.ai_qp_type;
  r->ai_port_space = hints.ai_port_space;
  bool copied = true;
  if (hints.ai_dst_len && hints.ai_dst_addr) {
    r->ai_dst_addr = copy_address(hints.ai_dst_addr, hints.ai_dst_len);
    r->ai_dst_len = hints.ai_dst_len;
    copied &= r->ai_dst_addr != nullptr;
  }
  if (hints.ai_src_len && hints.ai_src_addr) {
    r->ai_src_addr = copy_address(hints.ai_src_addr, hints.ai_src_len);
    r->ai_src_len = hints.ai_src_len;
    copied &= r->ai_src_addr != nullptr;
  }
  if (!copied) {
    rdma_freeaddrinfo(r);
    errno = ENOMEM;
    return -1;
  }
  *res = r;
  return 0;
}

IBEMU_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                  rdma_addrinfo** res) {
  if (!res || (!node && !service && !hints)) {
    errno = EINVAL;
    return -1;
  }
  const int flags = hints ? hints->ai_flags : 0;
  if (flags & RAI_SA) {
    // An IB service, asked of the SA (rdma-core 60): no node, no DNS.
    if (node || (flags & RAI_DNS)) return fail(EOPNOTSUPP);
    Library* lib;
    if (int err = Library::get(&lib)) return fail(err);
    return getaddrinfo_from_sa(*lib, service, res);
  }
  if (!node && !service) return addrinfo_from_hints(*hints, res);
  const bool passive = flags & RAI_PASSIVE;
  addrinfo want{};
  want.ai_family = hints && hints->ai_family != AF_IB ? hints->ai_family : AF_UNSPEC;
  want.ai_socktype = SOCK_STREAM;
  if (flags & RAI_NUMERICHOST) want.ai_flags |= AI_NUMERICHOST;
  if (passive) want.ai_flags |= AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int err = getaddrinfo(node, service, &want, &found)) {
    if (err == EAI_SYSTEM) return err;
    errno = err == EAI_MEMORY ? ENOMEM : EADDRNOTAVAIL;
    return err;
  }
  // IPv4 first, as a host whose emulated ports have only IPv4 addresses
  // would connect.
  addrinfo* pick = found;
  for (addrinfo* a = found; a; a = a->ai_next)
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  auto* r = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
  if (!r) {
    freeaddrinfo(found);
    errno = ENOMEM;
    return EAI_MEMORY;
  }
  r->ai_flags = flags;
  r->ai_family = pick->ai_family;
  r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
  r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  if (passive) {
    r->ai_src_addr = copy_address(pick->ai_addr, pick->ai_addrlen);
    r->ai_src_len = pick->ai_addrlen;
  } else {
    r->ai_dst_addr = copy_address(pick->ai_addr, pick->ai_addrlen);
    r->ai_dst_len = pick->ai_addrlen;
    if (hints && hints->ai_src_addr) {
      r->ai_src_addr = copy_address(hints->ai_src_addr, hints->ai_src_len);
      r->ai_src_len = hints->ai_src_len;
    }
  }
  if ((flags & RAI_NOROUTE) == 0 && pick->ai_canonname)
    r->ai_dst_canonname = strdup(pick->ai_canonname);
  freeaddrinfo(found);
  *res = r;
  return 0;
}

IBEMU_EXPORT int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* res, ibv_pd* pd,
                                ibv_qp_init_attr* qp_init_attr) {
  if (!out || !res) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id;
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    id = create_id(*lib, nullptr, nullptr, rdma_port_space(res->ai_port_space),
                   ibv_qp_type(res->ai_qp_type));
    if (!id) return -1;
  }
  id->pub.pd = pd;
  int ret;
  if (res->ai_flags & RAI_PASSIVE) {
    ret = rdma_bind_addr(&id->pub, res->ai_src_addr);
    if (ret == 0 && qp_init_attr) {
      id->ep_qp_attr = *qp_init_attr;
      id->ep_has_qp_attr = true;
    }
  } else {
    ret = rdma_resolve_addr(&id->pub, res->ai_src_addr, res->ai_dst_addr, kResolveTimeoutMs);
    if (ret == 0) ret = rdma_resolve_route(&id->pub, kResolveTimeoutMs);
    if (ret == 0 && qp_init_attr) {
      qp_init_attr->qp_type = ibv_qp_type(res->ai_qp_type);
      ret = rdma_create_qp(&id->pub, pd, qp_init_attr);
    }
  }
  if (ret) {
    int err = errno;
    rdma_destroy_ep(&id->pub);
    return fail(err);
  }
  *out = &id->pub;
  return 0;
}

IBEMU_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
  if (!id) return;
  if (id->qp) rdma_destroy_qp(id);
  if (id->srq) rdma_destroy_srq(id);
  rdma_destroy_id(id);
}

IBEMU_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
  if (!listen || !out) return fail(EINVAL);
  CmId* listener = from_pub(listen);
  if (!listener->sync) return fail(EINVAL);
  rdma_cm_event* event = nullptr;
  if (rdma_get_cm_event(listen->channel, &event) != 0) return -1;
  if (event->status || event_type(event->event) != RDMA_CM_EVENT_CONNECT_REQUEST) {
    int err = event->status ? (event->status < 0 ? -event->status : event->status) : EINVAL;
    rdma_ack_cm_event(event);
    return fail(err);
  }
  rdma_cm_id* id = event->id;
  // The new id answers for itself from now on: its own events, its own waits.
  if (rdma_migrate_id(id, nullptr) != 0) {
    int err = errno;
    rdma_ack_cm_event(event);
    return fail(err);
  }
  id->event = event;
  {
    // The request now belongs to the new id: the listener may go first.
    Library* lib;
    Library::get(&lib);
    std::lock_guard<std::mutex> lock(lib->mu);
    auto* e = reinterpret_cast<Event*>(event);
    e->owner->events_acked++;
    e->owner = from_pub(id);
    e->owner->events_reported++;
  }
  if (listener->ep_has_qp_attr) {
    ibv_qp_init_attr attr = listener->ep_qp_attr;
    if (rdma_create_qp(id, listen->pd, &attr) != 0) {
      int err = errno;
      rdma_reject(id, nullptr, 0);
      rdma_destroy_id(id);
      return fail(err);
    }
  }
  *out = id;
  return 0;
}

}  // extern "C"
