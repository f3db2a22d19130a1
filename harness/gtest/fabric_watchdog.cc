#include "harness/gtest/fabric_watchdog.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

extern char** environ;

namespace ibemu::testing::detail {

namespace {
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

void watch_owner(const std::string& ibemu, const std::string& runtime_dir, bool keep) {
  // A shell does the waiting: the forked child only calls execve, which is
  // safe even when the owner has threads. The directory gone means the
  // owner brought the fabric down itself.
  const std::string dir = shell_quote(runtime_dir);
  const std::string script = "while kill -0 " + std::to_string(getpid()) +
                             " 2>/dev/null; do sleep 0.2; done; [ -d " + dir + " ] || exit 0; " +
                             "IBEMU_RUNTIME_DIR=" + dir + " " + shell_quote(ibemu) + " down; " +
                             (keep ? "" : "rm -rf " + dir);
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  const pid_t child = fork();
  if (child != 0) {
    // Reap the intermediate child; the watchdog itself is init's.
    while (child > 0 && waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
    return;
  }
  // Its own session: Ctrl-C on the test must not stop the watchdog too; no
  // inherited descriptors: a test runner reading the test's output waits
  // for every writer to close it.
  setsid();
  if (fork() != 0) _exit(0);
  const int null = open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
  close_range(3, ~0U, 0);
  execve(argv[0], const_cast<char* const*>(argv), environ);
  _exit(127);
}

}  // namespace ibemu::testing::detail
