// Checkpoints of a training run: every persistable var of the training
// program (parameters, optimizer state, the learning rate, RNG state) as a
// .npy file numpy reads without kiln, the programs as text, and a manifest
// (JSON) listing each var's name, file, dtype, shape and sha256, each other
// file's sha256, the training loop's position, the kiln version and the
// program's fingerprint.
//
// Layout under a save directory ROOT:
//   ROOT/ckpt-<step>/manifest.json
//   ROOT/ckpt-<step>/<var>.npy ...        (var names escaped for file names)
//   ROOT/ckpt-<step>/<name>.pbtxt ...     (the programs given to SaveCheckpoint)
// A save writes everything into ROOT/.tmp-ckpt-<step>-<pid>/, fsyncs each
// file, renames the directory to ROOT/ckpt-<step> and fsyncs ROOT: after a
// crash at any moment ROOT holds whole checkpoints only (a stale .tmp
// directory is never read, and the next save removes it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/proto/framework.pb.h"
#include "framework/scope.h"
#include "framework/tensor.h"

namespace kiln {

// Where the training loop stands: what a resumed run continues from.
struct LoopState {
  int64_t step = 0;   // steps done
  int64_t epoch = 0;  // epoch of the next step
  int64_t batch = 0;  // index of the next batch within that epoch
  uint64_t shuffle_seed = 0;
  int64_t batch_size = 0;
};

struct CheckpointVar {
  std::string name;
  std::string file;
  DataType dtype = DataType::kFP32;
  Dims dims;
  std::string sha256;
};

struct CheckpointManifest {
  std::string kiln_version;
  std::string program_fingerprint;
  LoopState loop;
  std::vector<CheckpointVar> vars;            // sorted by name
  std::map<std::string, std::string> files;   // other files: name -> sha256
};

// The vars a checkpoint of `program` holds: block 0's persistable vars,
// sorted by name.
std::vector<std::string> CheckpointVars(const proto::ProgramDesc& program);
// 16 hex digits of the SHA-256 of the program's deterministic serialization.
std::string ProgramFingerprint(const proto::ProgramDesc& program);
// The version the manifest records.
const char* KilnVersion();

struct SaveOptions {
  int keep = 0;  // keep the newest `keep` checkpoints (0: all)
  // Extra text files stored beside the vars (e.g. "train.pbtxt").
  std::map<std::string, std::string> files;
};

// Saves the CheckpointVars of `program` from `scope` under `root`; returns
// the checkpoint's directory. Every var must hold data. Throws naming the var
// or path; nothing is left half-written at ROOT/ckpt-<step>.
std::string SaveCheckpoint(const std::string& root, const proto::ProgramDesc& program, const Scope& scope,
                           const LoopState& loop, const SaveOptions& options = {});

// The same written to `dir` itself (an exported model): atomically, replacing
// a checkpoint or model already there; an existing `dir` holding anything
// else is an error.
void SaveCheckpointDir(const std::string& dir, const proto::ProgramDesc& program, const Scope& scope,
                       const LoopState& loop, const SaveOptions& options = {});

// The newest complete checkpoint directory under `root` (by step), or ""
// when there is none. Does not verify the files.
std::string LatestCheckpoint(const std::string& root);

// `path` itself when it holds a manifest, else LatestCheckpoint(path); throws
// NotFound naming `path` when neither.
std::string ResolveCheckpoint(const std::string& path);

// Reads and verifies a checkpoint directory: the manifest must be valid JSON
// of this format; every listed file must exist and match its sha256; every
// var file must be a .npy of the listed dtype and shape. Fills `tensors` (by
// var name) and `files` (by name) when given. Throws naming the file and what
// is wrong.
CheckpointManifest ReadCheckpoint(const std::string& dir, std::map<std::string, Tensor>* tensors = nullptr,
                                  std::map<std::string, std::string>* files = nullptr);

// Reads and verifies `path` (ResolveCheckpoint), checks its vars against
// `program` (same names, dtypes and dims: a missing or extra var, a wrong
// dtype or shape is an error naming the var and the file) and only then
// replaces the vars in `scope`. On any error the scope is unchanged.
CheckpointManifest LoadCheckpoint(const std::string& path, const proto::ProgramDesc& program, Scope* scope);

}  // namespace kiln
