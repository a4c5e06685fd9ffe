// Tests for the safetensors reader and writer: round trips, atomic replacement, a suite of
// hand-built malformed files that must each be rejected with a precise fp4lab::Error, and
// truncation/corruption fuzzing that must never crash.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fp4lab/error.h"
#include "fp4lab/io/safetensors.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using fp4lab::io::DType;
using fp4lab::io::SafetensorsFile;
using fp4lab::io::SafetensorsWriter;

namespace {

// A fresh folder per test case, removed with everything in it afterwards.
class TempDir {
 public:
  TempDir() {
    std::random_device device;
    m_path = fs::temp_directory_path() /
             ("fp4lab-st-" + std::to_string(::getpid()) + "-" + std::to_string(device()));
    fs::create_directories(m_path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(m_path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (m_path / name).string(); }
  const fs::path& path() const { return m_path; }
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(m_path)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }

 private:
  fs::path m_path;
};

std::vector<uint8_t> readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void writeBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// Length prefix (the header's real length unless overridden), header text, data bytes.
std::vector<uint8_t> buildFile(const std::string& header, size_t dataBytes,
                               std::optional<uint64_t> lengthPrefix = std::nullopt) {
  const uint64_t length = lengthPrefix.value_or(header.size());
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<uint8_t>(length >> (8 * i)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  for (size_t i = 0; i < dataBytes; ++i) bytes.push_back(static_cast<uint8_t>(i * 7 + 1));
  return bytes;
}

uint64_t headerLength(const std::vector<uint8_t>& file) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | file[i];
  return length;
}

// The fp4lab::Error opening `path` throws, or nothing when it opens. Any other exception
// escapes and fails the test.
std::optional<fp4lab::Error> openFailure(const std::string& path) {
  try {
    SafetensorsFile file(path);
    return std::nullopt;
  } catch (const fp4lab::Error& error) {
    return error;
  }
}

std::vector<uint8_t> pattern(size_t count, uint8_t seed) {
  std::vector<uint8_t> bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 31);
  return bytes;
}

// A small file exercising several dtypes, an empty tensor and a scalar.
SafetensorsWriter sampleWriter() {
  SafetensorsWriter writer;
  writer.addFloat32("layer.weight", {2, 3}, {1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 1e-3f});
  writer.add("layer.bias", DType::BF16, {4},
             std::vector<uint8_t>{0x80, 0x3f, 0x00, 0xc0, 0, 0, 0x49, 0x40});
  writer.add("packed", DType::U8, {3, 5}, pattern(15, 3));
  writer.add("empty", DType::F16, {0, 4}, std::vector<uint8_t>{});
  const int64_t step = -42;
  writer.add("step", DType::I64, {}, &step, sizeof step);
  writer.setMetadata("quant", "mxfp4");
  return writer;
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, dtypes, shapes, bytes and metadata",
          "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  sampleWriter().write(path);
  CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});

  const std::vector<uint8_t> raw = readBytes(path);
  REQUIRE(raw.size() >= 8);
  const uint64_t n = headerLength(raw);
  CHECK((8 + n) % 8 == 0);
  REQUIRE(8 + n <= raw.size());
  const auto header = nlohmann::json::parse(raw.begin() + 8, raw.begin() + 8 + n);
  CHECK(header["__metadata__"]["format"] == "pt");
  CHECK(header["__metadata__"]["quant"] == "mxfp4");

  SafetensorsFile file(path);
  CHECK(file.path() == path);
  CHECK(file.metadata() ==
        std::map<std::string, std::string>{{"format", "pt"}, {"quant", "mxfp4"}});

  // Data order is insertion order.
  const std::vector<fp4lab::io::TensorInfo>& tensors = file.tensors();
  REQUIRE(tensors.size() == 5);
  CHECK(tensors[0].name == "layer.weight");
  CHECK(tensors[1].name == "layer.bias");
  CHECK(tensors[2].name == "packed");
  CHECK(tensors[3].name == "empty");
  CHECK(tensors[4].name == "step");
  uint64_t offset = 0;
  for (const auto& tensor : tensors) {
    CHECK(tensor.begin == offset);
    offset = tensor.end;
  }
  CHECK(8 + n + offset == raw.size());

  const auto& weight = file.at("layer.weight");
  CHECK(weight.dtype == DType::F32);
  CHECK(weight.shape == std::vector<int64_t>{2, 3});
  CHECK(weight.numel() == 6);
  CHECK(weight.bytes() == 24);
  CHECK(file.toFloat32(weight) == std::vector<float>{1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 1e-3f});

  const auto& bias = file.at("layer.bias");
  CHECK(bias.dtype == DType::BF16);
  CHECK(file.toFloat32(bias) == std::vector<float>{1.0f, -2.0f, 0.0f, 3.140625f});

  const auto& packed = file.at("packed");
  CHECK(packed.dtype == DType::U8);
  CHECK(packed.shape == std::vector<int64_t>{3, 5});
  CHECK(std::vector<uint8_t>(file.data(packed), file.data(packed) + packed.bytes()) ==
        pattern(15, 3));

  const auto& empty = file.at("empty");
  CHECK(empty.dtype == DType::F16);
  CHECK(empty.shape == std::vector<int64_t>{0, 4});
  CHECK(empty.numel() == 0);
  CHECK(empty.bytes() == 0);
  CHECK(file.toFloat32(empty).empty());

  const auto& step = file.at("step");
  CHECK(step.shape.empty());
  CHECK(step.numel() == 1);
  CHECK(file.toFloat32(step) == std::vector<float>{-42.0f});

  CHECK(file.find("missing") == nullptr);
  CHECK(file.find("packed") == &packed);
  REQUIRE_THROWS_AS(file.at("missing"), fp4lab::Error);
  CHECK_THROWS_WITH(file.at("missing"), Contains("missing"));

  // A moved-to file keeps its mapping valid.
  SafetensorsFile moved(std::move(file));
  CHECK(moved.toFloat32(moved.at("step")) == std::vector<float>{-42.0f});
  SafetensorsFile assigned(path);
  assigned = std::move(moved);
  CHECK(assigned.tensors().size() == 5);
}

TEST_CASE("safetensors writer handles no tensors and large tensors", "[io][safetensors]") {
  TempDir dir;
  SECTION("no tensors") {
    SafetensorsWriter().write(dir.file("none.safetensors"));
    SafetensorsFile file(dir.file("none.safetensors"));
    CHECK(file.tensors().empty());
    CHECK(file.metadata().at("format") == "pt");
  }
  SECTION("a tensor of 64 MiB") {
    const size_t count = 16u << 20;
    std::vector<float> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 1000) - 500;
    SafetensorsWriter writer;
    writer.addFloat32("big", {4096, 4096}, values);
    writer.write(dir.file("big.safetensors"));
    SafetensorsFile file(dir.file("big.safetensors"));
    CHECK(file.toFloat32(file.at("big")) == values);
  }
}

TEST_CASE("safetensors writer rejects bad tensors at add time", "[io][safetensors]") {
  SafetensorsWriter writer;
  writer.addFloat32("a", {2}, {1, 2});
  CHECK_THROWS_WITH(writer.addFloat32("a", {1}, {3}), Contains("already"));
  CHECK_THROWS_WITH(writer.add("b", DType::F32, {3}, std::vector<uint8_t>(8)),
                    Contains("needs 12"));
  CHECK_THROWS_WITH(writer.add("c", DType::BF16, {-2}, std::vector<uint8_t>{}),
                    Contains("negative"));
  CHECK_THROWS_AS(writer.add("d", DType::U8, {1ll << 40, 1ll << 40}, std::vector<uint8_t>{}),
                  fp4lab::Error);
  CHECK_THROWS_AS(writer.add("__metadata__", DType::U8, {0}, std::vector<uint8_t>{}),
                  fp4lab::Error);
  CHECK_THROWS_AS(writer.add("bad\xff", DType::U8, {0}, std::vector<uint8_t>{}), fp4lab::Error);
  CHECK_THROWS_AS(writer.add("e", DType::U8, {4}, nullptr, 4), fp4lab::Error);
  CHECK_THROWS_AS(writer.setMetadata("format", "tf"), fp4lab::Error);
  CHECK(writer.size() == 1);
}

TEST_CASE("safetensors writer replaces files atomically", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  SafetensorsWriter good;
  good.addFloat32("kept", {3}, {1, 2, 3});
  good.write(path);
  const std::vector<uint8_t> original = readBytes(path);
  REQUIRE_FALSE(original.empty());

  SECTION("a duplicate name fails before anything is written") {
    SafetensorsWriter writer;
    writer.addFloat32("x", {1}, {5});
    CHECK_THROWS_AS(writer.addFloat32("x", {1}, {6}), fp4lab::Error);
    CHECK(readBytes(path) == original);
  }

  SECTION("a write that runs out of space leaves the old file and no temporary") {
    // RLIMIT_FSIZE makes write() fail with EFBIG part way through, like a full disk.
    SafetensorsWriter writer;
    writer.add("huge", DType::U8, {1 << 20}, pattern(1 << 20, 9));
    struct sigaction ignore {
    }, previousAction{};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(sigaction(SIGXFSZ, &ignore, &previousAction) == 0);
    rlimit previousLimit{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &previousLimit) == 0);
    rlimit small = previousLimit;
    small.rlim_cur = 64 << 10;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::optional<fp4lab::Error> failure;
    try {
      writer.write(path);
    } catch (const fp4lab::Error& error) {
      failure = error;
    }
    setrlimit(RLIMIT_FSIZE, &previousLimit);
    sigaction(SIGXFSZ, &previousAction, nullptr);

    REQUIRE(failure.has_value());
    CHECK_THAT(failure->what(), Contains("cannot write"));
    CHECK(failure->where() == path);
    CHECK(readBytes(path) == original);
    CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});
  }

  SECTION("a missing destination folder fails cleanly") {
    const std::string missing = dir.file("no-such-folder/model.safetensors");
    CHECK_THROWS_WITH(good.write(missing), Contains("folder exists"));
    CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});
    CHECK(readBytes(path) == original);
  }

  SECTION("a folder in the way of the rename fails and removes the temporary") {
    fs::create_directory(dir.file("taken"));
    CHECK_THROWS_AS(good.write(dir.file("taken")), fp4lab::Error);
    CHECK(dir.entries() == std::set<std::string>{"model.safetensors", "taken"});
    CHECK(fs::is_directory(dir.file("taken")));
  }

  SECTION("a successful write replaces the file and leaves no temporary") {
    SafetensorsWriter writer;
    writer.addFloat32("replaced", {2}, {7, 8});
    writer.write(path);
    CHECK(dir.entries() == std::set<std::string>{"model.safetensors"});
    SafetensorsFile file(path);
    REQUIRE(file.tensors().size() == 1);
    CHECK(file.tensors()[0].name == "replaced");
    CHECK(file.toFloat32(file.tensors()[0]) == std::vector<float>{7, 8});
  }
}

TEST_CASE("safetensors reader accepts unusual but valid files", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("valid.safetensors");

  SECTION("empty header object and no data") {
    writeBytes(path, buildFile("{}", 0));
    SafetensorsFile file(path);
    CHECK(file.tensors().empty());
    CHECK(file.metadata().empty());
  }
  SECTION("header padded with spaces") {
    writeBytes(path, buildFile("{}            ", 0));
    CHECK(SafetensorsFile(path).tensors().empty());
  }
  SECTION("tensors listed out of data order, with empty tensors between them") {
    const std::string header = R"({"w_b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                               R"("e_1":{"dtype":"F16","shape":[3,0],"data_offsets":[8,8]},)"
                               R"("w_a":{"dtype":"I32","shape":[1,2],"data_offsets":[0,8]},)"
                               R"("e_0":{"dtype":"BF16","shape":[0],"data_offsets":[0,0]},)"
                               R"("e_2":{"dtype":"U8","shape":[0],"data_offsets":[16,16]},)"
                               R"("__metadata__":{"source":"hand made"}})";
    writeBytes(path, buildFile(header, 16));
    SafetensorsFile file(path);
    std::vector<std::string> names;
    for (const auto& tensor : file.tensors()) names.push_back(tensor.name);
    CHECK(names == std::vector<std::string>{"e_0", "w_a", "e_1", "w_b", "e_2"});
    CHECK(file.metadata() == std::map<std::string, std::string>{{"source", "hand made"}});
    CHECK(file.at("w_b").begin == 8);
    CHECK(file.data(file.at("w_b")) == file.data(file.at("w_a")) + 8);
  }
}

TEST_CASE("safetensors reader rejects malformed files with precise errors", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::string entryA = R"("w_a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

  struct Case {
    const char* label;
    std::vector<uint8_t> bytes;
    std::vector<std::string> problemMentions;  // each must appear in Error::problem()
    std::string whereMentions;                 // must appear in Error::where()
  };
  const std::vector<Case> cases = {
      {"shorter than 8 bytes", {1, 0, 0}, {"8-byte"}, ""},
      {"empty file", {}, {"8-byte"}, ""},
      {"length prefix one past the end",
       buildFile("{}", 0, 3),
       {"header length 3", "past the end"},
       ""},
      {"truncated header",
       [] {
         std::vector<uint8_t> file = buildFile(R"({"w_a":{"dtype":"F32","shape":[0]}})", 0);
         file.resize(20);
         return file;
       }(),
       {"past the end"},
       ""},
      {"huge header length", buildFile("{}", 0, 200ull << 20), {"huge header", "100 MB"}, ""},
      {"empty header", buildFile("", 0), {"JSON"}, ""},
      {"bad JSON", buildFile(R"({"w_a": {"dtype": "F32",)", 0), {"JSON"}, ""},
      {"trailing garbage after JSON", buildFile("{} x", 0), {"JSON"}, ""},
      {"header not UTF-8", buildFile("{\"w\xff\":{}}", 0), {"UTF-8"}, ""},
      {"header not an object", buildFile("[1, 2]", 0), {"object", "array"}, ""},
      {"entry not an object", buildFile(R"({"w_a":5})", 0), {"object", "number"}, "w_a"},
      {"missing data_offsets",
       buildFile(R"({"w_a":{"dtype":"F32","shape":[0]}})", 0),
       {"data_offsets"},
       "w_a"},
      {"missing dtype",
       buildFile(R"({"w_a":{"shape":[0],"data_offsets":[0,0]}})", 0),
       {"dtype"},
       "w_a"},
      {"missing shape",
       buildFile(R"({"w_a":{"dtype":"F32","data_offsets":[0,0]}})", 0),
       {"shape"},
       "w_a"},
      {"unknown dtype",
       buildFile(R"({"w_a":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", 8),
       {"unknown dtype", "F17"},
       "w_a"},
      {"dtype not a string",
       buildFile(R"({"w_a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", 8),
       {"dtype"},
       "w_a"},
      {"negative shape",
       buildFile(R"({"w_a":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", 8),
       {"shape", "non-negative"},
       "w_a"},
      {"fractional shape",
       buildFile(R"({"w_a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
       {"non-negative integers"},
       "w_a"},
      {"shape not an array",
       buildFile(R"({"w_a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8),
       {"shape"},
       "w_a"},
      {"shape overflowing 64 bits",
       buildFile(
           R"({"w_a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8),
       {"overflow"},
       "w_a"},
      {"dtype size disagrees with offsets",
       buildFile(R"({"w_a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
       {"4 bytes", "needs 8"},
       "w_a"},
      {"offsets past the end", buildFile("{" + entryA + "}", 4), {"past the end"}, "w_a"},
      {"offsets reversed",
       buildFile(R"({"w_a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
       {"data_offsets"},
       "w_a"},
      {"offsets with one number",
       buildFile(R"({"w_a":{"dtype":"F32","shape":[0],"data_offsets":[0]}})", 0),
       {"data_offsets"},
       "w_a"},
      {"negative offset",
       buildFile(R"({"w_a":{"dtype":"F32","shape":[0],"data_offsets":[-1,-1]}})", 0),
       {"data_offsets"},
       "w_a"},
      {"overlapping tensors",
       buildFile("{" + entryA + R"(,"w_b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       {"overlap", "w_a"},
       "w_b"},
      {"hole between tensors",
       buildFile("{" + entryA + R"(,"w_b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
                 20),
       {"hole", "w_a"},
       "w_b"},
      {"hole before the first tensor",
       buildFile(R"({"w_a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       {"hole of 4 bytes"},
       "w_a"},
      {"data not covered at the end",
       buildFile("{" + entryA + "}", 12),
       {"4 bytes", "no tensor", "w_a"},
       ""},
      {"data but no tensors", buildFile("{}", 8), {"8 bytes", "no tensor"}, ""},
      {"duplicate tensor names",
       buildFile("{" + entryA + R"(,"w_a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16),
       {"twice", "w_a"},
       ""},
      {"duplicate field inside an entry",
       buildFile(R"({"w_a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8),
       {"twice", "dtype"},
       ""},
      {"metadata with a non-string value",
       buildFile(R"({"__metadata__":{"format":"pt","epoch":3}})", 0),
       {"epoch", "string"},
       "__metadata__"},
      {"metadata not an object",
       buildFile(R"({"__metadata__":["pt"]})", 0),
       {"object"},
       "__metadata__"},
      {"deeply nested JSON",
       buildFile(R"({"__metadata__":)" + std::string(200, '[') + std::string(200, ']') + "}", 0),
       {"nests"},
       ""},
  };

  SECTION("hand-built files") {
    for (const Case& testCase : cases) {
      INFO("case: " << testCase.label);
      writeBytes(path, testCase.bytes);
      const std::optional<fp4lab::Error> error = openFailure(path);
      REQUIRE(error.has_value());
      INFO("message: " << error->what());
      for (const std::string& mention : testCase.problemMentions) {
        CHECK_THAT(error->problem(), Contains(mention));
      }
      CHECK_THAT(error->where(), Contains(path));
      CHECK_THAT(error->where(), Contains(testCase.whereMentions));
      CHECK_FALSE(error->hint().empty());
    }
  }

  SECTION("a writer's file with its data cut short names the last tensor") {
    sampleWriter().write(path);
    std::vector<uint8_t> bytes = readBytes(path);
    bytes.pop_back();
    writeBytes(path, bytes);
    const std::optional<fp4lab::Error> error = openFailure(path);
    REQUIRE(error.has_value());
    CHECK_THAT(error->problem(), Contains("past the end"));
    CHECK_THAT(error->where(), Contains("step"));
  }
  SECTION("a missing file and a folder are reported, not crashed on") {
    const std::optional<fp4lab::Error> missing = openFailure(dir.file("nothing.safetensors"));
    REQUIRE(missing.has_value());
    CHECK_THAT(missing->problem(), Contains("cannot open"));
    const std::optional<fp4lab::Error> folder = openFailure(dir.path().string());
    REQUIRE(folder.has_value());
    CHECK_THAT(folder->problem(), Contains("regular file"));
  }
}

TEST_CASE("safetensors reader survives truncation and corruption", "[io][safetensors][fuzz]") {
  TempDir dir;
  const std::string validPath = dir.file("valid.safetensors");
  sampleWriter().write(validPath);
  const std::vector<uint8_t> valid = readBytes(validPath);
  const uint64_t headerEnd = 8 + headerLength(valid);
  const std::string path = dir.file("fuzz.safetensors");

  SECTION("every truncation is rejected") {
    for (size_t length = 0; length < valid.size(); ++length) {
      writeBytes(path, std::vector<uint8_t>(valid.begin(), valid.begin() + length));
      INFO("length " << length);
      CHECK(openFailure(path).has_value());
    }
  }

  SECTION("random byte corruptions open cleanly or throw fp4lab::Error") {
    std::mt19937 rng(20240611);
    std::uniform_int_distribution<size_t> position(0, headerEnd - 1);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<int> corruptionCount(1, 3);
    size_t opened = 0, rejected = 0;
    for (int iteration = 0; iteration < 3000; ++iteration) {
      std::vector<uint8_t> bytes = valid;
      const int count = iteration < 2000 ? 1 : corruptionCount(rng);
      for (int i = 0; i < count; ++i) bytes[position(rng)] = static_cast<uint8_t>(byte(rng));
      writeBytes(path, bytes);
      INFO("iteration " << iteration);
      try {
        SafetensorsFile file(path);
        // Whatever survived validation must describe bytes inside the file.
        uint64_t covered = 0;
        for (const auto& tensor : file.tensors()) {
          covered += tensor.bytes();
          const std::vector<float> values = file.toFloat32(tensor);
          CHECK(static_cast<int64_t>(values.size()) == tensor.numel());
        }
        CHECK(covered == bytes.size() - 8 - headerLength(bytes));
        ++opened;
      } catch (const fp4lab::Error&) {
        ++rejected;
      }
    }
    // Both outcomes must occur, or the corruption is not reaching the parser.
    CHECK(opened > 0);
    CHECK(rejected > 0);
  }
}
