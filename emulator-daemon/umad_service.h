#pragma once
// The umad files of no-kernel mode: one listening socket per port at
// dev/infiniband/umadN of the fake sysfs tree, opened by the preload shim
// when a program opens /dev/infiniband/umadN. Moves their messages to and
// from the MadRouter (common/umad_protocol.h has the protocol) and runs the
// router's clock.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "emulator-daemon/asio.h"
#include "emulator-daemon/mad_router.h"

namespace ibemu {

class UmadService {
 public:
  UmadService(boost::asio::io_context& io, Subnet& subnet);
  ~UmadService();

  /// Listens on `dir`/umadN for each port (N in the order of `ports`).
  /// Throws std::runtime_error when a socket cannot be bound.
  void start(const std::string& dir, const std::vector<PortRef>& ports);
  void stop();

  const MadRouterCounters& counters() const { return router_.counters(); }
  void set_local_agent(uint8_t mgmt_class, MadRouter::LocalAgent agent) {
    router_.set_local_agent(mgmt_class, std::move(agent));
  }
  void set_tap(MadRouter::Tap tap) { router_.set_tap(std::move(tap)); }
  /// The router itself, for MADs that cross to and from other hosts.
  MadRouter& router() { return router_; }
  const MadRouter& router() const { return router_; }
  /// Open umad files.
  size_t files() const { return files_.size(); }
  /// Open issm files (ports whose IsSM bit a program holds).
  size_t issm_files() const { return issm_holders_.size(); }

 private:
  class Connection;
  void accept(size_t listener);
  void on_first_message(std::shared_ptr<Connection> c);
  void on_file_message(std::shared_ptr<Connection> c);
  /// An ISSM request: `c` holds its port's IsSM bit until it closes.
  void hold_issm(std::shared_ptr<Connection> c);
  void deliver(UmadClientId client, const UmadMessage& msg);
  void close_file(UmadClientId client);
  void rearm_timer();

  boost::asio::io_context& io_;
  Subnet& subnet_;
  MadRouter router_;
  std::vector<std::unique_ptr<boost::asio::posix::stream_descriptor>> listeners_;
  std::vector<PortRef> ports_;
  std::map<UmadClientId, std::shared_ptr<Connection>> files_;
  std::map<uint64_t, UmadClientId> tokens_;
  /// By umad number: the connection holding the port's issm file.
  std::map<size_t, std::shared_ptr<Connection>> issm_holders_;
  boost::asio::steady_timer timer_;
  UmadClientId next_client_ = 1;
  bool stopped_ = false;
};

}  // namespace ibemu
