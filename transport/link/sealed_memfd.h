#pragma once
// Shared memory that another process maps: a memfd whose size is sealed.
//
// A process that maps memory it does not own must not fault on it. If the
// owner could shrink the file later, every access past the new end would
// raise SIGBUS in the reader (the daemon, or another program writing into an
// inbox). So creators seal the size, and those who map check the seal
// before they trust the size they see.
#include <cstddef>

namespace ibemu::link {

/// A new memfd of `bytes`, zero-filled, whose size can no longer change.
/// Returns the fd, or -errno.
int create_sealed_memfd(const char* name, size_t bytes) noexcept;

/// The size of a memfd someone else created, provided it is sealed against
/// shrinking; -EINVAL when it is not (or not a memfd), else -errno.
long sealed_memfd_size(int fd) noexcept;

}  // namespace ibemu::link
