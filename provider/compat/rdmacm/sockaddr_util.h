#pragma once
// IPv4 and IPv6 socket addresses as rdma_cm handles them: parsing, ports,
// comparing, and whether an address lies in a port's subnet.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <string>

namespace ibemu::rdmacm {

inline bool parse_address(const std::string& text, sockaddr_storage* out) {
  std::string host = text.substr(0, text.find('/'));
  std::memset(out, 0, sizeof *out);
  auto* sin = reinterpret_cast<sockaddr_in*>(out);
  if (inet_pton(AF_INET, host.c_str(), &sin->sin_addr) == 1) {
    sin->sin_family = AF_INET;
    return true;
  }
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET6, host.c_str(), &sin6->sin6_addr) == 1) {
    sin6->sin6_family = AF_INET6;
    return true;
  }
  return false;
}

inline socklen_t address_length(const sockaddr* a) {
  switch (a->sa_family) {
    case AF_INET:
      return sizeof(sockaddr_in);
    case AF_INET6:
      return sizeof(sockaddr_in6);
    default:
      return 0;
  }
}

inline uint16_t port_of(const sockaddr* a) {
  if (a->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port);
  if (a->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port);
  return 0;
}

inline void set_port(sockaddr* a, uint16_t port) {
  if (a->sa_family == AF_INET) reinterpret_cast<sockaddr_in*>(a)->sin_port = htons(port);
  if (a->sa_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(a)->sin6_port = htons(port);
}

/// The address bytes (4 or 16) and their count.
inline const uint8_t* address_bytes(const sockaddr* a, size_t* len) {
  if (a->sa_family == AF_INET) {
    *len = 4;
    return reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr);
  }
  if (a->sa_family == AF_INET6) {
    *len = 16;
    return reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  }
  *len = 0;
  return nullptr;
}

inline bool same_address(const sockaddr* a, const sockaddr* b) {
  size_t la, lb;
  const uint8_t* pa = address_bytes(a, &la);
  const uint8_t* pb = address_bytes(b, &lb);
  return a->sa_family == b->sa_family && la == lb && la && std::memcmp(pa, pb, la) == 0;
}

inline bool is_any_address(const sockaddr* a) {
  size_t len;
  const uint8_t* p = address_bytes(a, &len);
  for (size_t i = 0; i < len; ++i)
    if (p[i]) return false;
  return true;
}

inline bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return false;
}

inline bool is_multicast(const sockaddr* a) {
  if (a->sa_family == AF_INET)
    return IN_MULTICAST(ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr));
  if (a->sa_family == AF_INET6)
    return IN6_IS_ADDR_MULTICAST(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return false;
}

/// Whether `a` lies in the subnet of `net`/`prefix`.
inline bool in_subnet(const sockaddr* a, const sockaddr* net, int prefix) {
  size_t la, ln;
  const uint8_t* pa = address_bytes(a, &la);
  const uint8_t* pn = address_bytes(net, &ln);
  if (a->sa_family != net->sa_family || la != ln || !la) return false;
  for (int bit = 0; bit < prefix && size_t(bit) < la * 8; ++bit) {
    uint8_t mask = uint8_t(0x80 >> (bit % 8));
    if ((pa[bit / 8] & mask) != (pn[bit / 8] & mask)) return false;
  }
  return true;
}

inline std::string address_text(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = "";
  size_t len;
  const uint8_t* p = address_bytes(a, &len);
  if (p) inet_ntop(a->sa_family, p, buf, sizeof buf);
  return buf;
}

}  // namespace ibemu::rdmacm
