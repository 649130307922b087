// kiln plot A.jsonl [B.jsonl ...] --out curves.svg: training curves from
// kiln train --history files (or the Python API's history), overlaid to
// compare runs: loss against step, test accuracy against epoch, step time
// against step.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "framework/checkpoint/durable_io.h"
#include "framework/error.h"
#include "framework/file_util.h"
#include "framework/flags.h"
#include "tools/commands.h"
#include "tools/svg_chart.h"

namespace kiln::tools {
namespace {

struct Run {
  std::string label;
  Series loss, accuracy, step_ms;
};

double Number(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.at(key).is_number()) ThrowInvalidArgument(where, ": field '", key, "' must be a number");
  return j.at(key).get<double>();
}

Run ReadHistory(const std::string& path) {
  Run run;
  run.label = path.substr(path.find_last_of('/') + 1);
  const std::string text = ReadFile(path);
  size_t line_no = 0, begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      ThrowInvalidArgument(where, ": not a JSON line (", e.what(), ")");
    }
    if (!j.is_object()) ThrowInvalidArgument(where, ": expected a JSON object");
    if (j.contains("step") && j.contains("loss")) {
      const double step = Number(j, "step", where);
      run.loss.x.push_back(step);
      run.loss.y.push_back(Number(j, "loss", where));
      if (j.contains("step_ms")) {
        run.step_ms.x.push_back(step);
        run.step_ms.y.push_back(Number(j, "step_ms", where));
      }
    } else if (j.contains("epoch") && j.contains("test_accuracy")) {
      run.accuracy.x.push_back(Number(j, "epoch", where));
      run.accuracy.y.push_back(Number(j, "test_accuracy", where));
    } else {
      ThrowInvalidArgument(where, ": expected a step line (step, loss, ...) or an epoch line (epoch, test_accuracy)");
    }
  }
  if (run.loss.x.empty()) ThrowInvalidArgument(path, ": no step lines (is it a kiln train --history file?)");
  return run;
}

}  // namespace

std::string PlotSvg(const std::vector<std::string>& paths) {
  LineChart loss{"loss", "step", "loss", {}, false}, accuracy{"test accuracy", "epoch", "accuracy", {}, false},
      step_ms{"step time", "step", "ms", {}, true};
  for (const std::string& p : paths) {
    Run r = ReadHistory(p);
    r.loss.label = r.accuracy.label = r.step_ms.label = r.label;
    loss.series.push_back(r.loss);
    accuracy.series.push_back(r.accuracy);
    step_ms.series.push_back(r.step_ms);
  }
  const double w = 760, h = 280;
  return SvgDocument(w, 3 * h, LineChartSvg(loss, 0, 0, w, h) + LineChartSvg(accuracy, 0, h, w, h) +
                                   LineChartSvg(step_ms, 0, 2 * h, w, h));
}

int PlotCommand(const std::vector<std::string>& paths) {
  if (paths.empty()) ThrowInvalidArgument("kiln plot needs one or more history files: kiln plot A.jsonl [B.jsonl ...] --out curves.svg");
  if (FLAGS_out.empty()) ThrowInvalidArgument("--out FILE.svg is required");
  CheckWritableFile(FLAGS_out, "--out");
  WriteFileAtomic(FLAGS_out, PlotSvg(paths));
  std::printf("wrote %s (%zu runs)\n", FLAGS_out.c_str(), paths.size());
  return 0;
}

}  // namespace kiln::tools
