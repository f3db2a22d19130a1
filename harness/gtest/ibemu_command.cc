#include "harness/gtest/ibemu_command.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

extern char** environ;

namespace ibemu::testing::detail {

namespace fs = std::filesystem;

std::string ibemu_binary() {
  if (const char* bin = std::getenv("IBEMU_BIN"); bin && *bin) return bin;
  // Baked in at build time so a test binary of the build tree (or linked
  // against an install) needs no PATH setup.
  for (const char* dir : {IBEMU_GTEST_BUILD_BIN_DIR, IBEMU_GTEST_INSTALL_BIN_DIR}) {
    const fs::path candidate = fs::path(dir) / "ibemu";
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "ibemu";
}

std::string CommandResult::describe() const {
  std::string text = "exit status " + std::to_string(status);
  if (!out.empty()) text += "\n" + out;
  if (!err.empty()) text += "\n" + err;
  return text;
}

namespace {
std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) text.append(buf, size_t(n));
  close(fd);
  return text;
}
}  // namespace

CommandResult run_ibemu(const std::string& runtime_dir, const std::vector<std::string>& args) {
  CommandResult result;
  // Output goes to anonymous files, not pipes: `ibemu up` leaves daemons
  // running that must not hold a pipe we wait on for EOF.
  const int out = memfd_create("ibemu-out", MFD_CLOEXEC);
  const int err = memfd_create("ibemu-err", MFD_CLOEXEC);
  const std::string binary = ibemu_binary();
  std::vector<char*> argv{const_cast<char*>(binary.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // The environment is built before fork: the child may only call
  // async-signal-safe functions in a process that has threads.
  const std::string dir_var = "IBEMU_RUNTIME_DIR=" + runtime_dir;
  std::vector<char*> envp{const_cast<char*>(dir_var.c_str())};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "IBEMU_RUNTIME_DIR=", 18) != 0) envp.push_back(*e);
  envp.push_back(nullptr);
  if (out < 0 || err < 0) {
    result.err = std::string("memfd_create: ") + std::strerror(errno);
    return result;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execvpe(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int wstatus = 0;
  if (pid > 0) {
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(wstatus)) result.status = WEXITSTATUS(wstatus);
  }
  result.out = read_all(out);
  result.err = read_all(err);
  if (result.status == 127) result.err += "(could not run " + binary + "; set IBEMU_BIN)";
  return result;
}

}  // namespace ibemu::testing::detail
