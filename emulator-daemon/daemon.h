#pragma once
// ibemud: owns the host's emulated HCAs (the subnet model and its SMA), the fake
// sysfs tree, the state page, the QP directory and the control socket.
#include <functional>
#include <map>
#include <memory>
#include "emulator-daemon/asio.h"

#include "common/config.h"
#include "common/runtime_paths.h"
#include "emulator-daemon/capture_service.h"
#include "emulator-daemon/cm_port_space.h"
#include "emulator-daemon/context_snapshots.h"
#include "emulator-daemon/control_server.h"
#include "emulator-daemon/fabric_link.h"
#include "emulator-daemon/ip_addresses.h"
#include "emulator-daemon/kernel_bridge.h"
#include "emulator-daemon/kernel_plane.h"
#include "emulator-daemon/multicast_groups.h"
#include "emulator-daemon/performance_agent.h"
#include "emulator-daemon/port_counter_registry.h"
#include "emulator-daemon/qp_directory.h"
#include "emulator-daemon/state_page_publisher.h"
#include "emulator-daemon/subnet.h"
#include "emulator-daemon/sysfs_tree.h"
#include "emulator-daemon/umad_service.h"
#include "emulator-daemon/xrc_domains.h"

namespace ibemu {

/// DOWN, INIT, ARMED, ACTIVE as `ibemu status` shows a port's state.
const char* port_state_word(PortState s);

class Daemon : public RequestHandler {
 public:
  /// The owner `resolve` names for the uplink ring (never a session id).
  static constexpr uint64_t kFabricOwner = ~uint64_t{0} - 1;

  Daemon(boost::asio::io_context& io, Config config, RuntimePaths paths);
  ~Daemon() override;

  /// Starts serving; returns once set up (the caller runs the io_context).
  void start();
  /// Graceful stop: close the socket and sessions, remove the sysfs tree.
  void stop();
  /// Called once when stop() runs, so main can cancel its own waits (signals).
  void on_stop(std::function<void()> cb) { on_stop_ = std::move(cb); }

  Json on_request(SessionInfo& session, const Json& request, std::vector<int>& fds_in,
                  std::vector<int>& fds_out) override;
  void on_session_closed(const SessionInfo& session) override;

 private:
  // Per-client state the data plane needs.
  struct Client {
    int inbox_fd = -1;  // the process's shared-memory receive ring (memfd)
    int contexts = 0;
    std::vector<uint64_t> counter_ids;  // its contexts' counter pages
    std::optional<PortRef> sm_port;
    unsigned uid = 0;               // the process's user (SO_PEERCRED)
    std::map<int, uint32_t> qps;    // QP numbers it holds, by device
    std::map<int, uint32_t> srqns;  // XRC SRQ numbers it holds, by device
  };

  Json do_hello(SessionInfo& s, const Json& req, std::vector<int>& fds_out);
  Json do_devices();
  /// With "details": asks every context for its objects and answers once
  /// those the asker may see answered, or after kSnapshotWait
  /// (daemon_inspection.cc).
  Json do_status(SessionInfo& s, const Json& req);
  Json status_reply();
  /// A process entry of `status`.
  Json process_json(const SessionInfo& s, const Client& c) const;
  Json status_with_details(const SessionInfo& asker, uint64_t request);
  void watch_pending_statuses();
  Json do_register_inbox(SessionInfo& s, std::vector<int>& fds_in);
  Json do_open_context(SessionInfo& s, const Json& req, std::vector<int>& fds_in);
  Json do_close_context(SessionInfo& s, const Json& req);
  Json do_create_qp(SessionInfo& s, const Json& req);
  Json do_destroy_qp(SessionInfo& s, const Json& req);
  Json do_resolve(SessionInfo& s, const Json& req, std::vector<int>& fds_out);
  Json do_mcast(SessionInfo& s, const Json& req, bool attach);
  Json do_open_xrcd(SessionInfo& s, const Json& req);
  Json do_close_xrcd(SessionInfo& s, const Json& req);
  Json do_srqn(SessionInfo& s, const Json& req, bool allocate);
  Json do_resolve_mcast(SessionInfo& s, const Json& req, std::vector<int>& fds_out);
  Json do_resolve_owner(SessionInfo& s, const std::string& op, const Json& req,
                        std::vector<int>& fds_out);
  /// Whether `asker` may have the inbox of session `owner` (Config::users).
  bool may_reach(const SessionInfo& asker, SessionId owner) const;
  /// The session's client record, made with its user on first use.
  Client& client_of(const SessionInfo& s);
  Json do_sm_attach(SessionInfo& s, const Json& req);
  Json do_sm_info(SessionInfo& s, const Json& req);
  Json do_smp(SessionInfo& s, const Json& req);
  Json do_capture(SessionInfo& s, const std::string& op, const Json& req);
  Json do_fault(const std::string& op, const Json& req);
  Json do_forced_nak(const Json& req);
  /// The ports a request names: "device" (and "port"), or all of them.
  std::optional<std::vector<PortRef>> selected_ports(const Json& req) const;
  Json do_shutdown();
  // rdma_cm (daemon_rdmacm.cc)
  Json do_ip_addresses();
  Json do_resolve_ip(const Json& req);
  Json do_cm_bind(SessionInfo& s, const Json& req, bool bind);
  // Kernel mode's data plane (daemon_kernel.cc).
  void start_kernel_plane();
  Json do_kernel_plane(SessionInfo& s, const Json& req);
  Json kernel_status() const;
  Json cm_status() const;
  std::array<uint8_t, 16> port_gid(PortRef port) const;
  Json address_announcement() const;
  void on_peer_addresses(int uplink, const Json& addresses);
  void apply_configured_faults();
  int device_index(const Json& value) const;
  void on_port_change(PortRef port);
  /// The SMA's or PMA's answer to a MAD the kernel's process_mad got.
  std::optional<std::array<uint8_t, 256>> answer_kernel_mad(PortRef port, const uint8_t* mad);

  // The links to other hosts (daemon_fabric.cc).
  void start_fabric();
  void on_fabric_management(int uplink, const std::vector<uint8_t>& packet);
  void on_returned_smp(PortRef port, uint16_t slid, const std::array<uint8_t, 256>& resp);
  void update_fabric_routes();
  /// Whether `dlid` is on another host that a link leads to: the uplink ring
  /// is where a provider sends packets for it.
  bool dlid_leaves_host(uint16_t dlid) const;
  /// An SM's SMP that left the host: its control request is answered when
  /// the response comes back, or ETIMEDOUT.
  void await_remote_smp(SessionId session, PortRef port, const std::vector<uint8_t>& mad);
  Json fabric_status() const;

  boost::asio::io_context& io_;
  Config config_;
  RuntimePaths paths_;
  Subnet subnet_;
  SysfsTree sysfs_;
  StatePagePublisher state_page_;
  QpDirectory qps_;
  PortCounterRegistry counters_;
  PerformanceAgent pma_;
  MulticastGroups mcast_;
  XrcDomains xrcds_;
  QpDirectory srqns_;  // XRC SRQ numbers: unique per device, like QP numbers
  ControlServer server_;
  UmadService umad_;
  CaptureService capture_;
  IpAddresses ip_addresses_;
  CmPortSpace cm_ports_;
  KernelBridge kernel_;
  std::unique_ptr<KernelPlane> kernel_plane_;
  std::map<SessionId, Client> clients_;
  std::map<std::pair<int, int>, LinkFaultView> faults_;  // links with faults set
  std::vector<ForcedNakView> forced_naks_;               // ibemu fault nak
  uint32_t next_forced_nak_id_ = 1;
  std::unique_ptr<FabricLink> fabric_;
  struct PendingSmp {
    SessionId session = 0;
    PortRef port;
    uint64_t tid = 0;
    std::shared_ptr<boost::asio::steady_timer> timer;
  };
  std::vector<PendingSmp> pending_smps_;
  ContextSnapshots snapshots_;
  struct PendingStatus {
    SessionInfo asker;
    uint64_t request = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<PendingStatus> pending_statuses_;
  boost::asio::steady_timer status_timer_{io_};
  bool status_timer_armed_ = false;
  std::function<void()> on_stop_;
  bool stopped_ = false;
};

/// A reply for a failed request.
Json error_reply(int err, const std::string& message);

}  // namespace ibemu
