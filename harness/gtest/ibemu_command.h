#pragma once
// Running the `ibemu` command for the fixture: which binary, and one
// invocation with its output captured.
#include <string>
#include <vector>

namespace ibemu::testing::detail {

/// $IBEMU_BIN, else the ibemu of the build tree or install prefix this
/// library was configured with (whichever exists), else "ibemu" from PATH.
std::string ibemu_binary();

struct CommandResult {
  int status = -1;  // exit status; -1 when it could not run or died of a signal
  std::string out;
  std::string err;
  std::string describe() const;  // for error messages
};

/// Runs `ibemu ARGS...` with IBEMU_RUNTIME_DIR=runtime_dir and waits for it.
CommandResult run_ibemu(const std::string& runtime_dir, const std::vector<std::string>& args);

}  // namespace ibemu::testing::detail
