#include "emulator-daemon/kernel_plane.h"

#include <pthread.h>

#include <cstring>

#include "common/log.h"

namespace ibemu {

KernelPlane::KernelPlane(RuntimePaths paths, std::vector<std::string> devices, uint32_t qpn_first,
                         uint32_t qpn_count, KernelDataChannel& channel, OpenChannel open_channel)
    : paths_(std::move(paths)),
      devices_(std::move(devices)),
      qpn_first_(qpn_first),
      qpn_count_(qpn_count),
      channel_(channel),
      open_channel_(std::move(open_channel)) {
  contexts_.resize(devices_.size());
}

KernelPlane::~KernelPlane() { stop(); }

void KernelPlane::start() {
  opener_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ibemu-kplane");
    open_all();
  });
}

void KernelPlane::open_all() {
  const auto copy = [this](const ibemu_data_copy_segment* segments, uint32_t count) {
    return channel_.copy(segments, count);
  };
  for (size_t d = 0; d < devices_.size(); ++d) {
    auto context = std::make_unique<KernelContext>(uint8_t(d), copy, [this] { wake(); });
    if (int err = context->open(paths_, devices_[d], qpn_first_, qpn_count_)) {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      failure_ = fmt::format("{}: {}", devices_[d], std::strerror(err));
      log_error("kernel plane: cannot open {}: kernel consumers get no QPs", failure_);
      return;
    }
    contexts_[d] = std::move(context);
  }
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    forwarder_ = std::thread([this] { forward_loop(); });
  }
  // The module replays every kernel object when a channel opens, so they
  // all reach engines that exist now.
  const int err = open_channel_(
      [this](const ibemu_data_hdr& hdr, const uint8_t* record) { on_record(hdr, record); });
  std::lock_guard lock(mutex_);
  if (err) {
    failure_ = fmt::format("no data channel ({})", std::strerror(err));
    log_info("kernel mode: {}: kernel consumers get no QPs", failure_);
    return;
  }
  serving_ = true;
  log_info("kernel plane: serving {} device(s), kernel QPNs {:#x}..{:#x}", devices_.size(),
           qpn_first_, qpn_first_ + qpn_count_ - 1);
}

void KernelPlane::on_record(const ibemu_data_hdr& hdr, const uint8_t* record) {
  // The channel opens only once every context is there (open_all).
  if (hdr.index >= contexts_.size() || !contexts_[hdr.index]) {
    log_error("kernel plane: a record for device {}, which the daemon does not have", hdr.index);
    return;
  }
  contexts_[hdr.index]->apply(hdr, record);
}

void KernelPlane::wake() {
  {
    std::lock_guard lock(mutex_);
    pending_ = true;
  }
  woken_.notify_one();
}

void KernelPlane::forward_loop() {
  pthread_setname_np(pthread_self(), "ibemu-kcomp");
  std::vector<uint8_t> batch;
  batch.reserve(IBEMU_DATA_MAX_BATCH);
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      woken_.wait(lock, [this] { return pending_ || stopping_; });
      if (stopping_) return;
      pending_ = false;
    }
    bool more = true;
    while (more) {
      more = false;
      batch.clear();
      for (auto& context : contexts_)
        if (context) more |= context->collect(batch, IBEMU_DATA_MAX_BATCH);
      if (batch.empty()) break;
      // One call per batch: the module runs the ULPs' completion handlers
      // once per CQ after it.
      if (int err = channel_.complete(batch.data(), batch.size())) {
        complete_errors_++;
        log_error("kernel plane: the module refused {} bytes of completions: {}", batch.size(),
                  std::strerror(err));
      }
    }
  }
}

void KernelPlane::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  woken_.notify_one();
  // The opener's requests fail once the control server has stopped, which
  // the daemon does first.
  if (opener_.joinable()) opener_.join();
  // No record reaches a context after this; copies still work meanwhile.
  channel_.halt_reader();
  if (forwarder_.joinable()) forwarder_.join();
  for (auto& context : contexts_)
    if (context) context->leave_daemon();
  contexts_.clear();
  serving_ = false;
}

Json KernelPlane::status() const {
  Json devices = Json::array();
  if (serving_)
    for (const auto& context : contexts_)
      if (context) devices.push_back(context->status());
  Json s = {{"serving", serving_.load()},
            {"devices", devices},
            {"complete_errors", complete_errors_.load()}};
  std::lock_guard lock(mutex_);
  if (!failure_.empty()) s["failure"] = failure_;
  return s;
}

}  // namespace ibemu
