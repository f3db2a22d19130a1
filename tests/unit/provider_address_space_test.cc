// What ibv_reg_mr checks of the memory it is given (provider/core/address_space.h):
// as the kernel's pin, every page mapped, readable or writable as asked.
#include "provider/core/address_space.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <string>

namespace ibemu::provider {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

uintptr_t map_pages(size_t n, int prot) {
  void* p = mmap(nullptr, n * kPage, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? 0 : reinterpret_cast<uintptr_t>(p);
}

void unmap(uintptr_t at, size_t pages) { munmap(reinterpret_cast<void*>(at), pages * kPage); }

void protect(uintptr_t at, size_t pages, int prot) {
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(at), pages * kPage, prot), 0);
}

TEST(AddressSpaceTest, MappedMemoryPasses) {
  const uintptr_t mem = map_pages(2, PROT_READ | PROT_WRITE);
  ASSERT_NE(mem, 0u);
  EXPECT_EQ(check_mapped(mem, 2 * kPage, true), 0);
  EXPECT_EQ(check_mapped(mem + 3, 10, false), 0);  // byte-granular, inside one page
  int on_stack = 0;
  EXPECT_EQ(check_mapped(reinterpret_cast<uintptr_t>(&on_stack), sizeof(on_stack), true), 0);
  unmap(mem, 2);
}

TEST(AddressSpaceTest, NothingMappedIsEfault) {
  EXPECT_EQ(check_mapped(0x1000, kPage, false), EFAULT);
  EXPECT_EQ(check_mapped(0, 1, false), EFAULT);
}

TEST(AddressSpaceTest, ZeroLengthPassesAndAWrappingRangeIsEinval) {
  EXPECT_EQ(check_mapped(0x1000, 0, true), 0);
  EXPECT_EQ(check_mapped(UINTPTR_MAX - 10, 100, false), EINVAL);
}

TEST(AddressSpaceTest, AccessMustBeAllowed) {
  const uintptr_t ro = map_pages(1, PROT_READ);
  const uintptr_t none = map_pages(1, PROT_NONE);
  const uintptr_t wo = map_pages(1, PROT_WRITE);
  ASSERT_TRUE(ro && none && wo);
  EXPECT_EQ(check_mapped(ro, kPage, false), 0);
  EXPECT_EQ(check_mapped(ro, kPage, true), EFAULT);
  EXPECT_EQ(check_mapped(none, kPage, false), EFAULT);
  EXPECT_EQ(check_mapped(none, 1, true), EFAULT);
  // As get_user_pages: a pin for writing needs VM_WRITE only.
  EXPECT_EQ(check_mapped(wo, kPage, true), 0);
  EXPECT_EQ(check_mapped(wo, kPage, false), EFAULT);
  unmap(ro, 1);
  unmap(none, 1);
  unmap(wo, 1);
}

TEST(AddressSpaceTest, ARangeOverAdjacentMappingsChecksEachOfThem) {
  // Three mappings side by side: read-write, read-only, read-write.
  const uintptr_t mem = map_pages(3, PROT_READ | PROT_WRITE);
  ASSERT_NE(mem, 0u);
  protect(mem + kPage, 1, PROT_READ);
  EXPECT_EQ(check_mapped(mem, 3 * kPage, false), 0);
  EXPECT_EQ(check_mapped(mem + kPage - 1, 2, false), 0);
  EXPECT_EQ(check_mapped(mem, 3 * kPage, true), EFAULT);
  EXPECT_EQ(check_mapped(mem + 2 * kPage - 1, 2, true), EFAULT);  // its last byte, the next first
  EXPECT_EQ(check_mapped(mem + 2 * kPage, kPage, true), 0);
  protect(mem + kPage, 1, PROT_READ | PROT_WRITE);
  EXPECT_EQ(check_mapped(mem, 3 * kPage, true), 0);
  unmap(mem, 3);
}

TEST(AddressSpaceTest, AHoleIsEfault) {
  const uintptr_t mem = map_pages(3, PROT_READ | PROT_WRITE);
  ASSERT_NE(mem, 0u);
  unmap(mem + kPage, 1);
  EXPECT_EQ(check_mapped(mem, 3 * kPage, false), EFAULT);
  EXPECT_EQ(check_mapped(mem, kPage, true), 0);
  EXPECT_EQ(check_mapped(mem, kPage + 1, true), EFAULT);
  EXPECT_EQ(check_mapped(mem + kPage, 1, false), EFAULT);
  EXPECT_EQ(check_mapped(mem + 2 * kPage, kPage, true), 0);
  unmap(mem, 1);
  unmap(mem + 2 * kPage, 1);
}

TEST(AddressSpaceTest, ManyMappingsAreReadToTheEnd) {
  // More lines than one read of the file returns.
  constexpr size_t kMappings = 400;
  const uintptr_t mem = map_pages(2 * kMappings, PROT_READ | PROT_WRITE);
  ASSERT_NE(mem, 0u);
  for (size_t i = 0; i < kMappings; ++i) protect(mem + 2 * i * kPage, 1, PROT_READ);
  EXPECT_EQ(check_mapped(mem, 2 * kMappings * kPage, false), 0);
  EXPECT_EQ(check_mapped(mem + (2 * kMappings - 1) * kPage, kPage, true), 0);
  EXPECT_EQ(check_mapped(mem, 2 * kMappings * kPage, true), EFAULT);
  unmap(mem, 2 * kMappings);
}

TEST(AddressSpaceTest, TheVdsoDataPagesCannotBePinned) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("[vvar]") == std::string::npos) continue;
    const uintptr_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    EXPECT_EQ(check_mapped(start, 1, false), EFAULT);
    return;
  }
  GTEST_SKIP() << "no [vvar] mapping";
}

}  // namespace
}  // namespace ibemu::provider
