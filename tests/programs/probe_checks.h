/* The "ok WHAT" / "FAIL WHAT: DETAIL" lines of the probe programs (one per
 * check, read by their pytests), and the checks they share. Each program
 * returns non-zero when probe_failures is. */
#ifndef IBEMU_TESTS_PROBE_CHECKS_H
#define IBEMU_TESTS_PROBE_CHECKS_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int probe_failures;

static inline void check(int ok, const char* what, const char* detail) {
  if (ok)
    printf("ok %s\n", what);
  else {
    printf("FAIL %s: %s\n", what, detail);
    probe_failures++;
  }
}

/* A NULL result with errno `want`. */
static inline void expect_null(const void* got, int want, const char* what) {
  int err = errno;
  char detail[96];
  snprintf(detail, sizeof detail, "got %p, errno %d (%s), want NULL and errno %d", got, err,
           strerror(err), want);
  check(!got && err == want, what, detail);
}

/* An int result `want`. */
static inline void expect_int(long got, long want, const char* what) {
  char detail[64];
  snprintf(detail, sizeof detail, "got %ld, want %ld", got, want);
  check(got == want, what, detail);
}

#endif
