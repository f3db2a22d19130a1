#pragma once
// Bytes as lowercase hex digits and back: how the control protocol carries
// binary fields (MADs, GIDs) inside JSON.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ibemu {

std::string to_hex(const uint8_t* data, size_t len);
/// False (and *out unspecified) unless `s` is an even number of hex digits
/// (either case).
bool from_hex(const std::string& s, std::vector<uint8_t>* out);

}  // namespace ibemu
