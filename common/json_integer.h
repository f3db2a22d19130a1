#pragma once
// Integers out of JSON that a program, a config file or another host wrote.
// nlohmann::json's get<T>() turns a floating-point value into T with a cast
// that is undefined behaviour out of T's range (a QPN of 1e42), and wraps
// integers that do not fit; these check first.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace ibemu {

/// Whether `v` is an integer that T holds.
template <typename T>
bool json_fits(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
  if (v.is_number_integer()) return std::in_range<T>(v.get<int64_t>());
  return false;
}

/// `v` as T; std::invalid_argument when it is not an integer T holds.
template <typename T>
T json_integer(const nlohmann::json& v) {
  if (!json_fits<T>(v))
    throw std::invalid_argument(
        "expected an integer from " + std::to_string(std::numeric_limits<T>::min()) + " to " +
        std::to_string(std::numeric_limits<T>::max()) + ", got " + v.dump());
  return v.is_number_unsigned() ? T(v.get<uint64_t>()) : T(v.get<int64_t>());
}

/// The integer field `key` of `obj`, or `fallback` when there is none.
template <typename T>
T json_integer_or(const nlohmann::json& obj, const char* key, T fallback) {
  const auto it = obj.find(key);
  return it == obj.end() ? fallback : json_integer<T>(*it);
}

}  // namespace ibemu
