/*
 * ibemu-ctl-fuzz N: writes N malformed or misdirected messages to ibemu.ko's
 * control device (/dev/ibemu) and checks that each one is refused with
 * EINVAL: random bytes of random lengths, every message type with a random
 * body, messages only the module sends, and messages about devices this file
 * never added. It never adds a device. Exits 1 on any other outcome; the
 * kernel's log is the qemu test's to check.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernel/ibemu_abi.h"

static unsigned long long next_random(unsigned long long* state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

static const struct {
  unsigned type;
  size_t size;
} kinds[] = {
    {IBEMU_CTL_ADD_DEVICE, sizeof(struct ibemu_ctl_add_device)},
    {IBEMU_CTL_SET_PORT, sizeof(struct ibemu_ctl_set_port)},
    {IBEMU_CTL_MAD_IN, sizeof(struct ibemu_ctl_mad_in)},
    {IBEMU_CTL_MAD_OUT, sizeof(struct ibemu_ctl_mad_out)},
    {IBEMU_CTL_PROCESS_MAD, sizeof(struct ibemu_ctl_process_mad)},
};

int main(int argc, char** argv) {
  long count = argc > 1 ? atol(argv[1]) : 10000;
  unsigned long long state = 0x9e3779b97f4a7c15ull;
  unsigned char buf[1024];
  long refused = 0;
  int fd = open("/dev/" IBEMU_CTL_DEVICE_NAME, O_RDWR | O_NONBLOCK);
  if (fd < 0) {
    perror("/dev/" IBEMU_CTL_DEVICE_NAME);
    return 1;
  }
  for (long i = 0; i < count; i++) {
    size_t len;
    for (size_t b = 0; b < sizeof(buf); b++) buf[b] = (unsigned char)next_random(&state);
    struct ibemu_ctl_hdr hdr;
    if (i % 3 == 0) {
      len = next_random(&state) % sizeof(buf);
      memcpy(&hdr, buf, sizeof(hdr) < len ? sizeof(hdr) : len);
    } else {
      /* A well-formed header around a random body. ADD_DEVICE keeps a
       * wrong ABI version so that nothing is ever registered; the others
       * name devices this file never added. */
      unsigned k = (unsigned)(next_random(&state) % (sizeof(kinds) / sizeof(kinds[0])));
      len = kinds[k].size;
      hdr.type = (unsigned short)kinds[k].type;
      hdr.length = (unsigned short)len;
      hdr.seq = 0;
      memcpy(buf, &hdr, sizeof(hdr));
      if (hdr.type == IBEMU_CTL_ADD_DEVICE) {
        unsigned abi = IBEMU_CTL_ABI_VERSION + 1 + (unsigned)(next_random(&state) % 1000);
        memcpy(buf + sizeof(hdr), &abi, sizeof(abi));
      }
    }
    ssize_t n = write(fd, buf, len);
    if (n >= 0 || errno != EINVAL) {
      fprintf(stderr, "message %ld (%zu bytes, type %u): %s\n", i, len, len >= 2 ? buf[0] : 0,
              n >= 0 ? "accepted" : strerror(errno));
      return 1;
    }
    refused++;
  }
  /* Nothing was queued for this file, and a short read buffer is refused. */
  if (read(fd, buf, 4) != -1 || (errno != EAGAIN && errno != EINVAL)) {
    fprintf(stderr, "read: unexpected result\n");
    return 1;
  }
  close(fd);
  printf("%ld bad messages refused with EINVAL\n", refused);
  return 0;
}
