// rdma_resolve_addrinfo and rdma_query_addrinfo (RDMACM_1.4): rdma_getaddrinfo
// whose result is announced on the id's event channel and kept by the id
// until the program takes it.
//
// As in rdma-core, a node and service are looked up (the system resolver,
// as rdma_getaddrinfo does) inside the call, which then posts
// RDMA_CM_EVENT_ADDRINFO_RESOLVED; a failed look-up fails the call and posts
// nothing. With RAI_SA the service is an IB service, asked of the SA as a
// ServiceRecord query from the port the id is bound to, as the kernel's
// rdma_cm asks it; the answer comes as ADDRINFO_RESOLVED or ADDRINFO_ERROR.
// rdma_getaddrinfo with RAI_SA asks so from each port in turn.
#include <endian.h>
#include <infiniband/ib.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "provider/compat/rdmacm/connection.h"
#include "provider/compat/rdmacm/exports.h"

namespace ibemu::rdmacm {

namespace {

constexpr int kServiceQueryTimeoutMs = 2000;  // the kernel's, for this query

/// Fills the ServiceRecord query for `service`: by ServiceID when the whole
/// text is a number (strtoull, base 0, as rdma-core reads it), else by
/// ServiceName. Returns the component mask.
uint64_t service_query(const char* service, mad::ServiceRecord* q) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long service_id = strtoull(service, &end, 0);
  if (errno == 0 && end != service && *end == '\0') {
    q->set_service_id(service_id);
    return mad::service_mask::kServiceId;
  }
  std::memcpy(q->service_name(), service, strnlen(service, q->kNameSize - 1));
  return mad::service_mask::kServiceName;
}

/// The ServiceRecords of an SA GetTable answer as rdma-core lists them: one
/// AF_IB destination per record (its GID, P_Key and ServiceID). 0, ENOENT
/// when there is none, or ENOMEM.
int addrinfo_from_service_records(const uint8_t* m, size_t len, rdma_addrinfo** out) {
  *out = nullptr;
  const size_t record_size = size_t(mad::load_be16(m + mad::kSaAttrOffsetOffset)) * 8;
  if (record_size < sizeof(mad::ServiceRecord{}.bytes)) return ENOENT;
  rdma_addrinfo** tail = out;
  for (size_t at = mad::kSaDataOffset; at + record_size <= len; at += record_size) {
    mad::ServiceRecord r;
    std::memcpy(r.bytes.data(), m + at, r.bytes.size());
    auto* ai = static_cast<rdma_addrinfo*>(calloc(1, sizeof(rdma_addrinfo)));
    auto* sib = static_cast<sockaddr_ib*>(calloc(1, sizeof(sockaddr_ib)));
    if (!ai || !sib) {
      free(ai);
      free(sib);
      rdma_freeaddrinfo(*out);
      *out = nullptr;
      return ENOMEM;
    }
    sib->sib_family = AF_IB;
    sib->sib_pkey = htobe16(r.service_pkey());
    std::memcpy(&sib->sib_addr, r.service_gid(), sizeof sib->sib_addr);
    sib->sib_sid = htobe64(r.service_id());
    sib->sib_sid_mask = htobe64(~0ull);
    ai->ai_flags = RAI_SA;
    ai->ai_family = AF_IB;
    ai->ai_port_space = RDMA_PS_IB;
    ai->ai_dst_addr = reinterpret_cast<sockaddr*>(sib);
    ai->ai_dst_len = sizeof *sib;
    *tail = ai;
    tail = &ai->ai_next;
  }
  return *out ? 0 : ENOENT;
}

/// The SA's answer to an id's service query: its event. Runs with the
/// mutex held.
void on_service_answer(CmId* id, int status, const uint8_t* m, size_t len) {
  if (id->state != IdState::kAddrinfoQuery) return;
  // The id stays bound where it was: AF_IB destinations are reported, not
  // taken as its own (docs/rdma-cm.md).
  id->state = IdState::kIdle;
  int error = 0;
  rdma_addrinfo* found = nullptr;
  if (status) {
    error = -status;  // no answer (ETIMEDOUT)
  } else if (len < mad::kSaDataOffset || mad::load_be16(m + 4) != 0) {
    error = -EINVAL;  // an SA error status, as the kernel's SA client reports it
  } else {
    error = -addrinfo_from_service_records(m, len, &found);  // ENOENT: no record
  }
  if (error) {
    post_event(id, RDMA_CM_EVENT_ADDRINFO_ERROR, error);
    return;
  }
  id->resolved_addrinfo = found;
  post_event(id, RDMA_CM_EVENT_ADDRINFO_RESOLVED, 0);
}

/// RAI_SA: starts the service query. 0 or an errno. Caller holds the mutex.
int start_service_query(Library& lib, CmId* id, const char* node, const char* service) {
  if (node) return ENOTSUP;
  if (!service) return EINVAL;
  // As the kernel's rdma_cm: only from an id bound to a port's address.
  if (!id->bound || !id->port || id->state != IdState::kIdle) return EINVAL;
  mad::ServiceRecord q;
  const uint64_t mask = service_query(service, &q);
  id->state = IdState::kAddrinfoQuery;
  const int err = sa_query(
      lib, id, mad::Method::kGetTable, mad::SaAttr::kServiceRecord, mask, q.bytes.data(),
      q.bytes.size(), kServiceQueryTimeoutMs,
      [id](int status, const uint8_t* m, size_t len) { on_service_answer(id, status, m, len); });
  if (err) id->state = IdState::kIdle;
  return err;
}

}  // namespace

int getaddrinfo_from_sa(Library& lib, const char* service, rdma_addrinfo** res) {
  if (!service || !res) return fail(EINVAL);
  std::vector<PortAddress> ports;
  {
    std::lock_guard<std::mutex> lock(lib.mu);
    ports = lib.ports;
  }
  for (const PortAddress& p : ports) {
    sockaddr_storage own = p.ipv4.ss_family == AF_INET ? p.ipv4 : p.ipv6;
    if (!p.active || own.ss_family == AF_UNSPEC) continue;
    // What rdma-core does per port, through an id of the IB port space
    // bound to the port (by its IP address: AF_IB binding is not emulated).
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(nullptr, &id, nullptr, RDMA_PS_IB)) continue;
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_SA;
    rdma_addrinfo* found = nullptr;
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&own)) == 0 &&
        rdma_resolve_addrinfo(id, nullptr, service, &hints) == 0)
      rdma_query_addrinfo(id, &found);
    rdma_destroy_id(id);
    if (!found) continue;
    // Each entry's source is this port: its GID, the IB port space's
    // ServiceID, the destination's P_Key.
    for (rdma_addrinfo* ai = found; ai; ai = ai->ai_next) {
      auto* sib = static_cast<sockaddr_ib*>(calloc(1, sizeof(sockaddr_ib)));
      if (!sib) {
        rdma_freeaddrinfo(found);
        return fail(ENOMEM);
      }
      sib->sib_family = AF_IB;
      std::memcpy(&sib->sib_addr, p.gid.data(), sizeof sib->sib_addr);
      sib->sib_sid = htobe64(uint64_t(RDMA_PS_IB) << 16);
      sib->sib_sid_mask = htobe64(RDMA_IB_IP_PS_MASK);
      sib->sib_pkey = reinterpret_cast<const sockaddr_ib*>(ai->ai_dst_addr)->sib_pkey;
      ai->ai_src_addr = reinterpret_cast<sockaddr*>(sib);
      ai->ai_src_len = sizeof *sib;
    }
    *res = found;
    return 0;
  }
  return fail(ENOENT);  // no port's SA knows the service
}

}  // namespace ibemu::rdmacm

using namespace ibemu::rdmacm;

extern "C" {

IBEMU_EXPORT int rdma_resolve_addrinfo(rdma_cm_id* pub, const char* node, const char* service,
                                       const rdma_addrinfo* hints) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id = from_pub(pub);
  const int flags = hints ? hints->ai_flags : 0;
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    if (id->resolving_addrinfo) return fail(EBUSY);
    if ((flags & RAI_SA) && (flags & RAI_DNS)) return fail(ENOTSUP);
    if (flags & RAI_SA) {
      if (int err = start_service_query(*lib, id, node, service)) return fail(err);
    }
    id->resolving_addrinfo = true;
  }
  if (!(flags & RAI_SA)) {
    // The look-up may take long (DNS): not under the mutex.
    rdma_addrinfo* found = nullptr;
    errno = 0;
    const int looked_up = rdma_getaddrinfo(node, service, hints, &found);
    const int err = errno ? errno : EADDRNOTAVAIL;
    std::lock_guard<std::mutex> lock(lib->mu);
    if (looked_up != 0) {
      id->resolving_addrinfo = false;
      return fail(err);  // rdma_getaddrinfo's errno; no event
    }
    id->resolved_addrinfo = found;
    post_event(id, RDMA_CM_EVENT_ADDRINFO_RESOLVED, 0);
  }
  return id->sync ? wait_sync_event(id, RDMA_CM_EVENT_ADDRINFO_RESOLVED) : 0;
}

IBEMU_EXPORT int rdma_query_addrinfo(rdma_cm_id* pub, rdma_addrinfo** info) {
  if (!pub || !info) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id = from_pub(pub);
  std::lock_guard<std::mutex> lock(lib->mu);
  if (!id->resolving_addrinfo || !id->resolved_addrinfo) return fail(ENOENT);
  // The program owns the list now (rdma_freeaddrinfo), and the id may
  // resolve again.
  *info = id->resolved_addrinfo;
  id->resolved_addrinfo = nullptr;
  id->resolving_addrinfo = false;
  return 0;
}

}  // extern "C"
