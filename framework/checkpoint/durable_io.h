// Durable file writes for checkpoints: data reaches the disk (fsync) before
// a directory is renamed into place, and the rename itself is made durable
// by syncing the parent directory. Errors name the path.
#pragma once

#include <string>
#include <vector>

namespace kiln {

// Creates (truncates) `path`, writes `bytes`, fsyncs and closes it.
void WriteFileDurable(const std::string& path, const std::string& bytes);
// fsync of a directory: makes the entries created or renamed in it durable.
void SyncDir(const std::string& dir);
// mkdir -p.
void MakeDirsOrThrow(const std::string& dir);
// rename(2): atomic when `to` does not exist.
void RenameOrThrow(const std::string& from, const std::string& to);
// rm -rf (no error when missing).
void RemoveTree(const std::string& path);
// Names of the entries of `dir` (not . and ..), sorted; empty when `dir` is missing.
std::vector<std::string> ListDir(const std::string& dir);

}  // namespace kiln
