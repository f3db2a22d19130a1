#pragma once
// XRC receive QPs that deliver into XRC SRQs of other processes (IBA annex
// A14). On hardware an XRC receive QP takes each request's SRQ, its PD and
// its CQ from the request's XRCETH, whichever process of the XRC domain
// created that SRQ. Here the QP runs in the process that created it, and the
// SRQ's WQEs, memory and CQ belong to another one, which the QP's process
// must not touch. So the work is split where the spec splits it:
//
//  - the receive QP's context is the responder: it checks the request
//    (source, PSN, opcode sequence, lengths), answers duplicates, keeps the
//    MSN and sends ACKs and NAKs, exactly as for an SRQ of its own; its
//    XrcForwarder (below, xrc_forwarding.cc) carries the request over and
//    the verdict back;
//  - the SRQ owner's context executes what touches the SRQ's objects
//    (xrc_srq_host.cc): it takes the receive WQE, checks keys against the
//    SRQ's PD, places the data, completes on the SRQ's CQ, sends the READ
//    responses and performs atomics, and answers with a verdict.
//
// The QP hands each request over in a kXrcRequest message (the whole IBA
// packet and the state of the message in progress) and executes none of its
// later packets before the verdict is back: they wait in the QP, in order,
// so ordering and RNR behave as the spec says. Other QPs carry on meanwhile.
#include <cstdint>
#include <deque>
#include <type_traits>
#include <vector>

#include "transport/engine/context_link.h"
#include "transport/engine/qp_core.h"
#include "transport/engine/response_path.h"
#include "transport/engine/types.h"
#include "transport/engine/work_queues.h"

namespace ibemu::engine {

/// kXrcRequest: the receive QP's context asks the SRQ's owner to execute one
/// request packet, which follows this structure.
struct XrcRequest {
  MessageHeader header;
  uint32_t seq = 0;     // the QP's number for this request; the verdict repeats it
  uint32_t qpn = 0;     // the XRC receive QP (completions name it)
  uint32_t xrcd = 0;    // its XRC domain: the SRQ must be in the same one
  uint32_t srqn = 0;    // the SRQ to execute against
  uint32_t access = 0;  // the QP's remote access flags
  uint32_t src_qp = 0;  // the QP's peer: completions' src_qp
  uint8_t sl = 0;       // ... and their SL
  bool replay = false;  // a duplicate READ, executed again from its PSN
  bool has_wqe = false;
  uint32_t recv_offset = 0;  // SEND: bytes of the message placed before this packet
  RecvWqe wqe;               // SEND middle/last: the WQE the message took (has_wqe)
  // RDMA WRITE middle/last: where the message stands.
  uint64_t write_va = 0;
  uint32_t write_rkey = 0;
  uint32_t write_remaining = 0;
  uint32_t write_total = 0;
  // RDMA READ: where the responses go (with the MSN they carry), their
  // first PSN and the path MTU.
  ResponsePath path;
  uint32_t response_psn = 0;
  uint32_t mtu = 0;
  uint32_t packet_len = 0;
};

enum class XrcOutcome : uint8_t {
  kExecuted,  // placed (and completed, when it was the last packet)
  kNoWqe,     // the SRQ had no WQE: RNR NAK, the PSN is not consumed
  kFailed,    // NAK with `nak`; the QP goes to the error state
};

enum XrcVerdictFlag : uint8_t {
  kVerdictHoldsWqe = 1,   // the WQE the SEND took, for its next packets
  kVerdictCqOverrun = 2,  // the SRQ's CQ overran: the QP is in error (QP_FATAL)
};

/// kXrcVerdict: the SRQ owner's answer.
struct XrcVerdict {
  MessageHeader header;
  uint32_t seq = 0;
  uint32_t qpn = 0;
  uint32_t srqn = 0;
  XrcOutcome outcome = XrcOutcome::kExecuted;
  uint8_t nak = 0;    // wire::NakCode, when failed
  WcStatus status{};  // the local status behind the NAK (the QP's async event)
  uint8_t flags = 0;  // XrcVerdictFlag
  uint64_t atomic_orig = 0;
  RecvWqe wqe;  // with kVerdictHoldsWqe
};

/// kXrcCompletion: the receive QP completes a WQE it held (the message broke
/// off, or the QP went to the error state); it goes to the SRQ's CQ.
struct XrcCompletion {
  MessageHeader header;
  uint32_t srqn = 0;
  uint32_t xrcd = 0;
  Completion completion;
  bool solicited = false;
};

static_assert(sizeof(XrcRequest) <= kMaxMessageExtra);
static_assert(std::is_trivially_copyable_v<XrcRequest> &&
              std::is_trivially_copyable_v<XrcVerdict> &&
              std::is_trivially_copyable_v<XrcCompletion>);

class Responder;

/// An XRC receive QP's link to the contexts that own the SRQs its requests
/// name: held by XRC receive QPs only, next to the responder it extends.
class XrcForwarder {
 public:
  XrcForwarder(QpCore& qp, Responder& responder);

  /// The current request's SRQ lives in another context (0: here).
  void set_remote(uint32_t srqn) noexcept { fwd_.srqn = srqn; }
  bool remote() const noexcept { return fwd_.srqn != 0; }
  /// A request is with the SRQ's owner: nothing passes it.
  bool waiting() const noexcept { return fwd_.waiting; }
  /// Hands the request to the SRQ's owner. kNoRoute: no context has it.
  Delivery forward(const wire::PacketView& pkt, bool replay) noexcept;
  void park(const wire::PacketView& pkt) noexcept;
  void receive_verdict(const XrcVerdict& v) noexcept;
  void abandon() noexcept;
  /// RESET: nothing awaited (the sequence numbers go on).
  void reset() noexcept;
  Nanos timer(Nanos now) noexcept;

  /// A completion for a WQE of another context's SRQ, sent to its owner.
  static void send_completion(QpCore& qp, uint32_t srqn, const Completion& c,
                              bool solicited) noexcept;
  /// A verdict no request awaits (the QP stopped waiting, or never
  /// forwarded): a WQE the request took is flushed.
  static void drop_verdict(QpCore& qp, const XrcVerdict& v) noexcept;

 private:
  void resume() noexcept;

  QpCore& qp_;
  Responder& responder_;
  struct Forwarding {
    uint32_t srqn = 0;     // the current packet's SRQ lives elsewhere (0: here)
    bool waiting = false;  // a request is with the SRQ's owner
    bool replay = false;   // ... and it is a duplicate READ
    uint32_t seq = 0;      // the request awaited
    uint32_t pending_srqn = 0;
    Nanos deadline = 0;                       // when to ask whether the SRQ's owner still lives
    std::vector<uint8_t> request;             // the packet awaiting its verdict
    std::deque<std::vector<uint8_t>> parked;  // packets behind it, in order
  } fwd_;
};

}  // namespace ibemu::engine
