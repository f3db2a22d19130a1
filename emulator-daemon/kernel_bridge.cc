#include "emulator-daemon/kernel_bridge.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/log.h"
#include "common/mad/mad.h"
#include "emulator-daemon/kernel_messages.h"
#include "kernel/ibemu_abi.h"
#include "kernel/ibemu_ctl_validate.h"
#include "transport/engine/types.h"

namespace ibemu {

namespace {

void copy_name(char (&to)[IBEMU_CTL_NAME_MAX], const std::string& from) {
  std::strncpy(to, from.c_str(), sizeof(to) - 1);
}

// fw_ver "a.b.c" as ib_core's 64-bit firmware version (a.b.c -> a<<32|b<<16|c).
uint64_t fw_ver_number(const std::string& text) {
  unsigned a = 0, b = 0, c = 0;
  std::sscanf(text.c_str(), "%u.%u.%u", &a, &b, &c);
  return uint64_t{a} << 32 | uint64_t{b & 0xffff} << 16 | (c & 0xffff);
}

}  // namespace

KernelBridge::KernelBridge(boost::asio::io_context& io, const Config& config, const Subnet& subnet)
    : config_(config), subnet_(subnet), fd_(io) {}

KernelBridge::~KernelBridge() { stop(); }

bool KernelBridge::start(const std::string& path, Answer answer, Send send,
                         ModifyCapabilities modify_capabilities) {
  if (config_.kernel == "off") return false;
  int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (config_.kernel == "auto" && errno == ENOENT) return false;
    throw std::runtime_error(
        fmt::format("{}: {} (is ibemu.ko loaded, and is this root?)", path, std::strerror(errno)));
  }
  fd_.assign(fd);
  answer_ = std::move(answer);
  send_ = std::move(send);
  modify_capabilities_ = std::move(modify_capabilities);
  for (size_t d = 0; d < config_.devices.size(); ++d) add_device(static_cast<int>(d));
  for (const PortRef& p : subnet_.ports()) update_port(p);
  do_read();
  log_info("kernel mode: {} device(s) registered with ib_core through {}", config_.devices.size(),
           path);
  return true;
}

int KernelBridge::open_data_channel(KernelDataChannel::Handler handler) {
  static_assert(kKernelQpnFirst + kKernelQpnCount == IBEMU_CTL_MULTICAST_QPN);
  return data_.open(fd_.native_handle(), std::move(handler));
}

void KernelBridge::stop() {
  // The channel first: its end is how the module learns the daemon left.
  data_.stop();
  boost::system::error_code ignored;
  fd_.close(ignored);
}

int KernelBridge::write_message(const void* msg, size_t len) {
  // The module's own checks, run here first: a refusal is the daemon's bug.
  if (ibemu_ctl_validate(msg, len) != 0) {
    log_error("kernel: the daemon built a malformed control message");
    return EINVAL;
  }
  ssize_t n = ::write(fd_.native_handle(), msg, len);
  return n == static_cast<ssize_t>(len) ? 0 : (n < 0 ? errno : EIO);
}

void KernelBridge::add_device(int index) {
  using engine::DeviceLimits;
  const DeviceConfig& dev = config_.devices[index];
  auto m = kernel_message<ibemu_ctl_add_device>(IBEMU_CTL_ADD_DEVICE);
  m.abi_version = IBEMU_CTL_ABI_VERSION;
  m.index = static_cast<uint8_t>(index);
  m.num_ports = static_cast<uint8_t>(dev.ports);
  copy_name(m.name, dev.name);
  copy_name(m.node_desc, dev.node_desc);
  m.node_guid = dev.node_guid;
  m.sys_image_guid = dev.sys_image_guid;
  m.subnet_prefix = subnet_.port(PortRef{index, 1}).subnet_prefix;
  for (int port = 1; port <= dev.ports; ++port)
    m.port_guids[port - 1] = subnet_.port(PortRef{index, port}).port_guid;
  m.fw_ver = fw_ver_number(dev.fw_ver);
  m.vendor_id = dev.vendor_id;
  m.vendor_part_id = dev.vendor_part_id;
  m.hw_ver = dev.hw_ver;
  m.max_qp = DeviceLimits::kMaxQp;
  m.max_qp_wr = DeviceLimits::kMaxQpWr;
  m.max_sge = DeviceLimits::kMaxSge;
  m.max_cq = DeviceLimits::kMaxCq;
  m.max_cqe = DeviceLimits::kMaxCqe;
  m.max_mr = DeviceLimits::kMaxMr;
  m.max_pd = DeviceLimits::kMaxPd;
  m.max_srq = DeviceLimits::kMaxSrq;
  m.max_srq_wr = DeviceLimits::kMaxSrqWr;
  m.max_mr_size = DeviceLimits::kMaxMrSize;
  m.kernel_qpn_first = kKernelQpnFirst;
  m.kernel_qpn_count = kKernelQpnCount;
  m.max_fast_reg_pages = kKernelFastRegPages;
  if (int err = write_message(&m, sizeof(m)))
    throw std::runtime_error(
        fmt::format("ibemu.ko refused device {}: {}", dev.name, std::strerror(err)));
}

void KernelBridge::update_port(PortRef port) {
  if (!active()) return;
  const PortAttributes a = subnet_.port(port);
  auto m = kernel_message<ibemu_ctl_set_port>(IBEMU_CTL_SET_PORT);
  m.index = static_cast<uint8_t>(port.device);
  m.port = static_cast<uint8_t>(port.port);
  m.state = static_cast<uint8_t>(a.state);
  m.phys_state = static_cast<uint8_t>(a.phys_state);
  m.lid = a.lid;
  m.sm_lid = a.sm_lid;
  m.lmc = a.lmc;
  m.sm_sl = a.sm_sl;
  m.max_mtu = a.max_mtu;
  m.active_mtu = a.neighbor_mtu ? a.neighbor_mtu : a.max_mtu;
  m.active_width = a.link_width_active;
  m.active_speed = a.link_speed_active;
  static_assert(IBEMU_CTL_MAX_PKEYS == kMaxPkeys);
  std::copy(a.pkeys.begin(), a.pkeys.end(), m.pkeys);
  m.port_cap_flags = a.cap_mask;
  m.subnet_prefix = a.subnet_prefix;
  m.port_guid = a.port_guid;
  if (int err = write_message(&m, sizeof(m)))
    log_warn("kernel: port {}/{} not updated: {}", port.device, port.port, std::strerror(err));
}

void KernelBridge::do_read() {
  fd_.async_read_some(boost::asio::buffer(buf_),
                      [this](const boost::system::error_code& ec, size_t n) {
                        if (ec == boost::asio::error::operation_aborted) return;
                        if (ec) {
                          log_warn("kernel: control device read failed: {}", ec.message());
                          return;
                        }
                        on_message(buf_.data(), n);
                        do_read();
                      });
}

void KernelBridge::on_message(const uint8_t* msg, size_t len) {
  ibemu_ctl_hdr hdr;
  if (len < sizeof(hdr)) return;
  std::memcpy(&hdr, msg, sizeof(hdr));
  if (hdr.type == IBEMU_CTL_MAD_OUT && len == sizeof(ibemu_ctl_mad_out)) on_mad_out(msg);
  if (hdr.type == IBEMU_CTL_PROCESS_MAD && len == sizeof(ibemu_ctl_process_mad))
    on_process_mad(msg);
  if (hdr.type == IBEMU_CTL_PORT_CAP && len == sizeof(ibemu_ctl_port_cap)) on_port_cap(msg);
}

void KernelBridge::on_port_cap(const uint8_t* msg) {
  ibemu_ctl_port_cap cap;
  std::memcpy(&cap, msg, sizeof(cap));
  if (!valid_port(cap.index, cap.port)) return;
  modify_capabilities_(PortRef{cap.index, cap.port}, cap.set_mask, cap.clear_mask);
}

bool KernelBridge::valid_port(int index, int port) const {
  return index >= 0 && static_cast<size_t>(index) < config_.devices.size() && port >= 1 &&
         port <= config_.devices[index].ports;
}

namespace {

// The kernel's MAD layer has stepped an outgoing directed-route SMP's hop
// pointer past this CA (IBA 14.2.2.2, C14-9:1); the subnet walks the route
// from the SM's port itself.
void rewind_directed_route(uint8_t* mad) {
  const bool directed = mad[1] == uint8_t(mad::MgmtClass::kSubnDirected);
  const bool outbound = !(mad[4] & 0x80);  // the D bit of the status word
  if (directed && outbound && mad[6] == 1) mad[6] = 0;
}

}  // namespace

void KernelBridge::on_mad_out(const uint8_t* msg) {
  ibemu_ctl_mad_out out;
  std::memcpy(&out, msg, sizeof(out));
  if (!valid_port(out.index, out.port)) return;
  rewind_directed_route(out.mad);
  ++counters_.mads_sent;
  send_(PortRef{out.index, out.port}, out.qpn, out.dlid, out.mad, sizeof(out.mad));
}

void KernelBridge::deliver_mad(PortRef port, uint16_t slid, uint32_t src_qp, uint32_t dst_qp,
                               const uint8_t* mad, size_t len) {
  auto in = kernel_message<ibemu_ctl_mad_in>(IBEMU_CTL_MAD_IN);
  if (!active() || len != sizeof(in.mad)) return;  // one segment per MAD here
  in.index = static_cast<uint8_t>(port.device);
  in.port = static_cast<uint8_t>(port.port);
  in.qpn = static_cast<uint8_t>(dst_qp);
  in.src_qp = src_qp;
  in.slid = slid;
  std::memcpy(in.mad, mad, len);
  if (int err = write_message(&in, sizeof(in)))
    log_warn("kernel: MAD for {}/{} refused: {}", port.device, port.port, std::strerror(err));
  else
    ++counters_.mads_received;
}

void KernelBridge::on_process_mad(const uint8_t* msg) {
  ibemu_ctl_process_mad req;
  std::memcpy(&req, msg, sizeof(req));
  auto reply = kernel_message<ibemu_ctl_process_mad_reply>(IBEMU_CTL_PROCESS_MAD_REPLY);
  reply.hdr.seq = req.hdr.seq;
  reply.result = IBEMU_CTL_MAD_IGNORED;
  if (valid_port(req.index, req.port)) {
    const uint8_t mgmt_class = req.mad[1];
    const bool ours =
        mad::is_smp_class(mgmt_class) || mgmt_class == uint8_t(mad::MgmtClass::kPerfMgt);
    rewind_directed_route(req.mad);
    auto answer = answer_(PortRef{req.index, req.port}, req.mad);
    if (answer) {
      std::memcpy(reply.mad, answer->data(), sizeof(reply.mad));
      reply.result = IBEMU_CTL_MAD_REPLY;
    } else if (ours) {
      reply.result = IBEMU_CTL_MAD_CONSUMED;  // the SMA or PMA dropped it
    }
    ++counters_.process_mad;
  }
  if (int err = write_message(&reply, sizeof(reply)))
    log_warn("kernel: MAD reply refused: {}", std::strerror(err));
}

}  // namespace ibemu
