// fault_shim: an LD_PRELOAD library that counts, and fails on request, the file system calls a
// real process makes on paths under one directory: every write, fsync/fdatasync and rename (and
// read, when asked). Writes through stdio count too: glibc's fwrite, fflush and fclose reach the
// kernel by internal calls that no preload sees, so the stream calls themselves are the points
// (an fwrite is a "write"; an fflush or fclose with buffered bytes is a "flush"). It lets a test enumerate the failure points of a durable operation run by
// the real `switchyard` binary (a checkpoint save through HDF5, a conversion, tune-io's files)
// and fail each in turn, as tests/reliability/failure_points.h does for the store's own file
// system layer. The process itself is not changed.
//
// Environment:
//   SY_FAULT_PATH     only paths containing this substring are watched (unset: the shim is idle)
//   SY_FAULT_OPS      comma-separated subset of read,write,sync,rename (default write,sync,rename)
//   SY_FAULT_JOURNAL  append "<n> <op> <path>" for every watched call to this file
//   SY_FAULT_AT       fail the n-th watched call (1-based; unset or 0: fail nothing)
//   SY_FAULT_KIND     EIO, ENOSPC (the call returns -1 with that errno; a stream call returns its
//                     failure value, and an fclose still closes), crash (SIGKILL before the
//                     call), torn (a write stores its first half, then SIGKILL), or SIGINT /
//                     SIGTERM (that signal sent to the process before the call, as a user or a
//                     scheduler would: its handlers run, and the call goes ahead if it lives)
//
// Thread-safety: the call counter is atomic; the fd table is a fixed array of atomics.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { kMaxFd = 65536, kNamedFds = 1024, kPathMax = 4096 };

static atomic_int watched_fd[kMaxFd];  // 1 when the fd is open on a watched path
static atomic_long calls;
static const char* watch_path;
static long fail_at;
static int fail_errno;
static int fail_crash;
static int fail_torn;
static int fail_signal;
static int ops_read, ops_write = 1, ops_sync = 1, ops_rename = 1;
static int journal_fd = -1;
static char fd_paths[kNamedFds][256];  // the watched paths of fds below kNamedFds, for the journal

__attribute__((constructor)) static void Init(void) {
  watch_path = getenv("SY_FAULT_PATH");
  if (watch_path != NULL && watch_path[0] == '\0') watch_path = NULL;
  const char* at = getenv("SY_FAULT_AT");
  fail_at = at != NULL ? atol(at) : 0;
  const char* kind = getenv("SY_FAULT_KIND");
  if (kind == NULL || strcmp(kind, "EIO") == 0)
    fail_errno = EIO;
  else if (strcmp(kind, "ENOSPC") == 0)
    fail_errno = ENOSPC;
  else if (strcmp(kind, "crash") == 0)
    fail_crash = 1;
  else if (strcmp(kind, "torn") == 0)
    fail_torn = 1;
  else if (strcmp(kind, "SIGINT") == 0)
    fail_signal = SIGINT;
  else if (strcmp(kind, "SIGTERM") == 0)
    fail_signal = SIGTERM;
  const char* ops = getenv("SY_FAULT_OPS");
  if (ops != NULL) {
    ops_read = strstr(ops, "read") != NULL;
    ops_write = strstr(ops, "write") != NULL;
    ops_sync = strstr(ops, "sync") != NULL;
    ops_rename = strstr(ops, "rename") != NULL;
  }
  const char* journal = getenv("SY_FAULT_JOURNAL");
  if (journal != NULL && watch_path != NULL) {
    journal_fd = (int)syscall(SYS_openat, AT_FDCWD, journal, O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
}

static int Watched(const char* path) {
  return watch_path != NULL && path != NULL && strstr(path, watch_path) != NULL;
}

static void Journal(long n, const char* op, const char* path) {
  if (journal_fd < 0) return;
  char line[kPathMax + 64];
  int len = snprintf(line, sizeof(line), "%ld %s %s\n", n, op, path != NULL ? path : "?");
  if (len > 0) (void)syscall(SYS_write, journal_fd, line, (size_t)len);
}

static const char* FdPath(int fd) { return fd >= 0 && fd < kNamedFds ? fd_paths[fd] : "(fd)"; }

// 0: go ahead; 1: fail with errno (already set); 2: torn write (store a prefix, then die).
static int Decide(const char* op, const char* path) {
  long n = atomic_fetch_add(&calls, 1) + 1;
  Journal(n, op, path);
  if (n != fail_at) return 0;
  if (fail_signal) {
    kill(getpid(), fail_signal);
    return 0;
  }
  if (fail_crash) kill(getpid(), SIGKILL);
  if (fail_torn) {
    if (strcmp(op, "write") == 0) return 2;
    kill(getpid(), SIGKILL);
  }
  errno = fail_errno;
  return 1;
}

static void Track(int fd, const char* path) {
  if (fd < 0 || fd >= kMaxFd) return;
  int watched = Watched(path);
  atomic_store(&watched_fd[fd], watched);
  if (watched && fd < kNamedFds) {
    strncpy(fd_paths[fd], path, sizeof(fd_paths[fd]) - 1);
    fd_paths[fd][sizeof(fd_paths[fd]) - 1] = '\0';
  }
}

static int IsWatched(int fd) { return fd >= 0 && fd < kMaxFd && atomic_load(&watched_fd[fd]); }

#define REAL(name, ret, ...)              \
  static ret (*real_##name)(__VA_ARGS__); \
  if (real_##name == NULL) real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

static mode_t ModeArg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  REAL(open, int, const char*, int, ...);
  int fd = real_open(path, flags, mode);
  Track(fd, path);
  return fd;
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  REAL(open64, int, const char*, int, ...);
  int fd = real_open64(path, flags, mode);
  Track(fd, path);
  return fd;
}

int openat(int dir, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  REAL(openat, int, int, const char*, int, ...);
  int fd = real_openat(dir, path, flags, mode);
  Track(fd, path);
  return fd;
}

int openat64(int dir, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  REAL(openat64, int, int, const char*, int, ...);
  int fd = real_openat64(dir, path, flags, mode);
  Track(fd, path);
  return fd;
}

int close(int fd) {
  REAL(close, int, int);
  if (fd >= 0 && fd < kMaxFd) atomic_store(&watched_fd[fd], 0);
  return real_close(fd);
}

#define WRITE_CALL(call_expr, half_expr)        \
  if (ops_write && IsWatched(fd)) {             \
    int decision = Decide("write", FdPath(fd)); \
    if (decision == 1) return -1;               \
    if (decision == 2) {                        \
      (void)(half_expr);                        \
      kill(getpid(), SIGKILL);                  \
    }                                           \
  }                                             \
  return call_expr

ssize_t write(int fd, const void* buf, size_t n) {
  REAL(write, ssize_t, int, const void*, size_t);
  WRITE_CALL(real_write(fd, buf, n), real_write(fd, buf, n / 2));
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) {
  REAL(pwrite, ssize_t, int, const void*, size_t, off_t);
  WRITE_CALL(real_pwrite(fd, buf, n, offset), real_pwrite(fd, buf, n / 2, offset));
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t offset) {
  REAL(pwrite64, ssize_t, int, const void*, size_t, off_t);
  WRITE_CALL(real_pwrite64(fd, buf, n, offset), real_pwrite64(fd, buf, n / 2, offset));
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  REAL(writev, ssize_t, int, const struct iovec*, int);
  WRITE_CALL(real_writev(fd, iov, count), real_writev(fd, iov, count > 1 ? count / 2 : count));
}

ssize_t pwritev(int fd, const struct iovec* iov, int count, off_t offset) {
  REAL(pwritev, ssize_t, int, const struct iovec*, int, off_t);
  WRITE_CALL(real_pwritev(fd, iov, count, offset),
             real_pwritev(fd, iov, count > 1 ? count / 2 : count, offset));
}

#define READ_CALL(call_expr)                                                   \
  if (ops_read && IsWatched(fd) && Decide("read", FdPath(fd)) != 0) return -1; \
  return call_expr

ssize_t read(int fd, void* buf, size_t n) {
  REAL(read, ssize_t, int, void*, size_t);
  READ_CALL(real_read(fd, buf, n));
}

ssize_t pread(int fd, void* buf, size_t n, off_t offset) {
  REAL(pread, ssize_t, int, void*, size_t, off_t);
  READ_CALL(real_pread(fd, buf, n, offset));
}

ssize_t pread64(int fd, void* buf, size_t n, off_t offset) {
  REAL(pread64, ssize_t, int, void*, size_t, off_t);
  READ_CALL(real_pread64(fd, buf, n, offset));
}

int fsync(int fd) {
  REAL(fsync, int, int);
  if (ops_sync && IsWatched(fd) && Decide("sync", FdPath(fd)) != 0) return -1;
  return real_fsync(fd);
}

int fdatasync(int fd) {
  REAL(fdatasync, int, int);
  if (ops_sync && IsWatched(fd) && Decide("sync", FdPath(fd)) != 0) return -1;
  return real_fdatasync(fd);
}

int rename(const char* from, const char* to) {
  REAL(rename, int, const char*, const char*);
  if (ops_rename && (Watched(from) || Watched(to)) && Decide("rename", from) != 0) return -1;
  return real_rename(from, to);
}

int renameat(int from_dir, const char* from, int to_dir, const char* to) {
  REAL(renameat, int, int, const char*, int, const char*);
  if (ops_rename && (Watched(from) || Watched(to)) && Decide("rename", from) != 0) return -1;
  return real_renameat(from_dir, from, to_dir, to);
}

// Streams (fopen'd files). glibc opens them with an internal open, so they are tracked here.
static FILE* TrackStream(FILE* f, const char* path) {
  if (f != NULL) Track(fileno(f), path);
  return f;
}

static int IsWatchedStream(FILE* f) { return f != NULL && IsWatched(fileno(f)); }

FILE* fopen(const char* path, const char* mode) {
  REAL(fopen, FILE*, const char*, const char*);
  return TrackStream(real_fopen(path, mode), path);
}

FILE* fopen64(const char* path, const char* mode) {
  REAL(fopen64, FILE*, const char*, const char*);
  return TrackStream(real_fopen64(path, mode), path);
}

size_t fwrite(const void* buf, size_t size, size_t count, FILE* f) {
  REAL(fwrite, size_t, const void*, size_t, size_t, FILE*);
  REAL(fflush, int, FILE*);
  if (ops_write && IsWatchedStream(f) && size > 0 && count > 0) {
    int decision = Decide("write", FdPath(fileno(f)));
    if (decision == 1) return 0;
    if (decision == 2) {
      (void)real_fwrite(buf, 1, size * count / 2, f);
      (void)real_fflush(f);
      kill(getpid(), SIGKILL);
    }
  }
  return real_fwrite(buf, size, count, f);
}

// An fflush or fclose is a point only when it has bytes to write.
int fflush(FILE* f) {
  REAL(fflush, int, FILE*);
  if (ops_write && IsWatchedStream(f) && __fpending(f) > 0 &&
      Decide("flush", FdPath(fileno(f))) != 0) {
    return EOF;
  }
  return real_fflush(f);
}

int fclose(FILE* f) {
  REAL(fclose, int, FILE*);
  if (f == NULL) return real_fclose(f);
  int fd = fileno(f);
  int failed = ops_write && IsWatchedStream(f) && __fpending(f) > 0 && Decide("flush", FdPath(fd));
  int err = errno;
  if (fd >= 0 && fd < kMaxFd) atomic_store(&watched_fd[fd], 0);
  if (failed) {
    __fpurge(f);  // the buffered bytes are lost, as when the kernel refuses them
    (void)real_fclose(f);
    errno = err;
    return EOF;
  }
  return real_fclose(f);
}
