#pragma once
// ibv_open_qp: handles on XRC receive QPs (IBA annex A14), as the kernel's
// ib_open_qp gives them. Any process of an XRC domain may open a handle on a
// receive QP of the domain by its number; a handle queries and modifies the
// QP, receives the QP's async events (every handle does), and its
// ibv_destroy_qp closes only the handle. The QP lives while any handle does,
// the creator's included.
//
// The QP's engine runs in the context that created it; a handle in another
// context reaches it with calls over the inbox rings (kQpHandleCall, answered
// by kQpHandleReply) and hears its events as kQpHandleEvent. What cannot be
// as in the kernel: the QP cannot outlive its creating context (the engine
// and its state are there). When that context closes, the handles elsewhere
// get IBV_EVENT_QP_FATAL; their calls then fail with ENODEV.
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "transport/engine/types.h"

namespace ibemu::provider {

class ProviderContext;

class SharedXrcQps {
 public:
  explicit SharedXrcQps(ProviderContext& ctx) : ctx_(ctx) {}

  // --- XRC receive QPs of this context ---
  /// A new one, with its creator's handle (an ibv_qp*, the element of its
  /// async events).
  void created(uint32_t qpn, uintptr_t handle);
  /// The QP's async event, on every handle: here and in other contexts.
  void raise(uint32_t qpn, uint32_t event) noexcept;

  // --- handles ---
  /// ibv_open_qp of QP `qpn` in domain `xrcd` (the daemon's number). 0 or
  /// EINVAL (no such XRC receive QP in that domain); *owner is the context
  /// whose QP it is (this one's session for a QP of this context).
  int open(uint32_t qpn, uint32_t xrcd, uintptr_t handle, uint64_t* owner);
  /// ibv_destroy_qp of a handle, the creator's included: the QP goes with
  /// the last handle.
  void close(uint64_t owner, uint32_t qpn, uintptr_t handle);
  /// ibv_query_qp / ibv_modify_qp through a handle on a QP of another
  /// context. 0 or an errno (the QP's, or ENODEV when its context is gone).
  int query(uint64_t owner, uint32_t qpn, engine::QpAttr* out);
  int modify(uint64_t owner, uint32_t qpn, const engine::QpAttr& attr, uint32_t mask);

  /// A message of kind kQpHandleCall, kQpHandleReply or kQpHandleEvent.
  void receive(const uint8_t* msg, size_t len) noexcept;
  /// This context closes: handles elsewhere on its QPs hear QP_FATAL; its
  /// own handles on other contexts' QPs are closed.
  void context_closing() noexcept;

 private:
  struct Reply;
  int call(uint64_t owner, uint8_t op, uint32_t qpn, uint32_t xrcd, const engine::QpAttr* attr,
           uint32_t mask, engine::QpAttr* out);
  void serve(uint64_t from, uint8_t op, uint32_t call, uint32_t qpn, uint32_t xrcd,
             const engine::QpAttr& attr, uint32_t mask) noexcept;
  /// Removes one opener or handle of a QP of this context; destroys the QP
  /// once none is left. Takes the lock itself.
  void release(uint32_t qpn, uint64_t opener, uintptr_t handle);

  ProviderContext& ctx_;
  std::mutex mutex_;
  struct Local {
    std::vector<uintptr_t> handles;   // handles in this context, the creator's first
    std::map<uint64_t, int> openers;  // other contexts' handles, counted per context
  };
  std::map<uint32_t, Local> local_;  // this context's XRC receive QPs, by number
  // Handles in this context on QPs of other contexts: (owner, qpn) → handle.
  std::multimap<std::pair<uint64_t, uint32_t>, uintptr_t> remote_;
  // Calls waiting for their reply.
  std::condition_variable replied_;
  std::map<uint32_t, Reply*> calls_;
  uint32_t next_call_ = 0;
};

}  // namespace ibemu::provider
