#pragma once
// A completion queue. Producers are the QPs' engines (any thread), the consumer
// polls from application threads; one mutex guards the ring. Arming for an
// event (ibv_req_notify_cq) is one-shot, as on hardware (IBA 11.4.2.2), and
// also answers completions no event has announced yet: those that arrived
// while the CQ was not armed (see arm()).
#include <atomic>
#include <functional>
#include <mutex>
#include <type_traits>
#include <vector>

#include "transport/engine/snapshot.h"
#include "transport/engine/types.h"

namespace ibemu::engine {

class CompletionQueue {
 public:
  /// `notify` runs (outside the lock) when an armed CQ gets a completion;
  /// `on_overrun` once, when the CQ overruns (the CQ error event).
  CompletionQueue(uint32_t capacity, std::function<void()> notify,
                  std::function<void()> on_overrun = nullptr);

  /// Adds a completion. Returns false on overrun: the CQ is then in error for
  /// good (IBA 11.4.2.1, C11-?) and takes no more completions.
  bool push(const Completion& c, bool solicited);
  int poll(int max, Completion* out);
  /// Polls up to `max` completions, handing each to `fn` under the lock:
  /// the caller converts them in place, with no intermediate copy. An `fn`
  /// of two arguments also gets whether the completion would fire an arming
  /// for solicited completions (solicited, or an error).
  template <typename Fn>
  int poll_each(int max, Fn&& fn) {
    std::lock_guard lock(mutex_);
    int n = 0;
    for (; n < max && count_; ++n) {
      const Entry& e = ring_[head_];
      if constexpr (std::is_invocable_v<Fn, const Completion&, bool>)
        fn(e.completion, e.wakes_solicited);
      else
        fn(e.completion);
      pop_head();
    }
    return n;
  }
  /// Arms the CQ; solicited_only arms for solicited completions only. A
  /// completion that arrived while the CQ was not armed, and that no event
  /// has announced since, raises the event at once (one that would have
  /// fired the arming: solicited or an error, for solicited_only), as a
  /// ConnectX does when armed behind completions it never reported: programs
  /// that poll and then arm without polling again (Open MPI's openib
  /// connection manager) would otherwise miss it. Completions an event
  /// already announced do not raise another (perftest's event mode polls
  /// once per event and takes an empty poll for an error).
  void arm(bool solicited_only);
  int resize(uint32_t capacity);
  uint32_t capacity() const;
  /// A racy hint for pollers (no lock): true when nothing is queued.
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }
  bool overrun() const;
  /// Size, completions waiting and overrun, for `ibemu status` (cqn: 0).
  CqSnapshot snapshot() const;
  /// Removes completions of a QP being destroyed (they must not be polled
  /// later); returns how many of them reported an error other than a flush
  /// (the error that failed the QP, which its consumer never saw).
  uint32_t purge_qp(uint32_t qpn);

 private:
  struct Entry {
    Completion completion;
    uint64_t seq = 0;              // order of arrival, from 1
    bool wakes_solicited = false;  // solicited, or an error (IBA 11.4.2.2)
  };
  /// Whether a waiting completion no event has announced would fire an
  /// arming for solicited completions (or for any). Caller holds the lock.
  bool unannounced_waiting(bool solicited_only) const;
  void pop_head();

  mutable std::mutex mutex_;
  std::vector<Entry> ring_;
  uint64_t last_seq_ = 0;
  /// Completions up to this one were covered by an event.
  uint64_t announced_through_ = 0;
  uint32_t head_ = 0;
  std::atomic<uint32_t> count_{0};
  enum class Armed : uint8_t { kNo, kNext, kSolicited } armed_ = Armed::kNo;
  bool overrun_ = false;
  std::function<void()> notify_;
  std::function<void()> on_overrun_;
};

}  // namespace ibemu::engine
