#include "common/runtime_paths.h"

#include <unistd.h>

#include <cstdlib>

namespace ibemu {

namespace {
constexpr const char* kSystemRuntimeDir = "/run/ibemu";
}  // namespace

std::string system_runtime_dir() {
  if (const char* dir = std::getenv("IBEMU_RUNTIME_DIR"); dir && *dir) return dir;
  return kSystemRuntimeDir;
}

std::string default_runtime_dir() {
  if (const char* dir = std::getenv("IBEMU_RUNTIME_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg)
    return std::string(xdg) + "/ibemu";
  if (geteuid() == 0) return kSystemRuntimeDir;
  return "/tmp/ibemu-" + std::to_string(getuid());
}

}  // namespace ibemu
