// A fresh folder under the system's temporary directory, removed with everything in it at the end
// of the scope. For tests that write files: run folders, logs, plots.
#pragma once

#include <filesystem>
#include <random>
#include <system_error>
#include <string>

namespace fp4lab::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "fp4lab-test-") {
    path =
        std::filesystem::temp_directory_path() / (prefix + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace fp4lab::testing
