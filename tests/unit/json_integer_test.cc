// Integers out of JSON (common/json_integer.h): what T holds is taken, and
// everything else — floating point, out of range, another type — refused
// instead of cast (a QPN of 1e42 was undefined behaviour in the daemon).
#include "common/json_integer.h"

#include <gtest/gtest.h>

namespace ibemu {
namespace {

using nlohmann::json;

TEST(JsonInteger, TakesWhatTheTypeHolds) {
  EXPECT_EQ(json_integer<uint32_t>(json(0xffffffffu)), 0xffffffffu);
  EXPECT_EQ(json_integer<uint16_t>(json(7)), 7);
  EXPECT_EQ(json_integer<int>(json(-5)), -5);
  EXPECT_EQ(json_integer<uint64_t>(json::parse("18446744073709551615")), ~uint64_t{0});
  EXPECT_EQ(json_integer<int64_t>(json::parse("-9223372036854775808")), INT64_MIN);
}

TEST(JsonInteger, RefusesWhatItCannotHold) {
  EXPECT_THROW(json_integer<uint32_t>(json::parse("1.87778e+42")), std::invalid_argument);
  EXPECT_THROW(json_integer<uint32_t>(json(1.0)), std::invalid_argument);
  EXPECT_THROW(json_integer<uint32_t>(json(-1)), std::invalid_argument);
  EXPECT_THROW(json_integer<uint16_t>(json(65536)), std::invalid_argument);
  EXPECT_THROW(json_integer<int>(json::parse("9223372036854775807")), std::invalid_argument);
  EXPECT_THROW(json_integer<int>(json("12")), std::invalid_argument);
  EXPECT_THROW(json_integer<int>(json(true)), std::invalid_argument);
  EXPECT_THROW(json_integer<int>(json(nullptr)), std::invalid_argument);
}

TEST(JsonInteger, OrTheFallbackWhenTheKeyIsMissing) {
  const json obj = {{"count", 3}, {"bad", 2.5}};
  EXPECT_EQ(json_integer_or<uint32_t>(obj, "count", 1), 3u);
  EXPECT_EQ(json_integer_or<uint32_t>(obj, "files", 1), 1u);
  EXPECT_THROW(json_integer_or<uint32_t>(obj, "bad", 1), std::invalid_argument);
}

}  // namespace
}  // namespace ibemu
