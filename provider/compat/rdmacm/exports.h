#pragma once
// Marks the functions of librdmacm's API; everything else stays hidden.
#define IBEMU_EXPORT __attribute__((visibility("default")))
