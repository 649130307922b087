// The checkpoint manifest as JSON (nlohmann::json): written with a fixed key
// order, read with a check of every field's presence and type.
#pragma once

#include <string>

#include "framework/checkpoint/checkpoint.h"

namespace kiln {

std::string ManifestToJson(const CheckpointManifest& manifest);
// `path` names the file in errors: "<path>: not JSON (...)", "<path>: field
// 'vars[2].shape' must be an array of integers". Var files and other files
// must be plain names within the checkpoint directory (no '/', not "..")
// and var names must not repeat.
CheckpointManifest ManifestFromJson(const std::string& text, const std::string& path);

}  // namespace kiln
