#include "sm-lite/subnet_administrator.h"

#include <algorithm>
#include <cstring>
#include <optional>

namespace ibemu::sm {

using mad::McMemberRecord;
using mad::Method;
using mad::PathRecord;
using mad::SaAttr;
using mad::SaStatus;
namespace pm = mad::path_mask;
namespace mm = mad::mcmember_mask;

namespace {

// IBA 15.2.5.16 PacketLifeTime, 4.096 us * 2^12 (about 17 ms): an emulated
// link delivers in microseconds, but a busy host may sleep a process that
// long. rdma_cm derives its local ACK timeout from it.
constexpr uint8_t kPacketLifeTime = 12;
constexpr uint8_t kSelectorExactly = 2;
constexpr uint16_t kDefaultPkey = 0xffff;
constexpr uint16_t kFirstMlid = 0xc000;  // IBA 4.1: multicast LIDs 0xC000-0xFFFE
constexpr uint16_t kLastMlid = 0xfffe;

// The IPoIB broadcast group of a partition (RFC 4391 section 4:
// ff1S:401b:PPPP::ffff:ffff, the partition's P_Key in bytes 4-5) is the
// SM's to define: IPoIB joins it naming only MGID, P_Key and JoinState and
// takes its MTU and Q_Key from the answer. OpenSM defines one per partition
// with these parameters (Q_Key 0x0B1B, MTU 2048, SL 0); this SA creates it
// at its first join.
constexpr uint32_t kIpoibQkey = 0x0b1b;
constexpr uint8_t kIpoibMtu = 4;  // IBA enum: 2048 bytes

bool is_ipoib_broadcast(const uint8_t* mgid) {
  static constexpr uint8_t kTail[10] = {0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  return mgid[0] == 0xff && (mgid[1] & 0xf0) == 0x10 && mgid[2] == 0x40 && mgid[3] == 0x1b &&
         std::memcmp(mgid + 6, kTail, sizeof(kTail)) == 0;
}

// IBA 15.2.5.16 Rate: enum values are not in order of speed.
constexpr std::pair<double, uint8_t> kRates[] = {
    {2.5, 2},  {5, 5},    {10, 3},   {14, 11},  {20, 6},   {25, 15},  {30, 4},   {40, 7},
    {50, 20},  {56, 12},  {60, 8},   {80, 9},   {100, 16}, {112, 13}, {120, 10}, {168, 14},
    {200, 17}, {300, 18}, {400, 21}, {600, 22}, {800, 24}, {1200, 25}};

// The enum for a link's Gb/s, or the largest below it.
uint8_t rate_enum(double gbps) {
  uint8_t best = 2;
  double best_gbps = 0;
  for (auto [g, e] : kRates)
    if (g <= gbps + 0.01 && g >= best_gbps) best = e, best_gbps = g;
  return best;
}

// The Gb/s of a rate enum; 0 for a reserved value.
double rate_gbps(uint8_t rate) {
  for (auto [g, e] : kRates)
    if (e == rate) return g;
  return 0;
}

uint8_t slower_rate(uint8_t a, uint8_t b) { return rate_gbps(a) <= rate_gbps(b) ? a : b; }

double port_gbps(const mad::PortInfo& pi) {
  double lane = 2.5;
  switch (pi.link_speed_ext_active()) {
    case 1:
      lane = 14;
      break;
    case 2:
      lane = 25;
      break;
    case 4:
      lane = 50;
      break;
    case 8:
      lane = 100;
      break;
    default:
      lane = pi.link_speed_active() == 4 ? 10 : pi.link_speed_active() == 2 ? 5 : 2.5;
  }
  switch (pi.link_width_active()) {
    case mad::kLinkWidth4x:
      return lane * 4;
    case mad::kLinkWidth8x:
      return lane * 8;
    case mad::kLinkWidth12x:
      return lane * 12;
    default:
      return lane;
  }
}

// IBA 15.2.5.16: MTU, Rate and PacketLifeTime selectors (0 greater than,
// 1 less than, 2 exactly, 3 the largest available). MTU and PacketLifeTime
// enums are in order of size; rates compare by speed.
constexpr uint8_t kSelectorGreater = 0, kSelectorLess = 1;

bool selector_ok(uint8_t selector, double wanted, double actual) {
  switch (selector) {
    case kSelectorGreater:
      return actual > wanted;
    case kSelectorLess:
      return actual < wanted;
    case kSelectorExactly:
      return actual == wanted;
    default:
      return true;
  }
}

// What a new multicast group gets for a component its creator may select
// (IBA C15-0.2.3 lets the creator choose MTU, rate and packet lifetime):
// the best the fabric offers when that satisfies the request, else the
// nearest value that does; nullopt when none does. IPoIB creates its groups
// with the broadcast group's values, selected exactly, and the kernel's
// multicast code refuses an answer that differs (cmp_rec: EINVAL).
std::optional<uint8_t> group_mtu(bool given, uint8_t selector, uint8_t wanted, uint8_t max) {
  if (!given || selector_ok(selector, wanted, max)) return max;
  if (selector == kSelectorExactly && wanted >= 1 && wanted <= max) return wanted;
  if (selector == kSelectorLess && wanted > 1) return std::min<uint8_t>(max, wanted - 1);
  return std::nullopt;
}

std::optional<uint8_t> group_rate(bool given, uint8_t selector, uint8_t wanted, uint8_t port) {
  const double want = rate_gbps(wanted), best = rate_gbps(port);
  if (!given || selector_ok(selector, want, best)) return port;
  if (selector == kSelectorExactly && want > 0 && want <= best) return wanted;
  const uint8_t below = rate_enum(want - 1);
  if (selector == kSelectorLess && rate_gbps(below) < want) return below;
  return std::nullopt;
}

std::optional<uint8_t> group_life_time(bool given, uint8_t selector, uint8_t wanted) {
  if (!given || selector_ok(selector, wanted, kPacketLifeTime)) return kPacketLifeTime;
  if (selector == kSelectorExactly) return wanted;
  if (selector == kSelectorGreater && wanted < 63) return uint8_t(wanted + 1);
  if (selector == kSelectorLess && wanted > 0) return uint8_t(wanted - 1);
  return std::nullopt;
}

// A component's selector, "exactly" when the request leaves it out.
uint8_t selector(uint8_t given, uint64_t mask, uint64_t selector_bit) {
  return (mask & selector_bit) ? given : kSelectorExactly;
}

bool is_zero(const uint8_t* gid) {
  return std::all_of(gid, gid + 16, [](uint8_t b) { return b == 0; });
}

Gid to_gid(const uint8_t* p) {
  Gid g;
  std::memcpy(g.data(), p, 16);
  return g;
}

template <typename Record>
std::vector<uint8_t> bytes_of(const Record& r) {
  return {r.bytes.begin(), r.bytes.end()};
}

}  // namespace

std::vector<SubnetAdministrator::PortView> SubnetAdministrator::ports() const {
  std::vector<PortView> out;
  for (const SmNode& n : sm_.nodes()) {
    if (n.type != mad::NodeType::kCa) continue;
    for (const auto& [num, p] : n.ports) {
      if (!p.known || p.info.lid() == 0) continue;
      PortView v;
      mad::store_be64(v.gid.data(), p.info.gid_prefix());
      mad::store_be64(v.gid.data() + 8, p.guid);
      v.lid = p.info.lid();
      v.mtu = p.info.neighbor_mtu() ? p.info.neighbor_mtu() : p.info.mtu_cap();
      v.rate = rate_enum(port_gbps(p.info));
      out.push_back(v);
    }
  }
  return out;
}

std::optional<SubnetAdministrator::PortView> SubnetAdministrator::port_by_gid(
    const uint8_t* gid) const {
  for (const PortView& v : ports())
    if (std::memcmp(v.gid.data(), gid, 16) == 0) return v;
  return std::nullopt;
}

std::optional<SubnetAdministrator::PortView> SubnetAdministrator::port_by_lid(uint16_t lid) const {
  for (const PortView& v : ports())
    if (v.lid == lid) return v;
  return std::nullopt;
}

std::optional<std::vector<uint8_t>> SubnetAdministrator::handle(const uint8_t* req, size_t len,
                                                                uint16_t requester_lid) {
  if (len < mad::kSaDataOffset || req[1] != uint8_t(mad::MgmtClass::kSubnAdm) ||
      (req[3] & mad::kMethodResponseBit))
    return std::nullopt;
  const auto method = Method(req[3]);
  const auto attr = SaAttr(mad::load_be16(req + 16));
  const uint64_t mask = mad::load_be64(req + mad::kSaComponentMaskOffset);
  // The query: the request's data area, padded so any record fits.
  std::array<uint8_t, 64> query{};
  std::memcpy(query.data(), req + mad::kSaDataOffset,
              std::min(query.size(), len - mad::kSaDataOffset));

  Records records;
  size_t record_size = 0;
  uint16_t status = 0;
  const bool table = method == Method::kGetTable;
  if (req[2] != mad::kSaClassVersion) {
    status = uint16_t(mad::MadStatus::kBadVersion);
  } else if (attr == SaAttr::kClassPortInfo && method == Method::kGet) {
    // IBA 13.4.8.1 ClassPortInfo: versions, and RespTimeValue (4.096 us * 2^18).
    std::vector<uint8_t> info(72, 0);
    info[0] = mad::kBaseVersion;
    info[1] = mad::kSaClassVersion;
    info[7] = 18;
    records.push_back(std::move(info));
    record_size = 72;
  } else if (attr == SaAttr::kNodeRecord && (method == Method::kGet || table)) {
    status = uint16_t(node_records(query.data(), mask, &records));
    record_size = mad::kNodeRecordSize;
  } else if (attr == SaAttr::kPathRecord && (method == Method::kGet || table)) {
    status = uint16_t(path_records(query.data(), mask, requester_lid, &records));
    record_size = sizeof(PathRecord);
  } else if (attr == SaAttr::kMcMemberRecord && method == Method::kSet) {
    status = uint16_t(join(query.data(), mask, &records));
    record_size = sizeof(McMemberRecord);
  } else if (attr == SaAttr::kMcMemberRecord && method == Method::kDelete) {
    status = uint16_t(leave(query.data(), mask, &records));
    record_size = sizeof(McMemberRecord);
  } else if (attr == SaAttr::kMcMemberRecord && (method == Method::kGet || table)) {
    status = uint16_t(member_records(query.data(), mask, &records));
    record_size = sizeof(McMemberRecord);
  } else {
    status = uint16_t(mad::MadStatus::kUnsupportedMethodAttr);
  }
  // IBA 15.2.5: a Get that matches nothing is "no records"; a Get answers
  // with the first match, a GetTable with all of them.
  if (status == 0 && records.empty() && !table) status = uint16_t(SaStatus::kNoRecords);
  if (status != 0 || !table) records.resize(std::min<size_t>(records.size(), 1));
  if (status != 0) records.clear();

  const size_t payload = records.size() * record_size;
  // A table is exactly as long as its records (the receiver counts them by
  // length); any other response is one MAD.
  std::vector<uint8_t> resp(table ? mad::kSaDataOffset + payload : mad::kMadSize, 0);
  std::memcpy(resp.data(), req, mad::kSaDataOffset);
  resp[3] = uint8_t(method == Method::kSet ? Method::kGetResp
                                           : Method(uint8_t(method) | mad::kMethodResponseBit));
  mad::store_be16(resp.data() + 4, status);
  std::memset(resp.data() + mad::kSaRmppOffset, 0, 12);
  if (table) {
    // A table arrives as one RMPP transfer (IBA 13.6); the receiver's MAD
    // layer hands the program the reassembled whole: DATA, first and last
    // segment, PayloadLength covering the SA header and the records.
    uint8_t* rmpp = resp.data() + mad::kSaRmppOffset;
    rmpp[0] = 1;
    rmpp[1] = 1;
    rmpp[2] = 0x07;
    mad::store_be32(rmpp + 4, 1);
    mad::store_be32(rmpp + 8, uint32_t(mad::kSaDataOffset - mad::kSaSmKeyOffset + payload));
  }
  mad::store_be16(resp.data() + mad::kSaAttrOffsetOffset, uint16_t(record_size / 8));
  for (size_t i = 0; i < records.size(); ++i)
    std::memcpy(resp.data() + mad::kSaDataOffset + i * record_size, records[i].data(),
                std::min(record_size, records[i].size()));
  return resp;
}

SaStatus SubnetAdministrator::path_records(const uint8_t* query, uint64_t mask,
                                           uint16_t requester_lid, Records* out) const {
  PathRecord q;
  std::memcpy(q.bytes.data(), query, q.bytes.size());
  // The source is the SGID or SLID given, else the port that asks.
  std::optional<PortView> src = (mask & pm::kSgid)   ? port_by_gid(q.sgid())
                                : (mask & pm::kSlid) ? port_by_lid(q.slid())
                                                     : port_by_lid(requester_lid);
  if (!src) return (mask & pm::kSgid) ? SaStatus::kInvalidGid : SaStatus::kNoRecords;
  if ((mask & pm::kPkey) && (q.pkey() & 0x7fff) != (kDefaultPkey & 0x7fff)) return SaStatus::kOk;
  for (const PortView& dst : ports()) {
    if ((mask & pm::kDgid) && std::memcmp(dst.gid.data(), q.dgid(), 16) != 0) continue;
    if ((mask & pm::kDlid) && dst.lid != q.dlid()) continue;
    PathRecord r;
    std::memcpy(r.dgid(), dst.gid.data(), 16);
    std::memcpy(r.sgid(), src->gid.data(), 16);
    r.set_dlid(dst.lid);
    r.set_slid(src->lid);
    r.set_reversible(true);
    r.set_numb_path(1);
    r.set_pkey(kDefaultPkey);
    r.set_sl((mask & pm::kSl) ? q.sl() : 0);
    r.set_mtu_selector(kSelectorExactly);
    r.set_mtu(std::min(src->mtu, dst.mtu));
    r.set_rate_selector(kSelectorExactly);
    r.set_rate(slower_rate(src->rate, dst.rate));
    r.set_packet_life_time_selector(kSelectorExactly);
    r.set_packet_life_time(kPacketLifeTime);
    if ((mask & pm::kMtu) &&
        !selector_ok(selector(q.mtu_selector(), mask, pm::kMtuSelector), q.mtu(), r.mtu()))
      continue;
    out->push_back(bytes_of(r));
  }
  return SaStatus::kOk;
}

Gid SubnetAdministrator::assign_mgid() {
  // IBA 4.1.1: an SA-assigned MGID, link-local scope, signature 0xA01B.
  Gid g{0xff, 0x12, 0xa0, 0x1b};
  mad::store_be32(g.data() + 12, next_mgid_++);
  return g;
}

uint16_t SubnetAdministrator::assign_mlid() const {
  for (uint32_t mlid = kFirstMlid; mlid <= kLastMlid; ++mlid) {
    bool used = false;
    for (const auto& [mgid, g] : groups_) used |= g.record.mlid() == mlid;
    if (!used) return uint16_t(mlid);
  }
  return 0;
}

SaStatus SubnetAdministrator::join(const uint8_t* query, uint64_t mask, Records* out) {
  McMemberRecord q;
  std::memcpy(q.bytes.data(), query, q.bytes.size());
  if (!(mask & mm::kPortGid) || !(mask & mm::kJoinState) || q.join_state() == 0)
    return SaStatus::kInsufficientComponents;
  const auto port = port_by_gid(q.port_gid());
  if (!port) return SaStatus::kInvalidGid;
  const bool named = (mask & mm::kMgid) && !is_zero(q.mgid());
  if (named && q.mgid()[0] != 0xff) return SaStatus::kInvalidGid;

  auto it = named ? groups_.find(to_gid(q.mgid())) : groups_.end();
  const bool ipoib_broadcast = named && it == groups_.end() && is_ipoib_broadcast(q.mgid());
  if (ipoib_broadcast) {
    q.set_qkey(kIpoibQkey);
    q.set_pkey(uint16_t(q.mgid()[4] << 8 | q.mgid()[5]));
    q.set_sl(0);
    q.set_flow_label(0);
    q.set_tclass(0);
    mask |= mm::kQkey | mm::kPkey | mm::kSl | mm::kFlowLabel | mm::kTclass;
  }
  if (it == groups_.end()) {
    // C15-0.2.3: creating a group takes its defining components, and only a
    // full member creates.
    const uint64_t needed = mm::kQkey | mm::kPkey | mm::kSl | mm::kFlowLabel | mm::kTclass;
    if ((mask & needed) != needed) return SaStatus::kInsufficientComponents;
    if (!(q.join_state() & mad::kJoinFullMember)) return SaStatus::kReqInvalid;
    const uint16_t mlid = assign_mlid();
    if (!mlid) return SaStatus::kNoResources;
    const uint8_t max_mtu = ipoib_broadcast ? std::min(port->mtu, kIpoibMtu) : port->mtu;
    const auto mtu = group_mtu(mask & mm::kMtu, selector(q.mtu_selector(), mask, mm::kMtuSelector),
                               q.mtu(), max_mtu);
    const auto rate =
        group_rate(mask & mm::kRate, selector(q.rate_selector(), mask, mm::kRateSelector), q.rate(),
                   port->rate);
    const auto life =
        group_life_time(mask & mm::kPacketLifeTime,
                        selector(q.packet_life_time_selector(), mask, mm::kPacketLifeTimeSelector),
                        q.packet_life_time());
    if (!mtu || !rate || !life) return SaStatus::kReqInvalid;
    McGroup g;
    g.record = q;
    const Gid mgid = named ? to_gid(q.mgid()) : assign_mgid();
    std::memcpy(g.record.mgid(), mgid.data(), 16);
    g.record.set_mlid(mlid);
    g.record.set_mtu_selector(kSelectorExactly);
    g.record.set_mtu(*mtu);
    g.record.set_rate_selector(kSelectorExactly);
    g.record.set_rate(*rate);
    g.record.set_packet_life_time_selector(kSelectorExactly);
    g.record.set_packet_life_time(*life);
    g.record.set_scope(mgid[1] & 0x0f);
    it = groups_.emplace(mgid, g).first;
  } else {
    // Joining an existing group: what the request gives must be the group's.
    const McMemberRecord& r = it->second.record;
    const bool mtu_ok =
        !(mask & mm::kMtu) ||
        selector_ok(selector(q.mtu_selector(), mask, mm::kMtuSelector), q.mtu(), r.mtu());
    const bool rate_ok =
        !(mask & mm::kRate) || selector_ok(selector(q.rate_selector(), mask, mm::kRateSelector),
                                           rate_gbps(q.rate()), rate_gbps(r.rate()));
    const bool life_ok =
        !(mask & mm::kPacketLifeTime) ||
        selector_ok(selector(q.packet_life_time_selector(), mask, mm::kPacketLifeTimeSelector),
                    q.packet_life_time(), r.packet_life_time());
    if (((mask & mm::kQkey) && q.qkey() != r.qkey()) ||
        ((mask & mm::kPkey) && q.pkey() != r.pkey()) ||
        ((mask & mm::kMlid) && q.mlid() != r.mlid()) || !mtu_ok || !rate_ok || !life_ok)
      return SaStatus::kReqInvalid;
  }
  uint8_t& state = it->second.members[to_gid(q.port_gid())];
  state |= q.join_state();
  McMemberRecord r = it->second.record;
  std::memcpy(r.port_gid(), q.port_gid(), 16);
  r.set_join_state(state);
  out->push_back(bytes_of(r));
  return SaStatus::kOk;
}

SaStatus SubnetAdministrator::leave(const uint8_t* query, uint64_t mask, Records* out) {
  McMemberRecord q;
  std::memcpy(q.bytes.data(), query, q.bytes.size());
  if (!(mask & mm::kMgid) || !(mask & mm::kPortGid) || !(mask & mm::kJoinState))
    return SaStatus::kInsufficientComponents;
  auto it = groups_.find(to_gid(q.mgid()));
  if (it == groups_.end()) return SaStatus::kReqInvalid;
  auto member = it->second.members.find(to_gid(q.port_gid()));
  if (member == it->second.members.end()) return SaStatus::kReqInvalid;
  McMemberRecord r = it->second.record;
  std::memcpy(r.port_gid(), q.port_gid(), 16);
  r.set_join_state(q.join_state());
  out->push_back(bytes_of(r));
  member->second &= uint8_t(~q.join_state());
  if (member->second == 0) it->second.members.erase(member);
  if (it->second.members.empty()) groups_.erase(it);
  return SaStatus::kOk;
}

SaStatus SubnetAdministrator::member_records(const uint8_t* query, uint64_t mask,
                                             Records* out) const {
  McMemberRecord q;
  std::memcpy(q.bytes.data(), query, q.bytes.size());
  for (const auto& [mgid, g] : groups_) {
    if ((mask & mm::kMgid) && std::memcmp(mgid.data(), q.mgid(), 16) != 0) continue;
    if ((mask & mm::kMlid) && g.record.mlid() != q.mlid()) continue;
    for (const auto& [port_gid, state] : g.members) {
      if ((mask & mm::kPortGid) && std::memcmp(port_gid.data(), q.port_gid(), 16) != 0) continue;
      McMemberRecord r = g.record;
      std::memcpy(r.port_gid(), port_gid.data(), 16);
      r.set_join_state(state);
      out->push_back(bytes_of(r));
    }
  }
  return SaStatus::kOk;
}

SaStatus SubnetAdministrator::node_records(const uint8_t* query, uint64_t mask,
                                           Records* out) const {
  namespace nm = mad::node_mask;
  const uint16_t want_lid = mad::load_be16(query);
  mad::NodeInfo want;
  std::memcpy(want.bytes.data(), query + 4, want.bytes.size());
  for (const SmNode& n : sm_.nodes()) {
    for (const auto& [num, p] : n.ports) {
      // A CA has a record per port (its LID, its PortGUID); a switch one, for port 0.
      const bool is_switch = n.type == mad::NodeType::kSwitch;
      if (is_switch != (num == 0) || !p.known || p.info.lid() == 0) continue;
      mad::NodeInfo ni = n.info;
      if (!is_switch) {
        ni.set_port_guid(p.guid);
        ni.set_local_port_num(uint8_t(num));
      }
      if (((mask & nm::kLid) && p.info.lid() != want_lid) ||
          ((mask & nm::kNodeType) && ni.node_type() != want.node_type()) ||
          ((mask & nm::kNodeGuid) && ni.node_guid() != want.node_guid()) ||
          ((mask & nm::kPortGuid) && ni.port_guid() != want.port_guid()))
        continue;
      std::vector<uint8_t> r(mad::kNodeRecordSize, 0);
      mad::store_be16(r.data(), p.info.lid());
      std::memcpy(r.data() + 4, ni.bytes.data(), ni.bytes.size());
      mad::NodeDescription nd;
      nd.set_text(n.description);
      std::memcpy(r.data() + 4 + ni.bytes.size(), nd.bytes.data(), nd.bytes.size());
      out->push_back(std::move(r));
    }
  }
  return SaStatus::kOk;
}

}  // namespace ibemu::sm
