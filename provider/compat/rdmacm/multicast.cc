// Multicast through rdma_cm: an IP multicast address maps to an MGID as
// IPoIB maps it (RFC 4391), with rdma_cm's own signature for the UDP port
// space; joining is an SA MCMemberRecord Set, and the id's UD QP is attached
// to the group the SA answers with.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "provider/compat/rdmacm/connection.h"
#include "provider/compat/rdmacm/exports.h"
#include "provider/compat/rdmacm/sockaddr_util.h"

namespace ibemu::rdmacm {

namespace mm = mad::mcmember_mask;

struct CmId::Join {
  sockaddr_storage addr{};
  void* context = nullptr;
  Gid mgid{};
  uint16_t mlid = 0;
  uint8_t join_state = 0;
  bool attached = false;
  bool joined = false;
};

namespace {

constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
constexpr uint32_t kIpoibQkey = 0x00000b1b;
constexpr int kJoinTimeoutMs = 2000;

Gid mgid_for(const CmId* id, const sockaddr* addr) {
  Gid mgid{};
  if (is_any_address(addr)) return mgid;  // the SA assigns one
  if (addr->sa_family == AF_INET6) {
    std::memcpy(mgid.data(), &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, 16);
    return mgid;
  }
  // RFC 4391 §4: ff1<scope>:401b:<P_Key>::<low 28 bits of the IPv4 group>;
  // rdma_cm marks its UDP port space's groups with 0x01 in place of 0x1b.
  const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr);
  mgid[0] = 0xff;
  mgid[1] = 0x12;
  mgid[2] = 0x40;
  mgid[3] = id->pub.ps == RDMA_PS_UDP ? 0x01 : 0x1b;
  mgid[4] = uint8_t(id->pkey >> 8);
  mgid[5] = uint8_t(id->pkey);
  mgid[12] = uint8_t((ip >> 24) & 0x0f);
  mgid[13] = uint8_t(ip >> 16);
  mgid[14] = uint8_t(ip >> 8);
  mgid[15] = uint8_t(ip);
  return mgid;
}

void joined(CmId* id, std::shared_ptr<CmId::Join> join, const mad::McMemberRecord& r) {
  std::memcpy(join->mgid.data(), r.mgid(), 16);
  join->mlid = r.mlid();
  join->joined = true;
  if (id->pub.qp && id->pub.qp->qp_type == IBV_QPT_UD) {
    ibv_gid gid;
    std::memcpy(gid.raw, join->mgid.data(), 16);
    join->attached = ibv_attach_mcast(id->pub.qp, &gid, join->mlid) == 0;
  }
  Event* e = post_event(id, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
  auto& ud = e->pub.param.ud;
  ud.private_data = join->context;
  ud.qp_num = 0xffffff;
  ud.qkey = r.qkey();
  ud.ah_attr.dlid = join->mlid;
  ud.ah_attr.sl = r.sl();
  ud.ah_attr.port_num = id->pub.port_num;
  ud.ah_attr.static_rate = 0;
  ud.ah_attr.is_global = 1;
  std::memcpy(ud.ah_attr.grh.dgid.raw, join->mgid.data(), 16);
  ud.ah_attr.grh.flow_label = r.flow_label();
  ud.ah_attr.grh.hop_limit = r.hop_limit();
  ud.ah_attr.grh.traffic_class = r.tclass();
}

int join_locked(Library& lib, CmId* id, const sockaddr* addr, uint8_t join_state, void* context) {
  if (!id->port || id->device < 0) return EINVAL;
  if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6) return EINVAL;
  for (auto& j : id->joins)
    if (same_address(reinterpret_cast<sockaddr*>(&j->addr), addr)) return EADDRINUSE;
  auto join = std::make_shared<CmId::Join>();
  std::memcpy(&join->addr, addr, address_length(addr));
  join->context = context;
  join->join_state = join_state;

  mad::McMemberRecord q;
  Gid mgid = mgid_for(id, addr);
  std::memcpy(q.mgid(), mgid.data(), 16);
  std::memcpy(q.port_gid(), id->port->gid.data(), 16);
  q.set_qkey(id->pub.ps == RDMA_PS_IPOIB ? kIpoibQkey : kUdpQkey);
  q.set_pkey(id->pkey);
  q.set_sl(0);
  q.set_flow_label(0);
  q.set_tclass(id->tos);
  q.set_hop_limit(0);
  q.set_scope(0x2);
  q.set_join_state(join_state);
  uint64_t mask = mm::kMgid | mm::kPortGid | mm::kQkey | mm::kPkey | mm::kSl | mm::kFlowLabel |
                  mm::kTclass | mm::kJoinState;
  id->joins.push_back(join);
  int err = sa_query(
      lib, id, mad::Method::kSet, mad::SaAttr::kMcMemberRecord, mask, q.bytes.data(),
      q.bytes.size(), kJoinTimeoutMs, [id, join](int status, const uint8_t* m, size_t len) {
        auto& js = id->joins;
        if (std::find(js.begin(), js.end(), join) == js.end()) return;
        if (status || len < mad::kSaDataOffset + 56 || mad::load_be16(m + 4)) {
          js.erase(std::find(js.begin(), js.end(), join));
          Event* e = post_event(id, RDMA_CM_EVENT_MULTICAST_ERROR, status ? -status : -EINVAL);
          e->pub.param.ud.private_data = join->context;
          return;
        }
        mad::McMemberRecord r;
        std::memcpy(r.bytes.data(), m + mad::kSaDataOffset, r.bytes.size());
        joined(id, join, r);
      });
  if (err) id->joins.pop_back();
  return err;
}

void leave(Library& lib, CmId* id, const std::shared_ptr<CmId::Join>& join) {
  if (join->attached && id->pub.qp) {
    ibv_gid gid;
    std::memcpy(gid.raw, join->mgid.data(), 16);
    ibv_detach_mcast(id->pub.qp, &gid, join->mlid);
  }
  if (!join->joined) return;
  mad::McMemberRecord q;
  std::memcpy(q.mgid(), join->mgid.data(), 16);
  std::memcpy(q.port_gid(), id->port->gid.data(), 16);
  q.set_join_state(join->join_state);
  sa_query(lib, id, mad::Method::kDelete, mad::SaAttr::kMcMemberRecord,
           mm::kMgid | mm::kPortGid | mm::kJoinState, q.bytes.data(), q.bytes.size(),
           kJoinTimeoutMs, [](int, const uint8_t*, size_t) {});
}

}  // namespace

void leave_all_groups(Library& lib, CmId* id) {
  for (auto& j : id->joins) leave(lib, id, j);
  id->joins.clear();
}

}  // namespace ibemu::rdmacm

using namespace ibemu::rdmacm;

extern "C" {

IBEMU_EXPORT int rdma_join_multicast_ex(rdma_cm_id* pub, rdma_cm_join_mc_attr_ex* attr,
                                        void* context) {
  if (!pub || !attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !attr->addr)
    return fail(EINVAL);
  uint8_t state = 1;  // full member
  if (attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) {
    if (attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
      state = 8;
    else if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER)
      return fail(EINVAL);
  }
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  int err = join_locked(*lib, from_pub(pub), attr->addr, state, context);
  return err ? fail(err) : 0;
}

IBEMU_EXPORT int rdma_join_multicast(rdma_cm_id* pub, sockaddr* addr, void* context) {
  rdma_cm_join_mc_attr_ex attr{};
  attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
  attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  attr.addr = addr;
  return rdma_join_multicast_ex(pub, &attr, context);
}

IBEMU_EXPORT int rdma_leave_multicast(rdma_cm_id* pub, sockaddr* addr) {
  if (!pub || !addr) return fail(EINVAL);
  Library* lib;
  if (int err = Library::get(&lib)) return fail(err);
  std::lock_guard<std::mutex> lock(lib->mu);
  CmId* id = from_pub(pub);
  for (auto it = id->joins.begin(); it != id->joins.end(); ++it) {
    if (!same_address(reinterpret_cast<sockaddr*>(&(*it)->addr), addr)) continue;
    leave(*lib, id, *it);
    id->joins.erase(it);
    return 0;
  }
  return fail(EADDRNOTAVAIL);
}

}  // extern "C"
