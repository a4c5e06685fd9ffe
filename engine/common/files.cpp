// POSIX implementations of the few file-system operations the model code needs (see files.h
// for why not std::filesystem).
#include "model/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fp4lab/error.h"

namespace fp4lab::model::files {

namespace {

std::string systemError(const std::string& what, int error) {
  return what + ": " + std::strerror(error);
}

}  // namespace

bool exists(const std::string& path) {
  struct stat info;
  return ::lstat(path.c_str(), &info) == 0;
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

void writeFileAtomically(const std::string& path, const std::string& content) {
  static std::atomic<unsigned> counter{0};
  const std::string temporary =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw Error(systemError("cannot create " + temporary, errno), path,
                "check that the folder exists and is writable");
  }
  size_t written = 0;
  int error = 0;
  while (written < content.size()) {
    const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      break;
    }
    written += static_cast<size_t>(n);
  }
  if (!error && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && !error) error = errno;
  if (!error && ::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error) {
    ::unlink(temporary.c_str());
    throw Error(systemError("cannot write file", error), path,
                "check free disk space and permissions");
  }
}

void syncFolder(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace fp4lab::model::files
