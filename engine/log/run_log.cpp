// The HDF5 run log (schema 1): writer (declare everything, then SWMR append), resume (truncate
// past a checkpoint), SWMR reader, writer-state probe. HDF5's C API only; see docs/log-schema.md.
#include "fp4lab/log/run_log.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#include "fp4lab/error.h"

namespace fp4lab::log {

namespace {

// ---- Names and sizes of schema 1 -----------------------------------------------------------

constexpr const char* kTrain = "/train";
constexpr const char* kEval = "/eval";
constexpr const char* kEvents = "/events";
constexpr const char* kQuant = "/quant";
constexpr const char* kQuantLayers = "/quant/layers";
constexpr const char* kQuantStep = "/quant/step";
constexpr const char* kQuantBlocks = "/quant/blocks";

constexpr const char* kEvalFixed[] = {"step", "tokens", "wall_s"};
constexpr const char* kQuantReserved[] = {"layers", "step", "blocks"};

constexpr size_t kEventBytes = 256;  // one event line, NUL-terminated: 255 usable bytes
constexpr size_t kMaxKindLength = 16;
constexpr size_t kChunkBytes = 64 * 1024;
constexpr hsize_t kMaxBlockChunkColumns = 16384;
constexpr double kFlushIntervalSeconds = 1.0;
// Metadata read attempts of a SWMR reader. The sleep between attempts doubles from 1 ns, so 24
// attempts wait about 17 ms in all: far longer than a concurrent write of one metadata block
// takes, and still quick to give up on a damaged file.
constexpr unsigned kSwmrReadAttempts = 24;

// Superblock (version 2 and 3) file consistency flags, byte 11 of the superblock.
constexpr unsigned kFlagWriteAccess = 0x01;
constexpr unsigned kFlagSwmrWriteAccess = 0x04;

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
std::recursive_mutex& hdf5Mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

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

herr_t collectDescription(unsigned, const H5E_error2_t* error, void* data) {
  auto* descriptions = static_cast<std::vector<std::string>*>(data);
  if (error->desc && *error->desc) descriptions->emplace_back(error->desc);
  return 0;
}

// The outermost and innermost messages of HDF5's error stack ("unable to open file: unable to
// lock file, errno = 11"): the innermost one usually names the actual cause.
std::string hdf5Detail() {
  std::vector<std::string> descriptions;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collectDescription, &descriptions);
  H5Eclear2(H5E_DEFAULT);
  if (descriptions.empty()) return {};
  if (descriptions.size() == 1) return descriptions.front();
  return descriptions.front() + ": " + descriptions.back();
}

[[noreturn]] void fail(const std::string& what, const std::string& where,
                       const std::string& hint = {}) {
  throw Error(what, where, hint);
}

// For failures of an HDF5 call: adds what HDF5 said.
[[noreturn]] void failH5(const std::string& what, const std::string& where,
                         const std::string& hint = {}) {
  const std::string detail = hdf5Detail();
  throw Error(detail.empty() ? what : what + " (HDF5: " + detail + ")", where, hint);
}

template <typename T>
T check(T result, const std::string& what, const std::string& where, const std::string& hint = {}) {
  if (result < 0) failH5(what, where, hint);
  return result;
}

std::string at(const std::string& path, const std::string& object) {
  return path + ", " + object;
}

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
        const std::string& hint = {}) {
  if (id < 0) failH5(what, where, hint);
  return Hid(id, closer);
}

// ---- Types -------------------------------------------------------------------------------------

Hid trainType(bool file) {
  const std::string where = "TrainRecord type";
  Hid type = own(H5Tcreate(H5T_COMPOUND, sizeof(TrainRecord)), H5Tclose, "H5Tcreate", where);
  const hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
  const hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
  const hid_t f32 = file ? H5T_IEEE_F32LE : H5T_NATIVE_FLOAT;
  check(H5Tinsert(type.get(), "step", HOFFSET(TrainRecord, step), i64), "H5Tinsert", where);
  check(H5Tinsert(type.get(), "tokens", HOFFSET(TrainRecord, tokens), i64), "H5Tinsert", where);
  check(H5Tinsert(type.get(), "wall_s", HOFFSET(TrainRecord, wallSeconds), f64), "H5Tinsert",
        where);
  check(H5Tinsert(type.get(), "loss", HOFFSET(TrainRecord, loss), f32), "H5Tinsert", where);
  check(H5Tinsert(type.get(), "lr", HOFFSET(TrainRecord, lr), f32), "H5Tinsert", where);
  check(H5Tinsert(type.get(), "grad_norm", HOFFSET(TrainRecord, gradNorm), f32), "H5Tinsert",
        where);
  check(H5Tinsert(type.get(), "tok_per_s", HOFFSET(TrainRecord, tokensPerSecond), f32), "H5Tinsert",
        where);
  return type;
}

const char* const kTrainFields[] = {"step", "tokens",    "wall_s",   "loss",
                                    "lr",   "grad_norm", "tok_per_s"};

size_t evalRecordSize(size_t columns) {
  return 8 * (3 + columns);
}

// /eval: step i64, tokens i64, wall_s f64, then one f64 per column, all 8-byte aligned.
Hid evalType(const std::vector<std::string>& columns, bool file) {
  const std::string where = "eval record type";
  Hid type =
      own(H5Tcreate(H5T_COMPOUND, evalRecordSize(columns.size())), H5Tclose, "H5Tcreate", where);
  const hid_t i64 = file ? H5T_STD_I64LE : H5T_NATIVE_INT64;
  const hid_t f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
  check(H5Tinsert(type.get(), "step", 0, i64), "H5Tinsert", where);
  check(H5Tinsert(type.get(), "tokens", 8, i64), "H5Tinsert", where);
  check(H5Tinsert(type.get(), "wall_s", 16, f64), "H5Tinsert", where);
  for (size_t i = 0; i < columns.size(); ++i)
    check(H5Tinsert(type.get(), columns[i].c_str(), 24 + 8 * i, f64), "H5Tinsert", where);
  return type;
}

// Only the step field of a compound table: resume reads it to find where to cut.
Hid stepOnlyType() {
  Hid type = own(H5Tcreate(H5T_COMPOUND, sizeof(int64_t)), H5Tclose, "H5Tcreate", "step type");
  check(H5Tinsert(type.get(), "step", 0, H5T_NATIVE_INT64), "H5Tinsert", "step type");
  return type;
}

Hid fixedStringType(size_t size, H5T_str_t padding) {
  Hid type = own(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", "string type");
  check(H5Tset_size(type.get(), size), "H5Tset_size", "string type");
  check(H5Tset_strpad(type.get(), padding), "H5Tset_strpad", "string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", "string type");
  return type;
}

Hid variableStringType() {
  Hid type = own(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", "string type");
  check(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size", "string type");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", "string type");
  return type;
}

std::string memberName(hid_t type, unsigned index) {
  char* raw = H5Tget_member_name(type, index);
  if (!raw) return {};
  std::string name(raw);
  H5free_memory(raw);
  return name;
}

// ---- Attributes -------------------------------------------------------------------------------

// H5Aexists answers false for a missing attribute but fails on a damaged object header: the
// latter must not read as "not a run log".
bool hasAttribute(hid_t object, const char* name, const std::string& where) {
  return check(H5Aexists(object, name), std::string("cannot read attribute ") + name, where,
               "the file is damaged") > 0;
}

// Whether an absolute path like /quant/blocks/3 exists. Checked component by component because
// H5Lexists fails, rather than answering false, when a parent group is missing.
bool hasLink(hid_t file, const std::string& name, const std::string& path) {
  for (size_t end = name.find('/', 1);; end = name.find('/', end + 1)) {
    const std::string prefix = name.substr(0, end);
    if (check(H5Lexists(file, prefix.c_str(), H5P_DEFAULT), "cannot look up " + prefix,
              at(path, prefix), "the file is damaged") <= 0)
      return false;
    if (end == std::string::npos) return true;
  }
}

// Variable-length UTF-8 strings: no size limit (config_yaml), and h5py returns them as str.
void writeStringAttribute(hid_t object, const char* name, const std::string& value,
                          const std::string& where) {
  if (hasAttribute(object, name, where)) check(H5Adelete(object, name), "H5Adelete", where);
  Hid type = variableStringType();
  Hid space = own(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", where);
  Hid attribute = own(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                      H5Aclose, std::string("cannot create attribute ") + name, where);
  const char* text = value.c_str();
  check(H5Awrite(attribute.get(), type.get(), &text), std::string("cannot write attribute ") + name,
        where);
}

void writeInt64Attribute(hid_t object, const char* name, int64_t value, const std::string& where) {
  if (hasAttribute(object, name, where)) check(H5Adelete(object, name), "H5Adelete", where);
  Hid space = own(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", where);
  Hid attribute =
      own(H5Acreate2(object, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
          std::string("cannot create attribute ") + name, where);
  check(H5Awrite(attribute.get(), H5T_NATIVE_INT64, &value),
        std::string("cannot write attribute ") + name, where);
}

// Reads variable- or fixed-length string attributes (the latter from files made by other tools).
std::optional<std::string> readStringAttribute(hid_t object, const char* name,
                                               const std::string& where) {
  if (!hasAttribute(object, name, where)) return std::nullopt;
  const std::string what = std::string("cannot read attribute ") + name;
  Hid attribute = own(H5Aopen(object, name, H5P_DEFAULT), H5Aclose, what, where);
  Hid type = own(H5Aget_type(attribute.get()), H5Tclose, what, where);
  if (H5Tget_class(type.get()) != H5T_STRING)
    fail("attribute " + std::string(name) + " is not a string", where,
         "damaged or not an fp4lab run log");
  if (H5Tis_variable_str(type.get()) > 0) {
    Hid memory = variableStringType();
    char* text = nullptr;
    check(H5Aread(attribute.get(), memory.get(), &text), what, where);
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  const size_t size = H5Tget_size(type.get());
  std::string buffer(size + 1, '\0');
  check(H5Aread(attribute.get(), type.get(), buffer.data()), what, where);
  buffer.resize(std::strlen(buffer.c_str()));
  return buffer;
}

std::optional<int64_t> readInt64Attribute(hid_t object, const char* name,
                                          const std::string& where) {
  if (!hasAttribute(object, name, where)) return std::nullopt;
  const std::string what = std::string("cannot read attribute ") + name;
  Hid attribute = own(H5Aopen(object, name, H5P_DEFAULT), H5Aclose, what, where);
  Hid type = own(H5Aget_type(attribute.get()), H5Tclose, what, where);
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    fail("attribute " + std::string(name) + " is not an integer", where,
         "damaged or not an fp4lab run log");
  int64_t value = 0;
  check(H5Aread(attribute.get(), H5T_NATIVE_INT64, &value), what, where);
  return value;
}

// ---- Rows --------------------------------------------------------------------------------------

// Rows of a dataset (its first dimension).
int64_t rowsOf(hid_t dataset, const std::string& where) {
  Hid space = own(H5Dget_space(dataset), H5Sclose, "cannot read the extent", where);
  hsize_t dims[2] = {0, 0};
  check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), "cannot read the extent", where);
  return static_cast<int64_t>(dims[0]);
}

int64_t columnsOf(hid_t dataset, const std::string& where) {
  Hid space = own(H5Dget_space(dataset), H5Sclose, "cannot read the extent", where);
  hsize_t dims[2] = {0, 0};
  if (check(H5Sget_simple_extent_ndims(space.get()), "cannot read the rank", where) != 2)
    fail("expected a two-dimensional dataset", where, "damaged or not an fp4lab run log");
  check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), "cannot read the extent", where);
  return static_cast<int64_t>(dims[1]);
}

// Selects rows [first, first + count) of a rank-1 dataset (columns == 0) or of a rank-2 one;
// returns the file and memory dataspaces.
std::pair<Hid, Hid> selectRows(hid_t dataset, hsize_t first, hsize_t count, hsize_t columns,
                               const std::string& where) {
  const int rank = columns == 0 ? 1 : 2;
  const hsize_t start[2] = {first, 0};
  const hsize_t size[2] = {count, columns};
  Hid fileSpace = own(H5Dget_space(dataset), H5Sclose, "H5Dget_space", where);
  check(H5Sselect_hyperslab(fileSpace.get(), H5S_SELECT_SET, start, nullptr, size, nullptr),
        "cannot select rows", where);
  Hid memorySpace = own(H5Screate_simple(rank, size, nullptr), H5Sclose, "H5Screate", where);
  return {std::move(fileSpace), std::move(memorySpace)};
}

void readRows(hid_t dataset, hsize_t first, hsize_t count, hsize_t columns, hid_t memoryType,
              void* buffer, const std::string& where) {
  if (count == 0) return;
  const auto [fileSpace, memorySpace] = selectRows(dataset, first, count, columns, where);
  check(H5Dread(dataset, memoryType, memorySpace.get(), fileSpace.get(), H5P_DEFAULT, buffer),
        "cannot read rows", where, "the file may be damaged");
}

void writeRows(hid_t dataset, hsize_t first, hsize_t count, hsize_t columns, hid_t memoryType,
               const void* buffer, const std::string& where) {
  if (count == 0) return;
  const auto [fileSpace, memorySpace] = selectRows(dataset, first, count, columns, where);
  check(H5Dwrite(dataset, memoryType, memorySpace.get(), fileSpace.get(), H5P_DEFAULT, buffer),
        "cannot write rows", where, "is the disk full?");
}

void setRows(hid_t dataset, hsize_t rows, hsize_t columns, const std::string& where) {
  const hsize_t dims[2] = {rows, columns};
  check(H5Dset_extent(dataset, dims), "cannot change the number of rows", where);
}

// Appending is H5Dset_extent plus a hyperslab write of the new rows.
void appendRows(hid_t dataset, hsize_t oldRows, hsize_t count, hsize_t columns, hid_t memoryType,
                const void* buffer, const std::string& where) {
  setRows(dataset, oldRows + count, columns, where);
  writeRows(dataset, oldRows, count, columns, memoryType, buffer, where);
}

// [from, to) clamped to [0, rows).
std::pair<hsize_t, hsize_t> clampRange(int64_t from, int64_t to, int64_t rows) {
  from = std::clamp<int64_t>(from, 0, rows);
  to = std::clamp<int64_t>(to, from, rows);
  return {static_cast<hsize_t>(from), static_cast<hsize_t>(to - from)};
}

hsize_t chunkRows(size_t bytesPerRow, hsize_t cap) {
  return std::clamp<hsize_t>(kChunkBytes / std::max<size_t>(bytesPerRow, 1), 1, cap);
}

// An extendible chunked dataset with zero rows (and fixed `columns` when non-zero).
void createTable(hid_t location, const char* name, hid_t fileType, hsize_t columns,
                 hsize_t rowsPerChunk, hsize_t columnsPerChunk, hid_t fillType, const void* fill,
                 const std::string& path) {
  const std::string where = at(path, name);
  const int rank = columns == 0 ? 1 : 2;
  const hsize_t dims[2] = {0, columns};
  const hsize_t maxDims[2] = {H5S_UNLIMITED, columns};
  const hsize_t chunk[2] = {rowsPerChunk, columnsPerChunk};
  Hid space = own(H5Screate_simple(rank, dims, maxDims), H5Sclose, "H5Screate_simple", where);
  Hid create = own(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate", where);
  check(H5Pset_chunk(create.get(), rank, chunk), "H5Pset_chunk", where);
  if (fill) check(H5Pset_fill_value(create.get(), fillType, fill), "H5Pset_fill_value", where);
  Hid dataset =
      own(H5Dcreate2(location, name, fileType, space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT),
          H5Dclose, "cannot create the dataset", where);
}

// ---- Files -------------------------------------------------------------------------------------

// What the first bytes say, before HDF5 sees the file: a missing or foreign file gets a precise
// error, and the write flags tell live/crashed writers apart.
struct FileProbe {
  int superblockVersion = -1;
  unsigned flags = 0;  // file consistency flags (superblock version >= 2 only)
};

FileProbe probeFile(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)
    fail(std::string("cannot open the run log: ") + std::strerror(errno), path,
         errno == ENOENT ? "no such file: check the run folder" : "");
  if (!S_ISREG(info.st_mode)) fail("not a regular file", path, "expected a run's log.h5");
  FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) fail(std::string("cannot open the run log: ") + std::strerror(errno), path);
  static const unsigned char kSignature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  unsigned char head[12] = {};
  const size_t got = std::fread(head, 1, sizeof(head), file);
  std::fclose(file);
  // HDF5 also looks at offsets 512, 1024, ... (user blocks); fp4lab logs never have one.
  if (got < sizeof(head) || std::memcmp(head, kSignature, sizeof(kSignature)) != 0)
    fail("not an HDF5 file", path, "not an fp4lab run log (expected a run's log.h5)");
  FileProbe probe;
  probe.superblockVersion = head[8];
  if (probe.superblockVersion >= 2) probe.flags = head[11];
  return probe;
}

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

// The latest format is what SWMR requires (and makes every piece of metadata checksummed, so a
// damaged file fails cleanly). File locking stays on but must not fail on file systems that
// lack it (NFS, some container overlays).
Hid fileAccess(bool clearStatusFlags, const std::string& path) {
  Hid access = own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate", path);
  check(H5Pset_libver_bounds(access.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST),
        "H5Pset_libver_bounds", path);
  check(H5Pset_file_locking(access.get(), true, true), "H5Pset_file_locking", path);
  // SWMR readers retry a metadata read whose checksum fails (it may be torn by a concurrent
  // write), sleeping twice as long each time: HDF5's default of 100 attempts turns one damaged
  // block into a hang of hours. See kSwmrReadAttempts.
  check(H5Pset_metadata_read_attempts(access.get(), kSwmrReadAttempts),
        "H5Pset_metadata_read_attempts", path);
  if (clearStatusFlags) {
    // HDF5's private property behind `h5clear -s`: the only way to open a file whose writer died
    // with the write flags set (read-only opens never write the cleared flags back).
    hbool_t clear = true;
    check(H5Pset(access.get(), "clear_status_flags", &clear), "cannot set clear_status_flags",
          path);
  }
  return access;
}

// Read-only, with SWMR when possible. A log whose non-SWMR writer died (flags set, no SWMR flag)
// is refused by SWMR_READ and opened without SWMR instead: nobody will write it any more.
Hid openReadOnly(const std::string& path, bool* swmr) {
  const FileProbe probe = probeFile(path);
  Hid access = fileAccess(false, path);
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, access.get());
  if (file >= 0) {
    *swmr = true;
    return Hid(file, H5Fclose);
  }
  const std::string swmrDetail = hdf5Detail();
  Hid cleared = fileAccess(true, path);
  file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, cleared.get());
  if (file >= 0) {
    *swmr = false;
    return Hid(file, H5Fclose);
  }
  hdf5Detail();
  const bool plainWriter =
      (probe.flags & kFlagWriteAccess) && !(probe.flags & kFlagSwmrWriteAccess);
  fail("cannot open the run log for reading" +
           (swmrDetail.empty() ? std::string() : " (HDF5: " + swmrDetail + ")"),
       path,
       plainWriter ? "is another process writing it? A create or resume holds the file "
                     "without SWMR for a moment: retry"
                   : "the file is damaged or not an fp4lab run log");
}

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return {};
  return name;
}

std::string utcNow(bool milliseconds) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[40];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &parts);
  std::string result = text;
  if (milliseconds) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
    std::snprintf(text, sizeof(text), ".%03d", static_cast<int>(ms.count() % 1000));
    result += text;
  }
  return result + "Z";
}

// ---- Layout: the datasets of an open log and the schema they imply -----------------------------

struct Layout {
  Hid train, eval, events, quantStep;
  std::vector<Hid> quantMetrics;  // schema.quantMetrics order
  std::vector<Hid> quantBlocks;   // one per layer when /quant/blocks exists; invalid where B_l = 0
  RunLogSchema schema;
  size_t eventBytes = kEventBytes;
};

Hid openDataset(hid_t file, const std::string& name, const std::string& path) {
  if (!hasLink(file, name, path))
    fail("missing dataset " + name, path, "damaged or not an fp4lab run log");
  return own(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset",
             at(path, name), "damaged or not an fp4lab run log");
}

Hid typeOf(hid_t dataset, const std::string& where) {
  return own(H5Dget_type(dataset), H5Tclose, "cannot read the type", where);
}

std::vector<std::string> readFixedStrings(hid_t dataset, hsize_t count, const std::string& where) {
  Hid type = typeOf(dataset, where);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
    fail("expected fixed-length strings", where, "damaged or not an fp4lab run log");
  const size_t size = H5Tget_size(type.get());
  std::vector<char> buffer(count * size + 1, '\0');
  readRows(dataset, 0, count, 0, type.get(), buffer.data(), where);
  std::vector<std::string> strings;
  strings.reserve(count);
  for (hsize_t i = 0; i < count; ++i) {
    const char* text = buffer.data() + i * size;
    strings.emplace_back(text, strnlen(text, size));
  }
  return strings;
}

// Link names of a group in creation order (the schema's metric order), or by name for groups
// made without creation-order tracking.
std::vector<std::string> linkNames(hid_t group, const std::string& where) {
  H5G_info_t info{};
  check(H5Gget_info(group, &info), "cannot list the group", where);
  const H5_index_t index = H5Lget_name_by_idx(group, ".", H5_INDEX_CRT_ORDER, H5_ITER_INC, 0,
                                              nullptr, 0, H5P_DEFAULT) >= 0
                               ? H5_INDEX_CRT_ORDER
                               : H5_INDEX_NAME;
  hdf5Detail();  // the probe above may leave an error on the stack
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t length =
        check(H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
              "cannot list the group", where);
    std::string name(static_cast<size_t>(length) + 1, '\0');
    check(H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, name.data(), name.size(),
                             H5P_DEFAULT),
          "cannot list the group", where);
    name.resize(static_cast<size_t>(length));
    names.push_back(name);
  }
  return names;
}

// Opens every dataset of schema 1 and checks their shapes and types, so readers and resume fail
// at open with a precise message rather than halfway through a read.
Layout openLayout(hid_t file, const std::string& path) {
  Layout layout;
  const std::string damaged = "damaged or not an fp4lab run log";

  layout.train = openDataset(file, kTrain, path);
  {
    Hid type = typeOf(layout.train.get(), at(path, kTrain));
    if (H5Tget_class(type.get()) != H5T_COMPOUND)
      fail("expected a compound table", at(path, kTrain), damaged);
    for (const char* field : kTrainFields)
      if (H5Tget_member_index(type.get(), field) < 0)
        fail(std::string("missing field ") + field, at(path, kTrain), damaged);
  }

  layout.eval = openDataset(file, kEval, path);
  {
    Hid type = typeOf(layout.eval.get(), at(path, kEval));
    if (H5Tget_class(type.get()) != H5T_COMPOUND)
      fail("expected a compound table", at(path, kEval), damaged);
    const int members = H5Tget_nmembers(type.get());
    if (members < 3) fail("expected step, tokens, wall_s and columns", at(path, kEval), damaged);
    for (int i = 0; i < members; ++i) {
      const std::string name = memberName(type.get(), static_cast<unsigned>(i));
      if (i < 3) {
        if (name != kEvalFixed[i])
          fail("field " + std::to_string(i) + " is '" + name + "', expected " + kEvalFixed[i],
               at(path, kEval), damaged);
      } else {
        layout.schema.evalColumns.push_back(name);
      }
    }
  }

  layout.events = openDataset(file, kEvents, path);
  {
    Hid type = typeOf(layout.events.get(), at(path, kEvents));
    if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) > 0)
      fail("expected fixed-length strings", at(path, kEvents), damaged);
    layout.eventBytes = H5Tget_size(type.get());
  }

  Hid layers = openDataset(file, kQuantLayers, path);
  layout.schema.quantLayers = readFixedStrings(
      layers.get(), rowsOf(layers.get(), at(path, kQuantLayers)), at(path, kQuantLayers));
  const int64_t layerCount = static_cast<int64_t>(layout.schema.quantLayers.size());
  layout.quantStep = openDataset(file, kQuantStep, path);

  Hid quant = own(H5Gopen2(file, kQuant, H5P_DEFAULT), H5Gclose, "cannot open group",
                  at(path, kQuant), damaged);
  for (const std::string& name : linkNames(quant.get(), at(path, kQuant))) {
    if (std::find(std::begin(kQuantReserved), std::end(kQuantReserved), name) !=
        std::end(kQuantReserved))
      continue;
    const std::string full = std::string(kQuant) + "/" + name;
    Hid metric = openDataset(file, full, path);
    if (columnsOf(metric.get(), at(path, full)) != layerCount)
      fail("expected one column per layer (" + std::to_string(layerCount) + ")", at(path, full),
           damaged);
    layout.schema.quantMetrics.push_back(name);
    layout.quantMetrics.push_back(std::move(metric));
  }

  if (hasLink(file, kQuantBlocks, path)) {
    for (int64_t layer = 0; layer < layerCount; ++layer) {
      const std::string full = std::string(kQuantBlocks) + "/" + std::to_string(layer);
      if (hasLink(file, full, path)) {
        Hid blocks = openDataset(file, full, path);
        layout.schema.blocksPerLayer.push_back(columnsOf(blocks.get(), at(path, full)));
        layout.quantBlocks.push_back(std::move(blocks));
      } else {
        layout.schema.blocksPerLayer.push_back(0);
        layout.quantBlocks.emplace_back();
      }
    }
  }
  return layout;
}

// Every dataset of a layout, for refresh.
std::vector<hid_t> allDatasets(const Layout& layout) {
  std::vector<hid_t> ids = {layout.train.get(), layout.eval.get(), layout.events.get(),
                            layout.quantStep.get()};
  for (const Hid& metric : layout.quantMetrics) ids.push_back(metric.get());
  for (const Hid& blocks : layout.quantBlocks)
    if (blocks.valid()) ids.push_back(blocks.get());
  return ids;
}

// Rows present in /quant/step and in every other /quant dataset: a reader may refresh between
// two datasets of one appendQuant, and a crashed writer may have stopped halfway through one.
int64_t completeQuantRows(const Layout& layout, const std::string& path) {
  int64_t rows = rowsOf(layout.quantStep.get(), at(path, kQuantStep));
  for (const Hid& metric : layout.quantMetrics)
    rows = std::min(rows, rowsOf(metric.get(), at(path, kQuant)));
  for (const Hid& blocks : layout.quantBlocks)
    if (blocks.valid()) rows = std::min(rows, rowsOf(blocks.get(), at(path, kQuantBlocks)));
  return rows;
}

RootAttributes readRootAttributes(hid_t file, const std::string& path) {
  const std::optional<int64_t> version = readInt64Attribute(file, "schema_version", path);
  if (!version)
    fail("not an fp4lab run log (no schema_version attribute)", path,
         "expected a run's log.h5 written by fp4lab");
  if (*version < 1 || *version > kSchemaVersion)
    fail("run log schema " + std::to_string(*version) + " is not supported (this build reads " +
             std::to_string(kSchemaVersion) + ")",
         path, *version > kSchemaVersion ? "written by a newer fp4lab: update fp4lab" : "");
  RootAttributes attributes;
  attributes.schemaVersion = static_cast<int>(*version);
  attributes.runId = readStringAttribute(file, "run_id", path).value_or("");
  attributes.recipe = readStringAttribute(file, "recipe", path).value_or("");
  attributes.format = readStringAttribute(file, "format", path).value_or("");
  attributes.createdUtc = readStringAttribute(file, "created_utc", path).value_or("");
  attributes.configYaml = readStringAttribute(file, "config_yaml", path).value_or("");
  return attributes;
}

void writeWriterIdentity(hid_t file, const std::string& path) {
  writeInt64Attribute(file, "writer_pid", static_cast<int64_t>(::getpid()), path);
  writeStringAttribute(file, "writer_host", hostName(), path);
}

// ---- Validation --------------------------------------------------------------------------------

void checkNames(const std::vector<std::string>& names, const char* what,
                const std::vector<std::string>& reserved, const std::string& path) {
  std::set<std::string> seen;
  for (const std::string& name : names) {
    if (name.empty()) fail(std::string("empty name in ") + what, path);
    if (name.find('/') != std::string::npos || name == "." || name.find('\0') != std::string::npos)
      fail(std::string("invalid name '") + name + "' in " + what, path,
           "names must not contain '/' or NUL");
    if (std::find(reserved.begin(), reserved.end(), name) != reserved.end())
      fail(std::string("reserved name '") + name + "' in " + what, path);
    if (!seen.insert(name).second)
      fail(std::string("duplicate name '") + name + "' in " + what, path);
  }
}

void validate(const RootAttributes& attributes, const RunLogSchema& schema,
              const std::string& path) {
  if (attributes.schemaVersion != kSchemaVersion)
    fail("cannot write schema " + std::to_string(attributes.schemaVersion), path,
         "this build writes schema " + std::to_string(kSchemaVersion));
  checkNames(schema.evalColumns, "evalColumns", {"step", "tokens", "wall_s"}, path);
  checkNames(schema.quantLayers, "quantLayers", {}, path);
  checkNames(schema.quantMetrics, "quantMetrics", {"layers", "step", "blocks"}, path);
  if (schema.quantLayers.empty() && !schema.quantMetrics.empty())
    fail("quantMetrics given but no quantLayers", path,
         "a run that quantizes no layer logs no quant metrics: pass empty quantMetrics");
  if (!schema.blocksPerLayer.empty()) {
    if (schema.blocksPerLayer.size() != schema.quantLayers.size())
      fail("blocksPerLayer has " + std::to_string(schema.blocksPerLayer.size()) + " entries for " +
               std::to_string(schema.quantLayers.size()) + " layers",
           path, "give one block count per quantized layer, or none");
    for (int64_t blocks : schema.blocksPerLayer)
      if (blocks < 0) fail("negative block count in blocksPerLayer", path);
  }
}

bool validKind(const std::string& kind) {
  if (kind.empty() || kind.size() > kMaxKindLength) return false;
  return std::all_of(kind.begin(), kind.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// "<UTC> <kind> <text>" on one line, at most `limit` bytes, never cut inside a UTF-8 sequence.
std::string eventLine(const std::string& kind, const std::string& text, size_t limit) {
  std::string line = utcNow(true) + " " + kind + " " + text;
  for (char& c : line)
    if (c == '\n' || c == '\r' || c == '\t' || c == '\0') c = ' ';
  if (line.size() > limit) {
    size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
    line.resize(cut);
  }
  return line;
}

}  // namespace

// ================================ RunLogWriter ===================================================

struct RunLogWriter::Impl {
  // The impl of a writer that is open, else an fp4lab::Error.
  static Impl& opened(const std::unique_ptr<Impl>& impl);

  std::string path;
  Hid file;
  Layout layout;
  Hid trainMemory, evalMemory, eventMemory;
  int64_t trainRows = 0, evalRows = 0, quantRows = 0, eventRows = 0;
  int64_t lastTrainStep = INT64_MIN, lastEvalStep = INT64_MIN, lastQuantStep = INT64_MIN;
  std::chrono::steady_clock::time_point lastFlush = std::chrono::steady_clock::now();

  // Opens the datasets of the (SWMR-writing) file and learns the row counts and last steps.
  void attach() {
    layout = openLayout(file.get(), path);
    trainMemory = trainType(false);
    evalMemory = evalType(layout.schema.evalColumns, false);
    eventMemory = fixedStringType(layout.eventBytes, H5T_STR_NULLTERM);
    trainRows = rowsOf(layout.train.get(), at(path, kTrain));
    evalRows = rowsOf(layout.eval.get(), at(path, kEval));
    eventRows = rowsOf(layout.events.get(), at(path, kEvents));
    quantRows = completeQuantRows(layout, path);
    lastTrainStep = lastStep(layout.train.get(), trainRows, true, kTrain);
    lastEvalStep = lastStep(layout.eval.get(), evalRows, true, kEval);
    lastQuantStep = lastStep(layout.quantStep.get(), quantRows, false, kQuantStep);
  }

  int64_t lastStep(hid_t dataset, int64_t rows, bool compound, const char* name) const {
    if (rows == 0) return INT64_MIN;
    int64_t step = 0;
    Hid type = compound ? stepOnlyType() : Hid();
    readRows(dataset, static_cast<hsize_t>(rows - 1), 1, 0,
             compound ? type.get() : H5T_NATIVE_INT64, &step, at(path, name));
    return step;
  }

  void checkStep(int64_t step, int64_t last, const char* table) const {
    if (step < last)
      fail("step " + std::to_string(step) + " comes after step " + std::to_string(last),
           at(path, table),
           "steps must not decrease; to go back to a checkpoint, resume() the log");
  }

  void flushNow() {
    check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), "cannot flush the run log", path,
          "is the disk full?");
    lastFlush = std::chrono::steady_clock::now();
  }

  void flushIfDue() {
    const std::chrono::duration<double> since = std::chrono::steady_clock::now() - lastFlush;
    if (since.count() >= kFlushIntervalSeconds) flushNow();
  }

  void appendEvent(const std::string& kind, const std::string& text) {
    if (!validKind(kind))
      fail("invalid event kind '" + kind + "'", at(path, kEvents),
           "use [a-z0-9_]{1,16}: start, resume, checkpoint, warning, end");
    std::vector<char> record(layout.eventBytes, '\0');
    const std::string line = eventLine(kind, text, layout.eventBytes - 1);
    std::memcpy(record.data(), line.data(), line.size());
    appendRows(layout.events.get(), static_cast<hsize_t>(eventRows), 1, 0, eventMemory.get(),
               record.data(), at(path, kEvents));
    ++eventRows;
  }
};

namespace {

// Declares everything schema 1 holds, before SWMR writing starts.
void declareLog(hid_t file, const RootAttributes& attributes, const RunLogSchema& schema,
                const std::string& path) {
  writeInt64Attribute(file, "schema_version", kSchemaVersion, path);
  writeStringAttribute(file, "run_id", attributes.runId, path);
  writeStringAttribute(file, "recipe", attributes.recipe, path);
  writeStringAttribute(file, "format", attributes.format, path);
  writeStringAttribute(file, "created_utc",
                       attributes.createdUtc.empty() ? utcNow(false) : attributes.createdUtc, path);
  writeStringAttribute(file, "config_yaml", attributes.configYaml, path);
  writeWriterIdentity(file, path);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const double nanD = std::numeric_limits<double>::quiet_NaN();
  // Fill values mark rows a reader might see before their data (step -1, NaN): never a fake 0.
  {
    Hid fileType = trainType(true);
    Hid memory = trainType(false);
    const TrainRecord fill{-1, -1, nanD, nan, nan, nan, nan};
    createTable(file, kTrain, fileType.get(), 0, chunkRows(sizeof(TrainRecord), 256), 0,
                memory.get(), &fill, path);
  }
  {
    const size_t columns = schema.evalColumns.size();
    Hid fileType = evalType(schema.evalColumns, true);
    Hid memory = evalType(schema.evalColumns, false);
    std::vector<unsigned char> fill(evalRecordSize(columns));
    const int64_t minusOne = -1;
    std::memcpy(fill.data(), &minusOne, 8);
    std::memcpy(fill.data() + 8, &minusOne, 8);
    for (size_t i = 0; i < columns + 1; ++i) std::memcpy(fill.data() + 16 + 8 * i, &nanD, 8);
    createTable(file, kEval, fileType.get(), 0, chunkRows(fill.size(), 64), 0, memory.get(),
                fill.data(), path);
  }
  {
    Hid type = fixedStringType(kEventBytes, H5T_STR_NULLTERM);
    createTable(file, kEvents, type.get(), 0, chunkRows(kEventBytes, 64), 0, -1, nullptr, path);
  }

  // /quant tracks creation order so the metrics come back in schema order.
  Hid groupCreate = own(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "H5Pcreate", path);
  check(
      H5Pset_link_creation_order(groupCreate.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
      "H5Pset_link_creation_order", path);
  Hid quant = own(H5Gcreate2(file, kQuant, H5P_DEFAULT, groupCreate.get(), H5P_DEFAULT), H5Gclose,
                  "cannot create group", at(path, kQuant));
  {
    const auto& layers = schema.quantLayers;
    size_t longest = 1;
    for (const std::string& name : layers) longest = std::max(longest, name.size());
    Hid type = fixedStringType(longest, H5T_STR_NULLPAD);
    const hsize_t dims[1] = {layers.size()};
    Hid space = own(H5Screate_simple(1, dims, nullptr), H5Sclose, "H5Screate_simple", path);
    Hid dataset = own(H5Dcreate2(file, kQuantLayers, type.get(), space.get(), H5P_DEFAULT,
                                 H5P_DEFAULT, H5P_DEFAULT),
                      H5Dclose, "cannot create the dataset", at(path, kQuantLayers));
    if (!layers.empty()) {
      std::vector<char> buffer(layers.size() * longest, '\0');
      for (size_t i = 0; i < layers.size(); ++i)
        std::memcpy(buffer.data() + i * longest, layers[i].data(), layers[i].size());
      check(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()),
            "cannot write the layer names", at(path, kQuantLayers));
    }
  }
  const int64_t minusOne = -1;
  createTable(file, kQuantStep, H5T_STD_I64LE, 0, 64, 0, H5T_NATIVE_INT64, &minusOne, path);
  const hsize_t layerCount = schema.quantLayers.size();
  for (const std::string& metric : schema.quantMetrics) {
    const std::string name = std::string(kQuant) + "/" + metric;
    createTable(file, name.c_str(), H5T_IEEE_F32LE, layerCount, chunkRows(4 * layerCount, 64),
                layerCount, H5T_NATIVE_FLOAT, &nan, path);
  }
  if (!schema.blocksPerLayer.empty()) {
    Hid blocks = own(H5Gcreate2(file, kQuantBlocks, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                     H5Gclose, "cannot create group", at(path, kQuantBlocks));
    for (size_t layer = 0; layer < schema.blocksPerLayer.size(); ++layer) {
      const hsize_t columns = static_cast<hsize_t>(schema.blocksPerLayer[layer]);
      if (columns == 0) continue;
      const std::string name = std::string(kQuantBlocks) + "/" + std::to_string(layer);
      const hsize_t chunkColumns = std::min(columns, kMaxBlockChunkColumns);
      createTable(file, name.c_str(), H5T_IEEE_F32LE, columns, chunkRows(4 * chunkColumns, 64),
                  chunkColumns, H5T_NATIVE_FLOAT, &nan, path);
      Hid dataset = own(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset",
                        at(path, name));
      writeStringAttribute(dataset.get(), "layer", schema.quantLayers[layer], at(path, name));
    }
  }
}

}  // namespace

RunLogWriter::RunLogWriter(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
RunLogWriter::RunLogWriter(RunLogWriter&&) noexcept = default;

RunLogWriter& RunLogWriter::operator=(RunLogWriter&& other) noexcept {
  if (this != &other) {
    try {
      close();
    } catch (...) {
      // A failed close of the old log must not stop the move; close() explicitly to see it.
    }
    Hdf5Scope scope;
    m_impl = std::move(other.m_impl);
  }
  return *this;
}

RunLogWriter::~RunLogWriter() {
  try {
    close();
  } catch (...) {
    // Destructors must not throw; call close() to learn about a failed final flush.
  }
  Hdf5Scope scope;
  m_impl.reset();
}

RunLogWriter RunLogWriter::create(const std::string& path, const RootAttributes& attributes,
                                  const RunLogSchema& schema) {
  Hdf5Scope scope;
  validate(attributes, schema, path);
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0)
    fail("the run log already exists", path,
         "a log is never overwritten: use a new run folder, or resume this log");

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  {
    Hid access = fileAccess(false, path);
    impl->file =
        own(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, access.get()), H5Fclose,
            "cannot create the run log", path, "does the folder exist and is it writable?");
  }
  try {
    declareLog(impl->file.get(), attributes, schema, path);
    check(H5Fstart_swmr_write(impl->file.get()), "cannot start SWMR writing", path);
    impl->attach();
    impl->flushNow();
  } catch (...) {
    // Never leave a half-declared log behind: the next create() would refuse the path.
    impl.reset();
    std::remove(path.c_str());
    throw;
  }
  return RunLogWriter(std::move(impl));
}

RunLogWriter RunLogWriter::resume(const std::string& path, int64_t keepThroughStep) {
  Hdf5Scope scope;
  const WriterState state = RunLogReader::writerState(path);
  if (state == WriterState::Live)
    fail("another process is still writing the run log", path,
         "stop that run first; only closed or crashed logs can be resumed");

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  {
    // Clearing the status flags is what lets a crashed writer's log be opened for writing.
    Hid access = fileAccess(state == WriterState::Crashed, path);
    impl->file = own(H5Fopen(path.c_str(), H5F_ACC_RDWR, access.get()), H5Fclose,
                     "cannot open the run log for writing", path,
                     "is another process writing it, or is the file read-only?");
  }
  const hid_t file = impl->file.get();
  readRootAttributes(file, path);  // refuses files that are not run logs before changing them
  Layout layout = openLayout(file, path);
  // First change: should this process die while truncating, the log names it as the writer.
  writeWriterIdentity(file, path);

  // Rows past the checkpoint go, so curves never show a step twice. Steps never decrease within
  // a table, so the kept rows are a prefix and truncation is a shrink of the extent.
  auto keptRows = [&](hid_t dataset, int64_t rows, bool compound, const char* name) {
    std::vector<int64_t> steps(static_cast<size_t>(rows));
    Hid type = compound ? stepOnlyType() : Hid();
    readRows(dataset, 0, static_cast<hsize_t>(rows), 0, compound ? type.get() : H5T_NATIVE_INT64,
             steps.data(), at(path, name));
    return static_cast<int64_t>(
        std::find_if(steps.begin(), steps.end(), [&](int64_t s) { return s > keepThroughStep; }) -
        steps.begin());
  };
  const int64_t trainRows = rowsOf(layout.train.get(), at(path, kTrain));
  const int64_t evalRows = rowsOf(layout.eval.get(), at(path, kEval));
  const int64_t quantRows = rowsOf(layout.quantStep.get(), at(path, kQuantStep));
  const int64_t keepTrain = keptRows(layout.train.get(), trainRows, true, kTrain);
  const int64_t keepEval = keptRows(layout.eval.get(), evalRows, true, kEval);
  // A crash halfway through appendQuant leaves some /quant datasets a row short: cut to the
  // rows complete everywhere.
  const int64_t keepQuant = std::min(keptRows(layout.quantStep.get(), quantRows, false, kQuantStep),
                                     completeQuantRows(layout, path));

  setRows(layout.train.get(), static_cast<hsize_t>(keepTrain), 0, at(path, kTrain));
  setRows(layout.eval.get(), static_cast<hsize_t>(keepEval), 0, at(path, kEval));
  setRows(layout.quantStep.get(), static_cast<hsize_t>(keepQuant), 0, at(path, kQuantStep));
  for (size_t m = 0; m < layout.quantMetrics.size(); ++m)
    setRows(layout.quantMetrics[m].get(), static_cast<hsize_t>(keepQuant),
            layout.schema.quantLayers.size(), at(path, kQuant));
  for (size_t l = 0; l < layout.quantBlocks.size(); ++l)
    if (layout.quantBlocks[l].valid())
      setRows(layout.quantBlocks[l].get(), static_cast<hsize_t>(keepQuant),
              static_cast<hsize_t>(layout.schema.blocksPerLayer[l]), at(path, kQuantBlocks));
  layout = Layout();

  impl->attach();
  impl->appendEvent("resume",
                    "kept steps <= " + std::to_string(keepThroughStep) + ", dropped " +
                        std::to_string(trainRows - keepTrain) + " train, " +
                        std::to_string(evalRows - keepEval) + " eval, " +
                        std::to_string(quantRows - keepQuant) + " quant rows" +
                        (state == WriterState::Crashed ? " (previous writer crashed)" : ""));
  check(H5Fstart_swmr_write(file), "cannot start SWMR writing", path);
  impl->flushNow();
  return RunLogWriter(std::move(impl));
}

RunLogWriter::Impl& RunLogWriter::Impl::opened(const std::unique_ptr<Impl>& impl) {
  if (!impl || !impl->file.valid())
    fail("the run log writer is closed", impl ? impl->path : std::string("(moved-from writer)"),
         "append before close()");
  return *impl;
}

void RunLogWriter::appendTrain(const TrainRow& row) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  d.checkStep(row.step, d.lastTrainStep, kTrain);
  const TrainRecord record{row.step, row.tokens,   row.wallSeconds,    row.loss,
                           row.lr,   row.gradNorm, row.tokensPerSecond};
  appendRows(d.layout.train.get(), static_cast<hsize_t>(d.trainRows), 1, 0, d.trainMemory.get(),
             &record, at(d.path, kTrain));
  ++d.trainRows;
  d.lastTrainStep = row.step;
  d.flushIfDue();
}

void RunLogWriter::appendEval(const EvalRow& row) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  const size_t columns = d.layout.schema.evalColumns.size();
  if (row.values.size() != columns)
    fail("eval row has " + std::to_string(row.values.size()) + " values for " +
             std::to_string(columns) + " columns",
         at(d.path, kEval), "give one value per eval column, NaN where not measured");
  d.checkStep(row.step, d.lastEvalStep, kEval);
  std::vector<unsigned char> record(evalRecordSize(columns));
  std::memcpy(record.data(), &row.step, 8);
  std::memcpy(record.data() + 8, &row.tokens, 8);
  std::memcpy(record.data() + 16, &row.wallSeconds, 8);
  if (columns) std::memcpy(record.data() + 24, row.values.data(), 8 * columns);
  appendRows(d.layout.eval.get(), static_cast<hsize_t>(d.evalRows), 1, 0, d.evalMemory.get(),
             record.data(), at(d.path, kEval));
  ++d.evalRows;
  d.lastEvalStep = row.step;
  d.flushNow();  // evals are rare and the GUI waits for them
}

void RunLogWriter::appendQuant(int64_t step, const std::vector<std::vector<float>>& metricByLayer) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  const RunLogSchema& schema = d.layout.schema;
  const size_t layers = schema.quantLayers.size();
  if (metricByLayer.size() != schema.quantMetrics.size())
    fail("got " + std::to_string(metricByLayer.size()) + " metrics, the log has " +
             std::to_string(schema.quantMetrics.size()),
         at(d.path, kQuant), "pass metricByLayer[metric][layer] in quantMetrics order");
  for (size_t m = 0; m < metricByLayer.size(); ++m)
    if (metricByLayer[m].size() != layers)
      fail("metric " + schema.quantMetrics[m] + " has " + std::to_string(metricByLayer[m].size()) +
               " values for " + std::to_string(layers) + " layers",
           at(d.path, kQuant), "one value per quantized layer, NaN where not measured");
  d.checkStep(step, d.lastQuantStep, kQuantStep);

  const hsize_t row = static_cast<hsize_t>(d.quantRows);
  appendRows(d.layout.quantStep.get(), row, 1, 0, H5T_NATIVE_INT64, &step, at(d.path, kQuantStep));
  for (size_t m = 0; m < metricByLayer.size(); ++m)
    appendRows(d.layout.quantMetrics[m].get(), row, 1, layers, H5T_NATIVE_FLOAT,
               metricByLayer[m].data(),
               at(d.path, std::string(kQuant) + "/" + schema.quantMetrics[m]));
  // Block rows follow /quant/step; they stay NaN (the fill value) until appendBlocks.
  for (size_t l = 0; l < d.layout.quantBlocks.size(); ++l)
    if (d.layout.quantBlocks[l].valid())
      setRows(d.layout.quantBlocks[l].get(), row + 1,
              static_cast<hsize_t>(schema.blocksPerLayer[l]), at(d.path, kQuantBlocks));
  ++d.quantRows;
  d.lastQuantStep = step;
  d.flushIfDue();
}

void RunLogWriter::appendBlocks(int64_t step, size_t layer, const std::vector<float>& perBlock) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  const RunLogSchema& schema = d.layout.schema;
  const std::string where = at(d.path, std::string(kQuantBlocks) + "/" + std::to_string(layer));
  if (schema.blocksPerLayer.empty())
    fail("the log has no per-block data", where, "declare blocksPerLayer at create()");
  if (layer >= schema.quantLayers.size())
    fail("layer " + std::to_string(layer) + " is out of range (" +
             std::to_string(schema.quantLayers.size()) + " layers)",
         where);
  if (!d.layout.quantBlocks[layer].valid())
    fail("layer " + schema.quantLayers[layer] + " was declared with 0 blocks", where);
  const size_t blocks = static_cast<size_t>(schema.blocksPerLayer[layer]);
  if (perBlock.size() != blocks)
    fail("got " + std::to_string(perBlock.size()) + " values for " + std::to_string(blocks) +
             " blocks of layer " + schema.quantLayers[layer],
         where);
  if (d.quantRows == 0 || step != d.lastQuantStep)
    fail("no /quant row for step " + std::to_string(step), where,
         "call appendQuant(step, ...) first; blocks go into the most recent quant row");
  writeRows(d.layout.quantBlocks[layer].get(), static_cast<hsize_t>(d.quantRows - 1), 1, blocks,
            H5T_NATIVE_FLOAT, perBlock.data(), where);
  d.flushIfDue();
}

void RunLogWriter::event(const std::string& kind, const std::string& text) {
  Hdf5Scope scope;
  Impl& d = Impl::opened(m_impl);
  d.appendEvent(kind, text);
  d.flushNow();
}

void RunLogWriter::flush() {
  Hdf5Scope scope;
  Impl::opened(m_impl).flushNow();
}

void RunLogWriter::close() {
  Hdf5Scope scope;
  if (!m_impl || !m_impl->file.valid()) return;
  Impl& d = *m_impl;
  // Close everything even when the flush fails, then report the first failure.
  std::string problem;
  if (H5Fflush(d.file.get(), H5F_SCOPE_LOCAL) < 0) problem = "cannot flush the run log";
  hdf5Detail();
  d.layout = Layout();
  d.trainMemory.reset();
  d.evalMemory.reset();
  d.eventMemory.reset();
  if (d.file.reset() < 0 && problem.empty()) problem = "cannot close the run log";
  if (!problem.empty()) failH5(problem, d.path, "is the disk full?");
}

bool RunLogWriter::isOpen() const {
  return m_impl && m_impl->file.valid();
}

const std::string& RunLogWriter::path() const {
  static const std::string none;
  return m_impl ? m_impl->path : none;
}

// ================================ RunLogReader ===================================================

struct RunLogReader::Impl {
  static const Impl& of(const std::unique_ptr<Impl>& impl);  // else an fp4lab::Error

  std::string path;
  Hid file;
  bool swmr = false;
  Layout layout;
  RootAttributes attributes;
  Hid trainMemory, evalMemory;
  int64_t trainRows = 0, evalRows = 0, quantRows = 0, eventRows = 0;

  void count() {
    trainRows = rowsOf(layout.train.get(), at(path, kTrain));
    evalRows = rowsOf(layout.eval.get(), at(path, kEval));
    eventRows = rowsOf(layout.events.get(), at(path, kEvents));
    quantRows = completeQuantRows(layout, path);
  }
};

RunLogReader::RunLogReader(const std::string& path) : m_impl(std::make_unique<Impl>()) {
  Hdf5Scope scope;
  Impl& d = *m_impl;
  try {
    d.path = path;
    d.file = openReadOnly(path, &d.swmr);
    d.attributes = readRootAttributes(d.file.get(), path);
    d.layout = openLayout(d.file.get(), path);
    d.trainMemory = trainType(false);
    d.evalMemory = evalType(d.layout.schema.evalColumns, false);
    d.count();
  } catch (...) {
    m_impl.reset();  // closes under the scope's lock
    throw;
  }
}

RunLogReader::RunLogReader(RunLogReader&&) noexcept = default;

RunLogReader& RunLogReader::operator=(RunLogReader&& other) noexcept {
  if (this != &other) {
    Hdf5Scope scope;
    m_impl = std::move(other.m_impl);
  }
  return *this;
}

RunLogReader::~RunLogReader() {
  Hdf5Scope scope;
  m_impl.reset();
}

const RunLogReader::Impl& RunLogReader::Impl::of(const std::unique_ptr<Impl>& impl) {
  if (!impl) fail("the run log reader was moved from", "(moved-from reader)");
  return *impl;
}

bool RunLogReader::refresh() {
  Hdf5Scope scope;
  Impl::of(m_impl);
  Impl& d = *m_impl;
  if (!d.swmr) return false;  // nobody writes a log opened without SWMR
  for (hid_t dataset : allDatasets(d.layout))
    check(H5Drefresh(dataset), "cannot refresh", d.path, "the file may be damaged");
  const int64_t before[4] = {d.trainRows, d.evalRows, d.quantRows, d.eventRows};
  d.count();
  const int64_t after[4] = {d.trainRows, d.evalRows, d.quantRows, d.eventRows};
  return !std::equal(std::begin(before), std::end(before), std::begin(after));
}

RootAttributes RunLogReader::attributes() const {
  return Impl::of(m_impl).attributes;
}
RunLogSchema RunLogReader::schema() const {
  return Impl::of(m_impl).layout.schema;
}
bool RunLogReader::isSwmr() const {
  return Impl::of(m_impl).swmr;
}
int64_t RunLogReader::trainRows() const {
  return Impl::of(m_impl).trainRows;
}
int64_t RunLogReader::evalRows() const {
  return Impl::of(m_impl).evalRows;
}
int64_t RunLogReader::quantRows() const {
  return Impl::of(m_impl).quantRows;
}
int64_t RunLogReader::eventRows() const {
  return Impl::of(m_impl).eventRows;
}

std::vector<TrainRow> RunLogReader::readTrain(int64_t fromRow, int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const auto [first, count] = clampRange(fromRow, toRow, d.trainRows);
  std::vector<TrainRecord> records(count);
  readRows(d.layout.train.get(), first, count, 0, d.trainMemory.get(), records.data(),
           at(d.path, kTrain));
  std::vector<TrainRow> rows(count);
  for (size_t i = 0; i < count; ++i) {
    const TrainRecord& r = records[i];
    rows[i] = {r.step, r.tokens, r.wallSeconds, r.loss, r.lr, r.gradNorm, r.tokensPerSecond};
  }
  return rows;
}

std::vector<EvalRow> RunLogReader::readEval(int64_t fromRow, int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const auto [first, count] = clampRange(fromRow, toRow, d.evalRows);
  const size_t columns = d.layout.schema.evalColumns.size();
  const size_t recordSize = evalRecordSize(columns);
  std::vector<unsigned char> buffer(count * recordSize);
  readRows(d.layout.eval.get(), first, count, 0, d.evalMemory.get(), buffer.data(),
           at(d.path, kEval));
  std::vector<EvalRow> rows(count);
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* record = buffer.data() + i * recordSize;
    EvalRow& row = rows[i];
    std::memcpy(&row.step, record, 8);
    std::memcpy(&row.tokens, record + 8, 8);
    std::memcpy(&row.wallSeconds, record + 16, 8);
    row.values.resize(columns);
    if (columns) std::memcpy(row.values.data(), record + 24, 8 * columns);
  }
  return rows;
}

std::vector<int64_t> RunLogReader::quantSteps(int64_t fromRow, int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const auto [first, count] = clampRange(fromRow, toRow, d.quantRows);
  std::vector<int64_t> steps(count);
  readRows(d.layout.quantStep.get(), first, count, 0, H5T_NATIVE_INT64, steps.data(),
           at(d.path, kQuantStep));
  return steps;
}

std::vector<float> RunLogReader::readQuant(const std::string& metric, int64_t fromRow,
                                           int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const auto& metrics = d.layout.schema.quantMetrics;
  const auto found = std::find(metrics.begin(), metrics.end(), metric);
  const std::string where = at(d.path, std::string(kQuant) + "/" + metric);
  if (found == metrics.end()) {
    std::string known;
    for (const std::string& name : metrics) known += (known.empty() ? "" : ", ") + name;
    fail("no quant metric '" + metric + "'", where,
         known.empty() ? "this log has no quant metrics" : "the log has: " + known);
  }
  const auto [first, count] = clampRange(fromRow, toRow, d.quantRows);
  const hsize_t layers = d.layout.schema.quantLayers.size();
  std::vector<float> values(count * layers);
  readRows(d.layout.quantMetrics[static_cast<size_t>(found - metrics.begin())].get(), first, count,
           layers, H5T_NATIVE_FLOAT, values.data(), where);
  return values;
}

std::vector<float> RunLogReader::readBlocks(size_t layer, int64_t fromRow, int64_t toRow) const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  const std::string where = at(d.path, std::string(kQuantBlocks) + "/" + std::to_string(layer));
  if (layer >= d.layout.quantBlocks.size() || !d.layout.quantBlocks[layer].valid())
    fail("no per-block data for layer " + std::to_string(layer), where,
         "see schema().blocksPerLayer");
  const auto [first, count] = clampRange(fromRow, toRow, d.quantRows);
  const hsize_t blocks = static_cast<hsize_t>(d.layout.schema.blocksPerLayer[layer]);
  std::vector<float> values(count * blocks);
  readRows(d.layout.quantBlocks[layer].get(), first, count, blocks, H5T_NATIVE_FLOAT, values.data(),
           where);
  return values;
}

std::vector<std::string> RunLogReader::events() const {
  Hdf5Scope scope;
  const Impl& d = Impl::of(m_impl);
  return readFixedStrings(d.layout.events.get(), static_cast<hsize_t>(d.eventRows),
                          at(d.path, kEvents));
}

std::vector<std::string> RunLogReader::listSeries() const {
  const Impl& d = Impl::of(m_impl);
  std::vector<std::string> series = {"train/loss", "train/lr", "train/grad_norm",
                                     "train/tok_per_s"};
  for (const std::string& column : d.layout.schema.evalColumns) series.push_back("eval/" + column);
  for (const std::string& metric : d.layout.schema.quantMetrics)
    series.push_back("quant/" + metric);
  return series;
}

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
