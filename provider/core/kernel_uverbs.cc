#include "provider/core/kernel_uverbs.h"

#include <rdma/ib_user_verbs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ibemu::provider::kernel_uverbs {

namespace {

// One legacy write() command: header, then the command; the kernel writes
// its response (if any) to the address in the command's `response`.
template <typename Cmd>
int execute(int cmd_fd, uint32_t command, const Cmd& cmd, size_t resp_size) noexcept {
  struct {
    ib_uverbs_cmd_hdr hdr;
    Cmd cmd;
  } buf{};
  static_assert(sizeof(buf) % 4 == 0);
  buf.hdr.command = command;
  buf.hdr.in_words = sizeof(buf) / 4;
  buf.hdr.out_words = static_cast<uint16_t>(resp_size / 4);
  buf.cmd = cmd;
  ssize_t n = write(cmd_fd, &buf, sizeof(buf));
  if (n == static_cast<ssize_t>(sizeof(buf))) return 0;
  return n < 0 ? errno : EIO;
}

}  // namespace

bool is_kernel_device(int cmd_fd) noexcept {
  struct stat fd_st, null_st;
  if (fstat(cmd_fd, &fd_st) != 0 || !S_ISCHR(fd_st.st_mode)) return false;
  return stat("/dev/null", &null_st) != 0 || fd_st.st_rdev != null_st.st_rdev;
}

int get_context(int cmd_fd, int* async_fd) noexcept {
  ib_uverbs_get_context_resp resp{};
  ib_uverbs_get_context cmd{};
  cmd.response = reinterpret_cast<uintptr_t>(&resp);
  if (int err = execute(cmd_fd, IB_USER_VERBS_CMD_GET_CONTEXT, cmd, sizeof(resp))) return err;
  *async_fd = static_cast<int>(resp.async_fd);
  return 0;
}

int create_cq(int cmd_fd, uint64_t user_handle, int cqe, int channel_fd,
              uint32_t* handle) noexcept {
  ib_uverbs_create_cq_resp resp{};
  ib_uverbs_create_cq cmd{};
  cmd.response = reinterpret_cast<uintptr_t>(&resp);
  cmd.user_handle = user_handle;
  cmd.cqe = static_cast<uint32_t>(cqe);
  cmd.comp_vector = 0;
  cmd.comp_channel = channel_fd;
  if (int err = execute(cmd_fd, IB_USER_VERBS_CMD_CREATE_CQ, cmd, sizeof(resp))) return err;
  *handle = resp.cq_handle;
  return 0;
}

int destroy_cq(int cmd_fd, uint32_t handle) noexcept {
  ib_uverbs_destroy_cq_resp resp{};
  ib_uverbs_destroy_cq cmd{};
  cmd.response = reinterpret_cast<uintptr_t>(&resp);
  cmd.cq_handle = handle;
  return execute(cmd_fd, IB_USER_VERBS_CMD_DESTROY_CQ, cmd, sizeof(resp));
}

int raise_cq_event(int cmd_fd, uint32_t handle) noexcept {
  ib_uverbs_req_notify_cq cmd{};
  cmd.cq_handle = handle;
  return execute(cmd_fd, IB_USER_VERBS_CMD_REQ_NOTIFY_CQ, cmd, 0);
}

}  // namespace ibemu::provider::kernel_uverbs
