// Guarded accesses to registered memory (transport/engine/dma_access.h):
// memory that went away makes the access fail instead of killing the
// process, and every other fault reaches the handler that was there before.
#include "transport/engine/dma_access.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "transport/engine/atomics.h"
#include "transport/engine/device_memory.h"

namespace ibemu::engine {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

uint8_t* map_pages(size_t n, int prot) {
  void* p = mmap(nullptr, n * kPage, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

// A fault the handler does not take ends the process as the handler found
// would have ended it: with SIG_DFL in place, killed by the signal.
auto killed_by(int sig) { return testing::KilledBySignal(sig); }

class DmaAccessTest : public testing::Test {
 protected:
  void SetUp() override { install_dma_fault_handler(); }
};

TEST_F(DmaAccessTest, CopiesMappedMemory) {
  uint8_t* mem = map_pages(1, PROT_READ | PROT_WRITE);
  ASSERT_NE(mem, nullptr);
  std::vector<uint8_t> bytes(100, 0x5a), back(100);
  EXPECT_TRUE(dma_write(mem + 7, bytes.data(), bytes.size()));
  EXPECT_TRUE(dma_read(back.data(), mem + 7, back.size()));
  EXPECT_EQ(back, bytes);
  munmap(mem, kPage);
}

TEST_F(DmaAccessTest, UnmappedMemoryFailsTheAccess) {
  uint8_t* mem = map_pages(2, PROT_READ | PROT_WRITE);
  ASSERT_NE(mem, nullptr);
  munmap(mem + kPage, kPage);
  std::vector<uint8_t> bytes(256, 1);
  // From the mapped page into the unmapped one.
  EXPECT_FALSE(dma_write(mem + kPage - 128, bytes.data(), bytes.size()));
  EXPECT_FALSE(dma_read(bytes.data(), mem + kPage - 128, bytes.size()));
  // The thread goes on, and guards the next access as well.
  EXPECT_TRUE(dma_read(bytes.data(), mem + kPage - 256, bytes.size()));
  EXPECT_FALSE(dma_read(bytes.data(), mem + kPage, 8));
  munmap(mem, kPage);
}

TEST_F(DmaAccessTest, ReadOnlyMemoryFailsAWrite) {
  uint8_t* mem = map_pages(1, PROT_READ);
  ASSERT_NE(mem, nullptr);
  const uint8_t byte = 9;
  uint8_t back = 1;
  EXPECT_FALSE(dma_write(mem, &byte, 1));
  EXPECT_TRUE(dma_read(&back, mem, 1));
  EXPECT_EQ(back, 0);
  munmap(mem, kPage);
}

TEST_F(DmaAccessTest, TruncatedFileFailsTheAccess) {
  // SIGBUS: the mapping is there, the file under it is not.
  const int fd = memfd_create("dma_access_test", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kPage)), 0);
  void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(ftruncate(fd, 0), 0);
  uint8_t bytes[64] = {};
  EXPECT_FALSE(dma_read(bytes, p, sizeof(bytes)));
  EXPECT_FALSE(dma_write(p, bytes, sizeof(bytes)));
  munmap(p, kPage);
  close(fd);
}

TEST_F(DmaAccessTest, MemorySpanAndAtomicsOnHostMemoryReportTheFault) {
  uint8_t* mem = map_pages(1, PROT_READ | PROT_WRITE);
  ASSERT_NE(mem, nullptr);
  wire::AtomicEth a;
  a.set_swap_add(5);
  MemorySpan span(mem, nullptr);
  uint64_t orig = 1;
  EXPECT_TRUE(execute_atomic(static_cast<uint8_t>(wire::Opcode::kRcFetchAdd), a, span, &orig));
  EXPECT_EQ(orig, 0u);
  uint64_t word = 0;
  EXPECT_TRUE(span.read(0, &word, sizeof(word)));
  EXPECT_EQ(word, 5u);
  ASSERT_EQ(mprotect(mem, kPage, PROT_NONE), 0);
  EXPECT_FALSE(execute_atomic(static_cast<uint8_t>(wire::Opcode::kRcFetchAdd), a, span, &orig));
  EXPECT_FALSE(span.read(0, &word, sizeof(word)));
  EXPECT_FALSE(span.write(8, &word, sizeof(word)));
  munmap(mem, kPage);
}

// The forwarding tests install the handler in a fresh process (a death
// test that re-executes the test binary), after a handler of the test's own.

void* volatile g_expected_fault = nullptr;  // written before the fault, read in the handler

void siginfo_handler(int, siginfo_t* info, void*) {
  _exit(info->si_addr == g_expected_fault ? 42 : 43);
}

void plain_handler(int) { _exit(44); }

// Faults on purpose: a store into a PROT_NONE page.
void fault_at(uint8_t* p) {
  g_expected_fault = p;
  *reinterpret_cast<volatile uint8_t*>(p) = 1;
}

TEST(DmaAccessForwardingTest, AFaultOutsideAGuardReachesTheSiginfoHandlerFoundBefore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction sa = {};
        sa.sa_sigaction = siginfo_handler;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGSEGV, &sa, nullptr);
        install_dma_fault_handler();
        uint8_t* mem = map_pages(1, PROT_NONE);
        uint8_t byte = 0;
        // A guarded access is the guard's, not the program's handler's...
        if (dma_read(&byte, mem, 1)) _exit(1);
        // ...and the program's own fault is the program's.
        fault_at(mem + 16);
      },
      testing::ExitedWithCode(42), "");
}

TEST(DmaAccessForwardingTest, AFaultOutsideAGuardReachesThePlainHandlerFoundBefore) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGBUS, plain_handler);
        install_dma_fault_handler();
        const int fd = memfd_create("dma_access_test", 0);
        if (ftruncate(fd, static_cast<off_t>(kPage)) != 0) _exit(1);
        auto* p =
            static_cast<uint8_t*>(mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        if (ftruncate(fd, 0) != 0) _exit(1);
        fault_at(p);
      },
      testing::ExitedWithCode(44), "");
}

TEST(DmaAccessForwardingTest, AFaultOutsideAGuardKillsAsWithoutTheHandler) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // What a program without a handler has (a sanitizer's own would
        // report the fault instead of letting it kill).
        signal(SIGSEGV, SIG_DFL);
        install_dma_fault_handler();
        fault_at(map_pages(1, PROT_NONE));
      },
      killed_by(SIGSEGV), "");
}

TEST(DmaAccessForwardingTest, AFaultOnTheUnregisteredSideOfACopyIsNotTheGuards) {
  // The guard takes faults on the registered bytes only: a bad destination
  // of the engine's own is a bug, and kills as one.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGSEGV, SIG_DFL);  // as above
        install_dma_fault_handler();
        uint8_t byte = 0;
        dma_read(map_pages(1, PROT_NONE), &byte, 1);
      },
      killed_by(SIGSEGV), "");
}

}  // namespace
}  // namespace ibemu::engine
