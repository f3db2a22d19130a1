// A Fabric's controls: the requests `ibemu fault` and `ibemu capture` send
// to the daemon (docs/control-protocol.md), made directly.
#include <filesystem>

#include "emulator-daemon/cli/daemon_session.h"
#include "harness/gtest/fabric_impl.h"

namespace ibemu::testing {

namespace {
Json port_selection(const char* op, const std::string& device, int port) {
  Json req = {{"op", op}};
  if (!device.empty()) req["device"] = device;
  if (!device.empty() && port > 0) req["port"] = port;
  return req;
}
}  // namespace

void Fabric::set_faults(const std::string& device, int port, const Faults& f) {
  Json req = port_selection("fault_set", device, port);
  req["drop"] = f.drop_pct;
  req["duplicate"] = f.duplicate_pct;
  req["reorder"] = f.reorder_pct;
  req["delay_us"] = f.delay_us;
  req["seed"] = f.seed;
  impl_->request(req);
}

void Fabric::clear_faults(const std::string& device, int port) {
  impl_->request(port_selection("fault_clear", device, port));
}

void Fabric::link_down(const std::string& device, int port) {
  impl_->request({{"op", "link"}, {"device", device}, {"port", port}, {"up", false}});
}

void Fabric::link_up(const std::string& device, int port, bool wait) {
  impl_->request({{"op", "link"}, {"device", device}, {"port", port}, {"up", true}});
  // The port trains to INIT; ACTIVE needs the subnet manager's next sweep.
  if (wait && !wait_port_state(device, port, "ACTIVE"))
    throw FabricError(device + ":" + std::to_string(port) + " did not become ACTIVE after link up");
}

void Fabric::force_nak(const std::string& device, uint32_t qpn, NakKind kind, uint32_t count) {
  impl_->request({{"op", "fault_nak"},
                  {"device", device},
                  {"qpn", qpn},
                  {"kind", kind == NakKind::kRnr ? "rnr" : "psn"},
                  {"count", count}});
}

void Fabric::start_capture(const std::string& path) {
  if (impl_->capture_session.connected()) throw FabricError("a capture is running already");
  if (!open_daemon_session(impl_->capture_session, impl_->dir, "capture"))
    throw FabricError("start_capture: no daemon answers in " + impl_->dir);
  // The daemon opens the file itself, relative to nothing.
  const Json req = {{"op", "capture_start"}, {"file", std::filesystem::absolute(path).string()}};
  Json reply;
  if (impl_->capture_session.request(req, &reply) != 0 || !reply.value("ok", false)) {
    impl_->capture_session.close();
    throw FabricError("capture_start: " + reply.value("error", std::string("no reply")));
  }
  impl_->capture_id = reply.value("id", uint64_t{0});
}

uint64_t Fabric::capture_packets() {
  Json reply;
  if (!impl_->capture_session.connected() ||
      impl_->capture_session.request({{"op", "capture_status"}, {"id", impl_->capture_id}},
                                     &reply) != 0 ||
      !reply.value("ok", false))
    throw FabricError("capture_status: no capture running");
  return reply.value("packets", uint64_t{0});
}

uint64_t Fabric::stop_capture() {
  Json reply;
  if (!impl_->capture_session.connected() ||
      impl_->capture_session.request({{"op", "capture_stop"}, {"id", impl_->capture_id}}, &reply) !=
          0)
    throw FabricError("capture_stop: no capture running");
  impl_->capture_session.close();
  return reply.value("packets", uint64_t{0});
}

}  // namespace ibemu::testing
