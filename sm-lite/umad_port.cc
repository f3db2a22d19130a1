#include "sm-lite/umad_port.h"

#include <arpa/inet.h>
#include <rdma/ib_user_mad.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/mad/mad.h"
#include "common/mad/sa.h"
#include "common/umad_client.h"

namespace ibemu::sm {

namespace {
constexpr size_t kMaxMessage = sizeof(ib_user_mad_hdr) + 64 * 1024;
}

UmadPort::~UmadPort() {
  if (fd_ >= 0) close(fd_);
}

int UmadPort::open_sa(const std::string& socket_path) {
  fd_ = ibemu_umad_connect(socket_path.c_str(), 1);
  if (fd_ < 0) return errno;
  ibemu_umad_request req{};
  ibemu_umad_reply reply{};
  req.op = IBEMU_UMAD_OPEN;
  if (ibemu_umad_round_trip(fd_, &req, &reply) != 0) return errno;
  if (reply.err) return reply.err;
  const uint64_t token = reply.token;

  // The methods an SA serves (IBA 15.2.2).
  req = {};
  req.op = IBEMU_UMAD_REGISTER;
  req.token = token;
  req.qpn = 1;
  req.mgmt_class = uint8_t(mad::MgmtClass::kSubnAdm);
  req.mgmt_class_version = mad::kSaClassVersion;
  req.rmpp_version = 1;
  for (mad::Method m :
       {mad::Method::kGet, mad::Method::kSet, mad::Method::kGetTable, mad::Method::kDelete})
    req.method_mask[uint8_t(m) / 64] |= uint64_t{1} << (uint8_t(m) % 64);
  int conn = ibemu_umad_connect(socket_path.c_str(), 0);
  if (conn < 0) return errno;
  const int rc = ibemu_umad_round_trip(conn, &req, &reply);
  const int err = errno;
  close(conn);
  if (rc != 0) return err;
  if (reply.err) return reply.err;
  agent_ = reply.agent_id;
  return 0;
}

std::optional<ReceivedMad> UmadPort::recv() {
  std::vector<uint8_t> buf(kMaxMessage);
  const ssize_t n = ::recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
  if (n < static_cast<ssize_t>(sizeof(ib_user_mad_hdr))) return std::nullopt;
  ib_user_mad_hdr hdr;
  std::memcpy(&hdr, buf.data(), sizeof hdr);
  if (hdr.status != 0) return std::nullopt;  // a timed-out send of ours
  ReceivedMad m;
  m.slid = ntohs(hdr.lid);
  m.sqpn = ntohl(hdr.qpn);
  m.mad.assign(buf.begin() + sizeof hdr, buf.begin() + n);
  return m;
}

int UmadPort::send(uint16_t dlid, uint32_t dqpn, const std::vector<uint8_t>& mad) {
  std::vector<uint8_t> msg(sizeof(ib_user_mad_hdr) + mad.size());
  ib_user_mad_hdr hdr{};
  hdr.id = agent_;
  hdr.qpn = htonl(dqpn);
  hdr.qkey = htonl(mad::kQp1Qkey);
  hdr.lid = htons(dlid);
  std::memcpy(msg.data(), &hdr, sizeof hdr);
  std::memcpy(msg.data() + sizeof hdr, mad.data(), mad.size());
  if (::send(fd_, msg.data(), msg.size(), MSG_NOSIGNAL) < 0) return errno;
  return 0;
}

}  // namespace ibemu::sm
