#include "tools/cli_args.h"

#include <gflags/gflags.h>

#include <algorithm>

#include "framework/error.h"
#include "framework/suggest.h"
#include "tools/command_table.h"

namespace kiln::tools {
namespace {

std::string Dashes(const std::string& name) { return "--" + name; }

bool IsBoolFlag(const std::string& name) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(name.c_str(), &info) && info.type == "bool";
}

bool IsFlag(const std::string& name) {
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(name.c_str(), &info);
}

std::string TypeForm(const std::string& type) {
  if (type == "bool") return "true or false";
  if (type == "string") return "a string";
  if (type == "double") return "a number";
  return "an integer (" + type + ")";
}

[[noreturn]] void UnknownFlag(const std::string& arg, const std::string& name, const CommandInfo* command) {
  // The command's own flags first: they are what the user most likely meant.
  std::vector<std::string> names = command != nullptr ? command->flags : std::vector<std::string>{};
  for (const auto& n : KilnFlagNames()) names.push_back(n);
  if (command != nullptr && !command->extra_args.empty()) {
    for (const auto& [form, what] : command->extra_args) names.push_back(form.substr(2, form.find(' ') - 2));
  }
  names.push_back("help");
  ThrowInvalidArgument("unknown flag ", arg.substr(0, arg.find('=')), DidYouMean(name, names, "--", ""),
                       " (`kiln ", command != nullptr ? command->name + " " : "", "--help` lists the flags)");
}

void SetFlag(const std::string& name, const std::string& value) {
  gflags::CommandLineFlagInfo info;
  gflags::GetCommandLineFlagInfo(name.c_str(), &info);
  if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
    ThrowInvalidArgument(Dashes(name), " takes ", TypeForm(info.type), ", got '", value, "'");
  }
}

void CheckFeed(const std::string& value) {
  const size_t eq = value.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
    ThrowInvalidArgument("--feed takes NAME=FILE.npy (one argument, no space), got '", value, "'");
  }
}

bool TakesFeeds(const CommandInfo* c) {
  if (c == nullptr) return false;
  return std::any_of(c->extra_args.begin(), c->extra_args.end(),
                     [](const auto& a) { return a.first.rfind("--feed", 0) == 0; });
}

// One argument starting with '-' at argv[*i]; may consume the next as its value.
void ParseFlag(int argc, char** argv, int* i, const CommandInfo* command, CliArgs* out) {
  const std::string arg = argv[*i];
  std::string body = arg.substr(arg.rfind("--", 0) == 0 ? 2 : 1);
  const size_t eq = body.find('=');
  const std::string name = body.substr(0, eq);
  const bool has_value = eq != std::string::npos;
  auto next_value = [&](const std::string& form) {
    if (has_value) return body.substr(eq + 1);
    if (*i + 1 >= argc) ThrowInvalidArgument(Dashes(name), " needs a value: ", Dashes(name), " ", form);
    return std::string(argv[++*i]);
  };
  if (name == "help" || name == "h") {
    out->help = true;
  } else if (name == "feed") {
    if (!TakesFeeds(command)) ThrowInvalidArgument("kiln ", out->command, " takes no --feed");
    const std::string value = next_value("NAME=FILE.npy");
    CheckFeed(value);
    out->feeds.push_back(value);
  } else if (name == "input_shape") {
    if (out->command != "import") ThrowInvalidArgument("kiln ", out->command, " takes no --input_shape");
    const std::string value = next_value("NAME=d0,d1,...");
    if (value.find('=') == std::string::npos) {
      ThrowInvalidArgument("--input_shape takes NAME=d0,d1,... (one argument, no space), got '", value, "'");
    }
    out->input_shapes.push_back(value);
  } else if (name == "trainable") {
    if (out->command != "import") ThrowInvalidArgument("kiln ", out->command, " takes no --trainable");
    if (out->trainable) ThrowInvalidArgument("--trainable given twice (list every name in one: NAME,NAME,...)");
    out->trainable = next_value("NAME,NAME,...");
  } else if (name == "all" && out->command == "flags") {
    out->all = true;
  } else if (name == "onnx" && out->command == "export") {
    if (has_value) ThrowInvalidArgument("--onnx takes no value (the file is --out: kiln export --from CKPT --out M.onnx --onnx)");
    out->onnx = true;
  } else if (IsFlag(name)) {
    gflags::CommandLineFlagInfo info;
    gflags::GetCommandLineFlagInfo(name.c_str(), &info);
    SetFlag(name, info.type == "bool" && !has_value ? "true" : next_value(info.type == "string" ? "S" : "N"));
  } else if (name.rfind("no", 0) == 0 && IsBoolFlag(name.substr(2)) && !has_value) {
    SetFlag(name.substr(2), "false");
  } else {
    UnknownFlag(arg, name, command);
  }
}

}  // namespace

CliArgs ParseCommandLine(int argc, char** argv) {
  CliArgs out;
  int i = 1;
  if (argc > 1) {
    const std::string first = argv[1];
    if (first == "--help" || first == "-h" || first == "help") {
      out.help = true;
      if (argc > 2 && argv[2][0] != '-') out.command = argv[++i];
      ++i;
    } else if (first[0] != '-') {
      out.command = first;
      ++i;
    }
  }
  const CommandInfo* command = out.command.empty() ? nullptr : FindCommand(out.command);
  if (!out.command.empty() && command == nullptr) {
    ThrowInvalidArgument("unknown command '", out.command, "'", DidYouMean(out.command, CommandNames(), "", ""),
                         " (`kiln --help` lists the commands)");
  }
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() > 1 && arg[0] == '-') {
      ParseFlag(argc, argv, &i, command, &out);
      continue;
    }
    if (out.command == "completion" || out.command == "plot" || out.command == "import") {
      out.positional.push_back(arg);
      continue;
    }
    const std::string previous = i > 1 ? argv[i - 1] : "";
    ThrowInvalidArgument("unexpected argument '", arg, "'",
                         previous.rfind("--feed", 0) == 0 ? " after --feed: --feed takes NAME=FILE.npy, no space"
                                                          : ": flags are --name=value or --name value");
  }
  return out;
}

}  // namespace kiln::tools
