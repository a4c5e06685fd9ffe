// POSIX file and folder helpers, and the atomic writes of files and folders every writer in
// fp4lab uses (fp4lab_common, plain C++). Not std::filesystem: it is unusable in anything linked
// with the PyPI libtorch: libtorch.so exports its own statically linked copy of libstdc++'s
// filesystem symbols, which interpose on the system ones and misbehave (create_directories
// reports "Not a directory", remove_all jumps to null). pytorch/pytorch#133437.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fp4lab::files {

bool exists(const std::string& path);  // anything, symlinks not followed
bool isDirectory(const std::string& path);
bool isRegularFile(const std::string& path);

// "a/b" + "c" -> "a/b/c"; parentOf("a/b/c") -> "a/b", parentOf("c") -> "."; baseName -> "c".
std::string join(const std::string& folder, const std::string& name);
std::string parentOf(const std::string& path);
std::string baseName(const std::string& path);
// Whether two paths name the same file or folder ("exp", "./exp/", "/abs/exp"): equal text, or
// both exist and resolve (realpath) to the same place.
bool samePath(const std::string& a, const std::string& b);
// Drops trailing slashes ("out/" -> "out"), keeping "/" itself.
std::string withoutTrailingSlash(const std::string& path);

// mkdir -p; throws fp4lab::Error naming the path.
void createDirectories(const std::string& path);
// rm -rf without following symlinks; returns false if something could not be removed.
bool removeTree(const std::string& path);
// Names of a folder's entries (not "." or ".."), sorted; throws fp4lab::Error.
std::vector<std::string> listDirectory(const std::string& path);
// A new, empty folder "<prefix>XXXXXX" (mkdtemp); throws fp4lab::Error.
std::string makeTemporaryDirectory(const std::string& prefix);

// Whole-file read; throws fp4lab::Error.
std::string readFile(const std::string& path);
// A file written under a temporary name in its folder and renamed over `path` by commit()
// (after fsync, and the folder's fsync after the rename), so `path` is always the old or the
// complete new file. Destroyed without commit() (an error, an exception), the temporary file is
// removed and `path` is untouched. Errors throw fp4lab::Error naming `path`.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, uint64_t bytes);
  void commit();

 private:
  std::string m_path, m_temporary;
  int m_fd = -1;
  bool m_committed = false;
};

// Before a command writes the file `path`: throws Error for a folder there, for an existing file
// unless `overwrite` (--force), and for a missing parent folder, each with what to do. `example`
// is a file name to suggest ("analysis.h5"). Commands call it before their work, so a bad path
// fails at once rather than after minutes of measuring.
void checkOutputFile(const std::string& path, bool overwrite, const std::string& example);

// AtomicFile with one write.
void writeFileAtomically(const std::string& path, const std::string& content);
// fsync of a folder, so renames inside it are durable; best effort (some filesystems refuse).
void syncFolder(const std::string& path);

// Replaces `target` by the complete folder `staging` (a sibling of it, same filesystem):
//  1. fsync `staging` (its files are already fsynced by their writers);
//  2. if `target` does not exist: rename(staging, target);
//     else: renameat2(RENAME_EXCHANGE) swaps the two atomically and the old folder (now at
//     `staging`) is deleted; where the filesystem cannot exchange (EINVAL/ENOSYS/ENOTSUP),
//     `target` is renamed to "<target>.old-<pid>", staging to target, and the old one deleted
//     (if that second rename fails, the old folder is renamed back);
//  3. fsync the parent folder.
// So at every instant a complete folder is at `target`, except in the fallback's window
// between its two renames, when the complete old one is at "<target>.old-<pid>" and the
// complete new one still at `staging`. A crash can leave "<target>.tmp-<pid>" or ".old-<pid>"
// litter next to the target, never a partial `target`. A `target` that exists but is not a
// folder is an error (nothing is replaced).
void publishFolder(const std::string& staging, const std::string& target);

}  // namespace fp4lab::files
