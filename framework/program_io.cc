#include "framework/program_io.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "framework/error.h"
#include "framework/file_util.h"

namespace kiln {
namespace {

bool IsTextPath(const std::string& path) {
  for (const char* ext : {".pbtxt", ".txt", ".prototxt"}) {
    const std::string e(ext);
    if (path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (!error_.empty()) return;
    // protobuf counts from 0; editors count from 1.
    error_ = StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

}  // namespace

proto::ProgramDesc ParseProgramText(const std::string& text, const std::string& source) {
  proto::ProgramDesc program;
  FirstErrorCollector errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &program)) {
    ThrowInvalidArgument("cannot parse program '", source, "': ",
                         errors.error().empty() ? "malformed text" : errors.error());
  }
  return program;
}

proto::ProgramDesc ParseProgramBinary(const std::string& bytes, const std::string& source) {
  proto::ProgramDesc program;
  if (!program.ParseFromString(bytes)) {
    ThrowInvalidArgument("cannot parse program '", source, "': not a binary ProgramDesc (use .pbtxt for text)");
  }
  return program;
}

proto::ProgramDesc LoadProgram(const std::string& path) {
  const std::string content = ReadFile(path);
  if (IsTextPath(path)) return ParseProgramText(content, path);
  return ParseProgramBinary(content, path);
}

std::string ProgramToText(const proto::ProgramDesc& program) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(program, &text);
  return text;
}

void SaveProgram(const std::string& path, const proto::ProgramDesc& program) {
  if (IsTextPath(path)) {
    WriteFileAtomic(path, ProgramToText(program));
    return;
  }
  std::string bytes;
  if (!program.SerializeToString(&bytes)) ThrowInvalidArgument("cannot serialise program for '", path, "'");
  WriteFileAtomic(path, bytes);
}

}  // namespace kiln
