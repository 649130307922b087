// File helpers: whole-file reads with clear errors, and atomic writes (a
// failed write never leaves a partial output file).
#pragma once

#include <string>

namespace kiln {

// Throws NotFound naming the file when it cannot be read.
std::string ReadFile(const std::string& path);
// Writes to a temporary file beside `path`, then renames it over `path`.
void WriteFileAtomic(const std::string& path, const std::string& content);

}  // namespace kiln
