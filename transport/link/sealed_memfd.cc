#include "transport/link/sealed_memfd.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace ibemu::link {

int create_sealed_memfd(const char* name, size_t bytes) noexcept {
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -errno;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

long sealed_memfd_size(int fd) noexcept {
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return errno == EINVAL ? -EINVAL : -errno;
  if (!(seals & F_SEAL_SHRINK)) return -EINVAL;
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  return static_cast<long>(st.st_size);
}

}  // namespace ibemu::link
