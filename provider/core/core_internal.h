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

class ProviderContext;
/// ibv_modify_qp's checks that need the QP's device (the path MTU against
/// its port), then the engine's modify. 0 or an errno.
int modify_engine_qp(ProviderContext& ctx, engine::Qp& qp, const engine::QpAttr& attr,
                     uint32_t mask) noexcept;
/// Destroys QP `qpn` of `ctx` in the engine and frees its number.
void destroy_engine_qp(ProviderContext& ctx, uint32_t qpn) noexcept;

}  // namespace ibemu::provider
