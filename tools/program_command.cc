// kiln program: writes a model's full training program (forward, backward,
// optimizer) and, next to it, its startup program.
#include <cstdio>

#include "framework/flags.h"
#include "framework/program_io.h"
#include "tools/commands.h"
#include "tools/model_flags.h"

namespace kiln::tools {

int ProgramCommand() {
  if (FLAGS_out.empty()) ThrowInvalidArgument("--out is required (e.g. --out mlp.pbtxt)");
  const Model m = BuildModelFromFlags(DatasetFromFlags());
  SaveProgram(FLAGS_out, m.train);
  std::string startup = FLAGS_out;
  const size_t dot = startup.rfind('.');
  startup = (dot == std::string::npos ? startup : startup.substr(0, dot)) + ".startup" +
            (dot == std::string::npos ? "" : FLAGS_out.substr(dot));
  SaveProgram(startup, m.startup);
  std::printf("wrote %s (%d ops, %d vars) and %s; feed '%s' and '%s', loss is '%s'\n", FLAGS_out.c_str(),
              m.train.blocks(0).ops_size(), m.train.blocks(0).vars_size(), startup.c_str(), m.features.c_str(),
              m.labels.c_str(), m.loss.c_str());
  return 0;
}

}  // namespace kiln::tools
