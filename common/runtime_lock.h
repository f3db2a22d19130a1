#pragma once
// One daemon (and one SM) per runtime directory: an exclusive flock on its lock
// file, held for the process's lifetime. The file also records the pid, for
// `ibemu down` and `ibemu status`.
#include <string>

namespace ibemu {

class RuntimeLock {
 public:
  /// Takes the lock or throws std::runtime_error naming the process that
  /// holds it; `who` names the program in that message ("ibemud").
  explicit RuntimeLock(const std::string& path, const std::string& who = "ibemud");
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
