#pragma once
// The environment of no-kernel mode: what `ibemu env` prints and `ibemu run`
// sets, so the system's libibverbs finds the emulated HCAs.
#include <string>
#include <utility>
#include <vector>

namespace ibemu {

/// Directory holding libibemu-rdmav34.so and libibemu-preload.so: next to the
/// executable (../lib, build tree or /usr/local), or ../lib/ibemu when installed.
std::string find_library_dir();
/// Directory of ibemud / ibemu-sm (the directory of this executable).
std::string find_binary_dir();

/// (name, value) pairs, values already merged with the current environment
/// (LD_PRELOAD is prepended to, not replaced).
std::vector<std::pair<std::string, std::string>> emulation_environment(
    const std::string& runtime_dir);

}  // namespace ibemu
