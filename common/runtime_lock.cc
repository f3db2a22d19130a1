#include "common/runtime_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ibemu {

namespace {
int read_pid(int fd) {
  char buf[32] = {};
  ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  return n > 0 ? std::atoi(buf) : 0;
}
}  // namespace

RuntimeLock::RuntimeLock(const std::string& path, const std::string& who) : path_(path) {
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int pid = read_pid(fd_);
    close(fd_);
    fd_ = -1;
    throw std::runtime_error("another " + who + " (pid " + std::to_string(pid) +
                             ") already runs on this runtime directory; stop it with: ibemu down");
  }
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) < 0)
    throw std::runtime_error("cannot write " + path);
}

RuntimeLock::~RuntimeLock() {
  if (fd_ < 0) return;
  // Truncate first: a reader that races with our exit then sees "no holder".
  if (ftruncate(fd_, 0) != 0) {
  }
  close(fd_);
}

int RuntimeLock::holder_pid(const std::string& path) {
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return 0;
  int pid = 0;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0)
    pid = read_pid(fd);
  else
    flock(fd, LOCK_UN);
  close(fd);
  return pid;
}

}  // namespace ibemu
