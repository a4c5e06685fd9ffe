// bench_io: import and export throughput (MB/s of input) against the floor of reading the same
// bytes, and the peak memory of each, on a synthetic llama model written here: a GGUF file (a
// TinyLlama-shaped model, hidden 2048, ffn 5632, vocab 32000; attention, embeddings and output in
// Q8_0, the MLP in Q4_1) by a small GGUF writer below, imported by `fp4lab import`'s
// importGguf into a BF16 Hugging Face folder, which is then exported (exportModel) as
// modelopt-nvfp4 (with and without the read-back check) and bf16. Each import and export runs in
// a child process, under RLIMIT_DATA (--data-limit-mb: heap and private writable memory; the
// read-only file maps do not count, RLIMIT_AS would count them) and is measured by its VmHWM
// (which counts the touched pages of the mapped input) and its peak RssAnon (sampled). The page
// cache is warm: every input was just written, and the floors read it first.
//
// Usage: bench_io [--layers N] [--dir DIR] [--data-limit-mb MB] [--reps N] [--keep] [--quick]
// Plain C++ (fp4lab_io, fp4lab_export), no LibTorch.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "fp4lab/common/files.h"
#include "fp4lab/error.h"
#include "fp4lab/export/export.h"
#include "fp4lab/io/gguf_import.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace files = fp4lab::files;

double seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}
double mb(uint64_t bytes) {
  return double(bytes) / 1e6;
}

// ---- A minimal GGUF writer (version 3, alignment 32), streaming the data -------------------

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;  // 0 F32, 3 Q4_1, 8 Q8_0
  uint64_t bytes;
};

uint64_t tensorBytes(const std::vector<uint64_t>& ne, uint32_t type) {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  if (type == 0) return n * 4;
  if (type == 3) return n / 32 * 20;
  return n / 32 * 34;  // Q8_0
}

class Bytes {
 public:
  std::string s;
  void u32(uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
  void u64(uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
  void f32(float v) { s.append(reinterpret_cast<const char*>(&v), 4); }
  void str(const std::string& v) {
    u64(v.size());
    s += v;
  }
  void kvU32(const std::string& k, uint32_t v) { str(k), u32(4), u32(v); }
  void kvF32(const std::string& k, float v) { str(k), u32(6), f32(v); }
  void kvStr(const std::string& k, const std::string& v) { str(k), u32(8), str(v); }
  void kvStrs(const std::string& k, const std::vector<std::string>& v) {
    str(k), u32(9), u32(8), u64(v.size());
    for (const std::string& x : v) str(x);
  }
};

struct Shape {
  uint64_t hidden = 2048, ffn = 5632, vocab = 32000, heads = 16, kvHeads = 4, layers = 12;
};

std::vector<GgufTensor> llamaTensors(const Shape& m) {
  const uint64_t headDim = m.hidden / m.heads, kv = m.kvHeads * headDim;
  std::vector<GgufTensor> t;
  auto add = [&](std::string name, std::vector<uint64_t> ne, uint32_t type) {
    const uint64_t b = tensorBytes(ne, type);
    t.push_back({std::move(name), std::move(ne), type, b});
  };
  add("token_embd.weight", {m.hidden, m.vocab}, 8);
  for (uint64_t l = 0; l < m.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {m.hidden}, 0);
    add(p + "attn_q.weight", {m.hidden, m.hidden}, 8);
    add(p + "attn_k.weight", {m.hidden, kv}, 8);
    add(p + "attn_v.weight", {m.hidden, kv}, 8);
    add(p + "attn_output.weight", {m.hidden, m.hidden}, 8);
    add(p + "ffn_norm.weight", {m.hidden}, 0);
    add(p + "ffn_gate.weight", {m.hidden, m.ffn}, 3);
    add(p + "ffn_up.weight", {m.hidden, m.ffn}, 3);
    add(p + "ffn_down.weight", {m.ffn, m.hidden}, 3);
  }
  add("output_norm.weight", {m.hidden}, 0);
  add("output.weight", {m.hidden, m.vocab}, 8);
  return t;
}

// Writes the file; returns its size.
uint64_t writeLlamaGguf(const std::string& path, const Shape& m) {
  const std::vector<GgufTensor> tensors = llamaTensors(m);
  Bytes h;
  h.u32(0x46554747), h.u32(3), h.u64(tensors.size()), h.u64(13);
  h.kvStr("general.architecture", "llama");
  h.kvStr("general.name", "bench_io synthetic llama");
  h.kvU32("llama.embedding_length", uint32_t(m.hidden));
  h.kvU32("llama.block_count", uint32_t(m.layers));
  h.kvU32("llama.feed_forward_length", uint32_t(m.ffn));
  h.kvU32("llama.attention.head_count", uint32_t(m.heads));
  h.kvU32("llama.attention.head_count_kv", uint32_t(m.kvHeads));
  h.kvU32("llama.context_length", 2048);
  h.kvF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  h.kvStr("tokenizer.ggml.model", "gpt2");
  std::vector<std::string> tokens = {"<s>", "</s>", "a", "b", "ab"};
  for (int i = 0; i < 251; ++i) tokens.push_back("t" + std::to_string(i));
  h.kvStrs("tokenizer.ggml.tokens", tokens);
  h.kvStrs("tokenizer.ggml.merges", {"a b"});
  h.kvU32("tokenizer.ggml.bos_token_id", 0);
  uint64_t offset = 0;
  for (const GgufTensor& t : tensors) {
    h.str(t.name);
    h.u32(uint32_t(t.ne.size()));
    for (uint64_t d : t.ne) h.u64(d);
    h.u32(t.type);
    h.u64(offset);
    offset += (t.bytes + 31) / 32 * 32;
  }
  h.s.append((32 - h.s.size() % 32) % 32, '\0');

  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw fp4lab::Error("cannot write", path);
  std::fwrite(h.s.data(), 1, h.s.size(), f);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  std::vector<uint8_t> block;
  for (const GgufTensor& t : tensors) {
    block.assign((t.bytes + 31) / 32 * 32, 0);
    if (t.type == 0) {
      const float one = 1.0f;
      for (uint64_t i = 0; i < t.bytes; i += 4) std::memcpy(&block[i], &one, 4);
    } else {
      for (size_t i = 0; i + 8 <= t.bytes; i += 8) {  // xorshift64 bytes
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        std::memcpy(&block[i], &state, 8);
      }
      const uint64_t per = t.type == 8 ? 34 : 20;
      for (uint64_t b = 0; b + per <= t.bytes; b += per) {
        block[b] = 0x00, block[b + 1] = 0x20;                       // d = 2^-7
        if (t.type == 3) block[b + 2] = 0x00, block[b + 3] = 0xA8;  // m = -2^-5
      }
    }
    std::fwrite(block.data(), 1, block.size(), f);
  }
  if (std::fclose(f) != 0) throw fp4lab::Error("cannot write", path);
  return uint64_t(h.s.size()) + offset;
}

// ---- Floors: read every byte ----------------------------------------------------------------

uint64_t g_sink = 0;

// read() in 8 MiB chunks, summing the bytes as 64-bit words.
uint64_t readFloor(const std::vector<std::string>& paths) {
  std::vector<uint64_t> buffer(1 << 20);
  uint64_t total = 0, sum = 0;
  for (const std::string& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) throw fp4lab::Error("cannot open", p);
    for (;;) {
      const ssize_t n = ::read(fd, buffer.data(), buffer.size() * 8);
      if (n <= 0) break;
      for (size_t i = 0; i < size_t(n) / 8; ++i) sum += buffer[i];
      total += uint64_t(n);
    }
    ::close(fd);
  }
  g_sink += sum;
  return total;
}

// mmap and sum every 64-bit word.
uint64_t mmapFloor(const std::vector<std::string>& paths) {
  uint64_t total = 0, sum = 0;
  for (const std::string& p : paths) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) throw fp4lab::Error("cannot open", p);
    const size_t size = size_t(st.st_size);
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) throw fp4lab::Error("cannot map", p);
    const uint64_t* w = static_cast<const uint64_t*>(map);
    for (size_t i = 0; i < size / 8; ++i) sum += w[i];
    ::munmap(map, size);
    total += size;
  }
  g_sink += sum;
  return total;
}

// ---- Children -----------------------------------------------------------------------------

struct ChildResult {
  bool ok = false;
  double seconds = 0;
  uint64_t hwmKb = 0, peakAnonKb = 0;
  std::string error;
};

uint64_t statusKb(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + (pid ? std::to_string(pid) : std::string("self")) + "/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, n, field) == 0) return std::strtoull(line.c_str() + n + 1, nullptr, 10);
  return 0;
}

// Runs `work` in a child under RLIMIT_DATA = dataLimit bytes (0: none); the parent samples the
// child's RssAnon every 5 ms.
ChildResult inChild(uint64_t dataLimit, const std::function<void()>& work) {
  int pipefd[2];
  if (pipe(pipefd) != 0) std::abort();
  const pid_t pid = fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    if (dataLimit) {
      struct rlimit r = {rlim_t(dataLimit), rlim_t(dataLimit)};
      setrlimit(RLIMIT_DATA, &r);
    }
    std::string message;
    const auto start = Clock::now();
    bool ok = true;
    try {
      work();
    } catch (const std::exception& e) {
      ok = false;
      message = e.what();
    }
    char buffer[512];
    std::snprintf(buffer, sizeof buffer, "%d %.6f %llu %.400s", ok ? 1 : 0, seconds(start),
                  static_cast<unsigned long long>(statusKb(0, "VmHWM:")), message.c_str());
    if (::write(pipefd[1], buffer, std::strlen(buffer)) < 0) _exit(3);
    _exit(0);
  }
  ::close(pipefd[1]);
  ChildResult r;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    r.peakAnonKb = std::max(r.peakAnonKb, statusKb(pid, "RssAnon:"));
    usleep(5000);
  }
  char buffer[600] = {};
  const ssize_t n = ::read(pipefd[0], buffer, sizeof buffer - 1);
  ::close(pipefd[0]);
  if (n <= 0) {
    r.error = "the child died (status " + std::to_string(status) + ")";
    return r;
  }
  int ok = 0, used = 0;
  unsigned long long hwm = 0;
  std::sscanf(buffer, "%d %lf %llu %n", &ok, &r.seconds, &hwm, &used);
  r.ok = ok == 1;
  r.hwmKb = hwm;
  r.error = buffer + used;
  return r;
}

uint64_t folderBytes(const std::string& dir, std::vector<std::string>* safetensors = nullptr) {
  uint64_t total = 0;
  for (const std::string& name : files::listDirectory(dir)) {
    const std::string p = files::join(dir, name);
    struct stat st;
    if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += uint64_t(st.st_size);
      if (safetensors && name.size() > 12 &&
          name.compare(name.size() - 12, 12, ".safetensors") == 0)
        safetensors->push_back(p);
    }
  }
  return total;
}

struct Row {
  std::string what;
  uint64_t inBytes = 0, outBytes = 0;
  double seconds = 0;
  uint64_t hwmKb = 0, anonKb = 0;
  bool child = false;
};

void printRow(const Row& r) {
  char mem[96] = "";
  if (r.child)
    std::snprintf(mem, sizeof mem, "%.0f MB | %.0f MB", double(r.hwmKb) / 1e3,
                  double(r.anonKb) / 1e3);
  else
    std::snprintf(mem, sizeof mem, "- | -");
  char out[32] = "-";
  if (r.outBytes) std::snprintf(out, sizeof out, "%.0f MB", mb(r.outBytes));
  std::printf("| %s | %.0f MB | %s | %.2f s | %.0f MB/s | %s |\n", r.what.c_str(), mb(r.inBytes),
              out, r.seconds, mb(r.inBytes) / r.seconds, mem);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Shape shape;
  std::string dir;
  uint64_t dataLimitMb = 512;
  int reps = 3;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) std::fprintf(stderr, "%s needs a value\n", a.c_str()), std::exit(2);
      return argv[++i];
    };
    if (a == "--layers") {
      shape.layers = std::strtoull(next(), nullptr, 10);
    } else if (a == "--dir") {
      dir = next();
    } else if (a == "--data-limit-mb") {
      dataLimitMb = std::strtoull(next(), nullptr, 10);
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(next()));
    } else if (a == "--keep") {
      keep = true;
    } else if (a == "--quick") {  // the ctest variant: a 2-layer, hidden-256 model
      shape = {256, 704, 1024, 4, 2, 2};
      reps = 1;
    } else {
      std::fprintf(stderr,
                   "usage: bench_io [--layers N] [--dir DIR] [--data-limit-mb MB] [--reps N] "
                   "[--keep] [--quick]\n");
      return 2;
    }
  }
  try {
    const bool ownDir = dir.empty();
    if (ownDir) {
      const char* tmp = std::getenv("TMPDIR");
      dir = files::makeTemporaryDirectory(files::join(tmp && *tmp ? tmp : "/tmp", "bench-io-"));
    } else {
      files::createDirectories(dir);
    }
    const std::string gguf = files::join(dir, "llama.gguf");
    const std::string hf = files::join(dir, "llama-bf16");
    const uint64_t limit = dataLimitMb << 20;

    auto t0 = Clock::now();
    const uint64_t ggufBytes = writeLlamaGguf(gguf, shape);
    std::printf("wrote %s: %.0f MB (%llu layers) in %.1f s\n", gguf.c_str(), mb(ggufBytes),
                static_cast<unsigned long long>(shape.layers), seconds(t0));

    std::vector<Row> rows;
    auto best = [&](const std::string& what, const std::function<uint64_t()>& f) {
      Row r{what};
      r.seconds = 1e30;
      for (int k = 0; k < reps; ++k) {
        const auto s = Clock::now();
        r.inBytes = f();
        r.seconds = std::min(r.seconds, seconds(s));
      }
      rows.push_back(r);
      printRow(r);
    };
    auto child = [&](const std::string& what, uint64_t inBytes, uint64_t lim,
                     const std::function<void()>& work, const std::string& out,
                     bool mayFail = false) {
      Row r{what, inBytes};
      r.child = true;
      r.seconds = 1e30;
      for (int k = 0; k < reps; ++k) {
        const ChildResult c = inChild(lim, work);
        if (!c.ok && mayFail) {
          std::printf("| %s | %.0f MB | fails: %s | | | %.0f MB | %.0f MB |\n", what.c_str(),
                      mb(inBytes), c.error.c_str(), double(c.hwmKb) / 1e3,
                      double(c.peakAnonKb) / 1e3);
          return;
        }
        if (!c.ok) throw fp4lab::Error(what + " failed: " + c.error);
        r.seconds = std::min(r.seconds, c.seconds);
        r.hwmKb = std::max(r.hwmKb, c.hwmKb);
        r.anonKb = std::max(r.anonKb, c.peakAnonKb);
      }
      r.outBytes = folderBytes(out);
      rows.push_back(r);
      printRow(r);
    };

    std::printf(
        "\n| step | input | output | time (best of %d) | input MB/s | VmHWM | peak RssAnon |\n",
        reps);
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    best("floor: read() the GGUF", [&] { return readFloor({gguf}); });
    best("floor: mmap + touch the GGUF", [&] { return mmapFloor({gguf}); });
    child(
        "import GGUF -> BF16 folder (no limit)", ggufBytes, 0,
        [&] {
          fp4lab::io::gguf::ImportOptions o;
          o.source = gguf, o.outputDir = hf, o.force = true;
          fp4lab::io::gguf::importGguf(o);
        },
        hf);
    child(
        "import under RLIMIT_DATA " + std::to_string(dataLimitMb) + " MB", ggufBytes, limit,
        [&] {
          fp4lab::io::gguf::ImportOptions o;
          o.source = gguf, o.outputDir = files::join(dir, "import-limited"), o.force = true;
          fp4lab::io::gguf::importGguf(o);
        },
        hf, true);

    std::vector<std::string> shards;
    folderBytes(hf, &shards);
    uint64_t hfTensorBytes = 0;
    for (const std::string& s : shards) {
      struct stat st;
      if (stat(s.c_str(), &st) == 0) hfTensorBytes += uint64_t(st.st_size);
    }
    best("floor: read() the BF16 safetensors", [&] { return readFloor(shards); });
    best("floor: mmap + touch the BF16 safetensors", [&] { return mmapFloor(shards); });
    struct Export {
      const char* label;
      fp4lab::exporter::Format format;
      bool verify;
    };
    const Export exports[] = {
        {"export modelopt-nvfp4 (read-back check)", fp4lab::exporter::Format::ModelOptNvfp4, true},
        {"export modelopt-nvfp4 --no-verify", fp4lab::exporter::Format::ModelOptNvfp4, false},
        {"export bf16 (read-back check)", fp4lab::exporter::Format::Bf16, true},
    };
    for (const Export& e : exports) {
      const std::string out =
          files::join(dir, std::string("export-") + fp4lab::exporter::formatName(e.format));
      char label[160];
      std::snprintf(label, sizeof label, "%s, RLIMIT_DATA %llu MB", e.label,
                    static_cast<unsigned long long>(dataLimitMb));
      child(
          label, hfTensorBytes, limit,
          [&] {
            fp4lab::exporter::Options o;
            o.modelDir = hf, o.outputDir = out, o.format = e.format, o.verify = e.verify;
            o.force = true;
            o.maxShardBytes = 2000000000ull;
            fp4lab::exporter::exportModel(o);
          },
          out);
    }
    std::printf(
        "\nmodel: %.0f MB GGUF, %.0f MB BF16 safetensors; RLIMIT_DATA for the exports "
        "%llu MB (%.0f%% of the BF16 model); sink %llu\n",
        mb(ggufBytes), mb(hfTensorBytes), static_cast<unsigned long long>(dataLimitMb),
        100.0 * double(limit) / double(hfTensorBytes),
        static_cast<unsigned long long>(g_sink % 10));
    if (ownDir && !keep) files::removeTree(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_io: %s\n", e.what());
    return 1;
  }
  return 0;
}
