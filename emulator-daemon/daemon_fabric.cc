// The daemon's side of the links to other hosts: starting them, the MADs
// that cross them, and SMPs whose responses come back from another host.
#include <fmt/format.h>

#include "common/hex.h"
#include "common/json_integer.h"
#include "common/log.h"
#include "common/mad/mad.h"
#include "emulator-daemon/daemon.h"
#include "emulator-daemon/mad_packet.h"

namespace ibemu {

namespace {
// How long an SM's SMP may be away on other hosts before the SM is told it
// timed out: many round trips of any LAN.
constexpr auto kRemoteSmpTimeout = std::chrono::milliseconds(200);
}  // namespace

void Daemon::start_fabric() {
  if (!config_.fabric.enabled) return;
  FabricLink::Events events;
  events.link_change = [this](int uplink, bool up) {
    subnet_.set_uplink_alive(uplink, up);
    if (!up) ip_addresses_.set_peer(std::to_string(uplink), {});
  };
  events.hello_fields = [this] { return Json{{"addresses", address_announcement()}}; };
  events.hello_received = [this](int uplink, const Json& hello) {
    on_peer_addresses(uplink, hello.value("addresses", Json::array()));
  };
  events.management = [this](int uplink, std::vector<uint8_t> packet) {
    on_fabric_management(uplink, packet);
  };
  fabric_ = std::make_unique<FabricLink>(io_, config_.fabric, subnet_.switch_guid(), paths_.dir,
                                         std::move(events));
  auto send = [this](int uplink, const std::vector<uint8_t>& packet) {
    fabric_->send_management(uplink, packet);
  };
  subnet_.on_departure(send);
  umad_.router().set_remote(send);
  subnet_.on_returned_smp([this](PortRef port, uint16_t slid, const std::array<uint8_t, 256>& r) {
    on_returned_smp(port, slid, r);
  });
  subnet_.on_lft_change([this] { update_fabric_routes(); });
  fabric_->start();
}

void Daemon::on_fabric_management(int uplink, const std::vector<uint8_t>& packet) {
  auto p = parse_mad_packet(packet.data(), packet.size());
  if (!p) return;
  const MadPacketFields& f = p->fields;
  if (f.dest_qp == 0)
    subnet_.receive_smp(uplink, f.slid, f.dlid, p->mad, p->len);
  else
    umad_.router().receive_gmp(f.slid, f.dlid, f.src_qp, p->mad, p->len);
}

void Daemon::await_remote_smp(SessionId session, PortRef port, const std::vector<uint8_t>& mad) {
  PendingSmp pending{session, port, mad::load_be64(mad.data() + 8),
                     std::make_shared<boost::asio::steady_timer>(io_)};
  pending.timer->expires_after(kRemoteSmpTimeout);
  pending.timer->async_wait([this, session,
                             tid = pending.tid](const boost::system::error_code& ec) {
    // The response may have come while this wait's end was already
    // queued (cancel() then does not stop it): the request was answered,
    // and a second reply would answer the session's next request.
    const size_t waiting = std::erase_if(
        pending_smps_, [&](const PendingSmp& p) { return p.session == session && p.tid == tid; });
    if (ec || !waiting) return;
    server_.reply_later(session, error_reply(ETIMEDOUT, "SMP dropped"));
  });
  pending_smps_.push_back(std::move(pending));
}

void Daemon::on_returned_smp(PortRef port, uint16_t slid, const std::array<uint8_t, 256>& resp) {
  const uint64_t tid = mad::load_be64(resp.data() + 8);
  auto it = std::find_if(pending_smps_.begin(), pending_smps_.end(),
                         [&](const PendingSmp& p) { return p.tid == tid && p.port == port; });
  if (it == pending_smps_.end()) {
    // Not the SM's control session: an agent of a umad file sent it.
    umad_.router().receive_smp_response(port, slid, resp.data(), resp.size());
    return;
  }
  const SessionId session = it->session;
  it->timer->cancel();
  pending_smps_.erase(it);
  Json reply = {{"ok", true}, {"mad", to_hex(resp.data(), resp.size())}};
  server_.reply_later(session, reply);
}

void Daemon::update_fabric_routes() {
  if (!fabric_) return;
  std::vector<int8_t> routes(0xc000, -1);
  for (uint16_t lid = 1; lid < routes.size(); ++lid)
    if (auto uplink = subnet_.uplink_for_lid(lid)) routes[lid] = int8_t(*uplink);
  fabric_->set_routes(routes);
}

bool Daemon::dlid_leaves_host(uint16_t dlid) const {
  if (!fabric_) return false;
  auto uplink = subnet_.uplink_for_lid(dlid);
  return uplink && subnet_.uplink_up(*uplink);
}

Json Daemon::fabric_status() const {
  if (!fabric_) return nullptr;
  Json f = fabric_->describe();
  for (auto& p : f["peers"]) p["switch_port"] = subnet_.uplink_port(json_integer<int>(p["uplink"]));
  return f;
}

}  // namespace ibemu
