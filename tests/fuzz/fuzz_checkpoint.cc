// Fuzzes checkpoint reading: the manifest (ManifestFromJson) and the loader
// (ReadCheckpoint, LoadCheckpoint) over a directory the input describes.
//
// Input: one mode byte, then
//   even mode: the manifest text alone. Whatever parses must write back
//     (ManifestToJson) to text that parses to the same manifest.
//   odd mode: an archive "<manifest.json>(\n@@ <file name>\n<file bytes>)*".
//     The files are written into an empty checkpoint directory (names other
//     than [A-Za-z0-9._%-]+ not starting with '.' are skipped), and each
//     "@sha:K@" in the manifest becomes the sha256 of file K (1-based), so
//     that mutations get past the checksums to the .npy reader and the
//     checks against the program. The directory is loaded into a scope for
//     the MLP training program of the seed (tests/fuzz/corpus/fuzz_checkpoint):
//     it either loads, with every persistable var of the declared dtype and
//     dims, or throws kiln::Error and leaves the scope unchanged.
#include <filesystem>
#include <vector>

#include "framework/checkpoint/checkpoint.h"
#include "framework/checkpoint/manifest.h"
#include "framework/checkpoint/sha256.h"
#include "framework/models/models.h"
#include "framework/op_desc.h"
#include "tests/fuzz/fuzz_util.h"

namespace kiln::fuzz {
namespace {

struct ArchiveFile {
  std::string name;
  std::string bytes;
};

bool SafeName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '%' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Splits the archive into the manifest text and the files.
std::string Unpack(const std::string& archive, std::vector<ArchiveFile>* files) {
  static const std::string kSep = "\n@@ ";
  size_t at = archive.find(kSep);
  const std::string manifest = archive.substr(0, at);
  while (at != std::string::npos) {
    const size_t start = at + kSep.size();
    at = archive.find(kSep, start);
    const std::string part = archive.substr(start, at == std::string::npos ? std::string::npos : at - start);
    const size_t nl = part.find('\n');
    files->push_back({part.substr(0, nl), nl == std::string::npos ? "" : part.substr(nl + 1)});
  }
  return manifest;
}

std::string FillShas(std::string manifest, const std::vector<ArchiveFile>& files) {
  for (size_t k = files.size(); k >= 1; --k) {  // "@sha:12@" before "@sha:1@"
    const std::string tag = "@sha:" + std::to_string(k) + "@";
    const std::string sha = Sha256Hex(files[k - 1].bytes);
    for (size_t at = manifest.find(tag); at != std::string::npos; at = manifest.find(tag, at + sha.size())) {
      manifest.replace(at, tag.size(), sha);
    }
  }
  return manifest;
}

bool SameManifest(const CheckpointManifest& a, const CheckpointManifest& b) {
  if (a.kiln_version != b.kiln_version || a.program_fingerprint != b.program_fingerprint || a.files != b.files ||
      a.vars.size() != b.vars.size() || a.loop.step != b.loop.step || a.loop.epoch != b.loop.epoch ||
      a.loop.batch != b.loop.batch || a.loop.shuffle_seed != b.loop.shuffle_seed ||
      a.loop.batch_size != b.loop.batch_size) {
    return false;
  }
  for (size_t i = 0; i < a.vars.size(); ++i) {
    const CheckpointVar &x = a.vars[i], &y = b.vars[i];
    if (x.name != y.name || x.file != y.file || x.dtype != y.dtype || x.dims != y.dims || x.sha256 != y.sha256) {
      return false;
    }
  }
  return true;
}

void FuzzManifest(const std::string& text) {
  ExpectOnlyKilnErrors([&] {
    const CheckpointManifest m = ManifestFromJson(text, "fuzz/manifest.json");
    if (!SameManifest(m, ManifestFromJson(ManifestToJson(m), "written"))) {
      Finding("ManifestToJson(ManifestFromJson(x)) reads back differently");
    }
  });
}

const proto::ProgramDesc& Program() {
  static const proto::ProgramDesc program = BuildMlp(MlpConfig{64, {4}, 10}, TrainConfig{}).train;
  return program;
}

void FuzzLoad(const std::string& archive) {
  std::vector<ArchiveFile> files;
  const std::string manifest = FillShas(Unpack(archive, &files), files);
  const std::string dir = ScratchDir() + "/ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory(dir);
  WritePlainFile(dir + "/manifest.json", manifest);
  for (const ArchiveFile& f : files) {
    if (SafeName(f.name) && f.name != "manifest.json") WritePlainFile(dir + "/" + f.name, f.bytes);
  }
  ExpectOnlyKilnErrors([&] { ReadCheckpoint(dir); });
  Scope scope;
  scope.Var("sentinel");
  bool loaded = false;
  ExpectOnlyKilnErrors([&] {
    LoadCheckpoint(dir, Program(), &scope);
    loaded = true;
  });
  if (!loaded) {
    if (scope.LocalVarNames().size() != 1) Finding("a failed LoadCheckpoint changed the scope");
    return;
  }
  for (const std::string& name : CheckpointVars(Program())) {
    const proto::VarDesc* desc = FindVarDesc(Program().blocks(0), name);
    const Variable* v = scope.FindVar(name);
    if (v == nullptr || v->Get().dtype() != FromProto(desc->dtype()) || v->Get().dims() != VarDims(*desc)) {
      Finding("LoadCheckpoint accepted var '" + name + "' of another dtype or shape");
    }
  }
}

}  // namespace
}  // namespace kiln::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    kiln::fuzz::FuzzManifest(rest);
  } else {
    kiln::fuzz::FuzzLoad(rest);
  }
  return 0;
}
