#include "emulator-daemon/fabric_delivery.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/capture_record.h"
#include "transport/wire/lrh.h"

namespace ibemu {

namespace {
constexpr size_t kQueueLimit = 1u << 20;
}  // namespace

FabricDelivery::~FabricDelivery() {
  link_.reset();
  if (page_) munmap(const_cast<StatePage*>(page_), sizeof(StatePage));
}

int FabricDelivery::connect(const std::string& runtime_dir) {
  if (int err = client_.connect(runtime_dir + "/ibemud.sock")) return err;
  fd_ = client_.fd();
  Json reply;
  std::vector<int> fds;
  if (client_.request(
          {{"op", "hello"}, {"role", "fabric"}, {"pid", getpid()}, {"want_state_page", true}},
          &reply, {}, &fds) ||
      !reply_ok(reply) || fds.size() != 1) {
    for (int fd : fds) close(fd);
    return EIO;
  }
  void* p = mmap(nullptr, sizeof(StatePage), PROT_READ, MAP_SHARED, fds[0], 0);
  close(fds[0]);
  if (p == MAP_FAILED) return errno;
  page_ = static_cast<const StatePage*>(p);
  for (uint32_t d = 0; d < page_->num_devices && d < uint32_t(kMaxDevices); ++d) {
    CounterPage counters;
    if (int err = counters.create()) return err;
    int fd = dup(counters.fd());
    const bool ok = client_.request({{"op", "open_context"}, {"device", d}}, &reply, {fd}) == 0 &&
                    reply_ok(reply);
    close(fd);
    if (!ok) return EIO;
    drops_.push_back(std::move(counters));
  }
  // The device index only names the sender in captures and fault counters;
  // a packet from another host has no sending port here.
  link_ = std::make_unique<provider::ShmLink>(&client_, 0);
  link_->forget_routes_on(&page_->inboxes_closed);
  // What another host sends is not held back by a full ring here (only its
  // RC windows hold it): a short queue, about a millisecond of packets, and
  // the transport's retransmission beyond it, as over the lossy network.
  link_->set_queue_limit(kQueueLimit);
  // Counted at the port the packet was for: it has no sending port here.
  link_->on_discard([this](const uint8_t* packet, size_t len, provider::ShmLink::Discard why) {
    if (len < wire::Lrh::kSize) return;
    const uint16_t dlid = wire::Lrh::from(packet).dlid();
    for (size_t d = 0; d < drops_.size(); ++d)
      if (const int port = page_->port_of_lid(int(d), dlid)) {
        engine::PortCounters& c = drops_[d].get()->at(unsigned(port));
        (why == provider::ShmLink::Discard::kReceiverStalled ? c.xmit_stalled_discards
                                                             : c.xmit_discards)++;
        return;
      }
  });
  link_->attach_capture(
      std::make_unique<provider::CaptureMirror>(page_, 0, runtime_dir + "/" + kCaptureSocketName));
  auto faults = std::make_unique<provider::LinkFaults>(page_, 0, nullptr, nullptr);
  faults->count_drops_of_other_hosts([this](int device, int port) {
    if (device >= 0 && size_t(device) < drops_.size())
      drops_[size_t(device)].get()->at(unsigned(port)).fault_drops++;
  });
  link_->attach_faults(std::move(faults));
  return 0;
}

void FabricDelivery::shut_down() {
  if (int fd = fd_.load(); fd >= 0) ::shutdown(fd, SHUT_RDWR);
}

bool FabricDelivery::deliver(uint16_t dlid, uint32_t dest_qp, const uint8_t* packet, size_t len) {
  if (!link_) return false;
  const engine::TxResult result = link_->transmit(dlid, dest_qp, packet, len);
  return result == engine::TxResult::kSent || result == engine::TxResult::kQueued;
}

void FabricDelivery::flush_queued(int64_t now_ns) {
  if (link_) link_->flush_queued(now_ns);
}

int64_t FabricDelivery::release_held(int64_t now_ns) {
  return link_ ? link_->release_held(now_ns) : 0;
}

}  // namespace ibemu
