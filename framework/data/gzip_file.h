// Whole-file reads through zlib, which inflates gzip files and passes plain
// files through unchanged, so loaders accept both forms.
#pragma once

#include <string>

namespace kiln {

// Returns the (decompressed) contents of `path`. Throws NotFound naming the
// file when it cannot be opened, DataLoss when the gzip stream is corrupt or
// truncated.
std::string ReadMaybeGzippedFile(const std::string& path);

}  // namespace kiln
