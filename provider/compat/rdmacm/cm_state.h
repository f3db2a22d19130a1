#pragma once
// The state of the user-space rdma_cm: the process-wide library (devices,
// their ports' addresses, the daemon connection and each port's CM endpoint),
// event channels and their events, and the rdma_cm_ids.
//
// What the kernel's rdma_cm and IB CM do for a real HCA happens here, inside
// the program: one worker thread reads the CM MADs the daemon routes to this
// process (docs/rdma-cm.md) and runs the protocol's timers. One mutex guards
// everything; API calls and the worker take it, and never block holding it
// except on condition variables that release it.
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/control_channel.h"
#include "common/umad_protocol.h"
#include "provider/compat/rdmacm/rdma_cma_newer.h"

namespace ibemu::rdmacm {

using Clock = std::chrono::steady_clock;
using Gid = std::array<uint8_t, 16>;

/// One emulated port as the daemon describes it (op ip_addresses).
struct PortAddress {
  std::string device;
  uint8_t port = 0;
  unsigned umad_index = 0;  // N of the daemon's umadN socket for this port
  sockaddr_storage ipv4{};  // AF_INET, or AF_UNSPEC when none
  int ipv4_prefix = 0;
  sockaddr_storage ipv6{};  // AF_INET6, or AF_UNSPEC when none
  int ipv6_prefix = 0;
  Gid gid{};
  bool active = false;
};

struct Device {
  std::string name;
  ibv_context* context = nullptr;
  ibv_device_attr attr{};
  ibv_pd* default_pd = nullptr;

  /// The device's protection domain that every rdma_cm id on it is given
  /// (rdma_cm_id::pd) and QPs created with no PD use: one per device, made
  /// on first use, as rdma-core's librdmacm does. Null when it cannot be.
  ibv_pd* shared_pd() {
    if (!default_pd && context) default_pd = ibv_alloc_pd(context);
    return default_pd;
  }
};

/// A port's CM endpoint: the umad file the daemon routes this process's CM
/// MADs to, with the SA client agent on the same file.
struct Endpoint {
  unsigned umad_index = 0;
  int fd = -1;
  uint32_t cm_agent = 0;
  uint32_t sa_agent = 0;
  uint64_t token = 0;
  uint32_t comm_id_base = 0;
  uint16_t next_comm_id = 1;
};

struct CmId;

/// An event as the program sees it, with room for its private data.
struct Event {
  rdma_cm_event pub{};
  uint8_t private_data[256] = {};
  CmId* owner = nullptr;  // whose events_acked its acknowledgement counts
};

struct Channel {
  rdma_event_channel pub{};  // pub.fd: an eventfd counting the queued events
  int readers = 0;           // threads inside rdma_get_cm_event
  bool destroyed = false;    // destroyed while a thread was reading it
  std::deque<Event*> queue;
  bool internal = false;  // made for a synchronous id,
  CmId* owner = nullptr;  // which owns it (ids of its connect requests use it too)
};

enum class IdState {
  kIdle,
  kAddrQuery,
  kAddrResolved,
  kRouteQuery,
  kRouteResolved,
  kListen,
  kConnectRequestReceived,  // passive: REQ delivered, not yet accepted
  kRepSent,                 // passive: waiting for RTU
  kReqSent,                 // active: waiting for REP
  kRepReceived,             // active, no QP of ours: waiting for rdma_establish
  kEstablished,
  kDreqSent,
  kDisconnected,
  kSidrReqSent,
  kUdReady,        // UD id after SIDR or a passive UD id
  kAddrinfoQuery,  // bound: asking the SA for an IB service (RAI_SA)
  kDestroying,
};

/// Something the worker does at a time: resend a CM MAD, give up on an
/// address, post a timewait exit.
struct Timer {
  Clock::time_point when;
  std::function<void()> fire;  // runs with the library mutex held
};

struct CmId {
  rdma_cm_id pub{};
  uint64_t serial = 0;  // tells this id from a later one at the same address
  Channel* channel = nullptr;
  bool sync = false;  // created with no channel: calls wait for their event
  IdState state = IdState::kIdle;
  int device = -1;                    // index into Library::devices, once bound
  const PortAddress* port = nullptr;  // the port, once bound to an address
  ibv_sa_path_rec path{};
  uint16_t pkey = 0xffff;

  // The IP port space reservation held in the daemon.
  bool bound = false;
  uint16_t bound_port = 0;

  // Listening.
  CmId* listener = nullptr;  // for an id created by a connect request
  std::vector<unsigned> listen_endpoints;
  ibv_qp_init_attr ep_qp_attr{};  // rdma_create_ep on a passive id
  bool ep_has_qp_attr = false;

  // The connection.
  unsigned endpoint = 0;  // umad_index of the port the CM MADs use
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint64_t remote_ca_guid = 0;
  uint64_t service_id = 0;
  uint64_t tid = 0;
  uint16_t remote_lid = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  uint32_t local_psn = 0;
  uint32_t remote_psn = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t ack_timeout = 14;
  bool ack_timeout_set = false;
  uint8_t tos = 0;
  bool reuseaddr = false;
  bool afonly = false;
  uint32_t qp_num_param = 0;  // conn_param.qp_num when the program made its QP

  // The last CM MAD sent that waits for an answer, and its resends.
  std::vector<uint8_t> pending_mad;
  int retries_left = 0;
  Clock::duration retry_interval{};
  uint64_t timer_generation = 0;

  // Events reported to and acknowledged by the program (rdma_destroy_id
  // waits until they match).
  uint64_t events_reported = 0;
  uint64_t events_acked = 0;

  // rdma_resolve_addrinfo: under way from the call until rdma_query_addrinfo
  // takes its result or the program takes its RDMA_CM_EVENT_ADDRINFO_ERROR.
  bool resolving_addrinfo = false;
  rdma_addrinfo* resolved_addrinfo = nullptr;  // freed with the id if never taken

  // Multicast groups joined, by group address text.
  struct Join;
  std::vector<std::shared_ptr<Join>> joins;
};

inline CmId* from_pub(rdma_cm_id* id) { return reinterpret_cast<CmId*>(id); }
inline Channel* from_pub(rdma_event_channel* ch) { return reinterpret_cast<Channel*>(ch); }
static_assert(offsetof(CmId, pub) == 0);
static_assert(offsetof(Channel, pub) == 0);
static_assert(offsetof(Event, pub) == 0);

class Library {
 public:
  /// The library, set up on first use: 0, or an errno (ENODEV when no daemon
  /// runs or it has no devices).
  static int get(Library** out);

  std::mutex mu;
  std::condition_variable cv;  // events acknowledged, SA answers
  std::vector<Device> devices;
  std::vector<PortAddress> ports;
  ControlClient control;

  /// The port's endpoint, opened on first use; nullptr with errno set.
  Endpoint* endpoint(unsigned umad_index);
  /// A request of common/umad_protocol.h about the endpoint's file: 0 or an
  /// errno.
  int endpoint_request(Endpoint& ep, ibemu_umad_request req, ibemu_umad_reply* reply);
  /// Writes a MAD to `dlid` through the endpoint's CM agent (sa: the SA agent,
  /// with the router's timeout and retries).
  int send_mad(Endpoint& ep, bool sa, uint16_t dlid, const std::vector<uint8_t>& mad,
               uint32_t timeout_ms = 0, uint32_t retries = 0);

  /// A new local communication ID from the endpoint's block.
  uint32_t new_comm_id(Endpoint& ep);
  CmId* id_by_comm_id(uint32_t comm_id);
  void add_id(CmId* id) {
    id->serial = ++id_serial_;
    ids.push_back(id);
  }
  void remove_id(CmId* id);
  std::vector<CmId*> ids;

  void add_timer(Clock::duration after, std::function<void()> fire);
  /// A timer of `id`'s: fire(id) runs unless the program destroyed the id
  /// (rdma_destroy_id frees it) before it fires.
  void add_timer(CmId* id, Clock::duration after, std::function<void(CmId*)> fire);

  /// Index of the device named `name`, or -1.
  int device_index(const std::string& name) const;
  const PortAddress* port_of(int device, uint8_t port_num) const;

  /// Handed the SA response (by the TransactionID's lower half) that arrives,
  /// with the id that asked (its waiters go when it is destroyed).
  struct SaWaiter {
    CmId* id;
    std::function<void(int status, const uint8_t* mad, size_t len)> done;
  };
  std::map<uint32_t, SaWaiter> sa_waiters;
  uint64_t next_tid = 1;

 private:
  Library() = default;
  int init();
  void worker();
  void wake();
  void on_umad_message(Endpoint& ep, const uint8_t* msg, size_t len);

  std::map<unsigned, std::unique_ptr<Endpoint>> endpoints_;
  std::vector<Timer> timers_;
  uint64_t id_serial_ = 0;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
};

/// An event type as a number. Types newer than the system's
/// <rdma/rdma_cma.h> (rdma_cma_newer.h) lie beyond its enum's range, where
/// loading one as the enum is undefined behaviour (a sanitized build stops
/// there): whatever may hold one is read as its bytes, never as the enum.
inline int event_type(const rdma_cm_event_type& type) {
  static_assert(sizeof(rdma_cm_event_type) == sizeof(int));
  int value;
  std::memcpy(&value, &type, sizeof value);
  return value;
}

/// Reports an event (an rdma_cm_event_type, perhaps one of
/// rdma_cma_newer.h's) on an id's channel. Caller holds the mutex.
Event* post_event(CmId* id, int type, int status);
/// Synchronous ids: waits for the next event of the id's own channel and
/// keeps it in id->pub.event (acking the one before); 0 or -1 with errno
/// from its status, EINVAL if it is not of type `expected`.
int wait_sync_event(CmId* id, int expected);

/// Incoming CM MAD for this process. Caller holds the mutex.
void on_cm_mad(Library& lib, Endpoint& ep, uint16_t slid, const uint8_t* mad, size_t len);

/// The device's port-capability limits for responder resources.
uint8_t max_responder_resources(const Device& d);
uint8_t max_initiator_depth(const Device& d);

/// Moves a connected id's QP through INIT→RTR→RTS with what the CM agreed.
int qp_to_rtr(CmId* id);
int qp_to_rts(CmId* id);
int qp_to_error(CmId* id);
int qp_to_init(CmId* id, ibv_qp* qp);

Channel* new_channel(bool internal);
void delete_channel(Channel* ch);
/// Counts one more event on the channel's fd.
void signal_event(Channel* ch);
/// Takes one count back without blocking; false when none was there.
bool take_signal(Channel* ch);
/// Removes the id's events not yet taken from its channel.
void drop_queued_events(CmId* id);
/// A synchronous id keeps its last event in id->pub.event until its next
/// operation; acknowledges and forgets it. Caller holds the mutex.
void release_sync_event(Library& lib, CmId* id);

/// Sets errno and returns -1.
inline int fail(int err) {
  errno = err;
  return -1;
}

}  // namespace ibemu::rdmacm
