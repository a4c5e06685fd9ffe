// The HDF5 layer of the run log, private to engine/log: schema 1's names and sizes, the call
// scope (one lock, HDF5's printing off), owned identifiers, record types, attributes, rows, files.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fp4lab::log::detail {

// ---- Names and sizes of schema 1 -----------------------------------------------------------

inline constexpr const char* kTrain = "/train";
inline constexpr const char* kEval = "/eval";
inline constexpr const char* kEvents = "/events";
inline constexpr const char* kQuant = "/quant";
inline constexpr const char* kQuantLayers = "/quant/layers";
inline constexpr const char* kQuantStep = "/quant/step";
inline constexpr const char* kQuantBlocks = "/quant/blocks";

inline constexpr const char* kEvalFixed[] = {"step", "tokens", "wall_s"};
inline constexpr const char* kQuantReserved[] = {"layers", "step", "blocks"};

inline constexpr size_t kEventBytes = 256;  // one event line, NUL-terminated: 255 usable bytes
inline constexpr size_t kMaxKindLength = 16;
inline constexpr size_t kChunkBytes = 64 * 1024;
inline constexpr hsize_t kMaxBlockChunkColumns = 16384;
inline constexpr double kFlushIntervalSeconds = 1.0;
// Metadata read attempts of a SWMR reader. The sleep between attempts doubles from 1 ns, so 24
// attempts wait about 17 ms in all: far longer than a concurrent write of one metadata block
// takes, and still quick to give up on a damaged file.
inline constexpr unsigned kSwmrReadAttempts = 24;

// Superblock (version 2 and 3) file consistency flags, byte 11 of the superblock.
inline constexpr unsigned kFlagWriteAccess = 0x01;
inline constexpr unsigned kFlagSwmrWriteAccess = 0x04;

// The in-memory and on-disk record of /train: packed, so both types share the offsets.
struct TrainRecord {
  int64_t step, tokens;
  double wallSeconds;
  float loss, lr, gradNorm, tokensPerSecond;
};
static_assert(sizeof(TrainRecord) == 40, "TrainRecord must be packed");

// ---- HDF5 call scope and errors ------------------------------------------------------------

// One lock for every HDF5 call made by this library: Debian's HDF5 is thread-safe, other builds
// may not be, and GUI worker threads may read several logs at once.
std::recursive_mutex& hdf5Mutex();

// Serializes and silences: HDF5's automatic error printing goes to stderr, which would spill
// into the CLI's output and the GUI's run console, so it is off while this library works (and
// restored afterwards for any other HDF5 user in the process). Failures become fp4lab::Error.
class Hdf5Scope {
 public:
  Hdf5Scope() : m_lock(hdf5Mutex()) {
    H5Eget_auto2(H5E_DEFAULT, &m_function, &m_data);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~Hdf5Scope() { H5Eset_auto2(H5E_DEFAULT, m_function, m_data); }
  Hdf5Scope(const Hdf5Scope&) = delete;
  Hdf5Scope& operator=(const Hdf5Scope&) = delete;

 private:
  std::lock_guard<std::recursive_mutex> m_lock;
  H5E_auto2_t m_function = nullptr;
  void* m_data = nullptr;
};

// The outermost and innermost messages of HDF5's error stack ("unable to open file: unable to
// lock file, errno = 11"): the innermost one usually names the actual cause.
std::string hdf5Detail();

[[noreturn]] void fail(const std::string& what, const std::string& where,
                       const std::string& hint = {});

// For failures of an HDF5 call: adds what HDF5 said.
[[noreturn]] void failH5(const std::string& what, const std::string& where,
                         const std::string& hint = {});

template <typename T>
T check(T result, const std::string& what, const std::string& where, const std::string& hint = {}) {
  if (result < 0) failH5(what, where, hint);
  return result;
}

std::string at(const std::string& path, const std::string& object);

// ---- Handles ----------------------------------------------------------------------------------

// An owned HDF5 identifier, closed with the matching H5?close.
class Hid {
 public:
  using Closer = herr_t (*)(hid_t);
  Hid() = default;
  Hid(hid_t id, Closer closer) : m_id(id), m_closer(closer) {}
  Hid(Hid&& other) noexcept
      : m_id(std::exchange(other.m_id, H5I_INVALID_HID)), m_closer(other.m_closer) {}
  Hid& operator=(Hid&& other) noexcept {
    if (this != &other) {
      reset();
      m_id = std::exchange(other.m_id, H5I_INVALID_HID);
      m_closer = other.m_closer;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }

  hid_t get() const { return m_id; }
  bool valid() const { return m_id >= 0; }
  herr_t reset() {
    herr_t result = 0;
    if (m_id >= 0 && m_closer) result = m_closer(m_id);
    m_id = H5I_INVALID_HID;
    return result;
  }

 private:
  hid_t m_id = H5I_INVALID_HID;
  Closer m_closer = nullptr;
};

Hid own(hid_t id, Hid::Closer closer, const std::string& what, const std::string& where,
        const std::string& hint = {});

// ---- Types -------------------------------------------------------------------------------------

Hid trainType(bool file);

inline const char* const kTrainFields[] = {"step", "tokens",    "wall_s",   "loss",
                                           "lr",   "grad_norm", "tok_per_s"};

size_t evalRecordSize(size_t columns);

// /eval: step i64, tokens i64, wall_s f64, then one f64 per column, all 8-byte aligned.
Hid evalType(const std::vector<std::string>& columns, bool file);

// Only the step field of a compound table: resume reads it to find where to cut.
Hid stepOnlyType();

Hid fixedStringType(size_t size, H5T_str_t padding);
Hid variableStringType();
std::string memberName(hid_t type, unsigned index);

// ---- Attributes -------------------------------------------------------------------------------

// H5Aexists answers false for a missing attribute but fails on a damaged object header: the
// latter must not read as "not a run log".
bool hasAttribute(hid_t object, const char* name, const std::string& where);

// Whether an absolute path like /quant/blocks/3 exists. Checked component by component because
// H5Lexists fails, rather than answering false, when a parent group is missing.
bool hasLink(hid_t file, const std::string& name, const std::string& path);

// Variable-length UTF-8 strings: no size limit (config_yaml), and h5py returns them as str.
void writeStringAttribute(hid_t object, const char* name, const std::string& value,
                          const std::string& where);
void writeInt64Attribute(hid_t object, const char* name, int64_t value, const std::string& where);

// Reads variable- or fixed-length string attributes (the latter from files made by other tools).
std::optional<std::string> readStringAttribute(hid_t object, const char* name,
                                               const std::string& where);
std::optional<int64_t> readInt64Attribute(hid_t object, const char* name, const std::string& where);

// ---- Rows --------------------------------------------------------------------------------------

// Rows of a dataset (its first dimension).
int64_t rowsOf(hid_t dataset, const std::string& where);
int64_t columnsOf(hid_t dataset, const std::string& where);

// Selects rows [first, first + count) of a rank-1 dataset (columns == 0) or of a rank-2 one;
// returns the file and memory dataspaces.
std::pair<Hid, Hid> selectRows(hid_t dataset, hsize_t first, hsize_t count, hsize_t columns,
                               const std::string& where);
void readRows(hid_t dataset, hsize_t first, hsize_t count, hsize_t columns, hid_t memoryType,
              void* buffer, const std::string& where);
void writeRows(hid_t dataset, hsize_t first, hsize_t count, hsize_t columns, hid_t memoryType,
               const void* buffer, const std::string& where);
void setRows(hid_t dataset, hsize_t rows, hsize_t columns, const std::string& where);

// Appending is H5Dset_extent plus a hyperslab write of the new rows.
void appendRows(hid_t dataset, hsize_t oldRows, hsize_t count, hsize_t columns, hid_t memoryType,
                const void* buffer, const std::string& where);

// [from, to) clamped to [0, rows).
std::pair<hsize_t, hsize_t> clampRange(int64_t from, int64_t to, int64_t rows);

hsize_t chunkRows(size_t bytesPerRow, hsize_t cap);

// An extendible chunked dataset with zero rows (and fixed `columns` when non-zero).
void createTable(hid_t location, const char* name, hid_t fileType, hsize_t columns,
                 hsize_t rowsPerChunk, hsize_t columnsPerChunk, hid_t fillType, const void* fill,
                 const std::string& path);

// ---- Files -------------------------------------------------------------------------------------

// What the first bytes say, before HDF5 sees the file: a missing or foreign file gets a precise
// error, and the write flags tell live/crashed writers apart.
struct FileProbe {
  int superblockVersion = -1;
  unsigned flags = 0;  // file consistency flags (superblock version >= 2 only)
};

FileProbe probeFile(const std::string& path);

// The latest format is what SWMR requires (and makes every piece of metadata checksummed, so a
// damaged file fails cleanly). File locking stays on but must not fail on file systems that
// lack it (NFS, some container overlays).
Hid fileAccess(bool clearStatusFlags, const std::string& path);

// Read-only, with SWMR when possible. A log whose non-SWMR writer died (flags set, no SWMR flag)
// is refused by SWMR_READ and opened without SWMR instead: nobody will write it any more.
Hid openReadOnly(const std::string& path, bool* swmr);

std::string hostName();

}  // namespace fp4lab::log::detail
