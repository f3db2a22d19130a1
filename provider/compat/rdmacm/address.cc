// Address and route resolution. An IP address maps to a port's GID through
// the daemons (each knows its own ports' addresses and, from the fabric's
// hellos, the other hosts'), as IPoIB's ARP maps it on a real subnet; the
// route is the PathRecord the SA gives for the two GIDs.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "common/hex.h"
#include "common/mad/sa.h"
#include "provider/compat/rdmacm/connection.h"
#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/sockaddr_util.h"

namespace ibemu::rdmacm {

namespace {

const PortAddress* first_active_port(const Library& lib) {
  for (const PortAddress& p : lib.ports)
    if (p.active) return &p;
  return nullptr;
}

/// The port a packet to `dst` leaves by, as the IP routing table of an
/// IPoIB host picks it: one whose subnet holds the address, else the first.
const PortAddress* route_port(const Library& lib, const sockaddr* dst) {
  for (const PortAddress& p : lib.ports) {
    const auto* net =
        reinterpret_cast<const sockaddr*>(dst->sa_family == AF_INET ? &p.ipv4 : &p.ipv6);
    int prefix = dst->sa_family == AF_INET ? p.ipv4_prefix : p.ipv6_prefix;
    if (p.active && in_subnet(dst, net, prefix)) return &p;
  }
  return first_active_port(lib);
}

void fill_path(const mad::PathRecord& r, ibv_sa_path_rec* p) {
  std::memset(p, 0, sizeof *p);
  std::memcpy(p->dgid.raw, r.dgid(), 16);
  std::memcpy(p->sgid.raw, r.sgid(), 16);
  p->dlid = htons(r.dlid());
  p->slid = htons(r.slid());
  p->raw_traffic = r.raw_traffic();
  p->flow_label = htonl(r.flow_label());
  p->hop_limit = r.hop_limit();
  p->traffic_class = r.tclass();
  p->reversible = r.reversible() ? 1 : 0;
  p->numb_path = r.numb_path();
  p->pkey = htons(r.pkey());
  p->sl = r.sl();
  p->mtu_selector = r.mtu_selector();
  p->mtu = r.mtu();
  p->rate_selector = r.rate_selector();
  p->rate = r.rate();
  p->packet_life_time_selector = r.packet_life_time_selector();
  p->packet_life_time = r.packet_life_time();
  p->preference = r.preference();
}

void use_path(CmId* id) {
  id->pub.route.path_rec = &id->path;
  id->pub.route.num_paths = 1;
  if (!id->ack_timeout_set)
    id->ack_timeout = std::max<uint8_t>(14, uint8_t(id->path.packet_life_time + 1));
  id->state = IdState::kRouteResolved;
}

}  // namespace

bool set_path_from_data(CmId* id, const ibv_path_data* data) {
  mad::PathRecord r;
  static_assert(sizeof(data->path) == sizeof(r.bytes));
  std::memcpy(r.bytes.data(), &data->path, r.bytes.size());
  fill_path(r, &id->path);
  use_path(id);
  return true;
}

int sa_query(Library& lib, CmId* id, mad::Method method, mad::SaAttr attr, uint64_t mask,
             const uint8_t* record, size_t record_len, int timeout_ms, SaCallback done) {
  Endpoint* ep = lib.endpoint(id->endpoint);
  if (!ep) return errno;
  ibv_port_attr pa{};
  if (ibv_query_port(id->pub.verbs, id->pub.port_num, &pa) != 0) return errno;
  if (!pa.sm_lid) return ENETUNREACH;
  uint32_t tid = uint32_t(lib.next_tid++);
  std::vector<uint8_t> m(mad::kMadSize, 0);
  mad::MadHeader h;
  h.set_base_version(mad::kBaseVersion);
  h.set_mgmt_class(mad::MgmtClass::kSubnAdm);
  h.set_class_version(mad::kSaClassVersion);
  h.set_method(method);
  h.set_tid(tid);
  h.set_attr_id(mad::AttrId(uint16_t(attr)));
  std::memcpy(m.data(), h.bytes.data(), mad::kMadHeaderSize);
  mad::store_be64(m.data() + mad::kSaComponentMaskOffset, mask);
  std::memcpy(m.data() + mad::kSaDataOffset, record, record_len);
  // The MAD layer owns the TransactionID's upper half: match on the lower.
  lib.sa_waiters[tid] = {id, std::move(done)};
  int per_try = std::max(100, timeout_ms / 2);
  if (int err = lib.send_mad(*ep, true, pa.sm_lid, m, uint32_t(per_try), 1)) {
    lib.sa_waiters.erase(tid);
    return err;
  }
  return 0;
}

void forget_sa_queries(Library& lib, CmId* id) {
  std::erase_if(lib.sa_waiters, [id](const auto& w) { return w.second.id == id; });
}

/// Resolves `dst` for the id: its GID and, unless already bound to one, the
/// local port to use. Caller holds the mutex. 0, or EHOSTUNREACH.
static int resolve_destination(Library& lib, CmId* id, const sockaddr* dst) {
  const PortAddress* local = nullptr;
  Gid dgid{};
  if (is_loopback(dst)) {
    local = id->port ? id->port : first_active_port(lib);
    if (!local) return EHOSTUNREACH;
    dgid = local->gid;
  } else if (is_multicast(dst)) {
    local = id->port ? id->port : route_port(lib, dst);
    if (!local) return EHOSTUNREACH;
  } else {
    Json reply;
    if (lib.control.request({{"op", "resolve_ip"}, {"ip", address_text(dst)}}, &reply) != 0 ||
        !reply.value("ok", false))
      return EHOSTUNREACH;
    std::vector<uint8_t> gid;
    if (!from_hex(reply.value("gid", ""), &gid) || gid.size() != 16) return EHOSTUNREACH;
    std::copy(gid.begin(), gid.end(), dgid.begin());
    // A local destination is reached through its own port, as IP reaches a
    // local address through loopback.
    if (reply.value("local", false)) {
      int dev = lib.device_index(reply.value("device", ""));
      local = lib.port_of(dev, uint8_t(reply.value("port", 0)));
    }
    if (id->port) local = id->port;
    if (!local) local = route_port(lib, dst);
    if (!local) return EHOSTUNREACH;
  }
  if (!id->port) attach_port(lib, id, local);
  // The source address becomes the port's own, keeping the bound IP port.
  const auto* own =
      reinterpret_cast<const sockaddr*>(dst->sa_family == AF_INET6 ? &local->ipv6 : &local->ipv4);
  if (is_any_address(&id->pub.route.addr.src_addr) && own->sa_family == dst->sa_family) {
    std::memcpy(&id->pub.route.addr.src_storage, own, address_length(own));
    set_port(&id->pub.route.addr.src_addr, id->bound_port);
  }
  std::memcpy(&id->pub.route.addr.addr.ibaddr.dgid, dgid.data(), 16);
  return 0;
}

}  // namespace ibemu::rdmacm

using namespace ibemu;
using namespace ibemu::rdmacm;

extern "C" {

IBEMU_EXPORT int rdma_resolve_addr(rdma_cm_id* pub, sockaddr* src, sockaddr* dst, int timeout_ms) {
  if (!pub || !dst || (dst->sa_family != AF_INET && dst->sa_family != AF_INET6))
    return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id = from_pub(pub);
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    if (id->state != IdState::kIdle && id->state != IdState::kAddrResolved) return fail(EINVAL);
    if (!id->bound) {
      sockaddr_storage any{};
      any.ss_family = dst->sa_family;
      const sockaddr* from = src ? src : reinterpret_cast<sockaddr*>(&any);
      if (int err = bind_locked(*lib, id, from)) return fail(err);
    }
    std::memcpy(&id->pub.route.addr.dst_storage, dst, address_length(dst));
    if (resolve_destination(*lib, id, dst) == 0) {
      id->state = IdState::kAddrResolved;
      post_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    } else {
      // No host answers for the address: like an unanswered ARP, the
      // resolution gives up when its time is over.
      id->state = IdState::kAddrQuery;
      uint64_t generation = ++id->timer_generation;
      lib->add_timer(id, std::chrono::milliseconds(std::max(timeout_ms, 1)),
                     [generation](CmId* id) {
                       if (id->timer_generation != generation || id->state != IdState::kAddrQuery)
                         return;
                       id->state = IdState::kIdle;
                       post_event(id, RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT);
                     });
    }
  }
  return id->sync ? wait_sync_event(id, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

IBEMU_EXPORT int rdma_resolve_route(rdma_cm_id* pub, int timeout_ms) {
  if (!pub) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  CmId* id = from_pub(pub);
  {
    std::lock_guard<std::mutex> lock(lib->mu);
    if (id->state == IdState::kRouteResolved) {
      post_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);  // a path set by RDMA_OPTION_IB_PATH
    } else {
      if (id->state != IdState::kAddrResolved) return fail(EINVAL);
      mad::PathRecord q;
      std::memcpy(q.sgid(), id->pub.route.addr.addr.ibaddr.sgid.raw, 16);
      std::memcpy(q.dgid(), id->pub.route.addr.addr.ibaddr.dgid.raw, 16);
      q.set_numb_path(1);
      q.set_pkey(id->pkey);
      uint64_t mask = mad::path_mask::kSgid | mad::path_mask::kDgid | mad::path_mask::kNumbPath |
                      mad::path_mask::kPkey;
      id->state = IdState::kRouteQuery;
      int err =
          sa_query(*lib, id, mad::Method::kGet, mad::SaAttr::kPathRecord, mask, q.bytes.data(),
                   q.bytes.size(), timeout_ms, [id](int status, const uint8_t* m, size_t len) {
                     if (id->state != IdState::kRouteQuery) return;
                     int error = 0;
                     if (status) {
                       error = -status;
                     } else if (len < mad::kSaDataOffset + 64 || mad::load_be16(m + 4) != 0) {
                       error = -EINVAL;  // the SA found no path
                     }
                     if (error) {
                       id->state = IdState::kAddrResolved;
                       post_event(id, RDMA_CM_EVENT_ROUTE_ERROR, error);
                       return;
                     }
                     mad::PathRecord r;
                     std::memcpy(r.bytes.data(), m + mad::kSaDataOffset, r.bytes.size());
                     fill_path(r, &id->path);
                     use_path(id);
                     post_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
                   });
      if (err) {
        id->state = IdState::kAddrResolved;
        return fail(err);
      }
    }
  }
  return id->sync ? wait_sync_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

}  // extern "C"
