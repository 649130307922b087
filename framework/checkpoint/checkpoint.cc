#include "framework/checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "framework/checkpoint/durable_io.h"
#include "framework/checkpoint/manifest.h"
#include "framework/checkpoint/sha256.h"
#include "framework/data/npy.h"
#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/op_desc.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif

namespace kiln {
namespace {

constexpr const char* kPrefix = "ckpt-";
constexpr const char* kManifest = "manifest.json";

// A var name as a file name: [A-Za-z0-9._-] kept, anything else as %XX.
std::string FileNameOf(const std::string& var) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : var) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out + ".npy";
}

// The step of "ckpt-<step>", or -1.
int64_t StepOf(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.size() == std::string(kPrefix).size()) return -1;
  int64_t step = 0;
  for (size_t i = std::string(kPrefix).size(); i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

bool HasManifest(const std::string& dir) { return std::filesystem::is_regular_file(dir + "/" + kManifest); }

// Complete checkpoints under root, newest first.
std::vector<std::pair<int64_t, std::string>> Checkpoints(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  for (const std::string& name : ListDir(root)) {
    const int64_t step = StepOf(name);
    if (step >= 0 && HasManifest(root + "/" + name)) out.emplace_back(step, root + "/" + name);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// The manifest and file contents of a checkpoint of `program` taken from `scope`.
CheckpointManifest Collect(const proto::ProgramDesc& program, const Scope& scope, const LoopState& loop,
                           const SaveOptions& options, std::map<std::string, std::string>* contents) {
  CheckpointManifest m;
  m.kiln_version = KilnVersion();
  m.program_fingerprint = ProgramFingerprint(program);
  m.loop = loop;
  for (const std::string& name : CheckpointVars(program)) {
    const Variable* v = scope.FindVar(name);
    if (v == nullptr || !v->Get().initialized()) {
      ThrowInvalidArgument("checkpoint: persistable var '", name, "' holds no data in the scope");
    }
    CheckpointVar var{name, FileNameOf(name), v->Get().dtype(), v->Get().dims(), ""};
    std::string bytes = NpyBytes(v->Get());
    var.sha256 = Sha256Hex(bytes);
    (*contents)[var.file] = std::move(bytes);
    m.vars.push_back(std::move(var));
  }
  for (const auto& [name, text] : options.files) {
    if (name == kManifest || contents->count(name)) ThrowInvalidArgument("checkpoint: file name '", name, "' is taken");
    m.files[name] = Sha256Hex(text);
    (*contents)[name] = text;
  }
  return m;
}

void Prune(const std::string& root, int keep) {
  const auto all = Checkpoints(root);
  for (size_t i = static_cast<size_t>(keep); keep > 0 && i < all.size(); ++i) RemoveTree(all[i].second);
}

// The bytes of a listed file, checked against its sha256.
std::string ReadVerified(const std::string& dir, const std::string& name, const std::string& sha256) {
  const std::string path = dir + "/" + name;
  std::string bytes = ReadFile(path);
  if (Sha256Hex(bytes) != sha256) {
    ThrowDataLoss("checkpoint file '", path, "' is corrupt: its sha256 differs from the manifest's");
  }
  return bytes;
}

}  // namespace

const char* KilnVersion() { return KILN_VERSION; }

std::vector<std::string> CheckpointVars(const proto::ProgramDesc& program) {
  std::vector<std::string> names;
  if (program.blocks_size() == 0) return names;
  for (const auto& v : program.blocks(0).vars()) {
    if (v.persistable()) names.push_back(v.name());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string ProgramFingerprint(const proto::ProgramDesc& program) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    program.SerializeToCodedStream(&coded);
  }
  return Sha256Hex(bytes).substr(0, 16);
}

namespace {

// Writes `contents` and the manifest into a temporary sibling of `dir`,
// fsyncs them, and renames it to `dir` (replacing a checkpoint there).
void WriteAtomically(const std::string& dir, const CheckpointManifest& m,
                     const std::map<std::string, std::string>& contents) {
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  const std::string base = std::filesystem::path(dir).filename().string();
  const std::string tmp = (parent.empty() ? "." : parent) + "/.tmp-" + base + "-" + std::to_string(::getpid());
  MakeDirsOrThrow(tmp);
  try {
    for (const auto& [name, bytes] : contents) WriteFileDurable(tmp + "/" + name, bytes);
    WriteFileDurable(tmp + "/" + kManifest, ManifestToJson(m));
    SyncDir(tmp);
    // An older checkpoint at `dir` goes first, so that the rename cannot fail
    // on a non-empty target.
    RemoveTree(dir);
    RenameOrThrow(tmp, dir);
    SyncDir(parent.empty() ? "." : parent);
  } catch (...) {
    RemoveTree(tmp);
    throw;
  }
}

}  // namespace

void SaveCheckpointDir(const std::string& dir, const proto::ProgramDesc& program, const Scope& scope,
                       const LoopState& loop, const SaveOptions& options) {
  std::map<std::string, std::string> contents;
  const CheckpointManifest m = Collect(program, scope, loop, options, &contents);
  if (std::filesystem::exists(dir) && !HasManifest(dir) && !std::filesystem::is_empty(dir)) {
    ThrowInvalidArgument("'", dir, "' exists and is not a kiln checkpoint or model: not overwriting it");
  }
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  if (!parent.empty()) MakeDirsOrThrow(parent);
  WriteAtomically(dir, m, contents);
}

std::string SaveCheckpoint(const std::string& root, const proto::ProgramDesc& program, const Scope& scope,
                           const LoopState& loop, const SaveOptions& options) {
  std::map<std::string, std::string> contents;
  const CheckpointManifest m = Collect(program, scope, loop, options, &contents);
  MakeDirsOrThrow(root);
  // Stale temporaries of runs that died while saving.
  for (const std::string& name : ListDir(root)) {
    if (name.rfind(".tmp-", 0) == 0) RemoveTree(root + "/" + name);
  }
  const std::string final_dir = root + "/" + kPrefix + std::to_string(loop.step);
  WriteAtomically(final_dir, m, contents);
  Prune(root, options.keep);
  return final_dir;
}

std::string LatestCheckpoint(const std::string& root) {
  const auto all = Checkpoints(root);
  return all.empty() ? "" : all.front().second;
}

std::string ResolveCheckpoint(const std::string& path) {
  if (HasManifest(path)) return path;
  const std::string latest = LatestCheckpoint(path);
  if (latest.empty()) ThrowNotFound("no checkpoint in '", path, "' (expected ", kManifest, " or ckpt-<step> folders)");
  return latest;
}

CheckpointManifest ReadCheckpoint(const std::string& dir, std::map<std::string, Tensor>* tensors,
                                  std::map<std::string, std::string>* files) {
  const std::string manifest_path = dir + "/" + kManifest;
  const CheckpointManifest m = ManifestFromJson(ReadFile(manifest_path), manifest_path);
  for (const CheckpointVar& v : m.vars) {
    const std::string path = dir + "/" + v.file;
    const Tensor t = ParseNpy(ReadVerified(dir, v.file, v.sha256), path);
    if (t.dtype() != v.dtype || t.dims() != v.dims) {
      ThrowDataLoss("checkpoint file '", path, "' holds ", NumpyDtypeName(t.dtype()), DimsToString(t.dims()),
                    ", the manifest says ", NumpyDtypeName(v.dtype), DimsToString(v.dims));
    }
    if (tensors != nullptr) (*tensors)[v.name] = t;
  }
  for (const auto& [name, sha] : m.files) {
    std::string bytes = ReadVerified(dir, name, sha);
    if (files != nullptr) (*files)[name] = std::move(bytes);
  }
  return m;
}

CheckpointManifest LoadCheckpoint(const std::string& path, const proto::ProgramDesc& program, Scope* scope) {
  const std::string dir = ResolveCheckpoint(path);
  std::map<std::string, Tensor> tensors;
  const CheckpointManifest m = ReadCheckpoint(dir, &tensors);
  const std::vector<std::string> expected = CheckpointVars(program);
  const std::set<std::string> wanted(expected.begin(), expected.end());
  for (const CheckpointVar& v : m.vars) {
    if (!wanted.count(v.name)) {
      ThrowInvalidArgument("checkpoint '", dir, "' has var '", v.name, "' (", v.file,
                           ") that the program does not have");
    }
  }
  for (const std::string& name : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end()) ThrowInvalidArgument("checkpoint '", dir, "' lacks persistable var '", name, "'");
    const proto::VarDesc* desc = FindVarDesc(program.blocks(0), name);
    const Tensor& t = it->second;
    const std::string file = dir + "/" + FileNameOf(name);
    if (t.dtype() != FromProto(desc->dtype())) {
      ThrowInvalidArgument("checkpoint var '", name, "' (", file, ") is ", NumpyDtypeName(t.dtype()),
                           ", the program declares ", NumpyDtypeName(FromProto(desc->dtype())));
    }
    const Dims declared = VarDims(*desc);
    if (std::find(declared.begin(), declared.end(), -1) == declared.end() && declared != t.dims()) {
      ThrowInvalidArgument("checkpoint var '", name, "' (", file, ") has shape ", DimsToString(t.dims()),
                           ", the program declares ", DimsToString(declared));
    }
  }
  // Everything checked: only now does the scope change.
  for (auto& [name, t] : tensors) {
    Variable* v = scope->Var(name);
    *v->GetMutable() = std::move(t);
    // Loaded, not initialised by a startup program (Variable::origin): the
    // startup that once initialised it must not overwrite it when re-run.
    v->set_origin(0);
  }
  return m;
}

}  // namespace kiln
