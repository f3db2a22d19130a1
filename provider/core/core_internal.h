#pragma once
// What the core's source files share beyond provider/core_api.h. The core's
// objects (ibemu_core_qp, ...) are defined in verbs_api.cc; other files reach
// what they need of them through these accessors.
#include "provider/core_api.h"
#include "transport/engine/qp.h"

namespace ibemu::provider {

/// The engine QP behind a core QP; valid until ibemu_core_destroy_qp.
engine::Qp& engine_qp(ibemu_core_qp* qp) noexcept;
/// rdma-core's address vector as the engine keeps it.
engine::AddressVector to_av(const ibv_ah_attr& a) noexcept;

}  // namespace ibemu::provider
