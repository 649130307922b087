// Fuzzes the program text parser (ParseProgramText) and ValidateProgram:
// any text either parses or throws kiln::Error; a parsed program either
// validates or throws kiln::Error (naming the op, slot or var); a program
// that parses prints back to text that parses to the same program; a valid
// program goes through the pass pipeline to a valid program
// (program_checks.h).
#include <google/protobuf/util/message_differencer.h>

#include "framework/program_io.h"
#include "tests/fuzz/program_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string text(reinterpret_cast<const char*>(data), size);
  fuzz::ExpectOnlyKilnErrors([&] {
    const proto::ProgramDesc program = ParseProgramText(text, "fuzz.pbtxt");
    const proto::ProgramDesc again = ParseProgramText(ProgramToText(program), "printed");
    if (!google::protobuf::util::MessageDifferencer::Equals(program, again)) {
      fuzz::Finding("ProgramToText does not round-trip");
    }
    fuzz::CheckProgram(program);
  });
  return 0;
}
