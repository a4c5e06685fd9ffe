// POSIX implementations of the file-system operations fp4lab needs, and its atomic writes (see
// files.h for why not std::filesystem).
#include "fp4lab/common/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fp4lab/error.h"

namespace fp4lab::files {

namespace {

std::string systemError(const std::string& what, int error) {
  return what + ": " + std::strerror(error);
}

}  // namespace

bool exists(const std::string& path) {
  struct stat info;
  return ::lstat(path.c_str(), &info) == 0;
}

bool samePath(const std::string& a, const std::string& b) {
  if (a == b) return true;
  char ra[PATH_MAX], rb[PATH_MAX];
  return ::realpath(a.c_str(), ra) && ::realpath(b.c_str(), rb) && std::strcmp(ra, rb) == 0;
}

bool isDirectory(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool isRegularFile(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string withoutTrailingSlash(const std::string& path) {
  std::string result = path;
  while (result.size() > 1 && result.back() == '/') result.pop_back();
  return result;
}

std::string join(const std::string& folder, const std::string& name) {
  if (folder.empty()) return name;
  return folder.back() == '/' ? folder + name : folder + "/" + name;
}

std::string parentOf(const std::string& path) {
  const std::string trimmed = withoutTrailingSlash(path);
  const size_t slash = trimmed.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return trimmed.substr(0, slash);
}

std::string baseName(const std::string& path) {
  const std::string trimmed = withoutTrailingSlash(path);
  const size_t slash = trimmed.rfind('/');
  return slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
}

void createDirectories(const std::string& path) {
  if (path.empty() || isDirectory(path)) return;
  const std::string parent = parentOf(path);
  if (parent != path && parent != "." && parent != "/") createDirectories(parent);
  if (::mkdir(path.c_str(), 0755) != 0 && !(errno == EEXIST && isDirectory(path))) {
    throw Error(systemError("cannot create folder", errno), path,
                "check that the parent folder exists and is writable");
  }
}

bool removeTree(const std::string& path) {
  if (!exists(path)) return true;
  // nftw's callback has no user pointer; the failure flag is per-thread so concurrent calls
  // from different threads do not mix.
  static thread_local bool failed;
  failed = false;
  auto removeOne = [](const char* entry, const struct stat*, int, struct FTW*) -> int {
    if (::remove(entry) != 0) failed = true;
    return 0;  // keep going: remove as much as possible
  };
  if (::nftw(path.c_str(), removeOne, 16, FTW_DEPTH | FTW_PHYS) != 0) return false;
  return !failed;
}

std::vector<std::string> listDirectory(const std::string& path) {
  DIR* folder = ::opendir(path.c_str());
  if (!folder) throw Error(systemError("cannot list folder", errno), path);
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(folder)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(folder);
  std::sort(names.begin(), names.end());
  return names;
}

std::string makeTemporaryDirectory(const std::string& prefix) {
  std::string pattern = prefix + "XXXXXX";
  if (!::mkdtemp(pattern.data())) {
    throw Error(systemError("cannot create temporary folder", errno), prefix);
  }
  return pattern;
}

std::string readFile(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  if (!stream) throw Error("cannot open file", path);
  std::ostringstream content;
  content << stream.rdbuf();
  if (stream.bad()) throw Error("cannot read file", path);
  return content.str();
}

AtomicFile::AtomicFile(std::string path) : m_path(std::move(path)) {
  static std::atomic<unsigned> counter{0};
  m_temporary =
      m_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  m_fd = ::open(m_temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (m_fd < 0)
    throw Error(systemError("cannot create temporary file " + m_temporary, errno), m_path,
                "check that the destination folder exists and is writable");
}

AtomicFile::~AtomicFile() {
  if (m_fd >= 0) ::close(m_fd);
  if (!m_committed) ::unlink(m_temporary.c_str());
}

void AtomicFile::write(const void* data, uint64_t bytes) {
  constexpr uint64_t kChunk = 1ull << 30;  // Linux moves at most ~2 GB per call anyway
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(m_fd, p, std::min(bytes, kChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)  // no progress and no error: avoid spinning forever
      throw Error(systemError("cannot write " + m_temporary, n < 0 ? errno : EIO), m_path,
                  "check free disk space and permissions");
    p += n;
    bytes -= uint64_t(n);
  }
}

void AtomicFile::commit() {
  const std::string hint = "check free disk space and permissions";
  if (::fsync(m_fd) != 0)
    throw Error(systemError("cannot flush " + m_temporary, errno), m_path, hint);
  const int closed = ::close(m_fd);
  m_fd = -1;  // after a failed close() the descriptor state is unspecified; never retry it
  if (closed != 0) throw Error(systemError("cannot close " + m_temporary, errno), m_path, hint);
  if (::rename(m_temporary.c_str(), m_path.c_str()) != 0)
    throw Error(systemError("cannot rename " + m_temporary + " into place", errno), m_path,
                "check that the destination is not a folder and is writable");
  m_committed = true;
  // The rename is only durable once the folder's entry is on disk too; the file is complete and
  // in place either way.
  syncFolder(parentOf(m_path));
}

void writeFileAtomically(const std::string& path, const std::string& content) {
  AtomicFile file(path);
  file.write(content.data(), content.size());
  file.commit();
}

void syncFolder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void publishFolder(const std::string& staging, const std::string& target) {
  files::syncFolder(staging);
  struct stat info;
  const bool targetExists = ::lstat(target.c_str(), &info) == 0;
  if (targetExists && !S_ISDIR(info.st_mode)) {
    throw Error("exists and is not a folder; not replacing it", target);
  }
  if (!targetExists) {
    if (::rename(staging.c_str(), target.c_str()) != 0) {
      throw Error(systemError("cannot move " + staging + " into place", errno), target);
    }
  } else if (::syscall(SYS_renameat2, AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(),
                       RENAME_EXCHANGE) == 0) {
    files::removeTree(staging);  // the old folder now; a leftover would only be litter
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    // No atomic exchange here (older kernel, some network filesystems): two renames.
    const std::string old = target + ".old-" + std::to_string(::getpid());
    files::removeTree(old);
    if (::rename(target.c_str(), old.c_str()) != 0) {
      throw Error(systemError("cannot move the previous folder aside", errno), target);
    }
    if (::rename(staging.c_str(), target.c_str()) != 0) {
      const int renameError = errno;
      ::rename(old.c_str(), target.c_str());  // put the previous folder back
      throw Error(systemError("cannot move " + staging + " into place", renameError), target);
    }
    files::removeTree(old);
  } else {
    throw Error(systemError("cannot replace the folder with " + staging, errno), target);
  }
  files::syncFolder(files::parentOf(target));
}

void checkOutputFile(const std::string& path, bool overwrite, const std::string& example) {
  if (isDirectory(path))
    throw Error("output is a folder", path, "give a file name, e.g. " + example);
  if (exists(path) && !overwrite)
    throw Error("output file exists", path, "pass --force to replace it, or choose another path");
  const std::string parent = parentOf(path);
  if (!parent.empty() && !isDirectory(parent))
    throw Error("output folder does not exist", parent, "create it first");
}

}  // namespace fp4lab::files
