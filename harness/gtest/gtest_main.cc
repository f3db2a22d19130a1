// main() of the ibemu_gtest_main library: every test of the binary runs
// under a private emulated fabric with the default options.
#include "ibemu/gtest_fabric.h"

IBEMU_GTEST_MAIN()
