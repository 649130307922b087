// File helpers: whole-file reads with clear errors, and atomic writes (a
// failed write never leaves a partial output file).
#pragma once

#include <string>

namespace kiln {

// Throws NotFound naming the file when it cannot be read.
std::string ReadFile(const std::string& path);
// Writes to a temporary file beside `path`, fsyncs it, then renames it over
// `path`.
void WriteFileAtomic(const std::string& path, const std::string& content);

// Checks before long work that a file can be created in `dir` (or in the
// folder of `path`); throws InvalidArgument starting with `what` (e.g.
// "--metrics_out") and naming the folder.
void CheckWritableDir(const std::string& dir, const std::string& what);
void CheckWritableFile(const std::string& path, const std::string& what);

}  // namespace kiln
