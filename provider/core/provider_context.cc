#include "provider/core/provider_context.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/runtime_paths.h"
#include "provider/core/kernel_uverbs.h"

namespace ibemu::provider {

ProviderContext::~ProviderContext() {
  if (has_engine()) shared_qps_.context_closing();
  // The progress thread calls this object's hooks: it stops before any of
  // its members go.
  stop_progress();
  if (async_pipe_[1] >= 0) close(async_pipe_[1]);
  if (kernel_async_fd_ >= 0) close(kernel_async_fd_);
  // async_pipe_[0] belongs to libibverbs (context->async_fd) and is closed there.
}

int ProviderContext::open(const char* ibdev_name, int cmd_fd) noexcept {
  RuntimePaths paths = runtime_paths();
  if (kernel_uverbs::is_kernel_device(cmd_fd)) {
    // A device of ibemu.ko: served by the system's daemon, whoever runs this.
    paths = RuntimePaths{system_runtime_dir()};
    if (int err = kernel_uverbs::get_context(cmd_fd, &kernel_async_fd_)) return err;
    fcntl(kernel_async_fd_, F_SETFL, O_NONBLOCK);
    kernel_cmd_fd_ = cmd_fd;
  }
  if (int err = open_engine(paths, ibdev_name, "provider")) return err;
  if (pipe2(async_pipe_, O_CLOEXEC) != 0) return errno;
  fcntl(async_pipe_[1], F_SETFL, O_NONBLOCK);
  for (int p = 1; p <= num_ports(); ++p) last_ports_[p - 1] = port_view(p);
  start_progress();
  return 0;
}

void ProviderContext::post_async_event(uint64_t element, uint32_t type) noexcept {
  struct {
    uint64_t element;
    uint32_t event_type;
    uint32_t reserved;
  } ev{element, type, 0};
  if (write(async_pipe_[1], &ev, sizeof(ev)) < 0) {
    // A full pipe means nobody reads async events; dropping is what an
    // unread event queue amounts to.
  }
}

void ProviderContext::on_daemon_lost() noexcept { post_async_event(0, IBV_EVENT_DEVICE_FATAL); }

void ProviderContext::on_message(const uint8_t* msg, size_t len) noexcept {
  shared_qps_.receive(msg, len);
}

void ProviderContext::forward_kernel_events() noexcept {
  // ib_uverbs_async_event_desc, the layout post_async_event writes too.
  struct {
    uint64_t element;
    uint32_t event_type;
    uint32_t reserved;
  } ev;
  while (read(kernel_async_fd_, &ev, sizeof(ev)) == static_cast<ssize_t>(sizeof(ev)))
    post_async_event(ev.element, ev.event_type);
}

void ProviderContext::on_scan() noexcept {
  if (kernel_async_fd_ >= 0) {
    forward_kernel_events();
    return;
  }
  for (int p = 1; p <= num_ports(); ++p) {
    PortStateView now = port_view(p);
    PortStateView& was = last_ports_[p - 1];
    const uint8_t active = static_cast<uint8_t>(PortState::kActive);
    if (now.state != was.state) {
      if (now.state == active)
        post_async_event(p, IBV_EVENT_PORT_ACTIVE);
      else if (was.state == active)
        post_async_event(p, IBV_EVENT_PORT_ERR);
    }
    if (now.lid != was.lid && now.state == active) post_async_event(p, IBV_EVENT_LID_CHANGE);
    if (now.sm_lid != was.sm_lid && now.state == active) post_async_event(p, IBV_EVENT_SM_CHANGE);
    if (!std::equal(now.pkeys, now.pkeys + kMaxPkeys, was.pkeys))
      post_async_event(p, IBV_EVENT_PKEY_CHANGE);
    was = now;
  }
}

}  // namespace ibemu::provider
