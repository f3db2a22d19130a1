#pragma once
// While `ibemu capture` runs (the state page counts captures), every packet
// this context sends is copied to the daemon's capture socket
// (common/capture_record.h). Costs one relaxed load per packet otherwise.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/state_page.h"

namespace ibemu::provider {

class CaptureMirror {
 public:
  CaptureMirror(const StatePage* page, int device, std::string socket_path)
      : page_(page), device_(device), socket_path_(std::move(socket_path)) {}
  ~CaptureMirror();
  CaptureMirror(const CaptureMirror&) = delete;
  CaptureMirror& operator=(const CaptureMirror&) = delete;

  void maybe_mirror(const uint8_t* packet, size_t len) noexcept {
    if (page_ && page_->capture_sessions.load(std::memory_order_relaxed)) mirror(packet, len);
  }

 private:
  void mirror(const uint8_t* packet, size_t len) noexcept;
  /// The port whose LID range holds the packet's SLID (1-based; 0 if none).
  uint8_t sending_port(uint16_t slid) const noexcept;

  const StatePage* page_;
  const int device_;
  const std::string socket_path_;
  std::mutex mutex_;
  int fd_ = -1;
};

}  // namespace ibemu::provider
