// The provider's verbs, on the C++ side of provider/core_api.h: argument
// checks with the errno a hardware provider returns, conversion between
// rdma-core's structures and the engine's, and the daemon requests that
// objects need (QP numbers).
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "common/hex.h"
#include "provider/core/address_space.h"
#include "provider/core/core_internal.h"
#include "provider/core/cuda_memory.h"
#include "provider/core/diagnostics.h"
#include "provider/core/kernel_uverbs.h"
#include "provider/core/provider_context.h"
#include "provider/core/queue_sizing.h"
#include "provider/core_api.h"
#include "transport/engine/dma_access.h"
#include "transport/wire/lrh.h"

using namespace ibemu;
using namespace ibemu::engine;
namespace kernel_uverbs = ibemu::provider::kernel_uverbs;

// QP and SRQ numbers are 24 bits on the wire (BTH DestQP, XRCETH).
static constexpr uint64_t kMaxQpn = 0xffffff;

struct ibemu_core_context {
  provider::ProviderContext ctx;
  std::atomic<uint32_t> next_pd{1};
  // Host dma-bufs mapped for their regions (ibv_reg_dmabuf_mr), by key.
  std::mutex dmabuf_mutex;
  std::map<uint32_t, std::pair<void*, size_t>> dmabuf_maps;
};

// An opcode the engine refuses at post time (EINVAL), for WRs found unusable
// while converting them.
constexpr WrOpcode kNoSuchOpcode = static_cast<WrOpcode>(0xff);

// An enum field of a program's struct as the integer it holds: a value
// outside the enum (garbage in a field the mask leaves out, a newer opcode)
// must reach the checks, and loading it as the enum is undefined behaviour.
template <class Enum>
uint32_t raw_value(const Enum& field) {
  std::underlying_type_t<Enum> value;
  std::memcpy(&value, &field, sizeof value);
  return static_cast<uint32_t>(value);
}

// Empty polls in a row after which a poller starts yielding its CPU.
constexpr uint32_t kPollsBeforeYield = 64;

struct ibemu_core_cq {
  ibemu_core_context* owner = nullptr;
  std::unique_ptr<CompletionQueue> cq;
  std::atomic<int> users{0};  // QPs attached: destroy is refused while > 0
  std::atomic<uint32_t> empty_polls{0};
  int channel_write_fd = -1;
  int kernel_cmd_fd = -1;      // kernel mode: the context's uverbs file ...
  uint32_t kernel_handle = 0;  // ... and the kernel CQ behind the channel
};

struct ibemu_core_srq {
  ibemu_core_context* owner = nullptr;
  std::unique_ptr<SharedReceiveQueue> srq;
  std::atomic<int> users{0};    // QPs attached: destroy is refused while > 0
  ibemu_core_cq* cq = nullptr;  // XRC SRQs: where their completions go
  uint32_t srqn = 0;            // its number once assigned (XRC: at creation)
};

struct ibemu_core_qp {
  ibemu_core_context* owner = nullptr;
  std::shared_ptr<Qp> qp;  // null: a handle on an XRC receive QP of another context
  ibemu_core_cq* send_cq = nullptr;
  ibemu_core_cq* recv_cq = nullptr;
  ibemu_core_srq* srq = nullptr;
  QpInit init;
  // XRC receive QPs: every handle, the creator's and those of ibv_open_qp
  // (provider/core/shared_xrc_qps.h), names the context whose QP it is.
  uint64_t qp_context = 0;
  uintptr_t handle = 0;  // the ibv_qp
};

// The engine's enums carry the verbs ABI's values.
static_assert(static_cast<int>(WcStatus::kRetryExcErr) == IBV_WC_RETRY_EXC_ERR);
static_assert(static_cast<int>(WcStatus::kRnrRetryExcErr) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(static_cast<int>(WcStatus::kWrFlushErr) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(WcStatus::kRemAccessErr) == IBV_WC_REM_ACCESS_ERR);
static_assert(static_cast<int>(WcOpcode::kRecvRdmaWithImm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(static_cast<int>(WrOpcode::kSendWithInv) == IBV_WR_SEND_WITH_INV);
static_assert(static_cast<int>(WrOpcode::kBindMw) == IBV_WR_BIND_MW);
static_assert(static_cast<int>(WcOpcode::kBindMw) == IBV_WC_BIND_MW);
static_assert(static_cast<int>(WcStatus::kMwBindErr) == IBV_WC_MW_BIND_ERR);
static_assert(int{kAccessMwBind} == int{IBV_ACCESS_MW_BIND} &&
              int{kAccessZeroBased} == int{IBV_ACCESS_ZERO_BASED});
static_assert(int{kQpDestQpn} == int{IBV_QP_DEST_QPN});
static_assert(int{kQpMaxDestRdAtomic} == int{IBV_QP_MAX_DEST_RD_ATOMIC});
static_assert(int{kSendInline} == int{IBV_SEND_INLINE} &&
              int{kSendSignaled} == int{IBV_SEND_SIGNALED});
static_assert(int{kAccessRemoteAtomic} == int{IBV_ACCESS_REMOTE_ATOMIC});
static_assert(static_cast<int>(QpState::kErr) == IBV_QPS_ERR);
static_assert(static_cast<int>(QpType::kUd) == IBV_QPT_UD &&
              static_cast<int>(QpType::kUc) == IBV_QPT_UC);
static_assert(int{kWcWithImm} == int{IBV_WC_WITH_IMM} && int{kWcGrh} == int{IBV_WC_GRH});

template <typename VerbsWr, typename Wqe>
static void copy_sges(const VerbsWr& wr, Wqe& w) {
  w.num_sge = wr.num_sge;
  for (int s = 0; s < wr.num_sge; ++s)
    w.sge[s] = Sge{wr.sg_list[s].addr, wr.sg_list[s].length, wr.sg_list[s].lkey};
}

// Posts a verbs WR list to the engine in batches converted on the stack
// (posting never allocates). Every WR before the first bad one is posted, as
// hardware providers do, and *bad names that one.
template <typename Wqe, typename VerbsWr, typename Convert, typename Post>
static int post_in_batches(VerbsWr* wr, VerbsWr** bad, Convert convert, Post post) {
  constexpr int kBatch = 8;
  Wqe batch[kBatch];
  VerbsWr* origin[kBatch];
  while (wr) {
    int n = 0, err = 0;
    for (; wr && n < kBatch; wr = wr->next, ++n) {
      if (wr->num_sge < 0 || wr->num_sge > static_cast<int>(DeviceLimits::kMaxSge)) {
        err = EINVAL;
        break;
      }
      convert(*wr, batch[n]);
      origin[n] = wr;
    }
    int bad_index = -1;
    if (n > 0) {
      if (int e = post(batch, n, &bad_index)) {
        *bad = origin[bad_index >= 0 && bad_index < n ? bad_index : 0];
        return e;
      }
    }
    if (err) {
      *bad = wr;
      return err;
    }
  }
  return 0;
}

extern "C" {

ibemu_core_context* ibemu_core_open(const char* ibdev_name, int cmd_fd, int* async_fd, int* err) {
  auto* c = new (std::nothrow) ibemu_core_context;
  if (!c) {
    *err = ENOMEM;
    return nullptr;
  }
  if ((*err = c->ctx.open(ibdev_name, cmd_fd))) {
    delete c;
    return nullptr;
  }
  *async_fd = c->ctx.async_read_fd();
  return c;
}

void ibemu_core_close(ibemu_core_context* c) { delete c; }

int ibemu_core_query_device_ex(ibemu_core_context* c, ibv_device_attr_ex* out, size_t size) {
  if (size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex attr{};
  const DeviceStateView& d = c->ctx.device();
  ibv_device_attr& a = attr.orig_attr;
  std::snprintf(a.fw_ver, sizeof(a.fw_ver), "%s", d.fw_ver);
  a.node_guid = htobe64(d.node_guid);
  a.sys_image_guid = htobe64(d.sys_image_guid);
  a.max_mr_size = DeviceLimits::kMaxMrSize;
  a.page_size_cap = 0xfffff000;
  a.vendor_id = d.vendor_id;
  a.vendor_part_id = d.vendor_part_id;
  a.hw_ver = d.hw_ver;
  a.max_qp = DeviceLimits::kMaxQp;
  a.max_qp_wr = DeviceLimits::kMaxQpWr;
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT |
                       IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_CHANGE_PHY_PORT |
                       IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
  a.max_mw = DeviceLimits::kMaxMw;
  a.max_sge = DeviceLimits::kMaxSge;
  a.max_sge_rd = DeviceLimits::kMaxSge;
  a.max_cq = DeviceLimits::kMaxCq;
  a.max_cqe = DeviceLimits::kMaxCqe;
  a.max_mr = DeviceLimits::kMaxMr;
  a.max_pd = DeviceLimits::kMaxPd;
  a.max_ah = DeviceLimits::kMaxAh;
  a.max_srq = DeviceLimits::kMaxSrq;
  a.max_mcast_grp = DeviceLimits::kMaxMcastGroups;
  a.max_mcast_qp_attach = DeviceLimits::kMaxMcastQpAttach;
  a.max_total_mcast_qp_attach = DeviceLimits::kMaxMcastGroups * DeviceLimits::kMaxMcastQpAttach;
  a.max_srq_wr = DeviceLimits::kMaxSrqWr;
  a.max_srq_sge = DeviceLimits::kMaxSge;
  a.max_qp_rd_atom = DeviceLimits::kMaxQpRdAtom;
  a.max_qp_init_rd_atom = DeviceLimits::kMaxQpInitRdAtom;
  a.max_res_rd_atom = DeviceLimits::kMaxQpRdAtom * DeviceLimits::kMaxQp;
  a.atomic_cap = IBV_ATOMIC_HCA;           // atomic with respect to other atomics of this HCA
  a.max_pkeys = c->ctx.port(1).num_pkeys;  // the P_Key table's size (PartitionCap)
  a.local_ca_ack_delay = 8;
  a.phys_port_cnt = static_cast<uint8_t>(d.num_ports);
  attr.max_dm_size = 0;
  std::memcpy(out, &attr, std::min(size, sizeof(attr)));
  return 0;
}

int ibemu_core_query_port(ibemu_core_context* c, uint8_t port, ibv_port_attr* out) {
  if (port < 1 || port > c->ctx.num_ports()) return EINVAL;
  PortStateView v = c->ctx.port_view(port);
  ibv_port_attr a{};
  a.state = static_cast<ibv_port_state>(v.state);
  a.max_mtu = static_cast<ibv_mtu>(v.max_mtu);
  a.active_mtu = static_cast<ibv_mtu>(v.active_mtu);
  a.gid_tbl_len = 1;
  a.port_cap_flags = v.cap_mask;
  a.max_msg_sz = DeviceLimits::kMaxMsgSize;
  a.bad_pkey_cntr = 0;
  a.qkey_viol_cntr = 0;
  a.pkey_tbl_len = v.num_pkeys;
  a.lid = v.lid;
  a.sm_lid = v.sm_lid;
  a.lmc = v.lmc;
  a.max_vl_num = 1;  // VL0 only
  a.sm_sl = v.sm_sl;
  a.subnet_timeout = 18;
  a.init_type_reply = 0;
  a.active_width = v.active_width;
  a.active_speed = v.active_speed;
  a.phys_state = v.phys_state;
  a.link_layer = IBV_LINK_LAYER_INFINIBAND;
  *out = a;
  return 0;
}

uint32_t ibemu_core_alloc_pd(ibemu_core_context* c) { return c->next_pd++; }

// IBA 10.6.3.1: which access flags a region may have. 0 or an errno.
static int check_mr_access(int access) {
  constexpr int kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                             IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING;
  if (access & IBV_ACCESS_ON_DEMAND) return EOPNOTSUPP;  // ODP is not advertised
  if (access & ~kSupported) return EINVAL;
  // C10-86: remote write or atomic access needs local write.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  return 0;
}

// Host memory must be there for the access asked, as the kernel's
// ib_umem_get finds when it pins the pages: EFAULT otherwise. The pages
// are not pinned, though: memory the program unmaps later makes the
// engine's access fail (transport/engine/dma_access.h), not the program.
static int check_host_memory(const void* addr, size_t length, int access) {
  engine::install_dma_fault_handler();
  // ib_access_writable: these pin the pages for writing.
  const bool writable = access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
  return provider::check_mapped(reinterpret_cast<uintptr_t>(addr), length, writable);
}

// `ibemu status` shows how many regions of a device are GPU memory.
static void count_gpu_region(ibemu_core_context* c, uint64_t length, bool added) {
  engine::EngineCounters& counters = c->ctx.engine().counters();
  if (added) {
    counters.gpu_regions++;
    counters.gpu_region_bytes += length;
  } else {
    counters.gpu_regions--;
    counters.gpu_region_bytes -= length;
  }
}

// A GPU pointer (cudaMalloc, cuMemAlloc) makes a region the engine reaches
// through the CUDA driver (provider/core/cuda_memory.h); anything else is
// host memory. Managed memory (cudaMallocManaged) counts as host memory: the
// CPU may touch it, and the driver migrates its pages.
int ibemu_core_reg_mr(ibemu_core_context* c, uint32_t pd, void* addr, size_t length, uint64_t iova,
                      int access, uint32_t* key) {
  if (int err = check_mr_access(access)) return err;
  if (!addr && length) return EINVAL;
  auto gpu = provider::CudaMemory::find(reinterpret_cast<uintptr_t>(addr), length);
  const bool on_gpu = gpu != nullptr;
  if (!on_gpu) {
    if (int err = check_host_memory(addr, length, access)) return err;
  }
  *key = c->ctx.engine().mrs().add(pd, static_cast<uint8_t*>(addr), iova, length,
                                   static_cast<uint32_t>(access), std::move(gpu));
  if (!*key) return ENOMEM;  // the device's max_mr, or the configured byte limit
  if (on_gpu) count_gpu_region(c, length, true);
  return 0;
}

// ibv_reg_dmabuf_mr. A GPU's dma-buf (cuMemGetHandleForAddressRange) is
// named, as NCCL and perftest name it, by iova = the GPU address of the
// region; the region is then that GPU memory. Another dma-buf (a udmabuf, a
// memfd-backed buffer) is mapped into the process and is host memory.
int ibemu_core_reg_dmabuf_mr(ibemu_core_context* c, uint32_t pd, uint64_t offset, size_t length,
                             uint64_t iova, int fd, int access, uint32_t* key) {
  if (int err = check_mr_access(access)) return err;
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return EBADF;
  if (auto gpu = provider::CudaMemory::find(iova, length)) {
    *key = c->ctx.engine().mrs().add(pd, reinterpret_cast<uint8_t*>(iova), iova, length,
                                     static_cast<uint32_t>(access), std::move(gpu));
    if (!*key) return ENOMEM;
    count_gpu_region(c, length, true);
    return 0;
  }
  void* map =
      mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (map == MAP_FAILED) return errno == ENODEV ? EOPNOTSUPP : errno;
  *key = c->ctx.engine().mrs().add(pd, static_cast<uint8_t*>(map), iova, length,
                                   static_cast<uint32_t>(access));
  if (!*key) {
    munmap(map, length);
    return ENOMEM;
  }
  std::lock_guard lock(c->dmabuf_mutex);
  c->dmabuf_maps[*key] = {map, length};
  return 0;
}

int ibemu_core_rereg_mr(ibemu_core_context* c, uint32_t key, int flags, uint32_t pd, void* addr,
                        size_t length, int access) {
  if (!flags || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED)) return EINVAL;
  if ((flags & IBV_REREG_MR_CHANGE_ACCESS) && check_mr_access(access)) return EINVAL;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && !addr && length) return EINVAL;
  uint8_t* new_addr = static_cast<uint8_t*>(addr);
  uint64_t new_iova = reinterpret_cast<uintptr_t>(addr), new_length = length;
  uint32_t new_access = static_cast<uint32_t>(access);
  const bool translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  if (translation || (flags & IBV_REREG_MR_CHANGE_ACCESS)) {
    // The kernel pins the pages again for a new range or access; a GPU
    // region and a dma-buf mapped here are not the program's host pages.
    engine::MemoryRegion mr;
    if (!c->ctx.engine().mrs().find_region(key, &mr)) return EINVAL;
    bool dmabuf;
    {
      std::lock_guard lock(c->dmabuf_mutex);
      dmabuf = c->dmabuf_maps.count(key) != 0;
    }
    if (!mr.device && !dmabuf) {
      if (int err = check_host_memory(
              translation ? addr : mr.addr, translation ? length : mr.length,
              (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : static_cast<int>(mr.access)))
        return err;
    }
  }
  bool ok = c->ctx.engine().mrs().modify(
      key, (flags & IBV_REREG_MR_CHANGE_PD) ? &pd : nullptr, translation ? &new_addr : nullptr,
      translation ? &new_iova : nullptr, translation ? &new_length : nullptr,
      (flags & IBV_REREG_MR_CHANGE_ACCESS) ? &new_access : nullptr);
  return ok ? 0 : EINVAL;
}

int ibemu_core_dereg_mr(ibemu_core_context* c, uint32_t key) {
  engine::MemoryRegion removed;
  if (int err = c->ctx.engine().mrs().remove(key, &removed)) return err;
  if (provider::diagnostics::on(provider::diagnostics::kChecks))
    c->ctx.checks().deregistering(c->ctx.engine(), key);
  if (removed.device) count_gpu_region(c, removed.length, false);
  std::lock_guard lock(c->dmabuf_mutex);
  auto it = c->dmabuf_maps.find(key);
  if (it != c->dmabuf_maps.end()) {
    munmap(it->second.first, it->second.second);
    c->dmabuf_maps.erase(it);
  }
  return 0;
}

int ibemu_core_alloc_mw(ibemu_core_context* c, uint32_t pd, int type, uint32_t* rkey) {
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return EINVAL;
  *rkey = c->ctx.engine().mrs().alloc_window(pd, static_cast<uint8_t>(type));
  return *rkey ? 0 : ENOMEM;
}

int ibemu_core_dealloc_mw(ibemu_core_context* c, uint32_t rkey) {
  return c->ctx.engine().mrs().free_window(rkey) ? 0 : EINVAL;
}

ibemu_core_cq* ibemu_core_create_cq(ibemu_core_context* c, int cqe, ibv_cq* ibcq, int channel_fd,
                                    int* err) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > DeviceLimits::kMaxCqe) {
    *err = EINVAL;
    return nullptr;
  }
  auto* cq = new (std::nothrow) ibemu_core_cq;
  if (!cq) {
    *err = ENOMEM;
    return nullptr;
  }
  cq->owner = c;
  const int kernel_fd = c->ctx.kernel_cmd_fd();
  if (channel_fd >= 0 && kernel_fd >= 0) {
    // The channel is the kernel's: only a kernel CQ can put events on it.
    if ((*err = kernel_uverbs::create_cq(kernel_fd, reinterpret_cast<uintptr_t>(ibcq), cqe,
                                         channel_fd, &cq->kernel_handle))) {
      delete cq;
      return nullptr;
    }
    cq->kernel_cmd_fd = kernel_fd;
  } else if (channel_fd >= 0) {
    // The channel fd is a pipe's read end; reopening it through /proc gives a
    // write end of the same pipe that this CQ owns.
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/self/fd/%d", channel_fd);
    cq->channel_write_fd = ::open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (cq->channel_write_fd < 0) {
      *err = errno;
      delete cq;
      return nullptr;
    }
  }
  int wfd = cq->channel_write_fd;
  auto notify = [wfd, ibcq, kernel_fd = cq->kernel_cmd_fd, handle = cq->kernel_handle] {
    if (kernel_fd >= 0) {
      kernel_uverbs::raise_cq_event(kernel_fd, handle);
      return;
    }
    if (wfd < 0) return;
    uint64_t cq_handle = reinterpret_cast<uintptr_t>(ibcq);  // ib_uverbs_comp_event_desc
    if (write(wfd, &cq_handle, sizeof(cq_handle)) < 0) {
      // Pipe full: the application has not read earlier events; a real HCA
      // would also coalesce them.
    }
  };
  // Overrun is the CQ error event (IBV_EVENT_CQ_ERR = 0), naming the ibv_cq.
  auto* ctx = &c->ctx;
  auto overrun = [ctx, ibcq, cq] {
    if (provider::diagnostics::on(provider::diagnostics::kChecks))
      ctx->checks().cq_overrun(reinterpret_cast<uintptr_t>(ibcq), cq->cq->capacity());
    ctx->post_async_event(reinterpret_cast<uintptr_t>(ibcq), 0);
  };
  cq->cq = std::make_unique<CompletionQueue>(static_cast<uint32_t>(cqe), notify, overrun);
  c->ctx.cq_numbers().add(cq->cq.get());
  return cq;
}

int ibemu_core_destroy_cq(ibemu_core_cq* cq) {
  if (cq->users.load() > 0) return EBUSY;
  cq->owner->ctx.cq_numbers().remove(cq->cq.get());
  if (cq->channel_write_fd >= 0) close(cq->channel_write_fd);
  if (cq->kernel_cmd_fd >= 0) kernel_uverbs::destroy_cq(cq->kernel_cmd_fd, cq->kernel_handle);
  delete cq;
  return 0;
}

int ibemu_core_poll_cq(ibemu_core_cq* cq, int n, ibv_wc* wc) {
  if (n < 0) return -EINVAL;
  if (cq->cq->empty() && !cq->owner->ctx.try_progress()) {
    // Nothing arrived. The peer "HCA" is software that needs a CPU too: a
    // poller that keeps finding nothing yields, so on a host with fewer cores
    // than busy pollers the other side gets to run (a hardware HCA would not
    // need this; here it turns milliseconds of waiting into microseconds).
    if (cq->empty_polls.fetch_add(1, std::memory_order_relaxed) >= kPollsBeforeYield) sched_yield();
    return 0;
  }
  cq->empty_polls.store(0, std::memory_order_relaxed);
  return cq->cq->poll_each(n, [&wc](const Completion& c) {
    ibv_wc& w = *wc++;
    w.wr_id = c.wr_id;
    w.status = static_cast<ibv_wc_status>(c.status);
    w.opcode = static_cast<ibv_wc_opcode>(c.opcode);
    w.vendor_err = c.vendor_err;
    w.byte_len = c.byte_len;
    w.imm_data = c.imm_data;
    w.qp_num = c.qp_num;
    w.src_qp = c.src_qp;
    w.wc_flags = c.wc_flags;
    w.pkey_index = c.pkey_index;
    w.slid = c.slid;
    w.sl = c.sl;
    w.dlid_path_bits = c.dlid_path_bits;
  });
}

int ibemu_core_req_notify_cq(ibemu_core_cq* cq, int solicited_only) {
  cq->cq->arm(solicited_only != 0);
  return 0;
}

int ibemu_core_resize_cq(ibemu_core_cq* cq, int cqe) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > DeviceLimits::kMaxCqe) return EINVAL;
  return cq->cq->resize(static_cast<uint32_t>(cqe));
}

ibemu_core_qp* ibemu_core_create_qp(ibemu_core_context* c, ibv_qp* ibqp, ibv_qp_init_attr_ex* attr,
                                    uint32_t pd, ibemu_core_cq* send_cq, ibemu_core_cq* recv_cq,
                                    ibemu_core_srq* srq, uint32_t xrcd, const ibemu_core_dc* dc,
                                    uint32_t* qpn, int* err) {
  *err = 0;
  QpType type;
  switch (raw_value(attr->qp_type)) {
    case IBV_QPT_DRIVER:
      if (!dc) {
        *err = EINVAL;
        return nullptr;
      }
      type = dc->type == IBEMU_CORE_DCT ? QpType::kDct : QpType::kDci;
      break;
    case IBV_QPT_RC:
      type = QpType::kRc;
      break;
    case IBV_QPT_UC:
      type = QpType::kUc;
      break;
    case IBV_QPT_UD:
      type = QpType::kUd;
      break;
    case IBV_QPT_XRC_SEND:
      type = QpType::kXrcSend;
      break;
    case IBV_QPT_XRC_RECV:
      type = QpType::kXrcRecv;
      break;
    default:
      *err = EOPNOTSUPP;
      return nullptr;
  }
  // An SRQ feeds RC, UC and UD QPs alike here (IBA 10.2.9.5 names RC, UC,
  // UD and RD; ConnectX offers it on all three).
  if (attr->srq && !srq) *err = EINVAL;
  // IBA annex A14: an XRC send QP has a send CQ only; an XRC receive QP has
  // no CQ, PD or receive queue but an XRC domain.
  if (type == QpType::kXrcRecv) {
    if (!xrcd) *err = EINVAL;
  } else if (type == QpType::kDct) {
    // A DCT receives into an SRQ only and completes on its receive CQ.
    if (!srq || !recv_cq) *err = EINVAL;
  } else if (!send_cq || (!recv_cq && type != QpType::kXrcSend && type != QpType::kDci)) {
    *err = EINVAL;
  }
  ibv_qp_cap& cap = attr->cap;
  if (cap.max_send_wr > DeviceLimits::kMaxQpWr || cap.max_recv_wr > DeviceLimits::kMaxQpWr ||
      cap.max_send_sge > DeviceLimits::kMaxSge || cap.max_recv_sge > DeviceLimits::kMaxSge ||
      cap.max_inline_data > DeviceLimits::kMaxInlineData)
    *err = EINVAL;
  if (*err) return nullptr;
  // Report what was granted, as hardware providers do (at least 1 of each).
  cap.max_send_wr = std::max(cap.max_send_wr, 1u);
  cap.max_recv_wr = std::max(cap.max_recv_wr, 1u);
  cap.max_send_sge = std::max(cap.max_send_sge, 1u);
  cap.max_recv_sge = std::max(cap.max_recv_sge, 1u);
  cap.max_inline_data = std::max(cap.max_inline_data, 64u);

  Json reply;
  uint64_t granted_qpn = 0;
  *err = reply_errno(
      c->ctx.daemon().request({{"op", "create_qp"}, {"device", c->ctx.device_index()}}, &reply),
      reply, ENOMEM);
  if (!*err && !reply_uint(reply, "qpn", kMaxQpn, &granted_qpn)) *err = EIO;
  if (*err) return nullptr;
  auto* q = new (std::nothrow) ibemu_core_qp;
  if (!q) {
    *err = ENOMEM;
    return nullptr;
  }
  q->owner = c;
  q->init.type = type;
  q->init.qpn = static_cast<uint32_t>(granted_qpn);
  q->init.pd = pd;
  q->init.send_cq = send_cq ? send_cq->cq.get() : nullptr;
  q->init.recv_cq = recv_cq ? recv_cq->cq.get() : nullptr;
  q->init.xrcd = xrcd;
  q->init.max_send_wr = cap.max_send_wr;
  q->init.max_recv_wr = cap.max_recv_wr;
  q->init.max_send_sge = cap.max_send_sge;
  q->init.max_recv_sge = cap.max_recv_sge;
  q->init.max_inline_data = cap.max_inline_data;
  q->init.sq_sig_all = attr->sq_sig_all;
  q->init.dct_access_key = dc ? dc->dct_access_key : 0;
  q->init.block_self_multicast = (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
                                 (attr->create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
  q->send_cq = send_cq;
  q->recv_cq = recv_cq;
  q->srq = srq;
  q->init.srq = srq ? srq->srq.get() : nullptr;
  if (srq) srq->users++;
  auto* ctx = &c->ctx;
  if (type == QpType::kXrcRecv) {
    // Its events go to every handle on it (ibv_open_qp), wherever they are.
    q->qp_context = ctx->session();
    q->handle = reinterpret_cast<uintptr_t>(ibqp);
    ctx->shared_qps().created(q->init.qpn, q->handle);
    q->qp = ctx->engine().create_qp(q->init, [ctx](uint32_t qpn, QpEvent ev) {
      ctx->shared_qps().raise(qpn, static_cast<uint32_t>(ev));
    });
  } else {
    // QpEvent carries ibv_event_type's values; the element is the ibv_qp.
    q->qp = ctx->engine().create_qp(q->init, [ctx, ibqp](uint32_t, QpEvent ev) {
      ctx->post_async_event(reinterpret_cast<uintptr_t>(ibqp), static_cast<uint32_t>(ev));
    });
  }
  if (send_cq) send_cq->users++;
  if (recv_cq) recv_cq->users++;
  *qpn = q->init.qpn;
  return q;
}

ibemu_core_qp* ibemu_core_open_qp(ibemu_core_context* c, ibv_qp* ibqp, uint32_t xrcd, uint32_t qpn,
                                  int* err) {
  auto* q = new (std::nothrow) ibemu_core_qp;
  if (!q) {
    *err = ENOMEM;
    return nullptr;
  }
  q->owner = c;
  q->init.type = QpType::kXrcRecv;
  q->init.qpn = qpn;
  q->init.xrcd = xrcd;
  q->handle = reinterpret_cast<uintptr_t>(ibqp);
  if ((*err = c->ctx.shared_qps().open(qpn, xrcd, q->handle, &q->qp_context))) {
    delete q;
    return nullptr;
  }
  if (q->qp_context == c->ctx.session()) q->qp = c->ctx.engine().find_qp(qpn);
  return q;
}

int ibemu_core_destroy_qp(ibemu_core_qp* q) {
  ibemu_core_context* c = q->owner;
  if (q->handle) {
    // An XRC receive QP stays while any handle on it does (ib_open_qp).
    c->ctx.shared_qps().close(q->qp_context, q->init.qpn, q->handle);
    delete q;
    return 0;
  }
  provider::destroy_engine_qp(c->ctx, q->init.qpn);
  uint32_t unpolled_errors = 0;
  for (ibemu_core_cq* cq : {q->send_cq, q->recv_cq})
    if (cq) {
      unpolled_errors += cq->cq->purge_qp(q->init.qpn);
      cq->users--;
    }
  if (provider::diagnostics::on(provider::diagnostics::kChecks)) {
    c->ctx.checks().destroyed_with_unpolled_errors(q->init.qpn, unpolled_errors);
    c->ctx.checks().forget_qp(q->init.qpn);
  }
  if (q->srq) q->srq->users--;
  delete q;
  return 0;
}

// The group is joined on this HCA (its engine delivers to the QP) and in the
// daemon (the emulated switch copies packets for the MLID to this process).
static int change_mcast(ibemu_core_qp* q, const ibv_gid* gid, uint16_t lid, bool attach) {
  if (!q->qp) return EINVAL;  // XRC receive QPs are not UD
  std::array<uint8_t, 16> mgid;
  std::memcpy(mgid.data(), gid->raw, 16);
  HcaEngine& engine = q->owner->ctx.engine();
  if (int err = attach ? engine.attach_mcast(q->init.qpn, mgid, lid)
                       : engine.detach_mcast(q->init.qpn, mgid, lid))
    return err == ENOENT ? EINVAL : err;
  Json reply;
  const int rc = q->owner->ctx.daemon().request({{"op", attach ? "mcast_attach" : "mcast_detach"},
                                                 {"device", q->owner->ctx.device_index()},
                                                 {"qpn", q->init.qpn},
                                                 {"mlid", lid},
                                                 {"mgid", to_hex(mgid.data(), 16)}},
                                                &reply);
  const int err = reply_errno(rc, reply, EIO);
  if (!err) return 0;
  // Undo the local half so both agree.
  if (attach)
    engine.detach_mcast(q->init.qpn, mgid, lid);
  else
    engine.attach_mcast(q->init.qpn, mgid, lid);
  return err;
}

int ibemu_core_attach_mcast(ibemu_core_qp* q, const ibv_gid* gid, uint16_t lid) {
  return change_mcast(q, gid, lid, true);
}

int ibemu_core_detach_mcast(ibemu_core_qp* q, const ibv_gid* gid, uint16_t lid) {
  return change_mcast(q, gid, lid, false);
}

ibemu_core_srq* ibemu_core_create_srq(ibemu_core_context* c, ibv_srq* ibsrq, ibv_srq_attr* attr,
                                      int* err) {
  const DeviceStateView& d = c->ctx.device();
  if ((*err = provider::size_srq(provider::queue_sizing_for(d.vendor_id, d.vendor_part_id), attr)))
    return nullptr;
  auto* s = new (std::nothrow) ibemu_core_srq;
  if (!s) {
    *err = ENOMEM;
    return nullptr;
  }
  s->owner = c;
  auto* ctx = &c->ctx;
  try {
    s->srq = std::make_unique<SharedReceiveQueue>(attr->max_wr, attr->max_sge, [ctx, ibsrq] {
      ctx->post_async_event(reinterpret_cast<uintptr_t>(ibsrq), IBV_EVENT_SRQ_LIMIT_REACHED);
    });
  } catch (...) {
    delete s;
    *err = ENOMEM;
    return nullptr;
  }
  // IBA 11.2.3.1: the limit given at creation is not armed; ibv_modify_srq arms it.
  *err = 0;
  return s;
}

int ibemu_core_destroy_srq(ibemu_core_srq* s) {
  if (s->users > 0) return EBUSY;
  if (s->srqn) {
    provider::ProviderContext& ctx = s->owner->ctx;
    ctx.engine().srqs().remove(s->srqn);
    Json reply;
    ctx.daemon().request({{"op", "free_srqn"}, {"device", ctx.device_index()}, {"srqn", s->srqn}},
                         &reply);
    if (s->cq) s->cq->users--;
  }
  delete s;
  return 0;
}

// SRQ numbers come from the daemon, unique on the device: XRC senders name
// SRQs by them, and every SRQ has one on ConnectX (mlx5 answers
// ibv_get_srq_num for basic SRQs too, for DC programs).
static int assign_srq_number(ibemu_core_srq* s) {
  if (s->srqn) return 0;
  provider::ProviderContext& ctx = s->owner->ctx;
  Json reply;
  uint64_t srqn = 0;
  if (int err = reply_errno(
          ctx.daemon().request({{"op", "alloc_srqn"}, {"device", ctx.device_index()}}, &reply),
          reply, EIO))
    return err;
  if (!reply_uint(reply, "srqn", kMaxQpn, &srqn)) return EIO;
  s->srqn = static_cast<uint32_t>(srqn);
  return 0;
}

int ibemu_core_srq_number(ibemu_core_srq* s, uint32_t* srqn) {
  if (int err = assign_srq_number(s)) return err;
  *srqn = s->srqn;
  return 0;
}

int ibemu_core_make_xrc_srq(ibemu_core_srq* s, uint32_t xrcd, uint32_t pd, ibemu_core_cq* cq,
                            uint32_t* srqn) {
  provider::ProviderContext& ctx = s->owner->ctx;
  if (int err = assign_srq_number(s)) return err;
  s->cq = cq;
  cq->users++;
  s->srq->set_xrc(XrcBinding{s->srqn, xrcd, pd, cq->cq.get()});
  ctx.engine().srqs().add(s->srqn, s->srq.get());
  *srqn = s->srqn;
  return 0;
}

int ibemu_core_open_xrcd(ibemu_core_context* c, const char* file, int create, int exclusive,
                         uint32_t* xrcd) {
  Json reply;
  Json req = {{"op", "open_xrcd"},
              {"device", c->ctx.device_index()},
              {"file", file},
              {"create", create != 0},
              {"exclusive", exclusive != 0}};
  if (int err = reply_errno(c->ctx.daemon().request(req, &reply), reply, EIO)) return err;
  uint64_t number = 0;
  if (!reply_uint(reply, "xrcd", UINT32_MAX, &number)) return EIO;
  *xrcd = static_cast<uint32_t>(number);
  return 0;
}

int ibemu_core_close_xrcd(ibemu_core_context* c, uint32_t xrcd) {
  Json reply;
  return reply_errno(
      c->ctx.daemon().request(
          {{"op", "close_xrcd"}, {"device", c->ctx.device_index()}, {"xrcd", xrcd}}, &reply),
      reply, EINVAL);
}

int ibemu_core_modify_srq(ibemu_core_srq* s, const ibv_srq_attr* attr, int mask) {
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR)
    return EINVAL;  // resizing is not offered (IBV_DEVICE_SRQ_RESIZE unset)
  if (mask & IBV_SRQ_LIMIT) return s->srq->arm_limit(attr->srq_limit);
  return 0;
}

int ibemu_core_query_srq(ibemu_core_srq* s, ibv_srq_attr* attr) {
  attr->max_wr = s->srq->max_wr();
  attr->max_sge = s->srq->max_sge();
  attr->srq_limit = s->srq->limit();
  return 0;
}

int ibemu_core_post_srq_recv(ibemu_core_srq* s, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto convert = [](const ibv_recv_wr& wr, RecvWqe& w) {
    w.wr_id = wr.wr_id;
    copy_sges(wr, w);
  };
  return post_in_batches<RecvWqe>(
      wr, bad, convert, [s](const RecvWqe* w, int n, int* b) { return s->srq->post(w, n, b); });
}

// IBA 11.2.2.1: what an address handle must name. 0 or an errno.
int ibemu_core_check_ah(ibemu_core_context* c, const ibv_ah_attr* a) {
  if (a->port_num < 1 || a->port_num > c->ctx.num_ports()) return EINVAL;
  if (a->is_global && a->grh.sgid_index >= 1) return EINVAL;  // one GID per port
  if (!a->is_global && a->dlid == 0) return EINVAL;
  return 0;
}

static ibv_ah_attr from_av(const AddressVector& av) {
  ibv_ah_attr a{};
  a.dlid = av.dlid;
  a.sl = av.sl;
  a.src_path_bits = av.src_path_bits;
  a.port_num = av.port_num;
  a.is_global = av.is_global;
  std::memcpy(a.grh.dgid.raw, av.dgid.data(), 16);
  a.grh.flow_label = av.flow_label;
  a.grh.sgid_index = av.sgid_index;
  a.grh.hop_limit = av.hop_limit;
  a.grh.traffic_class = av.traffic_class;
  return a;
}

int ibemu_core_modify_qp(ibemu_core_qp* q, ibv_qp_attr* a, int mask) {
  QpAttr attr;
  const uint32_t qp_state = raw_value(a->qp_state);
  attr.qp_state = static_cast<QpState>(qp_state);
  attr.cur_qp_state = static_cast<QpState>(raw_value(a->cur_qp_state));
  attr.path_mtu = raw_value(a->path_mtu);
  attr.qkey = a->qkey;
  attr.rq_psn = a->rq_psn;
  attr.sq_psn = a->sq_psn;
  attr.dest_qp_num = a->dest_qp_num;
  attr.qp_access_flags = a->qp_access_flags;
  attr.ah = provider::to_av(a->ah_attr);
  attr.pkey_index = a->pkey_index;
  attr.max_rd_atomic = a->max_rd_atomic;
  attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
  attr.min_rnr_timer = a->min_rnr_timer;
  attr.port_num = a->port_num;
  attr.timeout = a->timeout;
  attr.retry_cnt = a->retry_cnt;
  attr.rnr_retry = a->rnr_retry;
  attr.en_sqd_async_notify = a->en_sqd_async_notify;
  if ((mask & IBV_QP_STATE) && qp_state > IBV_QPS_ERR) return EINVAL;
  if ((mask & IBV_QP_PORT) && (a->port_num < 1 || a->port_num > q->owner->ctx.num_ports()))
    return EINVAL;
  if (!q->qp)
    return q->owner->ctx.shared_qps().modify(q->qp_context, q->init.qpn, attr,
                                             static_cast<uint32_t>(mask));
  return provider::modify_engine_qp(q->owner->ctx, *q->qp, attr, static_cast<uint32_t>(mask));
}

int ibemu_core_query_qp(ibemu_core_qp* q, ibv_qp_attr* out, int, ibv_qp_init_attr* init) {
  QpAttr a;
  if (q->qp)
    a = q->qp->query();
  else if (int err = q->owner->ctx.shared_qps().query(q->qp_context, q->init.qpn, &a))
    return err;
  ibv_qp_attr r{};
  r.qp_state = static_cast<ibv_qp_state>(a.qp_state);
  r.cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
  r.path_mtu = static_cast<ibv_mtu>(a.path_mtu);
  r.path_mig_state = IBV_MIG_MIGRATED;
  r.qkey = a.qkey;
  r.rq_psn = a.rq_psn;
  r.sq_psn = a.sq_psn;
  r.dest_qp_num = a.dest_qp_num;
  r.qp_access_flags = a.qp_access_flags;
  r.cap.max_send_wr = a.max_send_wr;
  r.cap.max_recv_wr = a.max_recv_wr;
  r.cap.max_send_sge = a.max_send_sge;
  r.cap.max_recv_sge = a.max_recv_sge;
  r.cap.max_inline_data = a.max_inline_data;
  r.ah_attr = from_av(a.ah);
  r.pkey_index = a.pkey_index;
  r.sq_draining = a.sq_draining;
  r.max_rd_atomic = a.max_rd_atomic;
  r.max_dest_rd_atomic = a.max_dest_rd_atomic;
  r.min_rnr_timer = a.min_rnr_timer;
  r.port_num = a.port_num;
  r.timeout = a.timeout;
  r.retry_cnt = a.retry_cnt;
  r.rnr_retry = a.rnr_retry;
  *out = r;
  if (init) {
    init->cap = r.cap;
    init->sq_sig_all = q->init.sq_sig_all;
    init->qp_type = static_cast<ibv_qp_type>(q->init.type);
  }
  return 0;
}

int ibemu_core_post_send(ibemu_core_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  if (!q->qp) {  // an XRC receive QP has no send queue, here or elsewhere
    *bad = wr;
    return EINVAL;
  }
  const bool datagram = q->init.type == QpType::kUd;
  const bool xrc = q->init.type == QpType::kXrcSend;
  auto convert = [datagram, xrc](const ibv_send_wr& wr, SendWqe& w) {
    w.wr_id = wr.wr_id;
    const uint32_t opcode = raw_value(wr.opcode);
    // Truncated, an unknown opcode could pass for a known one. Fast
    // registration is a kernel consumer's verb, never a program's.
    w.opcode = opcode < 0xff && opcode != static_cast<uint32_t>(WrOpcode::kRegMr)
                   ? static_cast<WrOpcode>(opcode)
                   : kNoSuchOpcode;
    w.flags = wr.send_flags;
    w.imm_or_rkey = opcode == IBV_WR_SEND_WITH_INV ? wr.invalidate_rkey : wr.imm_data;
    copy_sges(wr, w);
    w.remote_addr = wr.wr.rdma.remote_addr;
    w.rkey = wr.wr.rdma.rkey;
    if (datagram) {
      if (wr.wr.ud.ah)
        w.av = provider::to_av(reinterpret_cast<const ibemu_ah*>(wr.wr.ud.ah)->attr);
      else
        w.opcode = kNoSuchOpcode;  // no destination: refused by the post (EINVAL)
      w.remote_qpn = wr.wr.ud.remote_qpn & 0xffffff;
      w.remote_qkey = wr.wr.ud.remote_qkey;
    }
    if (xrc) w.remote_srqn = wr.qp_type.xrc.remote_srqn & 0xffffff;
    if (opcode == IBV_WR_BIND_MW) {
      const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
      // A WR without a window names none: the bind fails with MW_BIND_ERR.
      w.bind = WindowBind{wr.bind_mw.mw ? wr.bind_mw.mw->rkey : 0u,
                          wr.bind_mw.rkey,
                          b.mr ? b.mr->lkey : 0u,
                          b.addr,
                          b.length,
                          b.mw_access_flags};
    }
    if (opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      w.remote_addr = wr.wr.atomic.remote_addr;
      w.rkey = wr.wr.atomic.rkey;
      w.compare_add = wr.wr.atomic.compare_add;
      w.swap = wr.wr.atomic.swap;
    }
  };
  const bool check = provider::diagnostics::on(provider::diagnostics::kChecks);
  const QpState state = check ? q->qp->state() : QpState::kUnknown;
  const int err = post_in_batches<SendWqe>(
      wr, bad, convert, [q](const SendWqe* w, int n, int* b) { return q->qp->post_send(w, n, b); });
  if (check) {
    provider::SpecChecks& checks = q->owner->ctx.checks();
    for (const ibv_send_wr* w = wr; w && !(err && w == *bad); w = w->next)
      checks.send_posted(q->init.qpn, q->init.max_send_wr,
                         q->init.sq_sig_all || (w->send_flags & IBV_SEND_SIGNALED));
    checks.post_send_returned(q->init.qpn, state, err);
  }
  return err;
}

int ibemu_core_post_recv(ibemu_core_qp* q, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  if (!q->qp) {
    *bad = wr;
    return EINVAL;
  }
  auto convert = [](const ibv_recv_wr& wr, RecvWqe& w) {
    w.wr_id = wr.wr_id;
    copy_sges(wr, w);
  };
  const bool check = provider::diagnostics::on(provider::diagnostics::kChecks);
  const QpState state = check ? q->qp->state() : QpState::kUnknown;
  const int err = post_in_batches<RecvWqe>(
      wr, bad, convert, [q](const RecvWqe* w, int n, int* b) { return q->qp->post_recv(w, n, b); });
  if (check) q->owner->ctx.checks().post_recv_returned(q->init.qpn, state, err);
  return err;
}

}  // extern "C"

// ---- Accessors for the other core files (provider/core/core_internal.h) ----

engine::Qp& ibemu::provider::engine_qp(ibemu_core_qp* q) noexcept { return *q->qp; }

AddressVector ibemu::provider::to_av(const ibv_ah_attr& a) noexcept {
  AddressVector av;
  av.dlid = a.dlid;
  av.sl = a.sl;
  av.src_path_bits = a.src_path_bits;
  av.port_num = a.port_num;
  av.is_global = a.is_global;
  std::memcpy(av.dgid.data(), a.grh.dgid.raw, 16);
  av.flow_label = a.grh.flow_label;
  av.sgid_index = a.grh.sgid_index;
  av.hop_limit = a.grh.hop_limit;
  av.traffic_class = a.grh.traffic_class;
  return av;
}

int ibemu::provider::modify_engine_qp(provider::ProviderContext& ctx, engine::Qp& qp,
                                      const engine::QpAttr& attr, uint32_t mask) noexcept {
  const uint8_t own_port = qp.query().port_num;
  const uint8_t bound_port = own_port ? own_port : 1;
  if (provider::diagnostics::on(provider::diagnostics::kChecks)) {
    // The port this modify leaves the QP on: the one it names, or its own.
    const uint8_t port = (mask & kQpPort) ? attr.port_num : bound_port;
    if (port >= 1 && port <= ctx.num_ports())
      ctx.checks().modify_requested(qp.qpn(), attr, mask, port, ctx.port_view(port).active_mtu);
  }
  if ((mask & kQpPathMtu) && attr.path_mtu > ctx.port_view(bound_port).max_mtu) return EINVAL;
  if (int err = qp.modify(attr, mask)) return err;
  // The QP has its destination: the route to it is found now, in the
  // program's own call, not by the first packet (which may be sent by the
  // progress thread in the middle of traffic, thousands of QPs at once).
  if ((mask & kQpAv) && (mask & kQpDestQpn) && attr.ah.dlid &&
      !wire::is_multicast_lid(attr.ah.dlid))
    ctx.link().prepare_route(attr.ah.dlid, attr.dest_qp_num);
  return 0;
}

void ibemu::provider::destroy_engine_qp(provider::ProviderContext& ctx, uint32_t qpn) noexcept {
  ctx.engine().destroy_qp(qpn);
  Json reply;
  ctx.daemon().request({{"op", "destroy_qp"}, {"device", ctx.device_index()}, {"qpn", qpn}},
                       &reply);
}
