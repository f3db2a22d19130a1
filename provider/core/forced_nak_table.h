#pragma once
// The forced NAKs `ibemu fault nak` asks for (common/state_page.h), as this
// context's engine consumes them: each entry's count is used up once in the
// process whose QP it names.
#include <cstdint>
#include <map>
#include <mutex>

#include "common/state_page.h"
#include "transport/engine/forced_naks.h"

namespace ibemu::provider {

class ForcedNakTable : public engine::ForcedNakSource {
 public:
  ForcedNakTable(const StatePage* page, int device) : page_(page), device_(device) {}
  engine::ForcedNak take(uint32_t qpn) noexcept override;

 private:
  const StatePage* page_;
  const int device_;
  std::mutex mutex_;
  std::map<uint32_t, uint32_t> used_;  // entry id -> NAKs sent for it
};

}  // namespace ibemu::provider
