#pragma once
// How ibemu-sm reaches the fabric: one SMP out of the SM's port, its response
// back (or nothing: the SMP or its response was dropped, a timeout). The
// daemon's control socket carries them in production; tests plug a Subnet in
// directly.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>

namespace ibemu::sm {

using MadBytes = std::array<uint8_t, 256>;

class SmpTransport {
 public:
  virtual ~SmpTransport() = default;
  /// Sends a request and waits for its response; nullopt on timeout or drop.
  virtual std::optional<MadBytes> send(const MadBytes& mad) = 0;
};

/// A transport that calls a function: in-process subnets, fault injection.
class FunctionTransport : public SmpTransport {
 public:
  using Fn = std::function<std::optional<MadBytes>(const MadBytes&)>;
  explicit FunctionTransport(Fn fn) : fn_(std::move(fn)) {}
  std::optional<MadBytes> send(const MadBytes& mad) override {
    return fn_ ? fn_(mad) : std::nullopt;
  }

 private:
  Fn fn_;
};

}  // namespace ibemu::sm
