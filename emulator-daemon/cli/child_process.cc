#include "emulator-daemon/cli/child_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ibemu {

pid_t spawn_child(const std::vector<std::string>& argv, const sigset_t& unblock) {
  if (argv.empty()) {
    errno = EINVAL;
    return -1;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // A blocked signal stays blocked across exec: the program would not stop
  // on Ctrl-C.
  sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
  execvp(args[0], args.data());
  const char* why = std::strerror(errno);
  dprintf(STDERR_FILENO, "cannot run %s: %s\n", args[0], why);
  _exit(127);
}

int shell_exit_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return WEXITSTATUS(wait_status);
}

}  // namespace ibemu
