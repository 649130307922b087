// Reading and writing programs as protobuf text (.pbtxt) or binary (.pb).
#pragma once

#include <string>

#include "framework/proto/framework.pb.h"

namespace kiln {

// Parses text; errors name `source` (a file name) with line and column.
proto::ProgramDesc ParseProgramText(const std::string& text, const std::string& source = "<text>");
// Parses the binary wire format; errors name `source`.
proto::ProgramDesc ParseProgramBinary(const std::string& bytes, const std::string& source = "<bytes>");
// Text for files ending in .pbtxt/.txt/.prototxt, binary otherwise.
proto::ProgramDesc LoadProgram(const std::string& path);
void SaveProgram(const std::string& path, const proto::ProgramDesc& program);
std::string ProgramToText(const proto::ProgramDesc& program);

}  // namespace kiln
