#pragma once
// Kernel mode (ibemu.ko): the few uverbs commands the provider sends to the
// kernel, through the write() ABI of <rdma/ib_user_verbs.h>. The kernel owns
// the context's async event file and the completion channels; every other
// object of a verbs program lives in the provider, as in no-kernel mode.
#include <cstdint>

namespace ibemu::provider::kernel_uverbs {

/// Whether `cmd_fd` (the uverbs file libibverbs opened) belongs to a kernel
/// device, rather than the stand-in the preload shim gives in no-kernel mode.
bool is_kernel_device(int cmd_fd) noexcept;

/// GET_CONTEXT: the kernel's async event file in `*async_fd`. 0 or errno.
int get_context(int cmd_fd, int* async_fd) noexcept;

/// CREATE_CQ bound to completion channel `channel_fd`; the events it raises
/// name `user_handle` (the ibv_cq). 0 and the kernel's handle, or errno.
int create_cq(int cmd_fd, uint64_t user_handle, int cqe, int channel_fd, uint32_t* handle) noexcept;
int destroy_cq(int cmd_fd, uint32_t handle) noexcept;

/// Puts a completion event for the CQ on its channel: REQ_NOTIFY_CQ, which
/// ibemu.ko answers for a program's CQ by raising the event (the provider
/// alone knows when a completion reached an armed CQ).
int raise_cq_event(int cmd_fd, uint32_t handle) noexcept;

}  // namespace ibemu::provider::kernel_uverbs
