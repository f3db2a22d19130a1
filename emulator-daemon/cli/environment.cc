#include "emulator-daemon/cli/environment.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/runtime_paths.h"

namespace ibemu {

namespace fs = std::filesystem;

std::string find_binary_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

std::string find_library_dir() {
  fs::path bin = find_binary_dir();
  for (fs::path candidate : {bin / "../lib", bin / "../lib/ibemu", bin / "../lib64/ibemu"}) {
    if (fs::exists(candidate / IBEMU_PROVIDER_FILE_NAME))
      return fs::weakly_canonical(candidate).string();
  }
  return fs::weakly_canonical(bin / "../lib").string();
}

namespace {
std::string prepend(const char* name, const std::string& value) {
  const char* old = std::getenv(name);
  if (!old || !*old) return value;
  std::string existing = old;
  // Idempotent: `ibemu run` inside `ibemu run` must not stack copies.
  if (existing.rfind(value, 0) == 0) return existing;
  return value + ":" + existing;
}

// A sanitized build's provider needs its sanitizer's runtime loaded first in
// every program, including those built without it.
std::string preloads(const std::string& lib) {
  std::string shim = lib + "/libibemu-preload.so";
  std::string runtime = IBEMU_SANITIZER_RUNTIME;
  return runtime.empty() ? shim : runtime + ":" + shim;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> emulation_environment(
    const std::string& runtime_dir) {
  std::string lib = find_library_dir();
  RuntimePaths paths{runtime_dir};
  return {
      {"IBEMU_RUNTIME_DIR", runtime_dir},
      {"IBEMU_SYSFS", paths.sysfs()},
      {"SYSFS_PATH", paths.sysfs()},
      // libibverbs appends -rdmav34.so to this path.
      {"RDMAV_DRIVERS", lib + "/libibemu"},
      {"LD_PRELOAD", prepend("LD_PRELOAD", preloads(lib))},
      // librdmacm.so.1 in user space, found before the system's.
      {"LD_LIBRARY_PATH", prepend("LD_LIBRARY_PATH", lib + "/compat")},
  };
}

}  // namespace ibemu
