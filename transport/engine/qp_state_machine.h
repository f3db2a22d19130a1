#pragma once
// Which QP state transitions are legal and which attributes each one requires
// or allows (IBA 10.3.1, figure 124; 11.2.4.2 Modify QP, table of attributes
// per transition). Modify QP with anything else fails with EINVAL and leaves
// the QP unchanged (C11-9).
#include <cstdint>

#include "transport/engine/types.h"

namespace ibemu::engine {

struct TransitionRule {
  bool valid = false;
  uint32_t required = 0;
  uint32_t optional = 0;
};

TransitionRule transition_rule(QpType type, QpState from, QpState to);

/// 0 when `mask` is acceptable for from→to (kQpState absent means to == from),
/// EINVAL otherwise.
int check_transition(QpType type, QpState from, QpState to, uint32_t mask);

}  // namespace ibemu::engine
