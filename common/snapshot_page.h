#pragma once
// The snapshot page of one HCA context: shared memory in which the provider
// answers the daemon's requests for a ContextSnapshot (common/context_snapshot.h).
//
// The daemon asks every context at once by bumping the state page's
// `snapshot_request`; each provider's progress thread looks at it once per
// timer scan (at least every 10 ms, never per packet) and, when it changed,
// writes its snapshot here with the request it answers. So the data path pays
// nothing, and a program that is stopped or hung simply does not answer: the
// daemon never waits on it, it only looks at the page again later.
//
// The provider creates the memfd, sized and sealed against shrinking (the
// daemon maps it read-only and must not fault on a page the owner cut
// away), and passes it with `open_context`. The content is JSON behind a
// seqlock: the writer makes `seq` odd, writes, makes it even.
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

namespace ibemu {

struct SnapshotPageHeader {
  static constexpr uint64_t kMagic = 0x746f6873'70616e53ull;  // "Snapshot"
  uint64_t magic;
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> answered;  // the snapshot_request the content answers
  std::atomic<uint32_t> length;    // bytes of JSON after the header
  uint32_t reserved;
};

class SnapshotPage {
 public:
  /// The whole page, header included: room for kMaxListed of each kind.
  static constexpr size_t kBytes = 256 * 1024;
  static constexpr size_t kMaxContent = kBytes - sizeof(SnapshotPageHeader);

  SnapshotPage() = default;
  SnapshotPage(SnapshotPage&& other) noexcept;
  SnapshotPage& operator=(SnapshotPage&& other) noexcept;
  ~SnapshotPage();

  /// The provider: a new page, writable. 0 or an errno.
  int create() noexcept;
  /// The daemon: maps a page a provider created, read-only; takes `fd`.
  /// EINVAL when it is not sealed against shrinking or has another size.
  int attach_read_only(int fd) noexcept;

  int fd() const { return fd_; }
  bool attached() const { return header_ != nullptr; }

  /// The provider: `json` answers request `request`. False when it does not
  /// fit (nothing is written then).
  bool publish(uint64_t request, const std::string& json) noexcept;
  /// The daemon: the content when it answers `request` or a later one,
  /// copied consistently; nothing while the provider has not answered (or
  /// is writing: ask again later).
  std::optional<std::string> read(uint64_t request) const;

 private:
  void release() noexcept;

  int fd_ = -1;
  SnapshotPageHeader* header_ = nullptr;
  bool writable_ = false;
};

}  // namespace ibemu
