// Fuzzes the binary program parser (ParseProgramBinary, what LoadProgram
// uses for .pb files) and ValidateProgram: any bytes either parse or throw
// kiln::Error; a parsed program either validates or throws kiln::Error; a
// valid program goes through the pass pipeline to a valid program
// (program_checks.h).
#include "framework/program_io.h"
#include "tests/fuzz/program_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  fuzz::ExpectOnlyKilnErrors([&] {
    const proto::ProgramDesc program = ParseProgramBinary(bytes, "fuzz.pb");
    // The text form of whatever parsed (unknown fields and all) must print
    // and parse back: `kiln dump` and the tools print programs they loaded.
    ParseProgramText(ProgramToText(program), "printed");
    fuzz::CheckProgram(program);
  });
  return 0;
}
