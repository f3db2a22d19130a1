#pragma once
// Kernel mode: the daemon's HCAs registered with ib_core through ibemu.ko's
// control device (kernel/ibemu_abi.h). The bridge adds the devices, mirrors
// every port change into the kernel (which raises the ib_core events),
// answers the SMPs and PMA queries that reach the kernel's process_mad from
// the daemon's SMA and PMA, and carries the MADs of the kernel's QP0/QP1 to
// and from the daemon's MAD router. Closing it (the daemon exiting or dying)
// is what turns the kernel's ports DOWN.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/config.h"
#include "emulator-daemon/asio.h"
#include "emulator-daemon/kernel_data_channel.h"
#include "emulator-daemon/subnet.h"

namespace ibemu {

struct KernelBridgeCounters {
  uint64_t process_mad = 0;    // SMPs and PMA queries answered for the kernel
  uint64_t mads_sent = 0;      // by the kernel's QP0/QP1
  uint64_t mads_received = 0;  // handed to the kernel's QP0/QP1
};

class KernelBridge {
 public:
  /// The local SMA's or PMA's answer to a MAD at `port`, nullopt for none.
  using Answer =
      std::function<std::optional<std::array<uint8_t, 256>>(PortRef port, const uint8_t* mad)>;
  /// Routes a MAD the kernel sent from QP `qpn` of `port` to `dlid`.
  using Send = std::function<void(PortRef port, uint32_t qpn, uint16_t dlid, const uint8_t* mad,
                                  size_t len)>;

  /// Sets and clears a port's CapabilityMask bits: a kernel consumer's
  /// ib_modify_port, IsSM when an SM opens or closes the port's issm file.
  using ModifyCapabilities = std::function<void(PortRef port, uint32_t set, uint32_t clear)>;

  KernelBridge(boost::asio::io_context& io, const Config& config, const Subnet& subnet);
  ~KernelBridge();

  /// Opens `path` and registers every device: true in kernel mode. False when
  /// the module is not loaded and the config says "auto"; throws
  /// std::runtime_error when it says "on", or when the module refuses.
  bool start(const std::string& path, Answer answer, Send send,
             ModifyCapabilities modify_capabilities);
  void stop();
  bool active() const { return fd_.is_open(); }

  /// Mirrors a port's attributes into the kernel.
  void update_port(PortRef port);
  /// A MAD that arrived at `port` for its QP `dst_qp` (0 or 1), from `slid`
  /// and QP `src_qp`: into the kernel's receive queue.
  void deliver_mad(PortRef port, uint16_t slid, uint32_t src_qp, uint32_t dst_qp,
                   const uint8_t* mad, size_t len);

  const KernelBridgeCounters& counters() const { return counters_; }
  /// The QPNs ibemu.ko numbers kernel consumers' QPs from: the top of the
  /// QPN space, up to but not including the multicast QPN.
  static constexpr uint32_t kKernelQpnFirst = 0xf00000;
  static constexpr uint32_t kKernelQpnCount = 0xffffff - kKernelQpnFirst;
  /// The longest page list of a kernel consumer's FRWR MR
  /// (max_fast_reg_page_list_len): 2 MiB in 4 KiB pages.
  static constexpr uint32_t kKernelFastRegPages = 512;

  /// The data channel kernel consumers' QPs use (kernel_data_channel.h).
  KernelDataChannel& data_channel() { return data_; }
  const KernelDataChannel& data_channel() const { return data_; }
  /// Opens it, handing each record to `handler` on the channel's thread
  /// (the kernel plane's, once its engines are up). 0 or an errno
  /// (ENOTTY: a module without the data channel).
  int open_data_channel(KernelDataChannel::Handler handler);

 private:
  void add_device(int index);
  /// Writes one message; the module answers at once (errno on failure).
  int write_message(const void* msg, size_t len);
  void do_read();
  void on_message(const uint8_t* msg, size_t len);
  void on_process_mad(const uint8_t* msg);
  void on_mad_out(const uint8_t* msg);
  void on_port_cap(const uint8_t* msg);
  bool valid_port(int index, int port) const;

  const Config& config_;
  const Subnet& subnet_;
  boost::asio::posix::stream_descriptor fd_;
  Answer answer_;
  Send send_;
  ModifyCapabilities modify_capabilities_;
  std::array<uint8_t, 1024> buf_{};
  KernelBridgeCounters counters_;
  KernelDataChannel data_;
};

}  // namespace ibemu
