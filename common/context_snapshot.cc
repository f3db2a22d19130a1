#include "common/context_snapshot.h"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace ibemu {

namespace {

using nlohmann::json;

constexpr std::array<std::pair<engine::QpType, const char*>, 7> kQpTypes = {{
    {engine::QpType::kRc, "RC"},
    {engine::QpType::kUc, "UC"},
    {engine::QpType::kUd, "UD"},
    {engine::QpType::kXrcSend, "XRC_SEND"},
    {engine::QpType::kXrcRecv, "XRC_RECV"},
    {engine::QpType::kDci, "DCI"},
    {engine::QpType::kDct, "DCT"},
}};

std::optional<engine::QpType> qp_type_named(const std::string& name) {
  for (const auto& [type, n] : kQpTypes)
    if (name == n) return type;
  return std::nullopt;
}

std::optional<engine::QpState> qp_state_named(const std::string& name) {
  for (auto s = engine::QpState::kReset; s < engine::QpState::kUnknown;
       s = static_cast<engine::QpState>(static_cast<int>(s) + 1))
    if (name == engine::to_string(s)) return s;
  return std::nullopt;
}

json qp_json(const engine::QpSnapshot& q) {
  return {{"qpn", q.qpn},
          {"type", qp_type_name(q.type)},
          {"state", engine::to_string(q.state)},
          {"port", q.port},
          {"sq_psn", q.sq_psn},
          {"rq_psn", q.rq_psn},
          {"dest_qpn", q.dest_qpn},
          {"dlid", q.dlid},
          {"send_wrs", q.send_wrs},
          {"recv_wrs", q.recv_wrs},
          {"max_send_wr", q.max_send_wr},
          {"max_recv_wr", q.max_recv_wr},
          {"unacked", q.unacked},
          {"send_cq", q.send_cq},
          {"recv_cq", q.recv_cq}};
}

// Each reader throws on a missing field or one of the wrong type or range
// (nlohmann's get<uint8_t> of 300 would wrap); the caller turns that into
// "no snapshot".
template <typename T>
T field(const json& j, const char* name) {
  const json& v = j.at(name);
  if constexpr (std::is_same_v<T, bool>) {
    return v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.get<std::string>();
  } else {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > std::numeric_limits<T>::max())
      throw std::out_of_range(name);
    return static_cast<T>(v.get<uint64_t>());
  }
}

engine::QpSnapshot qp_from(const json& j) {
  engine::QpSnapshot q;
  q.qpn = field<uint32_t>(j, "qpn");
  auto type = qp_type_named(field<std::string>(j, "type"));
  auto state = qp_state_named(field<std::string>(j, "state"));
  if (!type || !state) throw std::invalid_argument("QP type or state");
  q.type = *type;
  q.state = *state;
  q.port = field<uint8_t>(j, "port");
  q.sq_psn = field<uint32_t>(j, "sq_psn");
  q.rq_psn = field<uint32_t>(j, "rq_psn");
  q.dest_qpn = field<uint32_t>(j, "dest_qpn");
  q.dlid = field<uint16_t>(j, "dlid");
  q.send_wrs = field<uint32_t>(j, "send_wrs");
  q.recv_wrs = field<uint32_t>(j, "recv_wrs");
  q.max_send_wr = field<uint32_t>(j, "max_send_wr");
  q.max_recv_wr = field<uint32_t>(j, "max_recv_wr");
  q.unacked = field<uint32_t>(j, "unacked");
  q.send_cq = field<uint32_t>(j, "send_cq");
  q.recv_cq = field<uint32_t>(j, "recv_cq");
  return q;
}

json cq_json(const engine::CqSnapshot& c) {
  return {{"cqn", c.cqn}, {"size", c.size}, {"pending", c.pending}, {"overrun", c.overrun}};
}

engine::CqSnapshot cq_from(const json& j) {
  return {field<uint32_t>(j, "cqn"), field<uint32_t>(j, "size"), field<uint32_t>(j, "pending"),
          field<bool>(j, "overrun")};
}

json mr_json(const engine::MrSnapshot& m) {
  return {{"lkey", m.lkey},          {"rkey", m.rkey},     {"pd", m.pd},
          {"iova", m.iova},          {"length", m.length}, {"access", m.access},
          {"on_device", m.on_device}};
}

engine::MrSnapshot mr_from(const json& j) {
  return {field<uint32_t>(j, "lkey"), field<uint32_t>(j, "rkey"),   field<uint32_t>(j, "pd"),
          field<uint64_t>(j, "iova"), field<uint64_t>(j, "length"), field<uint32_t>(j, "access"),
          field<bool>(j, "on_device")};
}

template <typename T, typename From>
std::vector<T> list_from(const json& j, const char* name, From from) {
  std::vector<T> out;
  const json& list = j.at(name);
  if (!list.is_array()) throw std::invalid_argument(name);
  for (const json& e : list) {
    if (out.size() == ContextSnapshot::kMaxListed) break;
    out.push_back(from(e));
  }
  return out;
}

}  // namespace

const char* qp_type_name(engine::QpType type) {
  for (const auto& [t, name] : kQpTypes)
    if (t == type) return name;
  return "UNKNOWN";
}

json to_json(const ContextSnapshot& s) {
  json qps = json::array(), cqs = json::array(), mrs = json::array();
  for (const auto& q : s.qps) qps.push_back(qp_json(q));
  for (const auto& c : s.cqs) cqs.push_back(cq_json(c));
  for (const auto& m : s.mrs) mrs.push_back(mr_json(m));
  return {{"qps", std::move(qps)},    {"cqs", std::move(cqs)},    {"mrs", std::move(mrs)},
          {"qps_total", s.qps_total}, {"cqs_total", s.cqs_total}, {"mrs_total", s.mrs_total}};
}

std::optional<ContextSnapshot> context_snapshot_from_json(const json& j) noexcept {
  try {
    if (!j.is_object()) return std::nullopt;
    ContextSnapshot s;
    s.qps = list_from<engine::QpSnapshot>(j, "qps", qp_from);
    s.cqs = list_from<engine::CqSnapshot>(j, "cqs", cq_from);
    s.mrs = list_from<engine::MrSnapshot>(j, "mrs", mr_from);
    s.qps_total = std::max<uint64_t>(field<uint64_t>(j, "qps_total"), s.qps.size());
    s.cqs_total = std::max<uint64_t>(field<uint64_t>(j, "cqs_total"), s.cqs.size());
    s.mrs_total = std::max<uint64_t>(field<uint64_t>(j, "mrs_total"), s.mrs.size());
    return s;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace ibemu
