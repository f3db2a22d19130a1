#pragma once
// QP0 and QP1 of the host's emulated ports, as the programs that register MAD
// agents through umad see them (IBA 13.4 management datagrams, 13.5 the MAD
// interfaces; Linux's ib_umad for how userspace reaches them).
//
// An agent registers on one port for a management class and class version,
// and for the request methods it serves. A MAD an agent sends leaves through
// its port: SMPs through the subnet's SMI to the SMAs, GMPs to the port that
// owns the DLID. There a response goes to the agent that sent the request —
// the upper 32 bits of the TransactionID name it, as the kernel's MAD layer
// arranges — and a request to the agent that serves its class, version and
// method. A request no agent serves is answered "unsupported
// method/attribute" (IBA 13.4.7), as an HCA's MAD layer answers. A request
// sent with a timeout is resent `retries` times and, still unanswered, handed
// back to its agent with status ETIMEDOUT.
//
//
// Communication management (class 0x07) is shared by every rdma_cm program
// of the host, as the kernel's CM is: a file registers as its port's CM
// endpoint and gets a block of communication IDs. A REQ or SIDR_REQ goes to
// the endpoint listening on its ServiceID, every other CM message to the
// endpoint whose block holds the communication ID it names. What no
// endpoint takes the router answers as an IBA CM would (docs/rdma-cm.md).
//
// Single-threaded and without I/O: the daemon moves the bytes and runs the
// clock, tests drive it directly.
#include <rdma/ib_user_mad.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "emulator-daemon/rmpp_segments.h"
#include "emulator-daemon/subnet.h"

namespace ibemu {

using UmadClientId = uint64_t;

/// What a umad file reads and writes: struct ib_user_mad_hdr, then the MAD.
using UmadMessage = std::vector<uint8_t>;
inline constexpr size_t kUmadHeaderSize = sizeof(ib_user_mad_hdr);
/// The largest MAD a program may write: RMPP agents send whole multi-segment
/// payloads in one write (the MAD layer would segment them).
inline constexpr size_t kMaxUmadMad = 64 * 1024;

/// IB_USER_MAD_REGISTER_AGENT2's request, as the router keeps it.
struct AgentRegistration {
  uint32_t qpn = 1;  // 0: SMPs, 1: GMPs
  uint8_t mgmt_class = 0;
  uint8_t class_version = 0;
  std::array<uint64_t, 2> method_mask{};  // bit m set: serves requests of method m
  uint8_t rmpp_version = 0;
};

/// Counted for `ibemu status`: MADs the router could not deliver and why.
struct MadRouterCounters {
  uint64_t sent = 0;
  uint64_t delivered = 0;
  uint64_t unmatched_requests = 0;  // answered "unsupported"
  uint64_t unsolicited_responses = 0;
  uint64_t unreachable = 0;  // DLID of no active port, port not active
  uint64_t malformed = 0;
  uint64_t timeouts = 0;
  uint64_t cm_routed = 0;     // CM messages handed to an endpoint
  uint64_t cm_unmatched = 0;  // CM messages for no endpoint or listener
};

class MadRouter {
 public:
  using Clock = std::chrono::steady_clock;
  /// Hands a message to a client's umad file.
  using Deliver = std::function<void(UmadClientId, UmadMessage)>;

  /// A MAD interface's own agent for a class (the PMA): answers a request
  /// that arrived at `port`, or nullopt to drop it.
  using LocalAgent = std::function<std::optional<std::vector<uint8_t>>(
      PortRef port, const uint8_t* mad, size_t len)>;

  MadRouter(Subnet& subnet, Deliver deliver);

  /// Requests of `mgmt_class` that no registered agent serves go to `agent`.
  void set_local_agent(uint8_t mgmt_class, LocalAgent agent);
  /// Told of every MAD as it would cross the wire out of port `from`: its
  /// LIDs, source and destination QP (0 or 1) and bytes. For captures.
  using Tap = std::function<void(PortRef from, uint16_t slid, uint16_t dlid, uint32_t sqpn,
                                 uint32_t dqpn, const uint8_t* mad, size_t len)>;
  void set_tap(Tap tap) { tap_ = std::move(tap); }
  /// Sends a MAD packet (emulator-daemon/mad_packet.h) to another host by
  /// inter-host link `uplink`: GMPs whose DLID the switch forwards there.
  using Remote = std::function<void(int uplink, const std::vector<uint8_t>& packet)>;
  void set_remote(Remote remote) { remote_ = std::move(remote); }
  /// A GMP that came from another host, for the port that owns `dlid`.
  void receive_gmp(uint16_t slid, uint16_t dlid, uint32_t src_qp, const uint8_t* mad, size_t len);
  /// The response to an SMP that left the host, back at the agent's `port`.
  void receive_smp_response(PortRef port, uint16_t slid, const uint8_t* mad, size_t len);

  /// IB_USER_MAD_REGISTER_AGENT: 0 and the file's new agent id, or the errno
  /// the kernel gives (EINVAL for a bad request or a method another agent of
  /// the port serves, ENOMEM when the file has 32 agents).
  int register_agent(UmadClientId client, PortRef port, const AgentRegistration& reg, uint32_t* id);
  /// IB_USER_MAD_UNREGISTER_AGENT: 0 or EINVAL.
  int unregister_agent(UmadClientId client, uint32_t id);
  /// IBEMU_UMAD_REGISTER_CM: the file becomes a CM endpoint of `port`. 0
  /// with its agent id and the base of its communication ID block (the low
  /// 16 bits are the endpoint's), or EINVAL (already one) / ENOSPC.
  int register_cm_endpoint(UmadClientId client, PortRef port, uint32_t* id, uint32_t* comm_id_base);
  /// IBEMU_UMAD_CM_LISTEN / CM_UNLISTEN: 0, EINVAL (no CM endpoint, or no
  /// such listen), or EADDRINUSE (another endpoint of the port listens on
  /// an overlapping ServiceID).
  int cm_listen(UmadClientId client, uint64_t service_id, uint64_t mask, bool listen);
  /// Whether some endpoint listens for REQs to `service_id`.
  bool cm_listening(uint64_t service_id) const;

  /// Kernel mode: the agents are the kernel's (ib_mad behind ibemu.ko), so
  /// every MAD that arrives at a port goes to `sink` with its source LID
  /// and QP and the QP it arrived on, segment by segment; only requests a
  /// local agent answers (the PMA, as an HCA's firmware would) stay here.
  using PortSink = std::function<void(PortRef port, uint16_t slid, uint32_t src_qp, uint32_t dst_qp,
                                      const uint8_t* mad, size_t len)>;
  void set_port_sink(PortSink sink) { sink_ = std::move(sink); }
  /// Kernel mode: a MAD the kernel sent from QP `qpn` (0: an SMP, 1: a GMP)
  /// of `port` to `dlid` (the kernel's MAD layer has set its TransactionID
  /// and keeps its timeouts).
  void send_from_port(PortRef port, uint32_t qpn, uint16_t dlid, const uint8_t* mad, size_t len);

  /// The file was closed: its agents and their outstanding requests go.
  void drop_client(UmadClientId client);

  /// A message a client wrote to its umad file.
  void send(UmadClientId client, const uint8_t* msg, size_t len, Clock::time_point now);

  /// When the next outstanding request times out.
  std::optional<Clock::time_point> next_deadline() const;
  /// Resends or gives up on the requests whose time has come.
  void expire(Clock::time_point now);

  const MadRouterCounters& counters() const { return counters_; }

 private:
  struct Agent {
    UmadClientId client = 0;
    uint32_t id = 0;  // the file's agent id
    PortRef port;
    AgentRegistration reg;
    uint32_t hi_tid = 0;  // the TransactionID's upper half on its requests
    uint16_t cm_tag = 0;  // a CM endpoint's communication ID block, or 0
  };
  struct CmListen {
    UmadClientId client = 0;
    PortRef port;
    uint64_t service_id = 0;
    uint64_t mask = 0;
  };
  /// A request sent with a timeout, waiting for its response.
  struct Outstanding {
    uint32_t hi_tid = 0;
    uint64_t tid = 0;
    UmadMessage request;  // as written, for resends and the timeout report
    uint32_t retries_left = 0;
    std::chrono::milliseconds timeout{0};
    Clock::time_point deadline;
  };
  /// Where a MAD came from, for the receiver's ib_user_mad_hdr.
  struct Source {
    uint16_t slid = 0;
    uint32_t qpn = 0;
  };

  Agent* find_agent(UmadClientId client, uint32_t id);
  Agent* agent_by_hi_tid(uint32_t hi_tid);
  const Agent* server_for(PortRef port, uint8_t mgmt_class, uint8_t version, uint8_t method) const;
  void dispatch(PortRef from, uint32_t qpn, const uint8_t* mad, size_t len, uint16_t dlid);
  void send_smp(PortRef from, const uint8_t* mad, size_t len, uint16_t dlid);
  void arrive(PortRef port, const Source& src, const uint8_t* mad, size_t len);
  void arrive_cm(PortRef port, const Source& src, const uint8_t* mad, size_t len);
  /// The router's own answer to a CM message no endpoint takes.
  void answer_cm(PortRef port, const Source& src, const uint8_t* mad);
  const Agent* cm_endpoint(PortRef port, UmadClientId client) const;
  void arrive_response(PortRef port, const Source& src, const uint8_t* mad, size_t len);
  void arrive_at_kernel(PortRef port, const Source& src, const uint8_t* mad, size_t len);
  void answer_unsupported(PortRef port, const Source& src, const uint8_t* mad);
  /// Sends a response from `port` back to where the request came from.
  void respond(PortRef port, const Source& src, const uint8_t* resp, size_t len);
  void give(const Agent& to, const Source& src, const uint8_t* mad, size_t len,
            uint32_t status = 0);
  /// Sends a GMP to a LID of another host; false when no inter-host link
  /// that is up leads there.
  bool send_remote(uint16_t slid, uint16_t dlid, const uint8_t* mad, size_t len);

  Subnet& subnet_;
  Deliver deliver_;
  std::map<uint8_t, LocalAgent> local_agents_;
  Tap tap_;
  Remote remote_;
  PortSink sink_;
  RmppReassembly rmpp_;  // long MADs arriving in segments from other hosts
  std::vector<Agent> agents_;
  std::vector<Outstanding> outstanding_;
  std::vector<CmListen> cm_listens_;
  uint16_t next_cm_tag_ = 1;
  uint32_t next_hi_tid_ = 1;
  MadRouterCounters counters_;
};

}  // namespace ibemu
