/*
 * libibemu-preload.so: makes an unmodified rdma-core stack and the ordinary
 * system tools see ibemu's emulated HCAs on a machine whose kernel has no
 * RDMA. See ibemu_shim.h for what it does; this file is how.
 *
 * The shim is loaded into every process started under `ibemu run`, /bin/sh
 * and coreutils included, so it is written to cost nothing where it has
 * nothing to do:
 *   - a path is looked at only when it starts with "/sys/class/infiniband",
 *     "/sys/devices/virtual/ibemu" or "/dev/infiniband"; everything else goes
 *     straight to libc;
 *   - write() and close() do one bounds-checked load from a table of fds;
 *   - no wrapper locks, uses stdio or allocates (beyond what the wrapped
 *     call itself does, e.g. realpath(path, NULL)), so a wrapper is
 *     async-signal-safe whenever the call it wraps is; the real functions
 *     are looked up once, in the constructor.
 */
#define _GNU_SOURCE
/* Fortified inline wrappers and 64-bit-offset renames in the libc headers
 * would turn the definitions below into definitions of other symbols. */
#undef _FORTIFY_SOURCE
#undef _FILE_OFFSET_BITS
#undef _TIME_BITS

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/netlink.h>
#include <rdma/ib_user_verbs.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "ibemu_shim.h"
#include "shim_netlink.h"
#include "shim_umad.h"

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define NOINLINE __attribute__((noinline))

#ifndef NETLINK_RDMA
#define NETLINK_RDMA 20
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* Entry points that current headers no longer (or only under
 * _FORTIFY_SOURCE) declare but that binaries still import. */
int __open_2(const char* path, int flags);
ssize_t __read_chk(int fd, void* buf, size_t nbytes, size_t buflen);
int __open64_2(const char* path, int flags);
int __openat_2(int dirfd, const char* path, int flags);
int __openat64_2(int dirfd, const char* path, int flags);
int __xstat(int ver, const char* path, struct stat* st);
int __xstat64(int ver, const char* path, struct stat64* st);
int __lxstat(int ver, const char* path, struct stat* st);
int __lxstat64(int ver, const char* path, struct stat64* st);
int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags);
int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags);
ssize_t __readlink_chk(const char* path, char* buf, size_t len, size_t buflen);
ssize_t __readlinkat_chk(int dirfd, const char* path, char* buf, size_t len, size_t buflen);
ssize_t __recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags, __SOCKADDR_ARG addr,
                       socklen_t* addrlen);
char* __realpath_chk(const char* path, char* resolved, size_t resolvedlen);

/* ------------------------------------------------------------------------ */
/* The next definition of every wrapped symbol. */

#define FOR_EACH_REAL(X)    \
  X(open)                   \
  X(open64)                 \
  X(__open_2)               \
  X(__open64_2)             \
  X(openat)                 \
  X(openat64)               \
  X(__openat_2)             \
  X(__openat64_2)           \
  X(creat)                  \
  X(creat64)                \
  X(fopen)                  \
  X(fopen64)                \
  X(freopen)                \
  X(freopen64)              \
  X(opendir)                \
  X(scandir)                \
  X(scandir64)              \
  X(scandirat)              \
  X(scandirat64)            \
  X(chdir)                  \
  X(stat)                   \
  X(stat64)                 \
  X(lstat)                  \
  X(lstat64)                \
  X(fstatat)                \
  X(fstatat64)              \
  X(statx)                  \
  X(__xstat)                \
  X(__xstat64)              \
  X(__lxstat)               \
  X(__lxstat64)             \
  X(__fxstatat)             \
  X(__fxstatat64)           \
  X(access)                 \
  X(faccessat)              \
  X(eaccess)                \
  X(euidaccess)             \
  X(readlink)               \
  X(readlinkat)             \
  X(__readlink_chk)         \
  X(__readlinkat_chk)       \
  X(realpath)               \
  X(__realpath_chk)         \
  X(canonicalize_file_name) \
  X(getxattr)               \
  X(lgetxattr)              \
  X(listxattr)              \
  X(llistxattr)             \
  X(write)                  \
  X(read)                   \
  X(__read_chk)             \
  X(ioctl)                  \
  X(close)                  \
  X(close_range)            \
  X(closefrom)              \
  X(dup)                    \
  X(dup2)                   \
  X(dup3)                   \
  X(fcntl)                  \
  X(fcntl64)                \
  X(socket)                 \
  X(bind)                   \
  X(connect)                \
  X(getsockname)            \
  X(getpeername)            \
  X(setsockopt)             \
  X(getsockopt)             \
  X(send)                   \
  X(sendto)                 \
  X(sendmsg)                \
  X(recvfrom)               \
  X(__recvfrom_chk)         \
  X(recvmsg)

#define DECLARE_REAL(name) static _Atomic(void*) real_##name;
FOR_EACH_REAL(DECLARE_REAL)
#undef DECLARE_REAL

static NOINLINE __attribute__((cold)) void* resolve_real(_Atomic(void*)* slot, const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == NULL) {
    /* Only reachable when the program calls a symbol that this libc does not
     * have, i.e. it was linked against another libc; nothing sane to return. */
    static const char msg[] = "libibemu-preload: symbol missing from libc: ";
    syscall(SYS_write, 2, msg, sizeof msg - 1);
    syscall(SYS_write, 2, name, strlen(name));
    syscall(SYS_write, 2, "\n", 1);
    abort();
  }
  atomic_store_explicit(slot, fn, memory_order_relaxed);
  return fn;
}

static inline void* real_fn(_Atomic(void*)* slot, const char* name) {
  void* fn = atomic_load_explicit(slot, memory_order_relaxed);
  return LIKELY(fn != NULL) ? fn : resolve_real(slot, name);
}

#define REAL(name) ((__typeof__(&name))real_fn(&real_##name, #name))

/* ------------------------------------------------------------------------ */
/* Configuration, read once. */

static char g_root[PATH_MAX]; /* $IBEMU_SYSFS, absolute, no trailing '/' */
static size_t g_root_len;
static int g_active;
static atomic_int g_init_state; /* 0: not yet, 1: in progress, 2: done */

static NOINLINE void init_slow(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&g_init_state, &expected, 1)) {
    /* Another thread is initialising; it only reads the environment. */
    while (atomic_load_explicit(&g_init_state, memory_order_acquire) != 2) sched_yield();
    return;
  }
  int saved_errno = errno;
  /* secure_getenv: a set-id program must not be pointed at a sysfs of the
   * caller's choosing. */
  const char* env = secure_getenv("IBEMU_SYSFS");
  if (env != NULL && env[0] != '\0') {
    size_t len = 0;
    /* A relative root would move with every chdir(); pin it now. */
    if (env[0] != '/') {
      if (getcwd(g_root, sizeof g_root) != NULL) {
        len = strlen(g_root);
        if (len > 0 && g_root[len - 1] != '/') g_root[len++] = '/';
      } else {
        len = sizeof g_root; /* fails the length check below */
      }
    }
    size_t env_len = strlen(env);
    if (len + env_len < sizeof g_root) {
      memcpy(g_root + len, env, env_len + 1);
      len += env_len;
      while (len > 0 && g_root[len - 1] == '/') g_root[--len] = '\0';
      g_root_len = len;
      g_active = 1;
    }
  }
  errno = saved_errno;
  atomic_store_explicit(&g_init_state, 2, memory_order_release);
}

static inline int shim_active(void) {
  if (UNLIKELY(atomic_load_explicit(&g_init_state, memory_order_acquire) != 2)) init_slow();
  return g_active;
}

__attribute__((constructor)) static void shim_constructor(void) {
  /* A relative IBEMU_SYSFS is pinned to the directory this process started
   * in, and exported that way so that children started after a chdir()
   * agree. */
  if (shim_active()) {
    const char* env = secure_getenv("IBEMU_SYSFS");
    if (env != NULL && env[0] != '/') setenv("IBEMU_SYSFS", g_root, 1);
  }
  /* Look everything up now so that no wrapper ever calls dlsym() later,
   * possibly inside a signal handler. A symbol this libc lacks stays unset. */
#define RESOLVE(name)                                                              \
  do {                                                                             \
    void* fn = dlsym(RTLD_NEXT, #name);                                            \
    if (fn != NULL) atomic_store_explicit(&real_##name, fn, memory_order_relaxed); \
  } while (0);
  FOR_EACH_REAL(RESOLVE)
#undef RESOLVE
}

EXPORT int ibemu_shim_active(void) { return 1; }

/* ------------------------------------------------------------------------ */
/* Path mapping. */

static const char k_sys_ib[] = "/sys/class/infiniband";
static const char k_dev_ib[] = "/dev/infiniband";
/* Where the class entries' links point (sysfs_tree.cc): a program that
 * resolves a link by hand (readlink, then a path under /sys) lands here. */
static const char k_sys_ibemu_parents[] = "/sys/devices/virtual/ibemu";
#define K_SYS_IB_LEN (sizeof k_sys_ib - 1)
#define K_SYS_IBEMU_PARENTS_LEN (sizeof k_sys_ibemu_parents - 1)
#define K_DEV_IB_LEN (sizeof k_dev_ib - 1)
#define K_SYS_LEN 4 /* "/sys": the tree under $IBEMU_SYSFS holds what lies below it */
#define DEV_NULL "/dev/null"

enum map_kind { MAP_TREE, MAP_UVERBS, MAP_UMAD, MAP_ISSM };

static inline int component_end(char c) { return c == '\0' || c == '/'; }

/* Whether the path names one of the locations that rdma-core and the
 * diagnostics tools hard-code, or the one the class entries link to. Whole
 * components only: /sys/class/infiniband_x and /dev/infinibandx are left
 * alone. */
static inline int wants_map(const char* path) {
  if (path == NULL || path[0] != '/') return 0;
  if (path[1] == 's') {
    if (strncmp(path, k_sys_ib, K_SYS_IB_LEN) != 0)
      return strncmp(path, k_sys_ibemu_parents, K_SYS_IBEMU_PARENTS_LEN) == 0 &&
             component_end(path[K_SYS_IBEMU_PARENTS_LEN]);
    const char* s = path + K_SYS_IB_LEN;
    if (component_end(s[0])) return 1;
    if (strncmp(s, "_verbs", 6) == 0) return component_end(s[6]);
    if (strncmp(s, "_mad", 4) == 0) return component_end(s[4]);
    return 0;
  }
  if (path[1] == 'd')
    return strncmp(path, k_dev_ib, K_DEV_IB_LEN) == 0 && component_end(path[K_DEV_IB_LEN]);
  return 0;
}

/* "uverbs" followed by a decimal number and nothing else. */
static int is_uverbs_name(const char* s) {
  if (strncmp(s, "uverbs", 6) != 0) return 0;
  s += 6;
  int digits = 0;
  for (; *s >= '0' && *s <= '9'; s++)
    if (++digits > 10) return 0;
  return digits > 0 && *s == '\0';
}

/* `prefix` ("umad" or "issm") followed by a decimal number and nothing
 * else: its number or -1. */
static long mad_file_index(const char* s, const char* prefix) {
  if (strncmp(s, prefix, 4) != 0) return -1;
  s += 4;
  long n = 0;
  int digits = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (++digits > 5) return -1;
    n = n * 10 + (*s - '0');
  }
  return digits > 0 && *s == '\0' ? n : -1;
}

int shim_umad_socket_path(unsigned index, char* buf) {
  int n = snprintf(buf, PATH_MAX, "%s/dev/infiniband/umad%u", g_root, index);
  if (n < 0 || n >= PATH_MAX) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

/* Whether the fake tree has class/infiniband_verbs/<name>; buf is scratch. */
static int uverbs_exists(const char* name, char* buf) {
  static const char dir[] = "/class/infiniband_verbs/";
  size_t name_len = strlen(name);
  if (g_root_len + sizeof dir + name_len > PATH_MAX) return 0;
  memcpy(buf, g_root, g_root_len);
  memcpy(buf + g_root_len, dir, sizeof dir - 1);
  memcpy(buf + g_root_len + sizeof dir - 1, name, name_len + 1);
  int saved_errno = errno;
  /* The raw call keeps this away from the wrapped access(). */
  long rc = syscall(SYS_faccessat, AT_FDCWD, buf, F_OK);
  errno = saved_errno;
  return rc == 0;
}

/* Rewrites a path for which wants_map() is true. Returns the path to use
 * (buf, or /dev/null for a uverbs node) or NULL with errno set. */
static const char* map_path(const char* path, char buf[PATH_MAX], enum map_kind* kind) {
  const char* tail;
  enum map_kind mapped = MAP_TREE;
  if (path[1] == 's') {
    tail = path + K_SYS_LEN;
  } else {
    /* $IBEMU_SYSFS/dev/infiniband holds what `ls /dev/infiniband` shows;
     * the uverbs nodes themselves must be character devices. */
    const char* s = path + K_DEV_IB_LEN;
    if (s[0] == '/' && is_uverbs_name(s + 1) && uverbs_exists(s + 1, buf)) {
      if (kind) *kind = MAP_UVERBS;
      return DEV_NULL;
    }
    /* A umad node is the daemon's socket for that port: opening it
     * connects (umad.c); every other call sees the socket itself. */
    if (s[0] == '/' && mad_file_index(s + 1, "umad") >= 0) mapped = MAP_UMAD;
    if (s[0] == '/' && mad_file_index(s + 1, "issm") >= 0) mapped = MAP_ISSM;
    tail = path;
  }
  size_t tail_len = strlen(tail);
  if (g_root_len + tail_len >= PATH_MAX) {
    errno = ENAMETOOLONG;
    return NULL;
  }
  memcpy(buf, g_root, g_root_len);
  memcpy(buf + g_root_len, tail, tail_len + 1);
  if (kind) *kind = mapped;
  return buf;
}

/* Defines a wrapper for a function whose argument `path` may need mapping.
 * The mapping (and its PATH_MAX buffer) lives in a separate function so the
 * common case costs no stack and no more than the prefix test. */
#define PATH_WRAPPER(ret, name, fail, params, args)                         \
  static NOINLINE ret name##_mapped params {                                \
    char buf_[PATH_MAX];                                                    \
    path = map_path(path, buf_, NULL);                                      \
    if (path == NULL) return fail;                                          \
    return REAL(name) args;                                                 \
  }                                                                         \
  EXPORT ret name params {                                                  \
    if (LIKELY(!wants_map(path)) || !shim_active()) return REAL(name) args; \
    return name##_mapped args;                                              \
  }

/* ------------------------------------------------------------------------ */
/* Fds the shim answers for. */

/* Per-fd state: 0 = not ours; FD_UVERBS = an open /dev/infiniband/uverbsN;
 * FD_CHAN_WRITER = the write end the shim keeps for a completion channel;
 * FD_CHAN_READER | writer << 3 = a completion channel handed out;
 * FD_UMAD = an open /dev/infiniband/umadN (umad.c); FD_ISSM = an open
 * /dev/infiniband/issmN, which has no read, write or ioctl; FD_NETLINK = an
 * emulated NETLINK_RDMA socket (netlink_socket.c). */
#define FD_SLOTS SHIM_UMAD_FD_SLOTS
enum {
  FD_NONE = 0,
  FD_UVERBS = 1,
  FD_CHAN_WRITER = 2,
  FD_CHAN_READER = 3,
  FD_UMAD = 4,
  FD_ISSM = 5,
  FD_NETLINK = 6
};
#define FD_KIND(v) ((v)&7u)
#define FD_WRITER_SHIFT 3

static _Atomic uint32_t g_fd_state[FD_SLOTS];
static atomic_uint g_fd_limit; /* one above the highest fd ever tracked */
static _Atomic uint64_t g_null_rdev;

static inline uint32_t fd_state(int fd) {
  return UNLIKELY((unsigned)fd >= FD_SLOTS)
             ? FD_NONE
             : atomic_load_explicit(&g_fd_state[fd], memory_order_relaxed);
}

static void fd_track(int fd, uint32_t state) {
  atomic_store_explicit(&g_fd_state[fd], state, memory_order_relaxed);
  unsigned limit = atomic_load_explicit(&g_fd_limit, memory_order_relaxed);
  while ((unsigned)fd >= limit &&
         !atomic_compare_exchange_weak_explicit(&g_fd_limit, &limit, (unsigned)fd + 1,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* Closes the shim's write end of a channel whose read end rfd (still open) is
 * going away. The fds may have been closed and reused behind the shim's back
 * (fclose, raw syscalls), so only a writer of the very same pipe is closed. */
static void drop_channel_writer(int rfd, int wfd) {
  if (fd_state(wfd) != FD_CHAN_WRITER) return;
  int saved_errno = errno;
  struct stat rs, ws;
  if (fstat(rfd, &rs) == 0 && fstat(wfd, &ws) == 0 && S_ISFIFO(ws.st_mode) &&
      rs.st_ino == ws.st_ino && rs.st_dev == ws.st_dev) {
    uint32_t expected = FD_CHAN_WRITER;
    if (atomic_compare_exchange_strong(&g_fd_state[wfd], &expected, FD_NONE)) REAL(close)(wfd);
  }
  errno = saved_errno;
}

/* The fd is about to be closed or replaced. Cleared before the real call so
 * that an fd number reused by another thread right after is never taken for
 * ours. */
static NOINLINE void fd_forget(int fd) {
  uint32_t v = atomic_exchange_explicit(&g_fd_state[fd], FD_NONE, memory_order_relaxed);
  if (FD_KIND(v) == FD_CHAN_READER) drop_channel_writer(fd, (int)(v >> FD_WRITER_SHIFT));
}

static void fd_forget_range(unsigned first, unsigned last) {
  unsigned limit = atomic_load_explicit(&g_fd_limit, memory_order_relaxed);
  for (unsigned fd = first; fd < limit && fd <= last; fd++)
    if (fd_state((int)fd) != FD_NONE) fd_forget((int)fd);
}

/* A new fd refers to the same open uverbs, umad or issm file, or netlink
 * socket, as oldfd. */
static int fd_inherit(int oldfd, int newfd) {
  const uint32_t state = fd_state(oldfd);
  if (newfd < 0 ||
      (state != FD_UVERBS && state != FD_UMAD && state != FD_ISSM && state != FD_NETLINK))
    return newfd;
  if ((unsigned)newfd >= FD_SLOTS) {
    REAL(close)(newfd);
    errno = EMFILE;
    return -1;
  }
  if (state == FD_UMAD) shim_umad_inherit(oldfd, newfd);
  if (state == FD_NETLINK) shim_nl_inherit(oldfd, newfd);
  fd_track(newfd, state);
  return newfd;
}

/* ------------------------------------------------------------------------ */
/* open() and friends. */

#define NEEDS_MODE(flags) (((flags)&O_CREAT) != 0 || ((flags)&O_TMPFILE) == O_TMPFILE)

#define GET_MODE(flags, last, mode) \
  do {                              \
    if (NEEDS_MODE(flags)) {        \
      va_list ap;                   \
      va_start(ap, last);           \
      mode = va_arg(ap, mode_t);    \
      va_end(ap);                   \
    }                               \
  } while (0)

static NOINLINE int open_mapped(const char* path, int flags, mode_t mode) {
  char buf[PATH_MAX];
  enum map_kind kind;
  const char* p = map_path(path, buf, &kind);
  if (p == NULL) return -1;
  if (kind == MAP_UMAD || kind == MAP_ISSM) {
    const char* name = strrchr(path, '/') + 1;
    int fd = kind == MAP_UMAD ? shim_umad_open((unsigned)mad_file_index(name, "umad"), flags)
                              : shim_issm_open((unsigned)mad_file_index(name, "issm"), flags);
    if (fd >= 0) fd_track(fd, kind == MAP_UMAD ? FD_UMAD : FD_ISSM);
    return fd;
  }
  /* p is absolute, so openat(AT_FDCWD) serves every variant. */
  int fd = REAL(openat)(AT_FDCWD, p, flags, mode);
  if (fd < 0 || kind != MAP_UVERBS) return fd;
  if ((unsigned)fd >= FD_SLOTS) {
    REAL(close)(fd);
    errno = EMFILE;
    return -1;
  }
  struct stat st;
  if (atomic_load_explicit(&g_null_rdev, memory_order_relaxed) == 0 && fstat(fd, &st) == 0)
    atomic_store_explicit(&g_null_rdev, st.st_rdev, memory_order_relaxed);
  fd_track(fd, FD_UVERBS);
  return fd;
}

#define OPEN_WRAPPER(name)                                                                \
  EXPORT int name(const char* path, int flags, ...) {                                     \
    mode_t mode = 0;                                                                      \
    GET_MODE(flags, flags, mode);                                                         \
    if (LIKELY(!wants_map(path)) || !shim_active()) return REAL(name)(path, flags, mode); \
    return open_mapped(path, flags, mode);                                                \
  }
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)

#define OPENAT_WRAPPER(name)                                                                     \
  EXPORT int name(int dirfd, const char* path, int flags, ...) {                                 \
    mode_t mode = 0;                                                                             \
    GET_MODE(flags, flags, mode);                                                                \
    if (LIKELY(!wants_map(path)) || !shim_active()) return REAL(name)(dirfd, path, flags, mode); \
    return open_mapped(path, flags, mode);                                                       \
  }
OPENAT_WRAPPER(openat)
OPENAT_WRAPPER(openat64)

/* The _FORTIFY_SOURCE entry points: open without a mode argument. */
#define OPEN2_WRAPPER(name)                                                         \
  EXPORT int name(const char* path, int flags) {                                    \
    if (LIKELY(!wants_map(path)) || !shim_active()) return REAL(name)(path, flags); \
    return open_mapped(path, flags, 0);                                             \
  }
OPEN2_WRAPPER(__open_2)
OPEN2_WRAPPER(__open64_2)

#define OPENAT2_WRAPPER(name)                                                              \
  EXPORT int name(int dirfd, const char* path, int flags) {                                \
    if (LIKELY(!wants_map(path)) || !shim_active()) return REAL(name)(dirfd, path, flags); \
    return open_mapped(path, flags, 0);                                                    \
  }
OPENAT2_WRAPPER(__openat_2)
OPENAT2_WRAPPER(__openat64_2)

PATH_WRAPPER(int, creat, -1, (const char* path, mode_t mode), (path, mode))
PATH_WRAPPER(int, creat64, -1, (const char* path, mode_t mode), (path, mode))

/* A stream on a uverbs node is /dev/null and not tracked: stdio writes go
 * through libc-internal calls the shim cannot see, and rdma-core never
 * does this. */
PATH_WRAPPER(FILE*, fopen, NULL, (const char* path, const char* mode), (path, mode))
PATH_WRAPPER(FILE*, fopen64, NULL, (const char* path, const char* mode), (path, mode))
PATH_WRAPPER(FILE*, freopen, NULL, (const char* path, const char* mode, FILE* stream),
             (path, mode, stream))
PATH_WRAPPER(FILE*, freopen64, NULL, (const char* path, const char* mode, FILE* stream),
             (path, mode, stream))

/* ------------------------------------------------------------------------ */
/* Directories. libc's scandir() opens the directory internally, so it must
 * be wrapped itself; the same goes for every function below. */

PATH_WRAPPER(DIR*, opendir, NULL, (const char* path), (path))
PATH_WRAPPER(int, scandir, -1,
             (const char* path, struct dirent*** list, int (*filter)(const struct dirent*),
              int (*compar)(const struct dirent**, const struct dirent**)),
             (path, list, filter, compar))
PATH_WRAPPER(int, scandir64, -1,
             (const char* path, struct dirent64*** list, int (*filter)(const struct dirent64*),
              int (*compar)(const struct dirent64**, const struct dirent64**)),
             (path, list, filter, compar))
PATH_WRAPPER(int, scandirat, -1,
             (int dirfd, const char* path, struct dirent*** list,
              int (*filter)(const struct dirent*),
              int (*compar)(const struct dirent**, const struct dirent**)),
             (dirfd, path, list, filter, compar))
PATH_WRAPPER(int, scandirat64, -1,
             (int dirfd, const char* path, struct dirent64*** list,
              int (*filter)(const struct dirent64*),
              int (*compar)(const struct dirent64**, const struct dirent64**)),
             (dirfd, path, list, filter, compar))
/* After a redirected chdir the real cwd is inside the fake tree, so relative
 * paths (`cd /sys/class/infiniband; cat fake0/node_guid`) need no mapping. */
PATH_WRAPPER(int, chdir, -1, (const char* path), (path))

/* ------------------------------------------------------------------------ */
/* stat() family: a uverbs node reports /dev/null's stat, a character device.
 * The fake sysfs `dev` file reads 0:0, so libibverbs does not compare
 * st_rdev. */

PATH_WRAPPER(int, stat, -1, (const char* path, struct stat* st), (path, st))
PATH_WRAPPER(int, stat64, -1, (const char* path, struct stat64* st), (path, st))
PATH_WRAPPER(int, lstat, -1, (const char* path, struct stat* st), (path, st))
PATH_WRAPPER(int, lstat64, -1, (const char* path, struct stat64* st), (path, st))
PATH_WRAPPER(int, fstatat, -1, (int dirfd, const char* path, struct stat* st, int flags),
             (dirfd, path, st, flags))
PATH_WRAPPER(int, fstatat64, -1, (int dirfd, const char* path, struct stat64* st, int flags),
             (dirfd, path, st, flags))
PATH_WRAPPER(int, statx, -1,
             (int dirfd, const char* path, int flags, unsigned int mask, struct statx* stx),
             (dirfd, path, flags, mask, stx))
/* Binaries built against glibc < 2.33 call these instead of stat(). */
PATH_WRAPPER(int, __xstat, -1, (int ver, const char* path, struct stat* st), (ver, path, st))
PATH_WRAPPER(int, __xstat64, -1, (int ver, const char* path, struct stat64* st), (ver, path, st))
PATH_WRAPPER(int, __lxstat, -1, (int ver, const char* path, struct stat* st), (ver, path, st))
PATH_WRAPPER(int, __lxstat64, -1, (int ver, const char* path, struct stat64* st), (ver, path, st))
PATH_WRAPPER(int, __fxstatat, -1,
             (int ver, int dirfd, const char* path, struct stat* st, int flags),
             (ver, dirfd, path, st, flags))
PATH_WRAPPER(int, __fxstatat64, -1,
             (int ver, int dirfd, const char* path, struct stat64* st, int flags),
             (ver, dirfd, path, st, flags))

PATH_WRAPPER(int, access, -1, (const char* path, int mode), (path, mode))
PATH_WRAPPER(int, faccessat, -1, (int dirfd, const char* path, int mode, int flags),
             (dirfd, path, mode, flags))
PATH_WRAPPER(int, eaccess, -1, (const char* path, int mode), (path, mode))
PATH_WRAPPER(int, euidaccess, -1, (const char* path, int mode), (path, mode))

/* Real sysfs class entries are symlinks; whatever the fake tree holds is
 * reported as is. A uverbs node reads as /dev/null does: not a link. */
PATH_WRAPPER(ssize_t, readlink, -1, (const char* path, char* buf, size_t len), (path, buf, len))
PATH_WRAPPER(ssize_t, readlinkat, -1, (int dirfd, const char* path, char* buf, size_t len),
             (dirfd, path, buf, len))
PATH_WRAPPER(ssize_t, __readlink_chk, -1, (const char* path, char* buf, size_t len, size_t buflen),
             (path, buf, len, buflen))
PATH_WRAPPER(ssize_t, __readlinkat_chk, -1,
             (int dirfd, const char* path, char* buf, size_t len, size_t buflen),
             (dirfd, path, buf, len, buflen))

/* `ls -l` asks for ACLs and security labels. */
PATH_WRAPPER(ssize_t, getxattr, -1, (const char* path, const char* name, void* value, size_t size),
             (path, name, value, size))
PATH_WRAPPER(ssize_t, lgetxattr, -1, (const char* path, const char* name, void* value, size_t size),
             (path, name, value, size))
PATH_WRAPPER(ssize_t, listxattr, -1, (const char* path, char* list, size_t size),
             (path, list, size))
PATH_WRAPPER(ssize_t, llistxattr, -1, (const char* path, char* list, size_t size),
             (path, list, size))

/* ------------------------------------------------------------------------ */
/* realpath(): libc resolves with internal calls, so the path is mapped up
 * front. The result names the fake tree, which stays usable for any later
 * call. A uverbs node resolves to itself (it is not a link). */

static char* uverbs_realpath(const char* path, char* resolved) {
  size_t len = strlen(path);
  if (resolved == NULL) {
    resolved = malloc(len + 1);
    if (resolved == NULL) return NULL;
  }
  memcpy(resolved, path, len + 1);
  return resolved;
}

static NOINLINE char* realpath_mapped(const char* path, char* resolved, size_t resolvedlen,
                                      int checked) {
  char buf[PATH_MAX];
  enum map_kind kind;
  const char* p = map_path(path, buf, &kind);
  if (p == NULL) return NULL;
  if (kind == MAP_UVERBS && (!checked || resolved == NULL || resolvedlen >= PATH_MAX))
    return uverbs_realpath(path, resolved);
  if (checked) return REAL(__realpath_chk)(p, resolved, resolvedlen);
  return REAL(realpath)(p, resolved);
}

EXPORT char* realpath(const char* path, char* resolved) {
  if (LIKELY(!wants_map(path)) || !shim_active()) return REAL(realpath)(path, resolved);
  return realpath_mapped(path, resolved, 0, 0);
}

EXPORT char* __realpath_chk(const char* path, char* resolved, size_t resolvedlen) {
  if (LIKELY(!wants_map(path)) || !shim_active())
    return REAL(__realpath_chk)(path, resolved, resolvedlen);
  return realpath_mapped(path, resolved, resolvedlen, 1);
}

EXPORT char* canonicalize_file_name(const char* path) {
  if (LIKELY(!wants_map(path)) || !shim_active()) return REAL(canonicalize_file_name)(path);
  return realpath_mapped(path, NULL, 0, 0);
}

/* ------------------------------------------------------------------------ */
/* Commands written to a uverbs fd. libibverbs falls back to write() because
 * ioctl() on /dev/null fails with ENOTTY. The provider implements every verb
 * itself except creating a completion channel, which libibverbs does by
 * writing a command to cmd_fd directly. */

/* The read end of a pipe serves as the channel: ibv_get_cq_event() reads
 * one 8-byte event from it and the provider writes events through a writer
 * it opens on /proc/self/fd/<fd>. The shim keeps a write end of its own for
 * as long as the channel is open, because a pipe with no writer at all reads
 * as end-of-file and polls as POLLHUP, which no kernel channel ever does. */
static int create_comp_channel(void) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  if ((unsigned)p[0] >= FD_SLOTS || (unsigned)p[1] >= FD_SLOTS) {
    REAL(close)(p[0]);
    REAL(close)(p[1]);
    errno = EMFILE;
    return -1;
  }
  fd_track(p[1], FD_CHAN_WRITER);
  fd_track(p[0], FD_CHAN_READER | (uint32_t)p[1] << FD_WRITER_SHIFT);
  return p[0];
}

static NOINLINE ssize_t uverbs_write(int fd, const void* buf, size_t count) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) ||
      st.st_rdev != atomic_load_explicit(&g_null_rdev, memory_order_relaxed)) {
    /* Closed behind the shim's back and the number reused by something
     * else: not ours any more. */
    uint32_t expected = FD_UVERBS;
    atomic_compare_exchange_strong(&g_fd_state[fd], &expected, FD_NONE);
    return REAL(write)(fd, buf, count);
  }

  /* The same checks, in the same order, as the kernel's write() handler. */
  struct ib_uverbs_cmd_hdr hdr;
  if (buf == NULL || count < sizeof hdr) {
    errno = EINVAL;
    return -1;
  }
  memcpy(&hdr, buf, sizeof hdr);
  if (hdr.command != IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL) {
    errno = ENOSYS;
    return -1;
  }
  struct ib_uverbs_create_comp_channel cmd;
  struct ib_uverbs_create_comp_channel_resp resp;
  if ((size_t)hdr.in_words * 4 != count) {
    errno = EINVAL;
    return -1;
  }
  if (count < sizeof hdr + sizeof cmd || (size_t)hdr.out_words * 4 < sizeof resp) {
    errno = ENOSPC;
    return -1;
  }
  memcpy(&cmd, (const char*)buf + sizeof hdr, sizeof cmd);
  if (cmd.response == 0) {
    errno = EFAULT;
    return -1;
  }
  int chan = create_comp_channel();
  if (chan < 0) return -1;
  memset(&resp, 0, sizeof resp);
  resp.fd = (__u32)chan;
  memcpy((void*)(uintptr_t)cmd.response, &resp, sizeof resp);
  return (ssize_t)count;
}

/* The kernel's issm file has no read, write or ioctl: EINVAL for each. */
static NOINLINE int issm_refuses(void) {
  errno = EINVAL;
  return -1;
}

static inline int is_netlink_fd(int fd);
static ssize_t netlink_send(int fd, const void* buf, size_t len, const struct sockaddr* to,
                            socklen_t to_len);

EXPORT ssize_t write(int fd, const void* buf, size_t count) {
  if (UNLIKELY(fd_state(fd) != FD_NONE)) {
    if (fd_state(fd) == FD_UVERBS) return uverbs_write(fd, buf, count);
    if (fd_state(fd) == FD_UMAD) return shim_umad_write(fd, buf, count);
    if (fd_state(fd) == FD_ISSM) return issm_refuses();
    if (is_netlink_fd(fd)) return netlink_send(fd, buf, count, NULL, 0);
  }
  return REAL(write)(fd, buf, count);
}

EXPORT ssize_t read(int fd, void* buf, size_t count) {
  if (UNLIKELY(fd_state(fd) == FD_UMAD)) return shim_umad_read(fd, buf, count);
  if (UNLIKELY(fd_state(fd) == FD_ISSM)) return issm_refuses();
  return REAL(read)(fd, buf, count);
}

EXPORT ssize_t __read_chk(int fd, void* buf, size_t count, size_t buflen) {
  if (UNLIKELY(fd_state(fd) == FD_UMAD) && count <= buflen) return shim_umad_read(fd, buf, count);
  if (UNLIKELY(fd_state(fd) == FD_ISSM)) return issm_refuses();
  return REAL(__read_chk)(fd, buf, count, buflen);
}

/* The argument of every ioctl the shim answers is a pointer (or absent);
 * for the others it is forwarded the way libc itself fetches it. */
EXPORT int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (UNLIKELY(fd_state(fd) == FD_UMAD)) return shim_umad_ioctl(fd, request, arg);
  if (UNLIKELY(fd_state(fd) == FD_ISSM)) return issm_refuses();
  return REAL(ioctl)(fd, request, arg);
}

/* ------------------------------------------------------------------------ */
/* Keeping the fd table true: every way an fd is closed, replaced or
 * duplicated that a program reaches through libc's exports. */

EXPORT int close(int fd) {
  if (UNLIKELY(fd_state(fd) != FD_NONE)) fd_forget(fd);
  return REAL(close)(fd);
}

EXPORT int close_range(unsigned int first, unsigned int last, int flags) {
  if (!((unsigned)flags & CLOSE_RANGE_CLOEXEC)) fd_forget_range(first, last);
  return REAL(close_range)(first, last, flags);
}

EXPORT void closefrom(int lowfd) {
  if (lowfd >= 0) fd_forget_range((unsigned)lowfd, UINT_MAX);
  REAL(closefrom)(lowfd);
}

EXPORT int dup(int oldfd) {
  int fd = REAL(dup)(oldfd);
  return UNLIKELY(fd_state(oldfd) != FD_NONE) ? fd_inherit(oldfd, fd) : fd;
}

/* newfd is closed by a successful dup2/dup3; forget it first unless the call
 * is bound to fail on oldfd (then newfd stays open and stays ours). */
static void before_dup_over(int oldfd, int newfd) {
  if (oldfd == newfd || fd_state(newfd) == FD_NONE) return;
  int saved_errno = errno;
  int valid = REAL(fcntl)(oldfd, F_GETFD) >= 0;
  errno = saved_errno;
  if (valid) fd_forget(newfd);
}

EXPORT int dup2(int oldfd, int newfd) {
  before_dup_over(oldfd, newfd);
  int fd = REAL(dup2)(oldfd, newfd);
  return oldfd != newfd ? fd_inherit(oldfd, fd) : fd;
}

EXPORT int dup3(int oldfd, int newfd, int flags) {
  before_dup_over(oldfd, newfd);
  return fd_inherit(oldfd, REAL(dup3)(oldfd, newfd, flags));
}

/* fcntl's third argument is an int, a pointer or absent; libc itself fetches
 * it as a pointer-sized value, so forwarding it that way is exact. */
#define FCNTL_WRAPPER(name)                                                              \
  EXPORT int name(int fd, int cmd, ...) {                                                \
    va_list ap;                                                                          \
    va_start(ap, cmd);                                                                   \
    void* arg = va_arg(ap, void*);                                                       \
    va_end(ap);                                                                          \
    int ret = REAL(name)(fd, cmd, arg);                                                  \
    if (UNLIKELY(fd_state(fd) != FD_NONE) && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) \
      ret = fd_inherit(fd, ret);                                                         \
    return ret;                                                                          \
  }
FCNTL_WRAPPER(fcntl)
FCNTL_WRAPPER(fcntl64)

/* ------------------------------------------------------------------------ */
/* Netlink. libibverbs asks the kernel for RDMA devices over NETLINK_RDMA
 * (through libnl), iproute2's `rdma` tool knows no other way; a kernel
 * without RDMA has no such family. The shim answers for its devices
 * (shim_netlink.h); the calls below are the socket calls a netlink program
 * makes, and each costs one table load on any other fd. */

/* Whether fd is an emulated netlink socket; one closed behind the shim's
 * back (raw syscalls) and its number reused is forgotten. */
static NOINLINE int netlink_fd_still_ours(int fd) {
  if (shim_nl_is_ours(fd)) return 1;
  uint32_t expected = FD_NETLINK;
  atomic_compare_exchange_strong(&g_fd_state[fd], &expected, FD_NONE);
  return 0;
}

static inline int is_netlink_fd(int fd) {
  return UNLIKELY(fd_state(fd) == FD_NETLINK) && netlink_fd_still_ours(fd);
}

EXPORT int socket(int domain, int type, int protocol) {
  if (UNLIKELY(domain == AF_NETLINK && protocol == NETLINK_RDMA) && shim_active()) {
    int fd = shim_nl_socket(type);
    if (fd >= 0) fd_track(fd, FD_NETLINK);
    return fd;
  }
  return REAL(socket)(domain, type, protocol);
}

/* <sys/socket.h> spells the address arguments as transparent unions under
 * _GNU_SOURCE; the wrappers take them the same way. */
EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len) {
  if (is_netlink_fd(fd)) return shim_nl_bind(fd, addr.__sockaddr__, len);
  return REAL(bind)(fd, addr, len);
}

EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len) {
  if (is_netlink_fd(fd)) return shim_nl_connect(fd, addr.__sockaddr__, len);
  return REAL(connect)(fd, addr, len);
}

EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t* len) {
  if (is_netlink_fd(fd)) return shim_nl_getsockname(fd, addr.__sockaddr__, len);
  return REAL(getsockname)(fd, addr, len);
}

EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t* len) {
  if (is_netlink_fd(fd)) return shim_nl_getpeername(fd, addr.__sockaddr__, len);
  return REAL(getpeername)(fd, addr, len);
}

EXPORT int setsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  if (is_netlink_fd(fd)) return shim_nl_setsockopt(fd, level, name, value, len);
  return REAL(setsockopt)(fd, level, name, value, len);
}

EXPORT int getsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  if (is_netlink_fd(fd)) return shim_nl_getsockopt(fd, level, name, value, len);
  return REAL(getsockopt)(fd, level, name, value, len);
}

static NOINLINE ssize_t netlink_send(int fd, const void* buf, size_t len, const struct sockaddr* to,
                                     socklen_t to_len) {
  struct iovec iov = {.iov_base = (void*)buf, .iov_len = len};
  struct msghdr msg = {
      .msg_name = (void*)to, .msg_namelen = to_len, .msg_iov = &iov, .msg_iovlen = 1};
  return shim_nl_sendmsg(g_root, fd, &msg);
}

EXPORT ssize_t send(int fd, const void* buf, size_t len, int flags) {
  if (is_netlink_fd(fd)) return netlink_send(fd, buf, len, NULL, 0);
  return REAL(send)(fd, buf, len, flags);
}

EXPORT ssize_t sendto(int fd, const void* buf, size_t len, int flags, __CONST_SOCKADDR_ARG to,
                      socklen_t to_len) {
  if (is_netlink_fd(fd)) return netlink_send(fd, buf, len, to.__sockaddr__, to_len);
  return REAL(sendto)(fd, buf, len, flags, to, to_len);
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  if (is_netlink_fd(fd)) return shim_nl_sendmsg(g_root, fd, msg);
  return REAL(sendmsg)(fd, msg, flags);
}

EXPORT ssize_t recvmsg(int fd, struct msghdr* msg, int flags) {
  if (is_netlink_fd(fd)) return shim_nl_recvmsg(fd, msg, flags);
  return REAL(recvmsg)(fd, msg, flags);
}

static NOINLINE ssize_t netlink_recvfrom(int fd, void* buf, size_t len, int flags,
                                         struct sockaddr* from, socklen_t* from_len) {
  struct iovec iov = {.iov_base = buf, .iov_len = len};
  struct msghdr msg = {.msg_name = from_len != NULL ? from : NULL,
                       .msg_namelen = from_len != NULL ? *from_len : 0,
                       .msg_iov = &iov,
                       .msg_iovlen = 1};
  ssize_t n = shim_nl_recvmsg(fd, &msg, flags);
  if (n >= 0 && from_len != NULL) *from_len = msg.msg_namelen;
  return n;
}

EXPORT ssize_t recvfrom(int fd, void* buf, size_t len, int flags, __SOCKADDR_ARG from,
                        socklen_t* from_len) {
  if (is_netlink_fd(fd)) return netlink_recvfrom(fd, buf, len, flags, from.__sockaddr__, from_len);
  return REAL(recvfrom)(fd, buf, len, flags, from, from_len);
}

EXPORT ssize_t __recvfrom_chk(int fd, void* buf, size_t len, size_t buflen, int flags,
                              __SOCKADDR_ARG from, socklen_t* from_len) {
  if (is_netlink_fd(fd) && len <= buflen)
    return netlink_recvfrom(fd, buf, len, flags, from.__sockaddr__, from_len);
  return REAL(__recvfrom_chk)(fd, buf, len, buflen, flags, from, from_len);
}
