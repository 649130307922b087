// kiln completion bash: a bash completion script written from the command
// table: the commands, each command's flags and arguments, and the values
// of --model, --dataset, --optimizer and --jit_launch_mode.
#include <cstdio>
#include <sstream>
#include <string>

#include "framework/error.h"
#include "tools/command_table.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

std::string Words(const CommandInfo& c) {
  std::string out = "--help";
  for (const auto& f : c.flags) out += " --" + f;
  for (const auto& [form, what] : c.extra_args) out += " " + form.substr(0, form.find(' '));
  return out;
}

}  // namespace

std::string BashCompletion() {
  std::ostringstream s;
  s << "# kiln bash completion: eval \"$(kiln completion bash)\"\n"
       "_kiln() {\n"
       "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
       "  # --flag=value: bash splits at '=', so the flag is two words back.\n"
       "  if [ \"$prev\" = \"=\" ]; then prev=\"${COMP_WORDS[COMP_CWORD-2]}\"; fi\n"
       "  if [ \"$cur\" = \"=\" ]; then cur=\"\"; fi\n"
       "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
       "    COMPREPLY=($(compgen -W \"";
  for (const auto& n : CommandNames()) s << n << " ";
  s << "--help\" -- \"$cur\")); return\n"
       "  fi\n"
       "  local cmd=\"${COMP_WORDS[1]}\"\n"
       "  case \"$prev\" in\n"
       "    --model) if [ \"$cmd\" = predict ]; then COMPREPLY=($(compgen -d -- \"$cur\"));"
       " else COMPREPLY=($(compgen -W \"mlp cnn transformer resnet gpt\" -- \"$cur\")); fi; return ;;\n"
       "    --dataset) COMPREPLY=($(compgen -W \"digits fashion-mnist synthetic\" -- \"$cur\")); return ;;\n"
       "    --optimizer) COMPREPLY=($(compgen -W \"sgd momentum adam adamw\" -- \"$cur\")); return ;;\n"
       "    --jit_launch_mode) COMPREPLY=($(compgen -W \"runtime executor\" -- \"$cur\")); return ;;\n"
       "    --program|--out|--from|--save_dir|--resume|--metrics_out|--data_dir|--feed|--dump_passes|--jit_dump_dir)"
       " COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n"
       "  esac\n"
       "  local words=\"\"\n"
       "  case \"$cmd\" in\n";
  for (const CommandInfo& c : Commands()) {
    if (c.name == "help") {
      s << "    help) words=\"";
      for (const auto& n : CommandNames()) s << n << " ";
      s << "\" ;;\n";
    } else if (c.name == "completion") {
      s << "    completion) words=\"bash\" ;;\n";
    } else {
      s << "    " << c.name << ") words=\"" << Words(c) << "\" ;;\n";
    }
  }
  s << "  esac\n"
       "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
       "}\n"
       "complete -o default -F _kiln kiln\n";
  return s.str();
}

int CompletionCommand(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0] != "bash") {
    ThrowInvalidArgument("kiln completion takes one argument, the shell: bash (got ", args.size(), ")");
  }
  std::fputs(BashCompletion().c_str(), stdout);
  return 0;
}

}  // namespace kiln::tools
