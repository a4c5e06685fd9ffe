// POSIX file and folder helpers for engine code. std::filesystem is unusable in anything linked
// with the PyPI libtorch: libtorch.so exports its own statically linked copy of libstdc++'s
// filesystem symbols, which interpose on the system ones and misbehave (create_directories
// reports "Not a directory", remove_all jumps to null). pytorch/pytorch#133437.
#pragma once

#include <string>
#include <vector>

namespace fp4lab::model::files {

bool exists(const std::string& path);  // anything, symlinks not followed
bool isDirectory(const std::string& path);
bool isRegularFile(const std::string& path);

// "a/b" + "c" -> "a/b/c"; parentOf("a/b/c") -> "a/b", parentOf("c") -> "."; baseName -> "c".
std::string join(const std::string& folder, const std::string& name);
std::string parentOf(const std::string& path);
std::string baseName(const std::string& path);
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
// Temporary file in the same folder, fsync, rename: `path` is either the old or the new file.
void writeFileAtomically(const std::string& path, const std::string& content);
// fsync of a folder, so renames inside it are durable; best effort (some filesystems refuse).
void syncFolder(const std::string& path);

}  // namespace fp4lab::model::files
