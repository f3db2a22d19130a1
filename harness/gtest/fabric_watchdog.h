#pragma once
// Bringing a fabric down when its owner dies without running its exit path
// (a crash, SIGKILL, a closed pipe), so no daemon outlives the test run.
#include <string>

namespace ibemu::testing::detail {

/// Starts a detached process that waits for this process to end, then runs
/// `ibemu down` on `runtime_dir` and removes it (unless `keep`), if the
/// owner has not done so already.
void watch_owner(const std::string& ibemu, const std::string& runtime_dir, bool keep);

}  // namespace ibemu::testing::detail
