// The analysis file (fp4lab/analyze/analyze.h; layout in docs/log-schema.md, "Analysis files"):
// one run-log-style /quant group per format, so the run log's /quant reader (readQuantRow)
// serves both, plus /analysis with what only an analysis has (histograms, raw statistics).
// The sensitivity file (fp4lab/analyze/sensitivity_file.h, "Sensitivity files") is laid out the
// same way: its per-layer losses as /quant/<format>, the rest under /sensitivity.
// HDF5's C API through fp4lab_log's HDF5 layer (its lock, error handling and handles).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fp4lab/analyze/analyze.h"
#include "fp4lab/analyze/sensitivity_file.h"
#include "fp4lab/common/files.h"
#include "fp4lab/common/system.h"
#include "fp4lab/common/time.h"
#include "fp4lab/error.h"
#include "log/hdf5_handles.h"
#include "log/log_layout.h"

namespace fp4lab::analyze {
namespace {

namespace d = fp4lab::log::detail;
using d::Hid;

constexpr int64_t kAnalysisSchema = 1;
constexpr const char* kKind = "fp4lab-analysis";
constexpr const char* kHint =
    "damaged, or not written by fp4lab analyze --output or fp4lab sensitivity --output";
const char* const kCountColumns[] = {"count", "clipped", "flushed", "nonfinite"};
const char* const kSumColumns[] = {"sum_x2", "sum_err2", "sum_xq", "sum_q2", "max_abs_err"};

// ---- Writing ---------------------------------------------------------------------------------

Hid makeGroup(hid_t location, const std::string& name, const std::string& where) {
  Hid gcpl = d::own(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "H5Pcreate", where);
  // Creation order tracked, as the run log's /quant: metrics list in the order written.
  d::check(H5Pset_link_creation_order(gcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
           "H5Pset_link_creation_order", where);
  return d::own(H5Gcreate2(location, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
                "cannot create group " + name, where);
}

void writeArray(hid_t location, const std::string& name, hid_t fileType, hid_t memoryType,
                const std::vector<hsize_t>& dims, const void* data, const std::string& where) {
  Hid space = d::own(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose,
                     "H5Screate_simple", where);
  Hid dataset = d::own(H5Dcreate2(location, name.c_str(), fileType, space.get(), H5P_DEFAULT,
                                  H5P_DEFAULT, H5P_DEFAULT),
                       H5Dclose, "cannot create dataset " + name, where);
  d::check(H5Dwrite(dataset.get(), memoryType, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
           "cannot write dataset " + name, where);
}

void writeStrings(hid_t location, const std::string& name, const std::vector<std::string>& values,
                  const std::string& where) {
  size_t width = 1;
  for (const std::string& v : values) width = std::max(width, v.size());
  std::vector<char> buffer(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i)
    std::memcpy(buffer.data() + i * width, values[i].data(), values[i].size());
  Hid type = d::fixedStringType(width, H5T_STR_NULLPAD);
  writeArray(location, name, type.get(), type.get(), {hsize_t(values.size())}, buffer.data(),
             where);
}

void writeDoubleAttribute(hid_t object, const char* name, const std::vector<double>& values,
                          const std::string& where) {
  const hsize_t n = values.size();
  Hid space = d::own(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple", where);
  Hid attribute =
      d::own(H5Acreate2(object, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
             H5Aclose, std::string("cannot create attribute ") + name, where);
  d::check(H5Awrite(attribute.get(), H5T_NATIVE_DOUBLE, values.data()),
           std::string("cannot write attribute ") + name, where);
}

void writeBins(hid_t object, const LogBins& bins, const std::string& where) {
  d::writeInt64Attribute(object, "min_exp", bins.minExp, where);
  d::writeInt64Attribute(object, "max_exp", bins.maxExp, where);
  d::writeInt64Attribute(object, "bins_per_octave", bins.binsPerOctave, where);
}

std::vector<double> edgesOf(const LogBins& bins) {
  std::vector<double> edges;
  for (int i = 0; i < bins.size(); ++i) edges.push_back(bins.lowerEdge(i));
  return edges;
}

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

void writeContents(hid_t file, const Analysis& a, const std::string& where) {
  const size_t L = a.layers.size(), F = a.formats.size();
  d::writeInt64Attribute(file, "schema_version", kAnalysisSchema, where);
  d::writeStringAttribute(file, "kind", kKind, where);
  d::writeStringAttribute(file, "model", a.modelDir, where);
  d::writeStringAttribute(file, "formats", joinNames(a.formats), where);
  d::writeStringAttribute(file, "created_utc", utcTimestamp(), where);
  d::writeInt64Attribute(file, "threads", a.threads, where);
  writeDoubleAttribute(file, "seconds", {a.seconds}, where);

  std::vector<std::string> names;
  for (const Layer& l : a.layers) names.push_back(l.module);

  // /quant/<format>: the run log's /quant layout with one row (step 0: the model as loaded).
  Hid quant = makeGroup(file, "quant", where);
  for (size_t f = 0; f < F; ++f) {
    const std::string& format = a.formats[f];
    Hid g = makeGroup(quant.get(), format, where);
    d::writeStringAttribute(g.get(), "format", format, where);
    writeStrings(g.get(), "layers", names, where);
    const int64_t step = 0;
    writeArray(g.get(), "step", H5T_STD_I64LE, H5T_NATIVE_INT64, {1}, &step, where);
    const std::vector<std::string>& metrics = metricNames();
    std::vector<std::vector<float>> values(metrics.size(), std::vector<float>(L, NAN));
    for (size_t l = 0; l < L; ++l) {
      const Entry& e = a.entries[l * F + f];
      if (!e.measured) continue;
      const std::vector<double> m = metricValues(e.stats);
      for (size_t k = 0; k < metrics.size(); ++k) values[k][l] = float(m[k]);
    }
    for (size_t k = 0; k < metrics.size(); ++k)
      writeArray(g.get(), metrics[k], H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {1, hsize_t(L)},
                 values[k].data(), where);
    bool anyBlocks = false;
    for (size_t l = 0; l < L; ++l) anyBlocks |= !a.entries[l * F + f].blockMse.empty();
    if (!anyBlocks) continue;
    Hid blocks = makeGroup(g.get(), "blocks", where);
    for (size_t l = 0; l < L; ++l) {
      const Entry& e = a.entries[l * F + f];
      if (e.blockMse.empty()) continue;
      const std::string index = std::to_string(l);
      writeArray(blocks.get(), index, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT,
                 {1, hsize_t(e.blockMse.size())}, e.blockMse.data(), where);
      Hid dataset = d::own(H5Dopen2(blocks.get(), index.c_str(), H5P_DEFAULT), H5Dclose,
                           "cannot open dataset", where);
      d::writeStringAttribute(dataset.get(), "layer", a.layers[l].module, where);
      d::writeInt64Attribute(dataset.get(), "rows", a.layers[l].rows, where);
    }
  }

  // /analysis: per layer, then per format, what the run log does not have.
  Hid an = makeGroup(file, "analysis", where);
  writeStrings(an.get(), "layers", names, where);
  std::vector<int64_t> shape, outliers, hist;
  std::vector<float> amax;
  std::vector<double> rms;
  const size_t W = size_t(weightBins().size());
  for (size_t l = 0; l < L; ++l) {
    shape.push_back(a.layers[l].rows), shape.push_back(a.layers[l].cols);
    const LayerOutliers& o = a.outliers[l];
    amax.push_back(o.amax), rms.push_back(o.rms);
    outliers.insert(outliers.end(), {o.over3, o.over6, o.over10});
    for (const std::vector<int64_t>* h : {&o.negative, &o.positive}) {
      if (h->size() != W) d::fail("weight histogram of the wrong size", a.layers[l].module);
      hist.insert(hist.end(), h->begin(), h->end());
    }
  }
  writeArray(an.get(), "shape", H5T_STD_I64LE, H5T_NATIVE_INT64, {L, 2}, shape.data(), where);
  writeArray(an.get(), "weight_amax", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {L}, amax.data(), where);
  writeArray(an.get(), "weight_rms", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {L}, rms.data(), where);
  writeArray(an.get(), "outliers", H5T_STD_I64LE, H5T_NATIVE_INT64, {L, 3}, outliers.data(), where);
  {
    Hid ds = d::own(H5Dopen2(an.get(), "outliers", H5P_DEFAULT), H5Dclose, "H5Dopen2", where);
    writeDoubleAttribute(ds.get(), "multiples", outlierMultiples(), where);
  }
  writeArray(an.get(), "weight_hist", H5T_STD_I64LE, H5T_NATIVE_INT64, {L, 2, W}, hist.data(),
             where);
  {
    Hid ds = d::own(H5Dopen2(an.get(), "weight_hist", H5P_DEFAULT), H5Dclose, "H5Dopen2", where);
    writeBins(ds.get(), weightBins(), where);
  }
  const std::vector<double> weightEdges = edgesOf(weightBins()),
                            ratioEdges = edgesOf(amaxRatioBins());
  writeArray(an.get(), "weight_hist_edges", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {W},
             weightEdges.data(), where);
  const size_t R = size_t(amaxRatioBins().size());
  writeArray(an.get(), "amax_hist_edges", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {R}, ratioEdges.data(),
             where);
  for (size_t f = 0; f < F; ++f) {
    Hid g = makeGroup(an.get(), a.formats[f], where);
    std::vector<uint8_t> measured;
    std::vector<float> tensorAmax;
    std::vector<int64_t> counts, scaleHist, amaxHist;
    std::vector<double> sums;
    for (size_t l = 0; l < L; ++l) {
      const Entry& e = a.entries[l * F + f];
      measured.push_back(e.measured ? 1 : 0);
      tensorAmax.push_back(e.tensorAmax);
      const fp4_error_stats& s = e.stats;
      counts.insert(counts.end(), {s.count, s.clipped, s.flushed, s.nonfinite});
      sums.insert(sums.end(), {s.sum_x2, s.sum_err2, s.sum_xq, s.sum_q2, s.max_abs_err});
      std::vector<int64_t> sh = e.scaleHist, ah = e.amaxHist;
      sh.resize(256, 0), ah.resize(R, 0);  // unmeasured: zeros
      scaleHist.insert(scaleHist.end(), sh.begin(), sh.end());
      amaxHist.insert(amaxHist.end(), ah.begin(), ah.end());
    }
    writeArray(g.get(), "measured", H5T_STD_U8LE, H5T_NATIVE_UINT8, {L}, measured.data(), where);
    writeArray(g.get(), "tensor_amax", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {L}, tensorAmax.data(),
               where);
    writeArray(g.get(), "counts", H5T_STD_I64LE, H5T_NATIVE_INT64, {L, 4}, counts.data(), where);
    writeArray(g.get(), "sums", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {L, 5}, sums.data(), where);
    writeArray(g.get(), "scale_hist", H5T_STD_I64LE, H5T_NATIVE_INT64, {L, 256}, scaleHist.data(),
               where);
    writeArray(g.get(), "amax_hist", H5T_STD_I64LE, H5T_NATIVE_INT64, {L, R}, amaxHist.data(),
               where);
    Hid ds = d::own(H5Dopen2(g.get(), "amax_hist", H5P_DEFAULT), H5Dclose, "H5Dopen2", where);
    writeBins(ds.get(), amaxRatioBins(), where);
  }
}

void fsyncFile(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    throw Error("cannot sync the " + what + ": " + std::strerror(err), path);
  }
  ::close(fd);
}

// ---- Reading ---------------------------------------------------------------------------------

std::vector<hsize_t> dimsOf(hid_t dataset, const std::string& where) {
  Hid space = d::own(H5Dget_space(dataset), H5Sclose, "H5Dget_space", where);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) d::failH5("cannot read the shape", where, kHint);
  std::vector<hsize_t> dims(size_t(rank), 0);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

Hid openIn(hid_t file, const std::string& name, const std::string& path) {
  if (!d::hasLink(file, name, path)) d::fail("missing dataset " + name, path, kHint);
  return d::own(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "cannot open dataset",
                d::at(path, name), kHint);
}

// A whole dataset of the expected shape and type class, converted to T by HDF5.
template <typename T>
std::vector<T> readArray(hid_t file, const std::string& name, hid_t memoryType,
                         const std::vector<hsize_t>& dims, H5T_class_t typeClass,
                         const std::string& path) {
  Hid ds = openIn(file, name, path);
  const std::string where = d::at(path, name);
  Hid type = d::typeOf(ds.get(), where);
  if (H5Tget_class(type.get()) != typeClass) d::fail("unexpected element type", where, kHint);
  if (dimsOf(ds.get(), where) != dims) d::fail("unexpected shape", where, kHint);
  size_t n = 1;
  for (hsize_t v : dims) n *= size_t(v);
  std::vector<T> out(n);
  if (n > 0)
    d::check(H5Dread(ds.get(), memoryType, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
             "cannot read", where, kHint);
  return out;
}

std::vector<std::string> readNames(hid_t file, const std::string& name, const std::string& path) {
  Hid ds = openIn(file, name, path);
  const std::string where = d::at(path, name);
  const std::vector<hsize_t> dims = dimsOf(ds.get(), where);
  if (dims.size() != 1) d::fail("expected a list of names", where, kHint);
  return d::readFixedStrings(ds.get(), dims[0], where);
}

Hid openFile(const std::string& path, bool* swmr) {
  return d::openReadOnly(path, swmr);
}

double readDoubleAttribute(hid_t object, const char* name, const std::string& where) {
  if (!d::hasAttribute(object, name, where)) return NAN;
  Hid attr = d::own(H5Aopen(object, name, H5P_DEFAULT), H5Aclose, "H5Aopen", where, kHint);
  Hid space = d::own(H5Aget_space(attr.get()), H5Sclose, "H5Aget_space", where);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    d::fail(std::string("attribute ") + name + " is not one number", where, kHint);
  double v = NAN;
  d::check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v), std::string("cannot read attribute ") + name,
           where, kHint);
  return v;
}

std::vector<std::string> splitNames(const std::string& joined) {
  std::vector<std::string> out;
  for (size_t start = 0; start < joined.size();) {
    size_t comma = joined.find(',', start);
    if (comma == std::string::npos) comma = joined.size();
    if (comma > start) out.push_back(joined.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

namespace {

// Writes an HDF5 file through a temporary name in the same folder, synced, then published
// without ever replacing a file that exists unless `overwrite` (link() refuses an existing name
// atomically, so a file that appeared meanwhile is kept). `what`: "analysis file", ...
void publishHdf5(const std::string& path, bool overwrite, const std::string& what,
                 const std::string& command, const std::function<void(hid_t)>& contents) {
  const std::string parent = files::parentOf(path);
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  try {
    {
      d::Hdf5Scope scope;
      Hid access = d::fileAccess(false, temporary);
      Hid file = d::own(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get()),
                        H5Fclose, "cannot create the " + what, path, "is the folder writable?");
      contents(file.get());
      d::check(file.reset(), "cannot close the " + what, path);
    }
    fsyncFile(temporary, what);
    if (overwrite) {
      if (std::rename(temporary.c_str(), path.c_str()) != 0)
        throw Error("cannot rename the " + what + ": " + std::strerror(errno), path);
    } else {
      if (::link(temporary.c_str(), path.c_str()) != 0) {
        const int err = errno;
        if (err == EEXIST)
          throw Error("output file exists", path,
                      "pass --force to replace it, or choose another path (" + command + ")");
        if (files::exists(path) || std::rename(temporary.c_str(), path.c_str()) != 0)
          throw Error("cannot publish the " + what + ": " + std::strerror(err), path);
      } else {
        ::unlink(temporary.c_str());
      }
    }
    files::syncFolder(parent.empty() ? "." : parent);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
}

}  // namespace

void writeAnalysisFile(const Analysis& a, const std::string& path, bool overwrite) {
  if (a.entries.size() != a.layers.size() * a.formats.size() ||
      a.outliers.size() != a.layers.size())
    throw Error("inconsistent analysis (entries do not match layers x formats)", path);
  files::checkOutputFile(path, overwrite, "analysis.h5");
  publishHdf5(path, overwrite, "analysis file", "fp4lab analyze",
              [&](hid_t file) { writeContents(file, a, path); });
}

Analysis readAnalysisFile(const std::string& path) {
  d::Hdf5Scope scope;
  if (!files::exists(path))
    throw Error("analysis file does not exist", path, "check the path (fp4lab analyze --output)");
  bool swmr = false;
  Hid file;
  try {
    file = openFile(path, &swmr);
  } catch (const Error& e) {
    throw Error(e.problem(), path, kHint);
  }
  const hid_t f = file.get();
  const auto kind = d::readStringAttribute(f, "kind", path);
  if (!kind || *kind != kKind)
    throw Error("not an fp4lab analysis file (no kind = \"fp4lab-analysis\" attribute)", path,
                "expected a file written by fp4lab analyze --output; a run's log.h5 is read "
                "with the run log reader");
  const auto version = d::readInt64Attribute(f, "schema_version", path);
  if (!version) throw Error("no schema_version attribute", path, kHint);
  if (*version > kAnalysisSchema)
    throw Error("written by a newer fp4lab (analysis schema " + std::to_string(*version) + ")",
                path, "update fp4lab");
  Analysis a;
  a.modelDir = d::readStringAttribute(f, "model", path).value_or("");
  a.formats = splitNames(d::readStringAttribute(f, "formats", path).value_or(""));
  if (a.formats.empty()) throw Error("no formats attribute", path, kHint);
  for (const std::string& fmt : a.formats) {
    try {
      formatConfig(fmt);
    } catch (const Error&) {
      throw Error("unknown format '" + fmt + "'", path, kHint);
    }
  }
  a.threads = int(d::readInt64Attribute(f, "threads", path).value_or(0));
  if (const double seconds = readDoubleAttribute(f, "seconds", path); std::isfinite(seconds))
    a.seconds = seconds;

  const std::vector<std::string> names = readNames(f, "/analysis/layers", path);
  const hsize_t L = names.size();
  const std::vector<int64_t> shape =
      readArray<int64_t>(f, "/analysis/shape", H5T_NATIVE_INT64, {L, 2}, H5T_INTEGER, path);
  for (size_t l = 0; l < L; ++l)
    a.layers.push_back({names[l], names[l] + ".weight", shape[2 * l], shape[2 * l + 1]});
  const std::vector<float> amax =
      readArray<float>(f, "/analysis/weight_amax", H5T_NATIVE_FLOAT, {L}, H5T_FLOAT, path);
  const std::vector<double> rms =
      readArray<double>(f, "/analysis/weight_rms", H5T_NATIVE_DOUBLE, {L}, H5T_FLOAT, path);
  const std::vector<int64_t> outliers =
      readArray<int64_t>(f, "/analysis/outliers", H5T_NATIVE_INT64, {L, 3}, H5T_INTEGER, path);
  const hsize_t W = hsize_t(weightBins().size()), R = hsize_t(amaxRatioBins().size());
  const std::vector<int64_t> hist = readArray<int64_t>(f, "/analysis/weight_hist", H5T_NATIVE_INT64,
                                                       {L, 2, W}, H5T_INTEGER, path);
  a.outliers.resize(L);
  for (size_t l = 0; l < L; ++l) {
    LayerOutliers& o = a.outliers[l];
    o.amax = amax[l], o.rms = rms[l];
    o.over3 = outliers[3 * l], o.over6 = outliers[3 * l + 1], o.over10 = outliers[3 * l + 2];
    const auto* h = hist.data() + l * 2 * W;
    o.negative.assign(h, h + W);
    o.positive.assign(h + W, h + 2 * W);
  }

  const size_t F = a.formats.size();
  a.entries.resize(L * F);
  for (size_t fi = 0; fi < F; ++fi) {
    const std::string& fmt = a.formats[fi];
    const std::string g = "/analysis/" + fmt + "/";
    const auto measured =
        readArray<uint8_t>(f, g + "measured", H5T_NATIVE_UINT8, {L}, H5T_INTEGER, path);
    const auto tensorAmax =
        readArray<float>(f, g + "tensor_amax", H5T_NATIVE_FLOAT, {L}, H5T_FLOAT, path);
    const auto counts =
        readArray<int64_t>(f, g + "counts", H5T_NATIVE_INT64, {L, 4}, H5T_INTEGER, path);
    const auto sums = readArray<double>(f, g + "sums", H5T_NATIVE_DOUBLE, {L, 5}, H5T_FLOAT, path);
    const auto scaleHist =
        readArray<int64_t>(f, g + "scale_hist", H5T_NATIVE_INT64, {L, 256}, H5T_INTEGER, path);
    const auto amaxHist =
        readArray<int64_t>(f, g + "amax_hist", H5T_NATIVE_INT64, {L, R}, H5T_INTEGER, path);
    const std::string blocks = "/quant/" + fmt + "/blocks";
    const bool haveBlocks = d::hasLink(f, blocks, path);
    const int64_t block = fp4_block_size(formatConfig(fmt).format);
    for (size_t l = 0; l < L; ++l) {
      Entry& e = a.entries[l * F + fi];
      e.layer = l;
      e.format = fmt;
      e.measured = measured[l] != 0;
      e.tensorAmax = tensorAmax[l];
      fp4_error_stats& s = e.stats;
      s.count = counts[4 * l], s.clipped = counts[4 * l + 1];
      s.flushed = counts[4 * l + 2], s.nonfinite = counts[4 * l + 3];
      s.sum_x2 = sums[5 * l], s.sum_err2 = sums[5 * l + 1], s.sum_xq = sums[5 * l + 2];
      s.sum_q2 = sums[5 * l + 3], s.max_abs_err = sums[5 * l + 4];
      if (!e.measured) continue;
      e.scaleHist.assign(scaleHist.begin() + long(l * 256),
                         scaleHist.begin() + long(l * 256 + 256));
      e.amaxHist.assign(amaxHist.begin() + long(l * R), amaxHist.begin() + long((l + 1) * R));
      const std::string ds = blocks + "/" + std::to_string(l);
      if (haveBlocks && d::hasLink(f, ds, path)) {
        const hsize_t B = hsize_t(a.layers[l].rows * a.layers[l].cols / block);
        e.blockMse = readArray<float>(f, ds, H5T_NATIVE_FLOAT, {1, B}, H5T_FLOAT, path);
      }
    }
  }
  return a;
}

QuantRow readQuantRow(const std::string& path, const std::string& group, int64_t row) {
  d::Hdf5Scope scope;
  if (group.empty() || group[0] != '/' || group.back() == '/')
    throw Error("malformed group path '" + group + "'", path, "e.g. /quant or /quant/nvfp4");
  bool swmr = false;
  Hid file = openFile(path, &swmr);
  const hid_t f = file.get();
  if (!d::hasLink(f, group, path))
    throw Error("no " + group + " group", path,
                "a run log has /quant, an analysis file /quant/<format>");
  QuantRow out;
  out.layers = readNames(f, group + "/layers", path);
  const hsize_t L = out.layers.size();
  Hid stepSet = openIn(f, group + "/step", path);
  const std::vector<hsize_t> stepDims = dimsOf(stepSet.get(), d::at(path, group + "/step"));
  if (stepDims.size() != 1)
    d::fail("expected a list of steps", d::at(path, group + "/step"), kHint);
  out.rows = int64_t(stepDims[0]);
  if (row < 0) row = out.rows - 1;
  if (row < 0 || row >= out.rows)
    throw Error(
        "row " + std::to_string(row) + " out of range (" + std::to_string(out.rows) + " rows)",
        d::at(path, group));
  d::readRows(stepSet.get(), hsize_t(row), 1, 0, H5T_NATIVE_INT64, &out.step,
              d::at(path, group + "/step"));
  Hid g = d::own(H5Gopen2(f, group.c_str(), H5P_DEFAULT), H5Gclose, "cannot open group",
                 d::at(path, group), kHint);
  for (const std::string& name : d::linkNames(g.get(), d::at(path, group))) {
    if (name == "layers" || name == "step" || name == "blocks") continue;
    const std::string where = d::at(path, group + "/" + name);
    Hid ds = openIn(f, group + "/" + name, path);
    const std::vector<hsize_t> dims = dimsOf(ds.get(), where);
    if (dims.size() != 2 || dims[1] != L || int64_t(dims[0]) < out.rows)
      d::fail("expected a [rows, layers] metric", where, kHint);
    std::vector<float> values(L);
    if (L > 0) d::readRows(ds.get(), hsize_t(row), 1, L, H5T_NATIVE_FLOAT, values.data(), where);
    out.metrics.push_back(name);
    out.values.push_back(std::move(values));
  }
  out.blocks.resize(L);
  out.blockRows.assign(L, 0);
  if (d::hasLink(f, group + "/blocks", path)) {
    for (size_t l = 0; l < L; ++l) {
      const std::string name = group + "/blocks/" + std::to_string(l);
      if (!d::hasLink(f, name, path)) continue;
      const std::string where = d::at(path, name);
      Hid ds = openIn(f, name, path);
      const std::vector<hsize_t> dims = dimsOf(ds.get(), where);
      if (dims.size() != 2 || int64_t(dims[0]) < out.rows)
        d::fail("expected a [rows, blocks] dataset", where, kHint);
      out.blocks[l].resize(dims[1]);
      out.blockRows[l] = d::readInt64Attribute(ds.get(), "rows", where).value_or(0);
      if (dims[1] > 0)
        d::readRows(ds.get(), hsize_t(row), 1, dims[1], H5T_NATIVE_FLOAT, out.blocks[l].data(),
                    where);
    }
  }
  return out;
}

// ---- Sensitivity files ------------------------------------------------------------------------

namespace {

constexpr int64_t kSensitivitySchema = 1;
constexpr const char* kSensitivityKind = "fp4lab-sensitivity";
constexpr const char* kSensitivityHint =
    "expected a file written by fp4lab sensitivity MODEL --data FILE --output FILE";

nlohmann::json jsonNumber(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

void writeSensitivityContents(hid_t file, const SensitivityFile& r, const std::string& where) {
  if (r.formatName.empty() || r.formatName.find('/') != std::string::npos)
    d::fail("the sensitivity result has no valid format name", where);
  d::writeInt64Attribute(file, "schema_version", kSensitivitySchema, where);
  d::writeStringAttribute(file, "kind", kSensitivityKind, where);
  d::writeStringAttribute(file, "created_utc", utcTimestamp(), where);
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"model", &r.model},
                                    {"data", &r.data},
                                    {"format", &r.format},
                                    {"format_name", &r.formatName}})
    d::writeStringAttribute(file, name, *value, where);
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"w4a4", r.w4a4 ? 1 : 0},
                                    {"sequences", r.sequences},
                                    {"tokens", r.tokens},
                                    {"seq_len", r.seqLen},
                                    {"batch_size", r.batchSize},
                                    {"eval_batches", r.evalBatches},
                                    {"bf16_bytes", r.bf16Bytes},
                                    {"ptq_bytes", r.ptqBytes},
                                    {"chosen_keep", r.chosenKeep},
                                    {"threads", int64_t(r.threads)}})
    d::writeInt64Attribute(file, name, value, where);
  for (const auto& [name, value] : {std::pair<const char*, double>{"bf16_loss", r.bf16Loss},
                                    {"ptq_loss", r.ptqLoss},
                                    {"ptq_kl", r.ptqKl},
                                    {"tolerance", r.tolerance},
                                    {"seconds", r.seconds}})
    writeDoubleAttribute(file, name, {value}, where);

  const hsize_t L = r.layers.size(), P = r.plans.size();
  std::vector<std::string> names;
  std::vector<double> loss, kl, delta;
  std::vector<int64_t> shape, bytes, rank;
  for (const SensitivityLayer& l : r.layers) {
    names.push_back(l.name);
    loss.push_back(l.loss), kl.push_back(l.kl), delta.push_back(l.loss - r.bf16Loss);
    shape.insert(shape.end(), {l.rows, l.cols});
    bytes.insert(bytes.end(), {l.bf16Bytes, l.fp4Bytes});
    rank.push_back(l.rank);
  }
  // /quant/<format>: the run log's layout, one row (step 0), the losses with only that layer
  // quantized as its metrics (float64 here; readQuantRow converts).
  Hid quant = makeGroup(file, "quant", where);
  Hid g = makeGroup(quant.get(), r.formatName, where);
  d::writeStringAttribute(g.get(), "format", r.formatName, where);
  writeStrings(g.get(), "layers", names, where);
  const int64_t step = 0;
  writeArray(g.get(), "step", H5T_STD_I64LE, H5T_NATIVE_INT64, {1}, &step, where);
  writeArray(g.get(), "loss", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {1, L}, loss.data(), where);
  writeArray(g.get(), "kl", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {1, L}, kl.data(), where);
  writeArray(g.get(), "delta_loss", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {1, L}, delta.data(), where);

  Hid sg = makeGroup(file, "sensitivity", where);
  writeArray(sg.get(), "layer_shape", H5T_STD_I64LE, H5T_NATIVE_INT64, {L, 2}, shape.data(), where);
  writeArray(sg.get(), "layer_bytes", H5T_STD_I64LE, H5T_NATIVE_INT64, {L, 2}, bytes.data(), where);
  writeArray(sg.get(), "layer_rank", H5T_STD_I64LE, H5T_NATIVE_INT64, {L}, rank.data(), where);
  std::vector<int64_t> keep, planBytes;
  std::vector<double> planLoss, planKl;
  std::vector<std::string> kept, exclude;
  for (const SensitivityPlan& p : r.plans) {
    keep.push_back(p.keep), planBytes.push_back(p.bytes);
    planLoss.push_back(p.loss), planKl.push_back(p.kl);
    for (const std::string& k : p.kept)
      if (k.find(',') != std::string::npos) d::fail("a layer name holds a comma: " + k, where);
    kept.push_back(joinNames(p.kept));
    exclude.push_back(p.exclude);
  }
  writeArray(sg.get(), "plan_keep", H5T_STD_I64LE, H5T_NATIVE_INT64, {P}, keep.data(), where);
  writeArray(sg.get(), "plan_bytes", H5T_STD_I64LE, H5T_NATIVE_INT64, {P}, planBytes.data(), where);
  writeArray(sg.get(), "plan_loss", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {P}, planLoss.data(), where);
  writeArray(sg.get(), "plan_kl", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {P}, planKl.data(), where);
  writeStrings(sg.get(), "plan_kept", kept, where);
  writeStrings(sg.get(), "plan_exclude", exclude, where);
}

SensitivityFile readSensitivityHdf5(const std::string& path) {
  d::Hdf5Scope scope;
  bool swmr = false;
  Hid file;
  try {
    file = openFile(path, &swmr);
  } catch (const Error& e) {
    throw Error(e.problem(), path, kSensitivityHint);
  }
  const hid_t f = file.get();
  const auto kind = d::readStringAttribute(f, "kind", path);
  if (!kind || *kind != kSensitivityKind)
    throw Error("not an fp4lab sensitivity file (no kind = \"fp4lab-sensitivity\" attribute)", path,
                kSensitivityHint);
  const auto version = d::readInt64Attribute(f, "schema_version", path);
  if (!version) throw Error("no schema_version attribute", path, kHint);
  if (*version > kSensitivitySchema)
    throw Error("written by a newer fp4lab (sensitivity schema " + std::to_string(*version) + ")",
                path, "update fp4lab");
  SensitivityFile r;
  const auto text = [&](const char* name) {
    return d::readStringAttribute(f, name, path).value_or("");
  };
  const auto integer = [&](const char* name, int64_t otherwise) {
    return d::readInt64Attribute(f, name, path).value_or(otherwise);
  };
  r.model = text("model"), r.data = text("data"), r.format = text("format");
  r.formatName = text("format_name");
  if (r.formatName.empty() || r.formatName.find('/') != std::string::npos)
    throw Error("no format_name attribute", path, kHint);
  r.w4a4 = integer("w4a4", 0) != 0;
  r.sequences = integer("sequences", 0), r.tokens = integer("tokens", 0);
  r.seqLen = integer("seq_len", 0), r.batchSize = integer("batch_size", 0);
  r.evalBatches = integer("eval_batches", 0);
  r.bf16Bytes = integer("bf16_bytes", 0), r.ptqBytes = integer("ptq_bytes", 0);
  r.chosenKeep = integer("chosen_keep", -1), r.threads = int(integer("threads", 0));
  r.bf16Loss = readDoubleAttribute(f, "bf16_loss", path);
  r.ptqLoss = readDoubleAttribute(f, "ptq_loss", path);
  r.ptqKl = readDoubleAttribute(f, "ptq_kl", path);
  r.tolerance = readDoubleAttribute(f, "tolerance", path);
  r.seconds = readDoubleAttribute(f, "seconds", path);
  if (!std::isfinite(r.bf16Loss)) throw Error("no bf16_loss attribute", path, kHint);

  const std::string g = "/quant/" + r.formatName + "/";
  const std::vector<std::string> names = readNames(f, g + "layers", path);
  const hsize_t L = names.size();
  const auto loss = readArray<double>(f, g + "loss", H5T_NATIVE_DOUBLE, {1, L}, H5T_FLOAT, path);
  const auto kl = readArray<double>(f, g + "kl", H5T_NATIVE_DOUBLE, {1, L}, H5T_FLOAT, path);
  const auto shape = readArray<int64_t>(f, "/sensitivity/layer_shape", H5T_NATIVE_INT64, {L, 2},
                                        H5T_INTEGER, path);
  const auto bytes = readArray<int64_t>(f, "/sensitivity/layer_bytes", H5T_NATIVE_INT64, {L, 2},
                                        H5T_INTEGER, path);
  const auto rank =
      readArray<int64_t>(f, "/sensitivity/layer_rank", H5T_NATIVE_INT64, {L}, H5T_INTEGER, path);
  for (size_t l = 0; l < L; ++l)
    r.layers.push_back({names[l], shape[2 * l], shape[2 * l + 1], bytes[2 * l], bytes[2 * l + 1],
                        loss[l], kl[l], rank[l]});
  const std::vector<std::string> exclude = readNames(f, "/sensitivity/plan_exclude", path);
  const hsize_t P = exclude.size();
  const auto keep =
      readArray<int64_t>(f, "/sensitivity/plan_keep", H5T_NATIVE_INT64, {P}, H5T_INTEGER, path);
  const auto planBytes =
      readArray<int64_t>(f, "/sensitivity/plan_bytes", H5T_NATIVE_INT64, {P}, H5T_INTEGER, path);
  const auto planLoss =
      readArray<double>(f, "/sensitivity/plan_loss", H5T_NATIVE_DOUBLE, {P}, H5T_FLOAT, path);
  const auto planKl =
      readArray<double>(f, "/sensitivity/plan_kl", H5T_NATIVE_DOUBLE, {P}, H5T_FLOAT, path);
  const std::vector<std::string> kept = readNames(f, "/sensitivity/plan_kept", path);
  if (kept.size() != P) d::fail("plan_kept and plan_exclude differ in length", path, kHint);
  for (size_t p = 0; p < P; ++p)
    r.plans.push_back(
        {keep[p], splitNames(kept[p]), planBytes[p], planLoss[p], planKl[p], exclude[p]});
  if (r.plans.empty()) throw Error("no plans", path, kHint);
  return r;
}

SensitivityFile readSensitivityJson(const std::string& path, const std::string& text) {
  const auto fail = [&](const std::string& what) -> SensitivityFile {
    throw Error("not a file of fp4lab sensitivity --output (" + what + ")", path, kSensitivityHint);
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(std::string("not JSON and not HDF5 (") + e.what() + ")", path, kSensitivityHint);
  }
  if (!j.is_object()) return fail("not a JSON object");
  const auto number = [](const nlohmann::json& o, const char* key, double otherwise) {
    const auto it = o.find(key);
    return it != o.end() && it->is_number() ? it->get<double>() : otherwise;
  };
  const auto integer = [](const nlohmann::json& o, const char* key, int64_t otherwise) {
    const auto it = o.find(key);
    return it != o.end() && it->is_number() ? int64_t(it->get<double>()) : otherwise;
  };
  const auto string = [](const nlohmann::json& o, const char* key) {
    const auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const nlohmann::json empty = nlohmann::json::object();
  const auto object = [&](const char* key) -> const nlohmann::json& {
    const auto it = j.find(key);
    return it != j.end() && it->is_object() ? *it : empty;
  };
  SensitivityFile r;
  r.model = string(j, "model"), r.data = string(j, "data"), r.format = string(j, "format");
  r.formatName = string(j, "format_name");
  r.w4a4 = j.value("w4a4", false);
  r.sequences = integer(j, "sequences", 0), r.tokens = integer(j, "tokens", 0);
  r.seqLen = integer(j, "seq_len", 0), r.batchSize = integer(j, "batch_size", 0);
  r.evalBatches = integer(j, "eval_batches", 0);
  r.bf16Loss = number(object("bf16"), "loss", NAN);
  r.bf16Bytes = integer(object("bf16"), "bytes", 0);
  r.ptqLoss = number(object("ptq"), "loss", NAN);
  r.ptqKl = number(object("ptq"), "kl", NAN);
  r.ptqBytes = integer(object("ptq"), "bytes", 0);
  r.chosenKeep = integer(j, "chosen_keep", -1);
  r.tolerance = number(j, "tolerance", NAN);
  r.seconds = number(j, "seconds", 0);
  r.threads = int(integer(j, "threads", 0));
  if (!std::isfinite(r.bf16Loss)) return fail("no bf16 loss");
  if (const auto it = j.find("layers"); it != j.end() && it->is_array())
    for (const auto& l : *it) {
      if (!l.is_object() || string(l, "name").empty()) return fail("a layer without a name");
      r.layers.push_back({string(l, "name"), integer(l, "rows", 0), integer(l, "cols", 0),
                          integer(l, "bf16_bytes", 0), integer(l, "fp4_bytes", 0),
                          number(l, "loss", NAN), number(l, "kl", NAN), integer(l, "rank", 0)});
    }
  const auto plans = j.find("plans");
  if (plans == j.end() || !plans->is_array() || plans->empty()) return fail("no plans");
  for (size_t i = 0; i < plans->size(); ++i) {
    const nlohmann::json& p = (*plans)[i];
    if (!p.is_object() || !p.contains("keep") || !p["keep"].is_number() || !p.contains("bytes") ||
        !p["bytes"].is_number())
      return fail("plan " + std::to_string(i) + " has no keep or bytes");
    SensitivityPlan plan;
    plan.keep = integer(p, "keep", 0), plan.bytes = integer(p, "bytes", 0);
    plan.loss = number(p, "loss", NAN), plan.kl = number(p, "kl", NAN);
    plan.exclude = string(p, "exclude");
    if (const auto k = p.find("kept"); k != p.end() && k->is_array())
      for (const auto& name : *k)
        if (name.is_string()) plan.kept.push_back(name.get<std::string>());
    r.plans.push_back(std::move(plan));
  }
  return r;
}

}  // namespace

bool isHdf5Path(const std::string& path) {
  return endsWith(path, ".h5") || endsWith(path, ".hdf5");
}

std::string sensitivityJson(const SensitivityFile& r, int indent) {
  nlohmann::json layers = nlohmann::json::array(), plans = nlohmann::json::array();
  for (const auto& l : r.layers)
    layers.push_back({{"name", l.name},
                      {"rows", l.rows},
                      {"cols", l.cols},
                      {"rank", l.rank},
                      {"loss", jsonNumber(l.loss)},
                      {"delta_loss", jsonNumber(l.loss - r.bf16Loss)},
                      {"kl", jsonNumber(l.kl)},
                      {"bf16_bytes", l.bf16Bytes},
                      {"fp4_bytes", l.fp4Bytes}});
  for (const auto& p : r.plans)
    plans.push_back({{"keep", p.keep},
                     {"bytes", p.bytes},
                     {"loss", jsonNumber(p.loss)},
                     {"kl", jsonNumber(p.kl)},
                     {"kept", p.kept},
                     {"exclude", p.exclude}});
  const nlohmann::json j = {
      {"model", r.model},
      {"data", r.data},
      {"format", r.format},
      {"format_name", r.formatName},
      {"w4a4", r.w4a4},
      {"sequences", r.sequences},
      {"tokens", r.tokens},
      {"seq_len", r.seqLen},
      {"batch_size", r.batchSize},
      {"eval_batches", r.evalBatches},
      {"bf16", {{"loss", jsonNumber(r.bf16Loss)}, {"bytes", r.bf16Bytes}}},
      {"ptq",
       {{"loss", jsonNumber(r.ptqLoss)}, {"kl", jsonNumber(r.ptqKl)}, {"bytes", r.ptqBytes}}},
      {"layers", layers},
      {"plans", plans},
      {"chosen_keep", r.chosenKeep},
      {"tolerance", jsonNumber(r.tolerance)},
      {"seconds", r.seconds},
      {"threads", r.threads}};
  return j.dump(indent);
}

void writeSensitivityFile(const SensitivityFile& file, const std::string& path, bool overwrite) {
  files::checkOutputFile(path, overwrite, "sensitivity.h5");
  if (isHdf5Path(path))
    publishHdf5(path, overwrite, "sensitivity file", "fp4lab sensitivity",
                [&](hid_t f) { writeSensitivityContents(f, file, path); });
  else
    files::writeFileAtomically(path, sensitivityJson(file) + "\n");
}

SensitivityFile readSensitivityFile(const std::string& path) {
  if (!files::exists(path))
    throw Error("sensitivity file does not exist", path,
                "check the path (fp4lab sensitivity --output)");
  if (!files::isRegularFile(path)) throw Error("not a file", path, kSensitivityHint);
  std::string text;
  try {
    text = files::readFile(path);
  } catch (const Error& e) {
    throw Error(e.problem(), path, "is it readable?");
  }
  static const char kHdf5Signature[] = "\x89HDF\r\n\x1a\n";
  if (text.compare(0, 8, kHdf5Signature, 8) == 0) return readSensitivityHdf5(path);
  return readSensitivityJson(path, text);
}

}  // namespace fp4lab::analyze
