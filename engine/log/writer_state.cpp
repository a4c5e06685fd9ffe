// RunLogReader::writerState: is a log live, crashed or closed? resume() asks it first, so that a
// running writer's log is never reopened for writing under it.
#include "fp4lab/log/run_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <optional>
#include <string>

#include "hdf5_handles.h"

namespace fp4lab::log {

using namespace detail;

namespace {

// HDF5's exclusive lock, held by a non-SWMR writer (create() before SWMR starts, resume() while
// it truncates) for as long as it lives. SWMR writers drop it, so it says nothing about them.
enum class Lock { Held, Free, Unknown };

Lock writerLock(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Lock::Unknown;
  Lock lock = Lock::Unknown;
  if (::flock(fd, LOCK_SH | LOCK_NB) == 0) {
    ::flock(fd, LOCK_UN);
    lock = Lock::Free;
  } else if (errno == EWOULDBLOCK) {
    lock = Lock::Held;
  }  // else a file system without locks: Unknown
  ::close(fd);
  return lock;
}

}  // namespace

WriterState RunLogReader::writerState(const std::string& path) {
  Hdf5Scope scope;
  const FileProbe probe = probeFile(path);
  // Superblocks before version 2 carry no such flags, and SWMR needs version 3 anyway.
  if (probe.superblockVersion < 2) return WriterState::Closed;
  if (!(probe.flags & (kFlagWriteAccess | kFlagSwmrWriteAccess))) return WriterState::Closed;
  // A non-SWMR writer keeps HDF5's exclusive lock for as long as it lives.
  const bool swmrWriter = probe.flags & kFlagSwmrWriteAccess;
  if (!swmrWriter) {
    const Lock lock = writerLock(path);
    if (lock == Lock::Held) return WriterState::Live;
    if (lock == Lock::Free) return WriterState::Crashed;
  }
  // SWMR writers drop the lock (and so does a file system without locks): ask whether the
  // recorded writing process still exists.
  bool swmr = false;
  Hid file = openReadOnly(path, &swmr);
  const std::optional<int64_t> pid = readInt64Attribute(file.get(), "writer_pid", path);
  const std::optional<std::string> host = readStringAttribute(file.get(), "writer_host", path);
  if (!pid || !host || *pid <= 0 || *pid > INT_MAX)
    return swmrWriter ? WriterState::Live : WriterState::Crashed;
  if (*host != hostName()) return WriterState::Live;  // cannot check another machine's processes
  const bool alive = ::kill(static_cast<pid_t>(*pid), 0) == 0 || errno == EPERM;
  return alive ? WriterState::Live : WriterState::Crashed;
}

}  // namespace fp4lab::log
