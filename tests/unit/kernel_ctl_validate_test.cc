// The checks ibemu.ko applies to every control message (kernel/ibemu_ctl_validate.c),
// compiled in user space.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

#include "emulator-daemon/kernel_messages.h"
#include "kernel/ibemu_ctl_validate.h"
#include "tests/unit/kernel_ctl_samples.h"

namespace ibemu {
namespace {

using testing::valid_device;
using testing::valid_mad_in;
using testing::valid_mad_reply;
using testing::valid_port;

template <typename Msg>
int validate(const Msg& m) {
  return ibemu_ctl_validate(&m, sizeof(m));
}

TEST(KernelControlValidate, AcceptsWellFormedMessages) {
  EXPECT_EQ(validate(valid_device()), 0);
  EXPECT_EQ(validate(valid_port()), 0);
  EXPECT_EQ(validate(valid_mad_in()), 0);
  EXPECT_EQ(validate(valid_mad_reply()), 0);
}

TEST(KernelControlValidate, RefusesLengthsThatDisagree) {
  auto m = valid_port();
  EXPECT_EQ(ibemu_ctl_validate(&m, sizeof(m) - 1), -EINVAL);
  m.hdr.length = sizeof(m) + 4;
  EXPECT_EQ(validate(m), -EINVAL);
  EXPECT_EQ(ibemu_ctl_validate(&m, 3), -EINVAL);
}

TEST(KernelControlValidate, RefusesWhatOnlyTheModuleSends) {
  EXPECT_EQ(validate(kernel_message<ibemu_ctl_mad_out>(IBEMU_CTL_MAD_OUT)), -EINVAL);
  EXPECT_EQ(validate(kernel_message<ibemu_ctl_process_mad>(IBEMU_CTL_PROCESS_MAD)), -EINVAL);
}

TEST(KernelControlValidate, RefusesBadDevices) {
  auto m = valid_device();
  m.abi_version = IBEMU_CTL_ABI_VERSION + 1;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.num_ports = 0;
  EXPECT_EQ(validate(m), -EINVAL);
  m.num_ports = IBEMU_CTL_MAX_PORTS + 1;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.index = IBEMU_CTL_MAX_DEVICES;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  std::memset(m.name, 'a', sizeof(m.name));  // not terminated
  EXPECT_EQ(validate(m), -EINVAL);
  for (const char* name : {"", "ibemu%d", "a/b", "a b"}) {
    m = valid_device();
    std::strcpy(m.name, name);
    EXPECT_EQ(validate(m), -EINVAL) << name;
  }
}

// ABI 3 appended the kernel QPN block and the FRWR limit to ABI 2's layout.
static_assert(sizeof(ibemu_ctl_add_device) == 240);
static_assert(offsetof(ibemu_ctl_add_device, kernel_qpn_first) == 224);

TEST(KernelControlValidate, RefusesBadKernelQpnBlocksAndPageLists) {
  auto m = valid_device();
  m.kernel_qpn_count = 0x100000;  // reaches the multicast QPN
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.kernel_qpn_first = 1;  // QP1
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.kernel_qpn_first = 0xffffff;
  m.kernel_qpn_count = 1;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.kernel_qpn_count = 0;  // no block, yet a start
  EXPECT_EQ(validate(m), -EINVAL);
  m.kernel_qpn_first = 0;
  EXPECT_EQ(validate(m), 0);
  m = valid_device();
  m.max_fast_reg_pages = IBEMU_CTL_MAX_FAST_REG_PAGES;
  EXPECT_EQ(validate(m), 0);
  m.max_fast_reg_pages = IBEMU_CTL_MAX_FAST_REG_PAGES + 1;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_device();
  m.reserved2 = 1;
  EXPECT_EQ(validate(m), -EINVAL);
  // ABI 2's ADD_DEVICE, shorter by the new fields.
  m = valid_device();
  m.hdr.length = offsetof(ibemu_ctl_add_device, kernel_qpn_first);
  EXPECT_EQ(ibemu_ctl_validate(&m, m.hdr.length), -EINVAL);
}

TEST(KernelControlValidate, RefusesPortAttributesOutOfRange) {
  auto m = valid_port();
  m.port = 0;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_port();
  m.state = 0;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_port();
  m.active_mtu = 6;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_port();
  m.lmc = 8;
  EXPECT_EQ(validate(m), -EINVAL);
  m = valid_port();
  m.sm_sl = 16;
  EXPECT_EQ(validate(m), -EINVAL);
}

TEST(KernelControlValidate, RefusesBadMadsAndReplies) {
  auto mad = kernel_message<ibemu_ctl_mad_in>(IBEMU_CTL_MAD_IN);
  mad.port = 1;
  mad.qpn = 2;
  EXPECT_EQ(validate(mad), -EINVAL);
  mad.qpn = 1;
  mad.src_qp = 1u << 24;
  EXPECT_EQ(validate(mad), -EINVAL);
  auto reply = kernel_message<ibemu_ctl_process_mad_reply>(IBEMU_CTL_PROCESS_MAD_REPLY);
  reply.hdr.seq = 0;
  EXPECT_EQ(validate(reply), -EINVAL);
  reply.hdr.seq = 1;
  reply.result = 3;
  EXPECT_EQ(validate(reply), -EINVAL);
}

}  // namespace
}  // namespace ibemu
