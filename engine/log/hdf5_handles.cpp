// The HDF5 layer declared in hdf5_handles.h: every call checked, every identifier owned, and
// failures turned into fp4lab::Error with what HDF5 said.
#include "hdf5_handles.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "fp4lab/error.h"

namespace fp4lab::log::detail {

// ---- HDF5 call scope and errors ------------------------------------------------------------

std::recursive_mutex& hdf5Mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}

namespace {

herr_t collectDescription(unsigned, const H5E_error2_t* error, void* data) {
  auto* descriptions = static_cast<std::vector<std::string>*>(data);
  if (error->desc && *error->desc) descriptions->emplace_back(error->desc);
  return 0;
}

}  // namespace

std::string hdf5Detail() {
  std::vector<std::string> descriptions;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collectDescription, &descriptions);
  H5Eclear2(H5E_DEFAULT);
  if (descriptions.empty()) return {};
  if (descriptions.size() == 1) return descriptions.front();
  return descriptions.front() + ": " + descriptions.back();
}

[[noreturn]] void fail(const std::string& what, const std::string& where, const std::string& hint) {
  throw Error(what, where, hint);
}

[[noreturn]] void failH5(const std::string& what, const std::string& where,
                         const std::string& hint) {
  const std::string detail = hdf5Detail();
  throw Error(detail.empty() ? what : what + " (HDF5: " + detail + ")", where, hint);
}

std::string at(const std::string& path, const std::string& object) {
  return path + ", " + object;
}

// ---- Handles ----------------------------------------------------------------------------------

Hid own(hid_t id, Hid::Closer closer, const std::string& what, const std::string& where,
        const std::string& hint) {
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

size_t evalRecordSize(size_t columns) {
  return 8 * (3 + columns);
}

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

bool hasAttribute(hid_t object, const char* name, const std::string& where) {
  return check(H5Aexists(object, name), std::string("cannot read attribute ") + name, where,
               "the file is damaged") > 0;
}

bool hasLink(hid_t file, const std::string& name, const std::string& path) {
  for (size_t end = name.find('/', 1);; end = name.find('/', end + 1)) {
    const std::string prefix = name.substr(0, end);
    if (check(H5Lexists(file, prefix.c_str(), H5P_DEFAULT), "cannot look up " + prefix,
              at(path, prefix), "the file is damaged") <= 0)
      return false;
    if (end == std::string::npos) return true;
  }
}

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

void appendRows(hid_t dataset, hsize_t oldRows, hsize_t count, hsize_t columns, hid_t memoryType,
                const void* buffer, const std::string& where) {
  setRows(dataset, oldRows + count, columns, where);
  writeRows(dataset, oldRows, count, columns, memoryType, buffer, where);
}

std::pair<hsize_t, hsize_t> clampRange(int64_t from, int64_t to, int64_t rows) {
  from = std::clamp<int64_t>(from, 0, rows);
  to = std::clamp<int64_t>(to, from, rows);
  return {static_cast<hsize_t>(from), static_cast<hsize_t>(to - from)};
}

hsize_t chunkRows(size_t bytesPerRow, hsize_t cap) {
  return std::clamp<hsize_t>(kChunkBytes / std::max<size_t>(bytesPerRow, 1), 1, cap);
}

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

}  // namespace fp4lab::log::detail
