#include "framework/checkpoint/manifest.h"

#include <set>

#include <nlohmann/json.hpp>

#include "framework/error.h"

namespace kiln {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "kiln checkpoint";
constexpr int kFormatVersion = 1;

// Typed access with errors naming the field.
class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}
  const Json& Field(const Json& obj, const std::string& key, const std::string& where) const {
    if (!obj.is_object() || !obj.contains(key)) Fail(where + key, "is missing");
    return obj.at(key);
  }
  std::string String(const Json& obj, const std::string& key, const std::string& where = "") const {
    const Json& v = Field(obj, key, where);
    if (!v.is_string()) Fail(where + key, "must be a string");
    return v.get<std::string>();
  }
  int64_t Int(const Json& obj, const std::string& key, const std::string& where = "") const {
    const Json& v = Field(obj, key, where);
    if (!v.is_number_integer()) Fail(where + key, "must be an integer");
    return v.get<int64_t>();
  }
  // A file of the checkpoint directory: a plain name. "../x" or "a/b" would
  // make a crafted manifest read (and report on) files outside it.
  std::string FileName(const Json& obj, const std::string& key, const std::string& where) const {
    const std::string name = String(obj, key, where);
    const bool plain = !name.empty() && name != "." && name != ".." &&
                       name.find_first_of(std::string("/\0", 2)) == std::string::npos;
    if (!plain) {
      Fail(where + key, "is '" + name + "', expected a file name within the checkpoint directory");
    }
    return name;
  }
  Dims Shape(const Json& obj, const std::string& where) const {
    const Json& v = Field(obj, "shape", where);
    Dims dims;
    if (!v.is_array()) Fail(where + "shape", "must be an array of integers");
    for (const Json& d : v) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) Fail(where + "shape", "must be an array of integers >= 0");
      dims.push_back(d.get<int64_t>());
    }
    return dims;
  }
  DataType Dtype(const Json& obj, const std::string& where) const {
    const std::string name = String(obj, "dtype", where);
    if (const auto dtype = DataTypeFromNumpyName(name)) return *dtype;
    Fail(where + "dtype", "is '" + name + "', expected float32, int64, int32, float64 or bool");
  }
  [[noreturn]] void Fail(const std::string& field, const std::string& what) const {
    ThrowInvalidArgument(path_, ": field '", field, "' ", what);
  }

 private:
  std::string path_;
};

CheckpointVar ReadVar(const Reader& r, const Json& v, size_t i) {
  const std::string where = "vars[" + std::to_string(i) + "].";
  CheckpointVar var;
  var.name = r.String(v, "name", where);
  var.file = r.FileName(v, "file", where);
  var.dtype = r.Dtype(v, where);
  var.dims = r.Shape(v, where);
  var.sha256 = r.String(v, "sha256", where);
  return var;
}

}  // namespace

std::string ManifestToJson(const CheckpointManifest& m) {
  Json j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  j["kiln_version"] = m.kiln_version;
  j["program_fingerprint"] = m.program_fingerprint;
  j["loop"] = {{"step", m.loop.step},
               {"epoch", m.loop.epoch},
               {"batch", m.loop.batch},
               {"shuffle_seed", m.loop.shuffle_seed},
               {"batch_size", m.loop.batch_size}};
  j["vars"] = Json::array();
  for (const CheckpointVar& v : m.vars) {
    j["vars"].push_back({{"name", v.name},
                         {"file", v.file},
                         {"dtype", NumpyDtypeName(v.dtype)},
                         {"shape", v.dims},
                         {"sha256", v.sha256}});
  }
  j["files"] = Json::array();
  for (const auto& [name, sha] : m.files) j["files"].push_back({{"name", name}, {"sha256", sha}});
  return j.dump(2) + "\n";
}

CheckpointManifest ManifestFromJson(const std::string& text, const std::string& path) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ThrowInvalidArgument(path, ": not JSON (", e.what(), ")");
  }
  const Reader r(path);
  if (r.String(j, "format") != kFormat) r.Fail("format", "is not '" + std::string(kFormat) + "'");
  if (r.Int(j, "format_version") != kFormatVersion) {
    r.Fail("format_version", "is " + std::to_string(r.Int(j, "format_version")) + ", this kiln reads " +
                                 std::to_string(kFormatVersion));
  }
  CheckpointManifest m;
  m.kiln_version = r.String(j, "kiln_version");
  m.program_fingerprint = r.String(j, "program_fingerprint");
  const Json& loop = r.Field(j, "loop", "");
  m.loop.step = r.Int(loop, "step", "loop.");
  m.loop.epoch = r.Int(loop, "epoch", "loop.");
  m.loop.batch = r.Int(loop, "batch", "loop.");
  m.loop.shuffle_seed = static_cast<uint64_t>(r.Int(loop, "shuffle_seed", "loop."));
  m.loop.batch_size = r.Int(loop, "batch_size", "loop.");
  const Json& vars = r.Field(j, "vars", "");
  if (!vars.is_array()) r.Fail("vars", "must be an array");
  std::set<std::string> names;
  for (size_t i = 0; i < vars.size(); ++i) {
    m.vars.push_back(ReadVar(r, vars[i], i));
    if (!names.insert(m.vars.back().name).second) {
      r.Fail("vars[" + std::to_string(i) + "].name", "repeats var '" + m.vars.back().name + "'");
    }
  }
  const Json& files = r.Field(j, "files", "");
  if (!files.is_array()) r.Fail("files", "must be an array");
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string where = "files[" + std::to_string(i) + "].";
    m.files[r.FileName(files[i], "name", where)] = r.String(files[i], "sha256", where);
  }
  return m;
}

}  // namespace kiln
