#pragma once
// Messages between the contexts that together play one emulated HCA. A real
// HCA is one device; here every process (every opened device context) runs
// the part of it that holds its own objects, and no process reads or writes
// another's memory. When a request needs an object of another context — an
// XRC SRQ that another process created, a QP that another process opened
// with ibv_open_qp — the context that has the request sends a message to the
// context that has the object, and that one does the work. Messages are no
// IBA packets: they never leave the host, as a real HCA's internal traffic
// never reaches the wire. The provider carries them in the same inbox rings
// as packets; unit tests carry them on their fake link.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transport/wire/packet.h"

namespace ibemu::engine {

/// What became of a message.
enum class Delivery : uint8_t {
  kDelivered,  // it is in the destination's inbox
  kNoRoute,    // no such destination: the SRQ or the context does not exist
  kDropped,    // the destination's inbox stayed full
};

class ContextLink {
 public:
  virtual ~ContextLink() = default;
  /// To the context that owns XRC SRQ `srqn` of this HCA.
  virtual Delivery to_srq_owner(uint32_t srqn, const uint8_t* msg, size_t len) noexcept = 0;
  /// To context `context` of this HCA (its daemon session).
  virtual Delivery to_context(uint64_t context, const uint8_t* msg, size_t len) noexcept = 0;
  /// Whether XRC SRQ `srqn` still has an owner, asked anew (not from a
  /// cache): a context that waits for an answer stops waiting once the
  /// process that should answer is gone.
  virtual bool srq_owner_alive(uint32_t srqn) noexcept = 0;
};

/// Who handles a message: the engine (XRC forwarding) or the provider
/// (handles of ibv_open_qp). The numbers are part of the message format.
enum class MessageKind : uint8_t {
  kXrcRequest = 1,     // XRC receive QP → SRQ owner: execute this request
  kXrcVerdict = 2,     // SRQ owner → XRC receive QP: what came of it
  kXrcCompletion = 3,  // XRC receive QP → SRQ owner: complete a WQE it held
  kQpHandleCall = 16,  // opener → QP owner: open, query, modify, close
  kQpHandleReply = 17,
  kQpHandleEvent = 18,  // QP owner → opener: an async event of the QP
};

/// The head of every message. Both ends run the same provider build (the
/// one RDMAV_DRIVERS names), so bodies are plain structures; `magic` and
/// `size` catch anything else.
struct MessageHeader {
  static constexpr uint16_t kMagic = 0x1bec;
  uint16_t magic = kMagic;
  MessageKind kind{};
  uint8_t reserved = 0;
  uint32_t size = 0;  // of the whole message
  uint64_t from = 0;  // the sending context: where answers go
};

/// Room for the largest message: a forwarded request and its whole packet.
inline constexpr size_t kMaxMessageExtra = 512;
inline constexpr size_t kMaxMessage = wire::kMaxPacket + kMaxMessageExtra;

/// Reads the header of a message of `len` bytes; false if it is none.
inline bool read_header(const uint8_t* msg, size_t len, MessageHeader* h) noexcept {
  if (len < sizeof(MessageHeader)) return false;
  std::memcpy(h, msg, sizeof(MessageHeader));
  return h->magic == MessageHeader::kMagic && h->size == len;
}

}  // namespace ibemu::engine
