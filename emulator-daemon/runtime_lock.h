#pragma once
// One daemon per runtime directory: an exclusive flock on ibemud.lock, held for
// the daemon's lifetime. The lock file also records the pid for `ibemu down`.
#include <string>

namespace ibemu {

class RuntimeLock {
 public:
  /// Takes the lock or throws std::runtime_error naming the process that holds it.
  explicit RuntimeLock(const std::string& path);
  ~RuntimeLock();
  RuntimeLock(const RuntimeLock&) = delete;
  RuntimeLock& operator=(const RuntimeLock&) = delete;

  /// The pid recorded in a lock file, or 0 when nobody holds the lock.
  static int holder_pid(const std::string& path);

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace ibemu
