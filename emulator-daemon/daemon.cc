#include "emulator-daemon/daemon.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/capture_record.h"
#include "common/hex.h"
#include "common/json_integer.h"
#include "common/log.h"
#include "common/mad/mad.h"
#include "emulator-daemon/heap_usage.h"
#include "kernel/ibemu_abi.h"
#include "transport/engine/types.h"
#include "transport/wire/lrh.h"

namespace ibemu {

Json error_reply(int err, const std::string& message) {
  return {{"ok", false}, {"errno", err}, {"error", message}};
}

namespace {
Json ok_reply() { return {{"ok", true}}; }

// ibemu.ko's control device (kernel/ibemu_abi.h).
constexpr const char* kKernelControlDevice = "/dev/" IBEMU_CTL_DEVICE_NAME;

}  // namespace

const char* port_state_word(PortState s) {
  switch (s) {
    case PortState::kDown:
      return "DOWN";
    case PortState::kInit:
      return "INIT";
    case PortState::kArmed:
      return "ARMED";
    case PortState::kActive:
      return "ACTIVE";
    default:
      return "NOP";
  }
}

Daemon::Daemon(boost::asio::io_context& io, Config config, RuntimePaths paths)
    : io_(io),
      config_(std::move(config)),
      paths_(std::move(paths)),
      subnet_(config_),
      sysfs_(paths_.sysfs(), config_),
      state_page_(config_, subnet_),
      counters_(config_),
      pma_(config_, counters_),
      server_(io, paths_.socket(), *this, config_.sessions_per_user),
      umad_(io, subnet_),
      capture_(io, subnet_, [this](uint32_t n) { state_page_.set_capture_sessions(n); }),
      ip_addresses_(config_),
      kernel_(io, config_, subnet_) {}

Daemon::~Daemon() { stop(); }

void Daemon::start() {
  sysfs_.create(subnet_);
  umad_.set_local_agent(
      uint8_t(mad::MgmtClass::kPerfMgt),
      [this](PortRef port, const uint8_t* mad, size_t len) { return pma_.handle(port, mad, len); });
  umad_.set_tap([this](PortRef from, uint16_t slid, uint16_t dlid, uint32_t sqpn, uint32_t dqpn,
                       const uint8_t* mad, size_t len) {
    capture_.record_mad(from, slid, dlid, sqpn, dqpn, mad, len);
  });
  umad_.start(paths_.sysfs() + "/dev/infiniband", subnet_.ports());
  capture_.start(paths_.dir + "/" + kCaptureSocketName);
  subnet_.on_port_change([this](PortRef p) { on_port_change(p); });
  const bool kernel_mode = kernel_.start(
      kKernelControlDevice,
      [this](PortRef port, const uint8_t* mad) { return answer_kernel_mad(port, mad); },
      [this](PortRef port, uint32_t qpn, uint16_t dlid, const uint8_t* mad, size_t len) {
        umad_.router().send_from_port(port, qpn, dlid, mad, len);
      },
      [this](PortRef port, uint32_t set, uint32_t clear) {
        subnet_.modify_capabilities(port, set, clear);
      });
  if (kernel_mode) {
    umad_.router().set_port_sink(
        [this](PortRef port, uint16_t slid, uint32_t src_qp, uint32_t dst_qp, const uint8_t* mad,
               size_t len) { kernel_.deliver_mad(port, slid, src_qp, dst_qp, mad, len); });
    // The kernel's devices are everyone's (ib_uverbs makes uverbsN 0666),
    // so every user's programs must reach the daemon that serves them;
    // what changes the fabric stays the daemon owner's (fabric_admin_op).
    chmod(paths_.dir.c_str(), 0755);
    chmod(paths_.socket().c_str(), 0666);
  }
  server_.start();
  if (kernel_mode) start_kernel_plane();
  start_fabric();
  apply_configured_faults();
  log_info("ibemud {} serving {} device(s) on {}", getpid(), config_.devices.size(),
           paths_.socket());
}

void Daemon::stop() {
  if (stopped_) return;
  stopped_ = true;
  server_.stop();
  // After the server: the plane's requests in flight end with its sessions.
  if (kernel_plane_) kernel_plane_->stop();
  status_timer_.cancel();
  // After the server: a request of the fabric's receive thread in flight
  // ends with its session.
  if (fabric_) fabric_->stop();
  umad_.stop();
  capture_.stop();
  kernel_.stop();
  sysfs_.remove();
  if (on_stop_) on_stop_();
}

void Daemon::on_port_change(PortRef port) {
  sysfs_.update_port(subnet_, port);
  state_page_.update_port(port);
  kernel_.update_port(port);
  PortAttributes a = subnet_.port(port);
  log_info("{} port {}: {} lid {} sm_lid {}", config_.devices[port.device].name, port.port,
           port_state_word(a.state), a.lid, a.sm_lid);
}

std::optional<std::array<uint8_t, 256>> Daemon::answer_kernel_mad(PortRef port,
                                                                  const uint8_t* mad) {
  std::array<uint8_t, 256> smp;
  std::copy(mad, mad + smp.size(), smp.begin());
  const uint8_t mgmt_class = smp[1];
  if (mgmt_class == uint8_t(mad::MgmtClass::kPerfMgt)) {
    auto resp = pma_.handle(port, smp.data(), smp.size());
    if (!resp || resp->size() != smp.size()) return std::nullopt;
    std::copy(resp->begin(), resp->end(), smp.begin());
    return smp;
  }
  if (!mad::is_smp_class(mgmt_class)) return std::nullopt;
  return subnet_.process_smp(port, smp.data(), smp.size(), subnet_.port(port).lid);
}

// Requests that change the fabric for every user of the host, or see every
// user's packets: the SM's, captures, faults and shutdown.
static bool fabric_admin_op(const std::string& op) {
  return op == "sm_attach" || op == "smp" || op.starts_with("capture_") ||
         op.starts_with("fault_") || op == "link" || op == "shutdown";
}

Json Daemon::on_request(SessionInfo& s, const Json& req, std::vector<int>& fds_in,
                        std::vector<int>& fds_out) {
  try {
    const std::string op = req.value("op", "");
    if (fabric_admin_op(op) && s.uid != 0 && s.uid != geteuid())
      return error_reply(EPERM, op + " is for the daemon's owner or root");
    if (op == "hello") return do_hello(s, req, fds_out);
    if (op == "ping") return {{"ok", true}, {"pid", getpid()}};
    if (op == "devices") return do_devices();
    if (op == "status") return do_status(s, req);
    if (op == "register_inbox") return do_register_inbox(s, fds_in);
    if (op == "open_context") return do_open_context(s, req, fds_in);
    if (op == "close_context") return do_close_context(s, req);
    if (op == "create_qp") return do_create_qp(s, req);
    if (op == "destroy_qp") return do_destroy_qp(s, req);
    if (op == "resolve") return do_resolve(s, req, fds_out);
    if (op == "mcast_attach") return do_mcast(s, req, true);
    if (op == "mcast_detach") return do_mcast(s, req, false);
    if (op == "resolve_mcast") return do_resolve_mcast(s, req, fds_out);
    if (op == "resolve_srq" || op == "resolve_qp" || op == "resolve_session")
      return do_resolve_owner(s, op, req, fds_out);
    if (op == "open_xrcd") return do_open_xrcd(s, req);
    if (op == "close_xrcd") return do_close_xrcd(s, req);
    if (op == "alloc_srqn") return do_srqn(s, req, true);
    if (op == "free_srqn") return do_srqn(s, req, false);
    if (op == "sm_attach") return do_sm_attach(s, req);
    if (op == "sm_info") return do_sm_info(s, req);
    if (op == "smp") return do_smp(s, req);
    if (op == "capture_start" || op == "capture_status" || op == "capture_stop")
      return do_capture(s, op, req);
    if (op == "fault_set" || op == "fault_clear" || op == "link") return do_fault(op, req);
    if (op == "fault_nak") return do_forced_nak(req);
    if (op == "ip_addresses") return do_ip_addresses();
    if (op == "resolve_ip") return do_resolve_ip(req);
    if (op == "kernel_plane") return do_kernel_plane(s, req);
    if (op == "cm_bind" || op == "cm_unbind") return do_cm_bind(s, req, op == "cm_bind");
    if (op == "shutdown") return do_shutdown();
    return error_reply(EOPNOTSUPP, "unknown op '" + op + "'");
  } catch (const std::exception& e) {
    // A field of the wrong type; the daemon answers and carries on.
    return error_reply(EINVAL, std::string("bad request: ") + e.what());
  }
}

void Daemon::on_session_closed(const SessionInfo& s) {
  // A session may bind rdma_cm ports without saying hello first.
  cm_ports_.release_all(s.id);
  auto it = clients_.find(s.id);
  if (it == clients_.end()) return;
  Client& c = it->second;
  size_t freed = qps_.release_all(s.id);
  for (uint64_t id : c.counter_ids) counters_.remove(id);
  snapshots_.remove_session(s.id);
  mcast_.leave_all(s.id);
  capture_.end_all(s.id);
  xrcds_.close_all(s.id);
  srqns_.release_all(s.id);
  if (c.inbox_fd >= 0) {
    close(c.inbox_fd);
    state_page_.note_inbox_closed();
  }
  if (c.sm_port) subnet_.set_is_sm(*c.sm_port, false);
  if (freed || c.contexts)
    log_info("process {} ({}) left: {} context(s), {} QP(s) reclaimed", s.pid, s.role, c.contexts,
             freed);
  clients_.erase(it);
}

int Daemon::device_index(const Json& v) const {
  if (v.is_number_integer()) {
    int d = v.get<int>();
    return d >= 0 && d < static_cast<int>(config_.devices.size()) ? d : -1;
  }
  if (v.is_string())
    for (size_t i = 0; i < config_.devices.size(); ++i)
      if (config_.devices[i].name == v.get<std::string>()) return static_cast<int>(i);
  return -1;
}

Json Daemon::do_hello(SessionInfo& s, const Json& req, std::vector<int>& fds_out) {
  s.role = req.value("role", "unknown");
  client_of(s);
  Json reply = ok_reply();
  reply["daemon_epoch"] = state_page_.epoch();
  reply["session"] = s.id;
  reply["registered_bytes_per_context"] = config_.registered_bytes_per_context;
  if (req.value("want_state_page", false)) {
    int fd = state_page_.reader_fd();
    if (fd < 0) return error_reply(errno, "cannot share the state page");
    fds_out.push_back(fd);
  }
  return reply;
}

Daemon::Client& Daemon::client_of(const SessionInfo& s) {
  auto [it, made] = clients_.try_emplace(s.id);
  if (made) it->second.uid = s.uid;
  return it->second;
}

// A process with another's inbox can read the packets others send it and
// write into its ring: on a daemon that several users share (kernel mode),
// only a user's own processes, and root, get it.
bool Daemon::may_reach(const SessionInfo& asker, SessionId owner) const {
  if (config_.users == "shared" || asker.uid == 0) return true;
  auto it = clients_.find(owner);
  return it != clients_.end() && it->second.uid == asker.uid;
}

namespace {
Json other_user_reply(const std::string& what) {
  return error_reply(EACCES, what +
                                 " belongs to another user's process (the daemon's config "
                                 "\"users\": \"shared\" lets users reach each other)");
}
}  // namespace

Json Daemon::do_devices() {
  Json devs = Json::array();
  for (size_t i = 0; i < config_.devices.size(); ++i) {
    const auto& d = config_.devices[i];
    devs.push_back({{"index", i},
                    {"name", d.name},
                    {"node_guid", fmt::format("0x{:016x}", d.node_guid)},
                    {"ports", d.ports}});
  }
  Json reply = ok_reply();
  reply["devices"] = devs;
  return reply;
}

Json Daemon::status_reply() {
  Json reply = do_devices();
  reply["fabric"] = fabric_status();
  reply["kernel"] = kernel_status();
  for (auto& dev : reply["devices"]) {
    int d = dev["index"].get<int>();
    Json ports = Json::array();
    for (int p = 1; p <= config_.devices[d].ports; ++p) {
      PortAttributes a = subnet_.port({d, p});
      ports.push_back({{"port", p},
                       {"state", port_state_word(a.state)},
                       {"lid", a.lid},
                       {"sm_lid", a.sm_lid},
                       {"port_guid", fmt::format("0x{:016x}", a.port_guid)},
                       {"counters", counters_.port_json(d, p)}});
      if (auto f = faults_.find({d, p}); f != faults_.end()) {
        const LinkFaultView& v = f->second;
        ports.back()["faults"] = {
            {"drop_ppm", v.drop_ppm}, {"dup_ppm", v.dup_ppm},     {"reorder_ppm", v.reorder_ppm},
            {"delay_us", v.delay_us}, {"jitter_us", v.jitter_us}, {"rate_mbps", v.rate_mbps},
            {"seed", v.seed}};
      }
    }
    dev["port_info"] = ports;
    dev["drops"] = counters_.device_drops_json(d);
    dev["gpu_memory"] = counters_.gpu_memory_json(d);
  }
  Json procs = Json::array();
  for (auto& s : server_.sessions()) {
    auto it = clients_.find(s.id);
    if (it == clients_.end()) continue;
    procs.push_back(process_json(s, it->second));
  }
  reply["processes"] = procs;
  reply["ip_addresses"] = do_ip_addresses()["addresses"];
  reply["cm_ports"] = cm_status();
  // Every SM attached here, each with what it published of itself; "sm" is
  // the master among them (or the last one, while none is master).
  reply["sm"] = nullptr;
  Json sms = Json::array();
  for (auto& s : server_.sessions()) {
    auto it = clients_.find(s.id);
    if (it == clients_.end() || !it->second.sm_port) continue;
    const PortRef port = *it->second.sm_port;
    const Subnet::SmInfoView info = subnet_.sm_info(port);
    Json sm = {{"pid", s.pid},
               {"device", config_.devices[port.device].name},
               {"port", port.port},
               {"priority", info.priority},
               {"state", mad::sm_state_keyword(info.state)}};
    if (reply["sm"].is_null() || reply["sm"]["state"] != "master") reply["sm"] = sm;
    sms.push_back(std::move(sm));
  }
  reply["sms"] = sms;
  reply["qps"] = qps_.size();
  reply["pid"] = getpid();
  reply["heap_in_use"] = heap_in_use();
  reply["runtime_dir"] = paths_.dir;
  reply["subnet"] = subnet_.describe();
  const MadRouterCounters& m = umad_.counters();
  reply["mads"] = {{"umad_files", umad_.files()},
                   {"sent", m.sent},
                   {"delivered", m.delivered},
                   {"unmatched_requests", m.unmatched_requests},
                   {"unsolicited_responses", m.unsolicited_responses},
                   {"unreachable", m.unreachable},
                   {"malformed", m.malformed},
                   {"timeouts", m.timeouts},
                   {"cm_routed", m.cm_routed},
                   {"cm_unmatched", m.cm_unmatched}};
  return reply;
}

Json Daemon::process_json(const SessionInfo& s, const Client& c) const {
  return {{"pid", s.pid}, {"role", s.role}, {"contexts", c.contexts}, {"qps", qps_.count(s.id)}};
}

Json Daemon::do_register_inbox(SessionInfo& s, std::vector<int>& fds_in) {
  if (fds_in.size() != 1) return error_reply(EINVAL, "register_inbox needs one memfd");
  Client& c = client_of(s);
  if (c.inbox_fd >= 0) close(c.inbox_fd);
  c.inbox_fd = fds_in[0];
  fds_in.clear();
  return ok_reply();
}

// A context may bring its counter page (a memfd the provider counts into)
// and then its snapshot page (what it answers `status` with).
Json Daemon::do_open_context(SessionInfo& s, const Json& req, std::vector<int>& fds_in) {
  const int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  CounterPage page;
  SnapshotPage snapshot_page;
  if (fds_in.size() > 2) return error_reply(EINVAL, "open_context takes at most two pages");
  // Each page owns (and closes) the fd it is given; the server closes the rest.
  if (!fds_in.empty()) {
    int err = page.attach_read_only(std::exchange(fds_in[0], -1));
    if (!err && fds_in.size() == 2)
      err = snapshot_page.attach_read_only(std::exchange(fds_in[1], -1));
    if (err) return error_reply(err, "cannot map the counter or snapshot page");
  }
  Client& c = client_of(s);
  if (c.contexts >= int64_t{config_.contexts_per_session})
    return error_reply(EMFILE, fmt::format("this connection holds {} device contexts, its limit "
                                           "(config limits.contexts_per_session)",
                                           c.contexts));
  ++c.contexts;
  const uint64_t id = counters_.add(d, std::move(page));
  c.counter_ids.push_back(id);
  if (snapshot_page.attached()) snapshots_.add(id, s.id, d, std::move(snapshot_page));
  Json reply = ok_reply();
  reply["context"] = id;
  return reply;
}

Json Daemon::do_close_context(SessionInfo& s, const Json& req) {
  if (device_index(req.at("device")) < 0) return error_reply(ENODEV, "no such device");
  Client& c = client_of(s);
  c.contexts = std::max(0, c.contexts - 1);
  const uint64_t id = json_integer_or<uint64_t>(req, "context", 0);
  auto it = std::find(c.counter_ids.begin(), c.counter_ids.end(), id);
  if (it != c.counter_ids.end()) {
    counters_.remove(id);
    snapshots_.remove(id);
    c.counter_ids.erase(it);
  }
  return ok_reply();
}

Json Daemon::do_create_qp(SessionInfo& s, const Json& req) {
  int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  Client& c = client_of(s);
  if (c.inbox_fd < 0) return error_reply(EINVAL, "register an inbox first");
  if (c.qps[d] >= config_.qps_per_context)
    return error_reply(ENOMEM, fmt::format("this context holds {} QPs of the device, its limit "
                                           "(config limits.qps_per_context)",
                                           c.qps[d]));
  auto qpn = qps_.allocate(d, s.id);
  if (!qpn) return error_reply(ENOMEM, "no free QP number");
  ++c.qps[d];
  Json reply = ok_reply();
  reply["qpn"] = *qpn;
  return reply;
}

Json Daemon::do_destroy_qp(SessionInfo& s, const Json& req) {
  int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  if (!qps_.release(d, json_integer<uint32_t>(req.at("qpn")), s.id))
    return error_reply(ENOENT, "no such QP");
  --client_of(s).qps[d];
  return ok_reply();
}

// The data plane asks where a destination QP lives: the LID picks the HCA (the
// emulated switch forwards by LID), the QPN the process; the reply carries that
// process's inbox ring. Unknown destinations are ENOENT and the sender drops,
// as a real fabric silently drops packets for a QP that does not exist.
Json Daemon::do_resolve(SessionInfo& s, const Json& req, std::vector<int>& fds_out) {
  uint16_t dlid = json_integer<uint16_t>(req.at("dlid"));
  uint32_t qpn = json_integer<uint32_t>(req.at("qpn"));
  auto port = subnet_.port_by_lid(dlid);
  if (!port && dlid_leaves_host(dlid)) {
    Json reply = ok_reply();
    reply["owner"] = kFabricOwner;
    if (req.value("want_fd", true)) {
      int fd = dup(fabric_->uplink_ring_fd());
      if (fd < 0) return error_reply(errno, "dup failed");
      fds_out.push_back(fd);
    }
    return reply;
  }
  if (!port) return error_reply(EHOSTUNREACH, "no port has that LID");
  auto owner = qps_.owner(port->device, qpn);
  if (!owner) return error_reply(ENOENT, "no such QP");
  auto it = clients_.find(*owner);
  if (it == clients_.end() || it->second.inbox_fd < 0) return error_reply(ENOENT, "no inbox");
  if (!may_reach(s, *owner)) return other_user_reply("that QP");
  Json reply = ok_reply();
  reply["owner"] = *owner;
  reply["device"] = port->device;
  reply["port"] = port->port;
  if (req.value("want_fd", true)) {
    int fd = dup(it->second.inbox_fd);
    if (fd < 0) return error_reply(errno, "dup failed");
    fds_out.push_back(fd);
  }
  return reply;
}

// Messages between the contexts of one HCA go to the inbox of the context
// that owns an XRC SRQ (requests an XRC receive QP elsewhere forwards), a QP
// (ibv_open_qp handles) or that is a session (answers). As `resolve`, with
// the owner's session id.
Json Daemon::do_resolve_owner(SessionInfo& s, const std::string& op, const Json& req,
                              std::vector<int>& fds_out) {
  std::optional<SessionId> owner;
  if (op == "resolve_session") {
    owner = req.at("session").get<SessionId>();
  } else {
    const int d = device_index(req.at("device"));
    if (d < 0) return error_reply(ENODEV, "no such device");
    owner = op == "resolve_srq" ? srqns_.owner(d, json_integer<uint32_t>(req.at("srqn")))
                                : qps_.owner(d, json_integer<uint32_t>(req.at("qpn")));
  }
  auto it = owner ? clients_.find(*owner) : clients_.end();
  if (it == clients_.end() || it->second.inbox_fd < 0) return error_reply(ENOENT, "no such owner");
  if (!may_reach(s, *owner)) return other_user_reply("that " + op.substr(op.find('_') + 1));
  Json reply = ok_reply();
  reply["owner"] = *owner;
  if (req.value("want_fd", true)) {
    int fd = dup(it->second.inbox_fd);
    if (fd < 0) return error_reply(errno, "dup failed");
    fds_out.push_back(fd);
  }
  return reply;
}

// ibv_attach_mcast / ibv_detach_mcast of a QP the session owns.
Json Daemon::do_mcast(SessionInfo& s, const Json& req, bool attach) {
  const int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  const uint32_t qpn = json_integer<uint32_t>(req.at("qpn"));
  const uint16_t mlid = json_integer<uint16_t>(req.at("mlid"));
  std::vector<uint8_t> raw;
  if (!from_hex(req.at("mgid").get<std::string>(), &raw) || raw.size() != 16)
    return error_reply(EINVAL, "mgid is not 16 hex bytes");
  if (!wire::is_multicast_lid(mlid)) return error_reply(EINVAL, "not a multicast LID");
  if (qps_.owner(d, qpn) != s.id) return error_reply(ENOENT, "no such QP");
  MulticastGroups::Gid mgid;
  std::copy(raw.begin(), raw.end(), mgid.begin());
  const bool done =
      attach ? mcast_.attach(s.id, d, qpn, mlid, mgid) : mcast_.detach(s.id, d, qpn, mlid, mgid);
  if (!done)
    return error_reply(attach ? EEXIST : ENOENT, attach ? "attached already" : "not attached");
  return ok_reply();
}

// Where a packet to a multicast LID goes: the inbox of every process with a
// member. The sender copies the packet into each.
Json Daemon::do_resolve_mcast(SessionInfo& s, const Json& req, std::vector<int>& fds_out) {
  const uint16_t mlid = json_integer<uint16_t>(req.at("mlid"));
  Json owners = Json::array();
  // Members on other hosts: the fabric floods the group to them. What came
  // from another host is not sent back out.
  if (fabric_ && fabric_->any_up() && s.role != "fabric") {
    int fd = dup(fabric_->uplink_ring_fd());
    if (fd >= 0) {
      fds_out.push_back(fd);
      owners.push_back(kFabricOwner);
    }
  }
  for (SessionId member : mcast_.sessions(mlid)) {
    auto it = clients_.find(member);
    if (it == clients_.end() || it->second.inbox_fd < 0 || !may_reach(s, member)) continue;
    int fd = dup(it->second.inbox_fd);
    if (fd < 0) break;
    fds_out.push_back(fd);
    owners.push_back(member);
  }
  Json reply = ok_reply();
  reply["owners"] = owners;
  return reply;
}

Json Daemon::do_open_xrcd(SessionInfo& s, const Json& req) {
  const int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  int err = 0;
  auto id = xrcds_.open(s.id, d, req.value("file", ""), req.value("create", false),
                        req.value("exclusive", false), &err);
  if (!id) return error_reply(err, err == EEXIST ? "XRC domain exists" : "no XRC domain for file");
  Json reply = ok_reply();
  reply["xrcd"] = *id;
  return reply;
}

Json Daemon::do_close_xrcd(SessionInfo& s, const Json& req) {
  const int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  if (!xrcds_.close(s.id, d, json_integer<uint32_t>(req.at("xrcd"))))
    return error_reply(EINVAL, "no such XRC domain");
  return ok_reply();
}

Json Daemon::do_srqn(SessionInfo& s, const Json& req, bool allocate) {
  const int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  Client& c = client_of(s);
  if (!allocate) {
    if (!srqns_.release(d, json_integer<uint32_t>(req.at("srqn")), s.id))
      return error_reply(ENOENT, "no such SRQ");
    --c.srqns[d];
    return ok_reply();
  }
  // As the device's max_srq bounds a program's SRQs on hardware.
  if (c.srqns[d] >= engine::DeviceLimits::kMaxSrq)
    return error_reply(ENOMEM, fmt::format("this connection holds {} SRQs of the device, its "
                                           "max_srq",
                                           c.srqns[d]));
  auto n = srqns_.allocate(d, s.id);
  if (!n) return error_reply(ENOMEM, "no free SRQ number");
  ++c.srqns[d];
  Json reply = ok_reply();
  reply["srqn"] = *n;
  return reply;
}

Json Daemon::do_sm_attach(SessionInfo& s, const Json& req) {
  int d = device_index(req.at("device"));
  int p = json_integer<int>(req.at("port"));
  if (d < 0 || p < 1 || p > config_.devices[d].ports) return error_reply(ENODEV, "no such port");
  // The priority comes with the attach: other SMs that ask before the SM's
  // first sm_info see it DISCOVERING with its real priority.
  const int priority = json_integer_or<int>(req, "priority", 0);
  if (priority < 0 || priority > 15) return error_reply(EINVAL, "priority must be 0..15");
  // One SM per port: SMInfo of a port describes one SM.
  for (const auto& [id, other] : clients_)
    if (id != s.id && other.sm_port == std::optional<PortRef>(PortRef{d, p}))
      return error_reply(EBUSY, "another subnet manager is attached to that port");
  Client& c = client_of(s);
  if (c.sm_port) subnet_.set_is_sm(*c.sm_port, false);
  c.sm_port = PortRef{d, p};
  subnet_.set_is_sm(*c.sm_port, true);
  subnet_.set_sm_info(*c.sm_port, uint8_t(priority), mad::SmState::kDiscovering);
  log_info("subnet manager (pid {}) attached on {} port {}", s.pid, config_.devices[d].name, p);
  return ok_reply();
}

// The SM of this session says what it is now: its SMInfo:Priority and IBA
// 14.4 state, which the SMA of its port answers SMInfo with.
Json Daemon::do_sm_info(SessionInfo& s, const Json& req) {
  auto it = clients_.find(s.id);
  if (it == clients_.end() || !it->second.sm_port)
    return error_reply(EINVAL, "not a subnet manager (sm_attach first)");
  const int priority = json_integer<int>(req.at("priority"));
  if (priority < 0 || priority > 15) return error_reply(EINVAL, "priority must be 0..15");
  const auto state = mad::parse_sm_state(req.at("state").get<std::string>());
  if (!state) return error_reply(EINVAL, "state must be notactive, discovering, standby or master");
  const PortRef port = *it->second.sm_port;
  subnet_.set_sm_info(port, uint8_t(priority), *state);
  log_info("subnet manager (pid {}) on {} port {}: {}, priority {}", s.pid,
           config_.devices[port.device].name, port.port, mad::sm_state_keyword(*state), priority);
  return ok_reply();
}

Json Daemon::do_smp(SessionInfo& s, const Json& req) {
  int d = device_index(req.at("device"));
  int p = json_integer<int>(req.at("port"));
  if (d < 0 || p < 1 || p > config_.devices[d].ports) return error_reply(ENODEV, "no such port");
  std::vector<uint8_t> mad;
  if (!from_hex(req.at("mad").get<std::string>(), &mad))
    return error_reply(EINVAL, "mad is not hex");
  bool departed = false;
  auto resp = subnet_.process_smp(PortRef{d, p}, mad.data(), mad.size(), 0xffff, &departed);
  if (departed) {
    await_remote_smp(s.id, PortRef{d, p}, mad);
    return nullptr;
  }
  if (!resp) return error_reply(ETIMEDOUT, "SMP dropped");
  Json reply = ok_reply();
  reply["mad"] = to_hex(resp->data(), resp->size());
  return reply;
}

// ibemu capture: the capture belongs to the session that started it and ends
// with it.
Json Daemon::do_capture(SessionInfo& s, const std::string& op, const Json& req) {
  const uint64_t id = json_integer_or<uint64_t>(req, "id", 0);
  if (op != "capture_start") capture_.drain();
  if (op == "capture_status") {
    Json d = capture_.describe(s.id, id);
    if (d.is_null()) return error_reply(ENOENT, "no such capture");
    d["ok"] = true;
    return d;
  }
  if (op == "capture_stop") {
    Json d = capture_.describe(s.id, id);
    if (d.is_null() || !capture_.end(s.id, id)) return error_reply(ENOENT, "no such capture");
    d["ok"] = true;
    return d;
  }
  CaptureRequest c;
  c.file = req.at("file").get<std::string>();
  if (c.file.empty() || c.file[0] != '/') return error_reply(EINVAL, "file must be absolute");
  if (req.contains("device")) {
    const int d = device_index(req["device"]);
    if (d < 0) return error_reply(ENODEV, "no such device");
    if (req.contains("port")) {
      const int p = json_integer<int>(req["port"]);
      if (p < 1 || p > config_.devices[d].ports) return error_reply(ENODEV, "no such port");
      c.filter.port = PortRef{d, p};
    } else {
      c.filter.device = d;
    }
  }
  if (req.contains("qpn")) c.filter.qpn = json_integer<uint32_t>(req["qpn"]);
  if (req.contains("lid")) c.filter.lid = json_integer<uint16_t>(req["lid"]);
  c.max_packets = json_integer_or<uint64_t>(req, "count", 0);
  c.file_bytes = json_integer_or<uint64_t>(req, "file_bytes", 0);
  c.files = json_integer_or<unsigned>(req, "files", 1);
  const std::string linktype = req.value("linktype", std::string("erf"));
  if (linktype != "erf" && linktype != "infiniband")
    return error_reply(EINVAL, "linktype is erf or infiniband");
  c.linktype = linktype == "erf" ? kLinktypeErf : kLinktypeInfiniband;
  uint64_t capture_id = 0;
  if (int err = capture_.begin(s.id, c, &capture_id))
    return error_reply(err, "cannot write " + c.file + ": " + std::strerror(err));
  log_info("capture {} into {} for pid {}", capture_id, c.file, s.pid);
  Json reply = ok_reply();
  reply["id"] = capture_id;
  return reply;
}

std::optional<std::vector<PortRef>> Daemon::selected_ports(const Json& req) const {
  std::vector<PortRef> out;
  if (!req.contains("device")) return subnet_.ports();
  const int d = device_index(req["device"]);
  if (d < 0) return std::nullopt;
  if (!req.contains("port")) {
    for (int p = 1; p <= config_.devices[d].ports; ++p) out.push_back({d, p});
    return out;
  }
  const int p = json_integer<int>(req["port"]);
  if (p < 1 || p > config_.devices[d].ports) return std::nullopt;
  out.push_back({d, p});
  return out;
}

// ibemu fault: what the links of the selected ports do to packets (the
// providers apply it, reading the state page), and cables pulled and
// plugged back.
Json Daemon::do_fault(const std::string& op, const Json& req) {
  if (op == "link" && req.contains("peer")) {
    // An inter-host cable: the link to another host's switch.
    const std::string peer = req["peer"].get<std::string>();
    if (!fabric_ || fabric_->set_cable(peer, req.at("up").get<bool>()) < 0)
      return error_reply(ENODEV, "no such peer host: " + peer);
    return ok_reply();
  }
  const auto ports = selected_ports(req);
  if (!ports) return error_reply(ENODEV, "no such device or port");
  if (op == "link") {
    if (ports->size() != 1 || !req.contains("port"))
      return error_reply(EINVAL, "link takes one device and port");
    const bool up = req.at("up").get<bool>();
    subnet_.set_link_up(ports->front(), up);
    log_info("{} port {}: link {}", config_.devices[ports->front().device].name,
             ports->front().port, up ? "up" : "down");
    return ok_reply();
  }
  LinkFaultView f{};
  if (op == "fault_set") {
    auto ppm = [&](const char* key) -> uint32_t {
      const double pct = req.value(key, 0.0);
      if (pct < 0 || pct > 100) throw std::invalid_argument(std::string(key) + " is 0..100");
      return uint32_t(pct * 10000 + 0.5);
    };
    f.drop_ppm = ppm("drop");
    f.dup_ppm = ppm("duplicate");
    f.reorder_ppm = ppm("reorder");
    f.delay_us = json_integer_or<unsigned>(req, "delay_us", 0);
    f.jitter_us = json_integer_or<unsigned>(req, "jitter_us", 0);
    f.rate_mbps = json_integer_or<unsigned>(req, "rate_mbps", 0);
    f.seed = json_integer_or<uint64_t>(req, "seed", 1);
  }
  // A seed alone is no fault.
  const bool none =
      !f.drop_ppm && !f.dup_ppm && !f.reorder_ppm && !f.delay_us && !f.jitter_us && !f.rate_mbps;
  for (PortRef p : *ports) {
    if (none)
      faults_.erase({p.device, p.port});
    else
      faults_[{p.device, p.port}] = f;
    state_page_.set_link_faults(p, none ? LinkFaultView{} : f);
  }
  if (op == "fault_clear") {
    // Perfect links again: no QP of these devices NAKs by order either.
    const size_t before = forced_naks_.size();
    std::erase_if(forced_naks_, [&](const ForcedNakView& e) {
      return std::any_of(ports->begin(), ports->end(),
                         [&](PortRef p) { return p.device == e.device; });
    });
    if (forced_naks_.size() != before) state_page_.set_forced_naks(forced_naks_);
  }
  log_info("{} on {} port(s)", op, ports->size());
  return ok_reply();
}

// ibemu fault nak: the responder of QP `qpn` NAKs its next `count` new
// requests. A new order for a QP replaces the last; count 0 cancels it.
Json Daemon::do_forced_nak(const Json& req) {
  const int d = device_index(req.at("device"));
  if (d < 0) return error_reply(ENODEV, "no such device");
  const uint32_t qpn = json_integer<uint32_t>(req.at("qpn"));
  const std::string kind = req.value("kind", std::string("rnr"));
  if (kind != "rnr" && kind != "psn") return error_reply(EINVAL, "kind is rnr or psn");
  const uint32_t count = json_integer_or<uint32_t>(req, "count", 1);
  // A QP that is gone takes its orders with it (a new QP may get its
  // number); one that does not exist cannot be given any.
  std::erase_if(forced_naks_, [&](const ForcedNakView& e) {
    return (e.device == d && e.qpn == qpn) || !qps_.owner(e.device, e.qpn);
  });
  if (count && !qps_.owner(d, qpn)) {
    state_page_.set_forced_naks(forced_naks_);
    return error_reply(ENOENT, fmt::format("{} has no QP {:#x}", config_.devices[d].name, qpn));
  }
  if (count) {
    if (forced_naks_.size() >= size_t(kMaxForcedNaks))
      return error_reply(ENOSPC, "too many forced NAKs pending");
    ForcedNakView e{};
    e.id = next_forced_nak_id_++;
    e.device = uint16_t(d);
    e.kind = kind == "rnr" ? 1 : 2;  // engine::ForcedNak
    e.qpn = qpn;
    e.count = count;
    forced_naks_.push_back(e);
  }
  state_page_.set_forced_naks(forced_naks_);
  log_info("fault nak: the next {} requests to {} QP {:#x} get a {} NAK", count,
           config_.devices[d].name, qpn, kind);
  return ok_reply();
}

// The config's faults, as `ibemu fault set` and `ibemu fault link` would set
// them; a fault naming no such device or port stops the daemon.
void Daemon::apply_configured_faults() {
  for (const FaultConfig& f : config_.faults) {
    Json req = {{"device", f.device},       {"drop", f.drop},         {"duplicate", f.duplicate},
                {"reorder", f.reorder},     {"delay_us", f.delay_us}, {"jitter_us", f.jitter_us},
                {"rate_mbps", f.rate_mbps}, {"seed", f.seed}};
    if (f.port) req["port"] = f.port;
    Json reply = do_fault("fault_set", req);
    if (reply.value("ok", false) && f.link_down) {
      req["up"] = false;
      reply = do_fault("link", req);
    }
    if (!reply.value("ok", false))
      throw std::runtime_error("config fault on " + f.device + ": " +
                               reply.value("error", std::string("refused")));
  }
}

Json Daemon::do_shutdown() {
  log_info("shutdown requested");
  boost::asio::post(io_, [this] { stop(); });
  return ok_reply();
}

}  // namespace ibemu
