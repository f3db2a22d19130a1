#pragma once
// The header rdma_cm puts in front of the private data of a REQ or SIDR_REQ
// for the IP port spaces (IBA annex A11, "RDMA IP CM Service"): version,
// IP version, the source port and both IP addresses, so the listener learns
// who connects and to which of its addresses.
#include <cstdint>
#include <cstring>

#include "provider/compat/rdmacm/sockaddr_util.h"

namespace ibemu::rdmacm {

inline constexpr size_t kIpCmHeaderSize = 36;

inline void write_ip_cm_header(uint8_t* out, const sockaddr* src, const sockaddr* dst) {
  std::memset(out, 0, kIpCmHeaderSize);
  out[0] = 0;  // CM version
  out[1] = uint8_t((src->sa_family == AF_INET6 ? 6 : 4) << 4);
  uint16_t port = htons(port_of(src));
  std::memcpy(out + 2, &port, 2);
  size_t len;
  const uint8_t* s = address_bytes(src, &len);
  std::memcpy(out + 4 + (16 - len), s, len);
  const uint8_t* d = address_bytes(dst, &len);
  if (d) std::memcpy(out + 20 + (16 - len), d, len);
}

/// The source (with its port) and destination addresses of a header; false
/// when it is not one.
inline bool read_ip_cm_header(const uint8_t* in, sockaddr_storage* src, sockaddr_storage* dst) {
  int version = in[1] >> 4;
  std::memset(src, 0, sizeof *src);
  std::memset(dst, 0, sizeof *dst);
  uint16_t port;
  std::memcpy(&port, in + 2, 2);
  if (version == 4) {
    auto* s = reinterpret_cast<sockaddr_in*>(src);
    auto* d = reinterpret_cast<sockaddr_in*>(dst);
    s->sin_family = d->sin_family = AF_INET;
    std::memcpy(&s->sin_addr, in + 16, 4);
    std::memcpy(&d->sin_addr, in + 32, 4);
    s->sin_port = port;
    return true;
  }
  if (version == 6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(src);
    auto* d = reinterpret_cast<sockaddr_in6*>(dst);
    s->sin6_family = d->sin6_family = AF_INET6;
    std::memcpy(&s->sin6_addr, in + 4, 16);
    std::memcpy(&d->sin6_addr, in + 20, 16);
    s->sin6_port = port;
    return true;
  }
  return false;
}

}  // namespace ibemu::rdmacm
