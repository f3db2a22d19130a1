# find_package(ibemu) for projects that test on an installed ibemu
# (scripts/install.sh): the targets ibemu::ibemu_gtest and
# ibemu::ibemu_gtest_main (docs/gtest-fixture.md).
include(CMakeFindDependencyMacro)
find_dependency(GTest)
find_dependency(Threads)

get_filename_component(_ibemu_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET ibemu::ibemu_gtest)
  add_library(ibemu::ibemu_gtest STATIC IMPORTED)
  set_target_properties(ibemu::ibemu_gtest PROPERTIES
    IMPORTED_LOCATION "${_ibemu_prefix}/lib/libibemu_gtest.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_ibemu_prefix}/include"
    INTERFACE_LINK_LIBRARIES "GTest::gtest;Threads::Threads")
  add_library(ibemu::ibemu_gtest_main STATIC IMPORTED)
  set_target_properties(ibemu::ibemu_gtest_main PROPERTIES
    IMPORTED_LOCATION "${_ibemu_prefix}/lib/libibemu_gtest_main.a"
    INTERFACE_LINK_LIBRARIES ibemu::ibemu_gtest)
endif()
unset(_ibemu_prefix)
