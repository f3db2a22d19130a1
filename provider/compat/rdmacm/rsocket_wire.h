#pragma once
// The rsocket stream protocol on the wire: what two rsockets of this library
// say to each other. docs/rsockets.md describes it in prose.
//
// - Connection private data: each side's Hello, in rdma_connect's REQ and
//   rdma_accept's REP, names its receive ring and how many receive WRs the
//   peer's data may use.
// - Stream bytes: RDMA WRITE WITH IMMEDIATE into the peer's receive ring at
//   the writer's running position; the immediate is the byte count. A write
//   never wraps the ring's end: the writer splits it.
// - Control: a SEND of one ControlMessage (credits, end of stream, iomap
//   announcements). Every control message carries the sender's credit totals.
// - riowrite: a plain RDMA WRITE into a region the peer announced.
#include <endian.h>

#include <cstdint>

namespace ibemu::rsock {

inline constexpr uint32_t kHelloMagic = 0x69627273;  // "ibrs"
inline constexpr uint16_t kProtocolVersion = 1;

/// Private data of the REQ and the REP; big-endian fields.
struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t ring_addr;
  uint32_t ring_rkey;
  uint32_t ring_size;
  uint32_t data_credits;  // receive WRs the peer's stream writes may consume
  uint32_t reserved2;
};
static_assert(sizeof(Hello) == 32, "fits the 56 bytes an IP-addressed REQ leaves");

enum class ControlKind : uint32_t {
  kCredits = 1,      // nothing beyond the credit totals
  kEndOfStream = 2,  // rshutdown(SHUT_WR): no more stream bytes follow
  kIomap = 3,        // region: offset, addr, length, rkey
  kIounmap = 4,      // region: offset
};

/// The payload of every control SEND; big-endian fields.
struct ControlMessage {
  uint32_t kind;
  uint32_t region_rkey;
  // Cumulative totals, so an update never depends on the one before it.
  uint64_t bytes_consumed;     // of the sender's receive ring, read by its program
  uint64_t receives_reposted;  // data receive WRs the sender has posted again
  uint64_t region_offset;
  uint64_t region_addr;
  uint64_t region_length;
};
static_assert(sizeof(ControlMessage) == 48);

/// Size of each receive WR's buffer: big enough for any control message.
inline constexpr uint32_t kControlBufferSize = 64;
static_assert(sizeof(ControlMessage) <= kControlBufferSize);

inline uint64_t to_wire64(uint64_t v) { return htobe64(v); }
inline uint64_t from_wire64(uint64_t v) { return be64toh(v); }
inline uint32_t to_wire32(uint32_t v) { return htobe32(v); }
inline uint32_t from_wire32(uint32_t v) { return be32toh(v); }
inline uint16_t to_wire16(uint16_t v) { return htobe16(v); }
inline uint16_t from_wire16(uint16_t v) { return be16toh(v); }

}  // namespace ibemu::rsock
