#pragma once
// Boost.Asio for the daemon. Boost 1.74's awaitable.hpp uses std::exchange
// without including <utility>, which GCC 12 in C++20 mode does not pull in
// otherwise: include it first, here, once.
// clang-format off
#include <utility>
#include <boost/asio.hpp>
// clang-format on
