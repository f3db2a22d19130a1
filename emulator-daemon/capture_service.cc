#include "emulator-daemon/capture_service.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <stdexcept>
#include <vector>

#include "common/capture_record.h"
#include "common/log.h"
#include "emulator-daemon/mad_packet.h"
#include "transport/wire/packet.h"

namespace ibemu {

namespace asio = boost::asio;

CaptureService::CaptureService(asio::io_context& io, const Subnet& subnet,
                               std::function<void(uint32_t)> on_count_change)
    : io_(io), subnet_(subnet), on_count_change_(std::move(on_count_change)) {}

CaptureService::~CaptureService() { stop(); }

void CaptureService::start(const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path)
    throw std::runtime_error("socket path too long: " + socket_path);
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ::unlink(socket_path.c_str());
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    if (fd >= 0) close(fd);
    throw std::runtime_error("cannot bind " + socket_path + ": " + std::strerror(err));
  }
  // Bursts of mirrored packets queue here while the daemon writes.
  int rcvbuf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  socket_path_ = socket_path;
  socket_ = std::make_unique<asio::posix::stream_descriptor>(io_, fd);
  receive();
}

void CaptureService::stop() {
  if (!socket_) return;
  boost::system::error_code ec;
  socket_->close(ec);
  socket_.reset();
  ::unlink(socket_path_.c_str());
  captures_.clear();
  publish_count();
}

void CaptureService::publish_count() {
  uint32_t running = 0;
  for (const auto& [id, c] : captures_) running += !c.done;
  if (on_count_change_) on_count_change_(running);
}

int CaptureService::begin(uint64_t session, const CaptureRequest& req, uint64_t* id) {
  Capture c;
  c.session = session;
  c.req = req;
  c.writer = std::make_unique<PcapWriter>(req.file, req.linktype, req.file_bytes, req.files);
  if (int err = c.writer->open()) return err;
  *id = next_id_++;
  captures_.emplace(*id, std::move(c));
  publish_count();
  return 0;
}

bool CaptureService::end(uint64_t session, uint64_t id) {
  auto it = captures_.find(id);
  if (it == captures_.end() || it->second.session != session) return false;
  captures_.erase(it);
  publish_count();
  return true;
}

void CaptureService::end_all(uint64_t session) {
  const size_t before = captures_.size();
  std::erase_if(captures_, [&](const auto& kv) { return kv.second.session == session; });
  if (captures_.size() != before) publish_count();
}

Json CaptureService::describe(uint64_t session, uint64_t id) const {
  auto it = captures_.find(id);
  if (it == captures_.end() || it->second.session != session) return nullptr;
  Json d = {{"packets", it->second.packets},
            {"done", it->second.done},
            {"file", it->second.writer->current_path()}};
  if (!it->second.error.empty()) d["error"] = it->second.error;
  return d;
}

void CaptureService::fail(uint64_t id, Capture& c, int err) {
  log_warn("capture {} into {}: {}: stopped", id, c.writer->current_path(), std::strerror(err));
  c.error = std::string("writing ") + c.writer->current_path() + ": " + std::strerror(err);
  c.done = true;
}

bool CaptureService::matches(const CaptureFilter& f, PortRef from, uint32_t src_qpn,
                             const uint8_t* packet, size_t len) const {
  wire::PacketView v;
  if (wire::parse_packet(packet, len, &v, false) != wire::ParseError::kOk) {
    // Unparsable: only a capture without a packet filter keeps it.
    return !f.qpn && !f.lid && !f.port && !f.device;
  }
  const uint16_t dlid = v.lrh().dlid(), slid = v.lrh().slid();
  const auto to = subnet_.port_by_lid(dlid);
  if (f.port && !(from == *f.port) && !(to && *to == *f.port)) return false;
  if (f.device && from.device != *f.device && !(to && to->device == *f.device)) return false;
  if (f.qpn && v.bth().dest_qp() != *f.qpn && src_qpn != *f.qpn) return false;
  if (f.lid && slid != *f.lid && dlid != *f.lid) return false;
  return true;
}

bool CaptureService::active() const {
  for (const auto& [id, c] : captures_)
    if (!c.done) return true;
  return false;
}

void CaptureService::record_mad(PortRef from, uint16_t slid, uint16_t dlid, uint32_t sqpn,
                                uint32_t dqpn, const uint8_t* mad, size_t len) {
  // Only MADs that fit one packet: RMPP transfers are handed over whole here
  // and never exist as segments.
  if (!active() || len > 256) return;
  const auto packet = build_mad_packet({slid, dlid, sqpn, dqpn}, mad, len);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  record(uint64_t(now.tv_sec) * 1000000000u + uint64_t(now.tv_nsec), from, sqpn, packet.data(),
         packet.size());
}

void CaptureService::record(uint64_t time_ns, PortRef from, uint32_t src_qpn, const uint8_t* packet,
                            size_t len) {
  // Links between processes skip the CRCs; a capture shows them as a real
  // link carries them.
  std::vector<uint8_t> copy(packet, packet + len);
  if (len >= wire::Lrh::kSize + wire::kIcrcSize + wire::kVcrcSize)
    wire::fill_crcs(copy.data(), len);
  bool finished = false;
  for (auto& [id, c] : captures_) {
    if (c.done || !matches(c.req.filter, from, src_qpn, copy.data(), len)) continue;
    if (int err = c.writer->write(time_ns, copy.data(), len)) {
      fail(id, c, err);
      finished = true;
      continue;
    }
    ++c.packets;
    if (c.req.max_packets && c.packets >= c.req.max_packets) c.done = finished = true;
  }
  if (finished) publish_count();
}

void CaptureService::drain() {
  if (!socket_) return;
  std::vector<uint8_t> buf(sizeof(CaptureRecordHeader) + wire::kMaxPacket);
  for (;;) {
    const ssize_t n = recv(socket_->native_handle(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n < 0) break;
    CaptureRecordHeader h;
    if (size_t(n) < sizeof h) continue;
    std::memcpy(&h, buf.data(), sizeof h);
    if (h.magic != CaptureRecordHeader::kMagic || h.length != size_t(n) - sizeof h) continue;
    record(h.time_ns, PortRef{h.device, h.port}, h.src_qpn, buf.data() + sizeof h, h.length);
  }
  bool failed = false;
  for (auto& [id, c] : captures_)
    if (c.error.empty())
      if (int err = c.writer->flush()) {
        fail(id, c, err);
        failed = true;
      }
  if (failed) publish_count();
}

void CaptureService::receive() {
  socket_->async_wait(asio::posix::descriptor::wait_read,
                      [this](const boost::system::error_code& ec) {
                        if (ec || !socket_) return;
                        drain();
                        receive();
                      });
}

}  // namespace ibemu
