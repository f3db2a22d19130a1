// The preload shim's NETLINK_RDMA replies (provider/shim/rdma_netlink.c),
// for a fake sysfs tree laid out as the daemon writes it.
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "provider/shim/shim_netlink.h"

namespace {

namespace fs = std::filesystem;

constexpr uint32_t kPortid = 4242;
constexpr uint16_t kNldev = RDMA_NL_NLDEV;

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// One device as the daemon writes it: class/infiniband_verbs/uverbsN and the
// device's directory, with `ports` ports.
void add_device(const fs::path& root, int index, const std::string& name, int ports) {
  fs::path uverbs = root / "class/infiniband_verbs" / ("uverbs" + std::to_string(index));
  write_file(uverbs / "ibdev", name);
  write_file(uverbs / "abi_version", "1");
  write_file(uverbs / "dev", "0:0");
  fs::path dev = root / "class/infiniband" / name;
  write_file(dev / "node_type", "1: CA");
  write_file(dev / "node_guid", "0002:c903:0000:" + std::to_string(1000 + index));
  write_file(dev / "sys_image_guid", "0002:c903:0000:" + std::to_string(1000 + index));
  write_file(dev / "fw_ver", "1.2.3");
  for (int p = 1; p <= ports; ++p) {
    fs::path port = dev / "ports" / std::to_string(p);
    write_file(port / "state", "4: ACTIVE");
    write_file(port / "phys_state", "5: LinkUp");
    write_file(port / "lid", "0x" + std::to_string(index + 1) + std::to_string(p));
    write_file(port / "sm_lid", "0x1");
    write_file(port / "lid_mask_count", "0");
    write_file(port / "cap_mask", "0x02510868");
    write_file(port / "gids/0", "fe80:0000:0000:0000:0002:c903:0000:1001");
  }
}

struct Message {
  nlmsghdr header;
  std::vector<unsigned char> payload;
  std::map<uint16_t, std::vector<unsigned char>> attrs;

  uint32_t u32(uint16_t type) const { return as<uint32_t>(type); }
  uint64_t u64(uint16_t type) const { return as<uint64_t>(type); }
  uint8_t u8(uint16_t type) const { return as<uint8_t>(type); }
  std::string str(uint16_t type) const {
    auto& v = attrs.at(type);
    return std::string(reinterpret_cast<const char*>(v.data()),
                       strnlen((const char*)v.data(), v.size()));
  }
  int error() const {
    int e;
    memcpy(&e, payload.data(), sizeof e);
    return e;
  }

 private:
  template <typename T>
  T as(uint16_t type) const {
    auto& v = attrs.at(type);
    EXPECT_EQ(v.size(), sizeof(T)) << "attribute " << type;
    T out{};
    memcpy(&out, v.data(), std::min(v.size(), sizeof out));
    return out;
  }
};

class ShimRdmaNetlink : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ibemu-nl-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // Sends one request; returns the reply messages in order and keeps the
  // datagrams' sizes.
  std::vector<Message> ask(uint16_t op, uint16_t flags, const std::vector<unsigned char>& attrs,
                           uint32_t seq = 77) {
    std::vector<unsigned char> req(NLMSG_HDRLEN + attrs.size());
    nlmsghdr h{};
    h.nlmsg_len = static_cast<uint32_t>(req.size());
    h.nlmsg_type = RDMA_NL_GET_TYPE(kNldev, op);
    h.nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    h.nlmsg_seq = seq;
    memcpy(req.data(), &h, sizeof h);
    if (!attrs.empty()) memcpy(req.data() + NLMSG_HDRLEN, attrs.data(), attrs.size());
    return ask_raw(req);
  }

  std::vector<Message> ask_raw(const std::vector<unsigned char>& req) {
    datagrams_.clear();
    EXPECT_EQ(shim_rdma_nl_answer(root_.c_str(), kPortid, req.data(), req.size(), collect, this),
              0);
    std::vector<Message> out;
    for (auto& d : datagrams_) parse_datagram(d, out);
    return out;
  }

  static std::vector<unsigned char> attr(uint16_t type, const void* data, size_t len) {
    std::vector<unsigned char> a(NLA_ALIGN(NLA_HDRLEN + len), 0);
    nlattr h{static_cast<uint16_t>(NLA_HDRLEN + len), type};
    memcpy(a.data(), &h, sizeof h);
    memcpy(a.data() + NLA_HDRLEN, data, len);
    return a;
  }
  static std::vector<unsigned char> u32_attr(uint16_t type, uint32_t v) {
    return attr(type, &v, sizeof v);
  }
  static std::vector<unsigned char> cat(std::vector<unsigned char> a,
                                        const std::vector<unsigned char>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  std::string root_;
  std::vector<std::vector<unsigned char>> datagrams_;

 private:
  static int collect(void* ctx, const void* data, size_t len) {
    auto* self = static_cast<ShimRdmaNetlink*>(ctx);
    auto* p = static_cast<const unsigned char*>(data);
    self->datagrams_.emplace_back(p, p + len);
    return 0;
  }

  static void parse_datagram(const std::vector<unsigned char>& d, std::vector<Message>& out) {
    size_t off = 0;
    while (off + NLMSG_HDRLEN <= d.size()) {
      Message m;
      memcpy(&m.header, d.data() + off, sizeof m.header);
      ASSERT_GE(m.header.nlmsg_len, NLMSG_HDRLEN);
      ASSERT_LE(off + m.header.nlmsg_len, d.size());
      m.payload.assign(d.begin() + off + NLMSG_HDRLEN, d.begin() + off + m.header.nlmsg_len);
      if (m.header.nlmsg_type >= NLMSG_MIN_TYPE) {
        size_t a = 0;
        while (a + NLA_HDRLEN <= m.payload.size()) {
          nlattr h;
          memcpy(&h, m.payload.data() + a, sizeof h);
          ASSERT_GE(h.nla_len, NLA_HDRLEN);
          ASSERT_LE(a + h.nla_len, m.payload.size());
          m.attrs[h.nla_type].assign(m.payload.begin() + a + NLA_HDRLEN,
                                     m.payload.begin() + a + h.nla_len);
          a += NLA_ALIGN(h.nla_len);
        }
      }
      off += NLMSG_ALIGN(m.header.nlmsg_len);
      out.push_back(std::move(m));
    }
  }
};

TEST_F(ShimRdmaNetlink, DeviceDumpListsEveryDeviceInIndexOrderThenDone) {
  add_device(root_, 1, "ibemu1", 2);
  add_device(root_, 0, "ibemu0", 1);
  auto replies = ask(RDMA_NLDEV_CMD_GET, NLM_F_DUMP, {});
  ASSERT_EQ(replies.size(), 3u);
  for (int i = 0; i < 2; ++i) {
    const Message& m = replies[i];
    EXPECT_EQ(m.header.nlmsg_type, RDMA_NL_GET_TYPE(kNldev, RDMA_NLDEV_CMD_GET));
    EXPECT_EQ(m.header.nlmsg_flags & NLM_F_MULTI, NLM_F_MULTI);
    EXPECT_EQ(m.header.nlmsg_seq, 77u);
    EXPECT_EQ(m.header.nlmsg_pid, kPortid);
    EXPECT_EQ(m.u32(RDMA_NLDEV_ATTR_DEV_INDEX), static_cast<uint32_t>(i));
    EXPECT_EQ(m.str(RDMA_NLDEV_ATTR_DEV_NAME), "ibemu" + std::to_string(i));
    EXPECT_EQ(m.u32(RDMA_NLDEV_ATTR_PORT_INDEX), static_cast<uint32_t>(i + 1));
    EXPECT_EQ(m.u64(RDMA_NLDEV_ATTR_NODE_GUID), 0x0002c90300001000ull + i);
    EXPECT_EQ(m.u8(RDMA_NLDEV_ATTR_DEV_NODE_TYPE), 1);  // RDMA_NODE_IB_CA
    EXPECT_EQ(m.str(RDMA_NLDEV_ATTR_FW_VERSION), "1.2.3");
    EXPECT_EQ(m.str(RDMA_NLDEV_ATTR_DEV_PROTOCOL), "ib");
  }
  EXPECT_EQ(replies[2].header.nlmsg_type, NLMSG_DONE);
  EXPECT_EQ(replies[2].header.nlmsg_seq, 77u);
}

TEST_F(ShimRdmaNetlink, PortQueryAnswersFromTheTreeAndAcksWhenAsked) {
  add_device(root_, 0, "ibemu0", 2);
  auto replies =
      ask(RDMA_NLDEV_CMD_PORT_GET, NLM_F_ACK,
          cat(u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, 0), u32_attr(RDMA_NLDEV_ATTR_PORT_INDEX, 2)));
  ASSERT_EQ(replies.size(), 2u);
  const Message& port = replies[0];
  EXPECT_EQ(port.header.nlmsg_flags & NLM_F_MULTI, 0);
  EXPECT_EQ(port.str(RDMA_NLDEV_ATTR_DEV_NAME), "ibemu0");
  EXPECT_EQ(port.u32(RDMA_NLDEV_ATTR_PORT_INDEX), 2u);
  EXPECT_EQ(port.u8(RDMA_NLDEV_ATTR_PORT_STATE), 4);       // IB_PORT_ACTIVE
  EXPECT_EQ(port.u8(RDMA_NLDEV_ATTR_PORT_PHYS_STATE), 5);  // LinkUp
  EXPECT_EQ(port.u32(RDMA_NLDEV_ATTR_LID), 0x12u);
  EXPECT_EQ(port.u32(RDMA_NLDEV_ATTR_SM_LID), 1u);
  EXPECT_EQ(port.u8(RDMA_NLDEV_ATTR_LMC), 0);
  EXPECT_EQ(port.u64(RDMA_NLDEV_ATTR_CAP_FLAGS), 0x02510868u);
  EXPECT_EQ(port.u64(RDMA_NLDEV_ATTR_SUBNET_PREFIX), 0xfe80000000000000ull);
  EXPECT_EQ(port.attrs.count(RDMA_NLDEV_ATTR_NDEV_NAME), 0u) << "no IPoIB netdev";
  EXPECT_EQ(replies[1].header.nlmsg_type, NLMSG_ERROR);
  EXPECT_EQ(replies[1].error(), 0);
}

TEST_F(ShimRdmaNetlink, PortDumpCoversEveryPortOfTheDevice) {
  add_device(root_, 0, "ibemu0", 3);
  auto replies = ask(RDMA_NLDEV_CMD_PORT_GET, NLM_F_DUMP, u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, 0));
  ASSERT_EQ(replies.size(), 4u);
  for (uint32_t p = 1; p <= 3; ++p) EXPECT_EQ(replies[p - 1].u32(RDMA_NLDEV_ATTR_PORT_INDEX), p);
  EXPECT_EQ(replies[3].header.nlmsg_type, NLMSG_DONE);
}

TEST_F(ShimRdmaNetlink, UverbsCharDeviceIsTheDevicesUverbsFile) {
  add_device(root_, 0, "ibemu0", 1);
  add_device(root_, 1, "ibemu1", 1);
  const char type[] = "uverbs";
  auto replies = ask(RDMA_NLDEV_CMD_GET_CHARDEV, 0,
                     cat(u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, 1),
                         attr(RDMA_NLDEV_ATTR_CHARDEV_TYPE, type, sizeof type)));
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].str(RDMA_NLDEV_ATTR_CHARDEV_NAME), "uverbs1");
  EXPECT_EQ(replies[0].u64(RDMA_NLDEV_ATTR_CHARDEV_ABI), 1u);
  EXPECT_EQ(replies[0].u64(RDMA_NLDEV_ATTR_CHARDEV), 0u);
  EXPECT_EQ(replies[0].u32(RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID), 0u);  // RDMA_DRIVER_UNKNOWN
}

TEST_F(ShimRdmaNetlink, BadRequestsGetTheKernelsErrorsWithTheRequestEchoed) {
  add_device(root_, 0, "ibemu0", 1);
  struct Case {
    const char* what;
    uint16_t op, flags;
    std::vector<unsigned char> attrs;
    int error;
  };
  const char rdma_cm[] = "rdma_cm";
  std::vector<Case> cases = {
      {"no such device", RDMA_NLDEV_CMD_GET, 0, u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, 9), -EINVAL},
      {"no device index", RDMA_NLDEV_CMD_GET, 0, {}, -EINVAL},
      {"port 0", RDMA_NLDEV_CMD_PORT_GET, 0,
       cat(u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, 0), u32_attr(RDMA_NLDEV_ATTR_PORT_INDEX, 0)),
       -EINVAL},
      {"port past the last", RDMA_NLDEV_CMD_PORT_GET, 0,
       cat(u32_attr(RDMA_NLDEV_ATTR_DEV_INDEX, 0), u32_attr(RDMA_NLDEV_ATTR_PORT_INDEX, 2)),
       -EINVAL},
      {"dump of a command without one", RDMA_NLDEV_CMD_SYS_GET, NLM_F_DUMP, {}, -EINVAL},
      {"resource tracking", RDMA_NLDEV_CMD_RES_GET, NLM_F_DUMP, {}, -EOPNOTSUPP},
      {"an unknown char device", RDMA_NLDEV_CMD_GET_CHARDEV, 0,
       attr(RDMA_NLDEV_ATTR_CHARDEV_TYPE, rdma_cm, sizeof rdma_cm), -EOPNOTSUPP},
      {"an attribute running past the message",
       RDMA_NLDEV_CMD_GET,
       0,
       {40, 0, RDMA_NLDEV_ATTR_DEV_INDEX, 0, 0, 0, 0, 0},
       -EINVAL},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto replies = ask(c.op, c.flags, c.attrs, 5);
    ASSERT_EQ(replies.size(), 1u);
    EXPECT_EQ(replies[0].header.nlmsg_type, NLMSG_ERROR);
    EXPECT_EQ(replies[0].header.nlmsg_seq, 5u);
    EXPECT_EQ(replies[0].error(), c.error);
    nlmsghdr echoed;
    ASSERT_GE(replies[0].payload.size(), sizeof(int) + sizeof echoed);
    memcpy(&echoed, replies[0].payload.data() + sizeof(int), sizeof echoed);
    EXPECT_EQ(echoed.nlmsg_type, RDMA_NL_GET_TYPE(kNldev, c.op));
    EXPECT_EQ(echoed.nlmsg_len, NLMSG_HDRLEN + c.attrs.size());
  }
}

TEST_F(ShimRdmaNetlink, OtherClientsAreNotSupported) {
  std::vector<unsigned char> req(NLMSG_HDRLEN);
  nlmsghdr h{NLMSG_HDRLEN, RDMA_NL_GET_TYPE(RDMA_NL_LS, 1), NLM_F_REQUEST, 1, 0};
  memcpy(req.data(), &h, sizeof h);
  auto replies = ask_raw(req);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].error(), -EOPNOTSUPP);
}

TEST_F(ShimRdmaNetlink, TruncatedOrNonRequestMessagesGetNoReply) {
  add_device(root_, 0, "ibemu0", 1);
  std::vector<unsigned char> req(NLMSG_HDRLEN);
  nlmsghdr h{NLMSG_HDRLEN + 8, RDMA_NL_GET_TYPE(kNldev, RDMA_NLDEV_CMD_GET),
             NLM_F_REQUEST | NLM_F_DUMP, 1, 0};
  memcpy(req.data(), &h, sizeof h);
  EXPECT_TRUE(ask_raw(req).empty()) << "length past the datagram";
  h.nlmsg_len = NLMSG_HDRLEN;
  h.nlmsg_flags = NLM_F_DUMP;  // no NLM_F_REQUEST
  memcpy(req.data(), &h, sizeof h);
  EXPECT_TRUE(ask_raw(req).empty());
  EXPECT_TRUE(ask_raw({1, 2, 3}).empty());
}

TEST_F(ShimRdmaNetlink, SeveralRequestsInOneSendAreAnsweredInOrder) {
  add_device(root_, 0, "ibemu0", 1);
  std::vector<unsigned char> req;
  for (uint32_t seq : {10u, 11u}) {
    std::vector<unsigned char> one(NLMSG_HDRLEN);
    nlmsghdr h{NLMSG_HDRLEN, RDMA_NL_GET_TYPE(kNldev, RDMA_NLDEV_CMD_SYS_GET), NLM_F_REQUEST, seq,
               0};
    memcpy(one.data(), &h, sizeof h);
    req.insert(req.end(), one.begin(), one.end());
  }
  auto replies = ask_raw(req);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].header.nlmsg_seq, 10u);
  EXPECT_EQ(replies[1].header.nlmsg_seq, 11u);
  EXPECT_EQ(replies[0].u8(RDMA_NLDEV_SYS_ATTR_NETNS_MODE), 1);
  EXPECT_EQ(replies[0].attrs.count(RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK), 0u);
}

TEST_F(ShimRdmaNetlink, LargeDumpsSpreadOverDatagramsAPageReaderCanTake) {
  for (int i = 0; i < 40; ++i) add_device(root_, i, "ibemu" + std::to_string(i), 2);
  auto replies = ask(RDMA_NLDEV_CMD_GET, NLM_F_DUMP, {});
  ASSERT_EQ(replies.size(), 41u);
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(replies[i].str(RDMA_NLDEV_ATTR_DEV_NAME), "ibemu" + std::to_string(i));
  EXPECT_GT(datagrams_.size(), 1u);
  for (auto& d : datagrams_) EXPECT_LE(d.size(), 4096u);
}

}  // namespace
