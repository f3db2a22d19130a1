#pragma once
// What a responder needs to answer its requester (IBA 9.7.5.1), apart from
// the QP: the QP sends its ACKs and READ responses through it, and so does
// the context that executes an XRC request forwarded to it
// (xrc_srq_host.cc), whose READ responses must look exactly like the
// receive QP's own.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "transport/engine/device_memory.h"
#include "transport/engine/packet_sink.h"
#include "transport/engine/types.h"
#include "transport/wire/opcode.h"
#include "transport/wire/packet.h"
#include "transport/wire/psn.h"

namespace ibemu::engine {

struct ResponsePath {
  AddressVector av;        // the QP's path toward its requester
  uint8_t port_num = 0;    // the port the responses leave from
  uint8_t transport = 0;   // the QP's wire::Transport: the opcodes' upper bits
  uint32_t dest_qp = 0;    // the requester's QP
  uint32_t msn = 0;        // what the AETH carries
  uint16_t pkey = 0xffff;  // the QP's P_Key: its responses are in its partition
};

/// LRH and, for a global address vector, GRH toward `av` from port `me`
/// (IBA 7.7, 8.3).
void fill_address_headers(wire::PacketHeaders& h, const AddressVector& av,
                          const PortAddress& me) noexcept;

/// Writes one response packet into `buf` (wire::kMaxPacket bytes): an ACK, a
/// READ response or an atomic ACK, `rc_opcode` being RC's opcode for it.
/// Returns the packet's length, or 0 when `payload` (registered host memory)
/// faulted while it was copied.
size_t write_response(uint8_t* buf, const ResponsePath& path, const PortAddress& me,
                      uint8_t rc_opcode, uint32_t psn, uint8_t syndrome, const uint8_t* payload,
                      uint32_t len, uint64_t atomic_orig, bool crcs) noexcept;

/// How many packets a message of `len` bytes takes at path MTU `mtu`: at
/// least one, a zero-length message included (IBA 9.7.5.2.2 for READ
/// responses, 9.7.4.1 for requests).
inline uint32_t packets_for(uint32_t len, uint32_t mtu) { return len ? (len + mtu - 1) / mtu : 1; }

/// The opcode of READ response `index` of `npkts` (IBA 9.7.5.2.2).
inline wire::Opcode read_response_opcode(uint32_t index, uint32_t npkts) {
  using wire::Opcode;
  const bool first = index == 0, last = index + 1 == npkts;
  return first && last ? Opcode::kRcReadResponseOnly
         : first       ? Opcode::kRcReadResponseFirst
         : last        ? Opcode::kRcReadResponseLast
                       : Opcode::kRcReadResponseMiddle;
}

/// The responses to an RDMA READ of `len` bytes at `src` (IBA 9.7.5.2.2):
/// one PMTU each, PSNs from `psn` on. Calls send(rc_opcode, psn, data, n)
/// for each packet, which returns false when it could not read `data` (host
/// memory gone); device memory is copied through `bounce` (one PMTU).
/// Returns false when the memory refused a read (no further packet is sent).
template <typename Send>
bool for_each_read_response(const MemorySpan& src, uint32_t len, uint32_t mtu, uint32_t psn,
                            uint8_t* bounce, Send&& send) {
  const uint32_t npkts = packets_for(len, mtu);
  for (uint32_t i = 0; i < npkts; ++i) {
    const uint32_t off = i * mtu;
    const uint32_t n = std::min(mtu, len - off);
    const wire::Opcode op = read_response_opcode(i, npkts);
    const uint8_t* data = src.addr + off;
    if (src.on_device()) {
      if (n && !src.read(off, bounce, n)) return false;
      data = bounce;
    }
    if (!send(static_cast<uint8_t>(op), wire::psn_add(psn, i), data, n)) return false;
  }
  return true;
}

}  // namespace ibemu::engine
