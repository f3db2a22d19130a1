#pragma once
// Kernel mode: one ibemu.ko device's kernel consumers (IPoIB, the kernel's
// rdma_cm, storage ULPs) on the daemon's transport engine. The context is an
// engine host like a verbs program's device context (a daemon session with
// role "kernel", an inbox, a progress thread), holding the QP number block
// the module numbers kernel QPs from. The data channel's reader applies the
// module's commands and WQEs to it (apply); the plane's forwarder collects
// what the engine completed and raised (collect) and hands it back to the
// module. docs/design/kernel-consumers.md, section 5.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/control_channel.h"
#include "emulator-daemon/kernel_memory.h"
#include "provider/core/engine_host.h"
#include "transport/engine/shared_receive_queue.h"

namespace ibemu {

struct KernelPlaneCounters {
  std::atomic<uint64_t> send_wqes{0};
  std::atomic<uint64_t> recv_wqes{0};
  std::atomic<uint64_t> refused{0};  // commands and WQEs the engine refused
  std::atomic<uint64_t> events{0};
};

class KernelContext : public provider::EngineHost {
 public:
  /// Device `index` (the daemon's, as in the module's records); `copy`
  /// moves payload (KernelDataChannel::copy); `wake` tells the plane's
  /// forwarder that collect() has something.
  KernelContext(uint8_t index, KernelMemory::Copy copy, std::function<void()> wake);
  ~KernelContext() override;

  /// Opens the engine as role "kernel" and claims the QPNs the module
  /// numbers kernel QPs from ([qpn_first, qpn_first + qpn_count)); starts
  /// the progress thread. 0 or an errno.
  int open(const RuntimePaths& paths, const std::string& ibdev, uint32_t qpn_first,
           uint32_t qpn_count);
  /// Data channel reader: one command or WQE of this device.
  void apply(const ibemu_data_hdr& hdr, const uint8_t* record) noexcept;
  /// Forwarder: appends CQE and EVENT records to `out` while it has room
  /// for one more of each (at most `limit` bytes); true when some were left.
  bool collect(std::vector<uint8_t>& out, size_t limit);

  Json status() const;
  const KernelPlaneCounters& counters() const { return counters_; }

 private:
  struct Cq {
    uint32_t handle = 0;
    std::unique_ptr<engine::CompletionQueue> cq;
  };
  struct KernelQp {
    std::shared_ptr<engine::Qp> qp;
    std::shared_ptr<Cq> send_cq, recv_cq;
    std::shared_ptr<engine::SharedReceiveQueue> srq;  // kept while a QP takes from it
    uint32_t modify_seq = 0;
    bool reported_error = false;  // a QP_STATE event followed its first error
  };
  struct KernelMr {
    uint32_t key;  // an FRWR MR's first: its index names it
    bool fast_reg;
  };
  struct PendingEvent {
    uint8_t object;
    uint32_t handle;
    uint8_t event;
  };

  void create_cq(const ibemu_data_create_cq& r);
  void destroy_cq(const ibemu_data_destroy_cq& r);
  void reg_dma_mr(const ibemu_data_reg_dma_mr& r);
  void alloc_mr(const ibemu_data_alloc_mr& r);
  /// Keeps the MR registered in the engine by its handle; logs `err`.
  void added_mr(uint32_t key, bool fast_reg, int err);
  void dereg_mr(const ibemu_data_dereg_mr& r);
  void create_srq(const ibemu_data_create_srq& r);
  void modify_srq(const ibemu_data_modify_srq& r);
  void destroy_srq(const ibemu_data_destroy_srq& r);
  void create_qp(const ibemu_data_create_qp& r);
  void modify_qp(const ibemu_data_modify_qp& r);
  void destroy_qp(const ibemu_data_destroy_qp& r);
  void mcast(const ibemu_data_mcast& r, bool attach);
  void post_send(const ibemu_data_send_wqe& r);
  void post_recv(const ibemu_data_recv_wqe& r);
  void post_srq_recv(const ibemu_data_recv_wqe& r);
  /// A WQE the engine refused: completed with LOC_QP_OP_ERR, so that the
  /// module retires it (the QP's WQEs complete in order all the same).
  void refuse_wqe(const std::shared_ptr<Cq>& cq, uint32_t qpn, uint64_t token,
                  engine::WcOpcode opcode);
  void raise(uint8_t object, uint32_t handle, uint8_t event);
  void mark_dirty(uint32_t cq_handle);
  std::shared_ptr<Cq> find_cq(uint32_t handle) const;
  std::shared_ptr<engine::SharedReceiveQueue> find_srq(uint32_t handle) const;
  /// Appends one record; false when it would pass `limit`.
  static bool append(std::vector<uint8_t>& out, size_t limit, const void* record, size_t len);

  const uint8_t index_;
  KernelMemory::Copy copy_;
  std::function<void()> wake_;
  KernelPlaneCounters counters_;

  mutable std::mutex mutex_;
  // Under mutex_:
  std::map<uint32_t, std::shared_ptr<Cq>> cqs_;
  std::map<uint32_t, KernelQp> qps_;
  std::map<uint32_t, KernelMr> mrs_;                                      // by handle
  std::map<uint32_t, std::shared_ptr<engine::SharedReceiveQueue>> srqs_;  // by handle
  std::vector<uint32_t> dirty_cqs_;
  std::vector<PendingEvent> events_;
};

}  // namespace ibemu
