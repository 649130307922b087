#include "tools/dump_html.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "framework/file_util.h"
#include "tools/svg_chart.h"

namespace kiln::tools {
namespace {

const char* kStyle = R"css(
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
pre { background: #f6f8fa; padding: 0.6em; overflow-x: auto; font-size: 12px; }
section.cluster { border: 1px solid #ccd; border-radius: 6px; padding: 0 1em 1em; margin: 1.5em 0; }
section.cluster.selected, section.cluster:target { border: 2px solid #1f77b4; background: #fbfdff; }
nav a { margin-right: 0.8em; }
details summary { cursor: pointer; margin: 0.3em 0; }
.graph svg { max-width: 100%; height: auto; }
.note { color: #666; }
body.focus > :not(h1):not(section.selected) { display: none; }
)css";

// Marks the cluster named by the URL fragment (#c1): for a click on its box
// in the graph, a link in the list, or a URL opened as it is. ?cluster=c1
// shows that cluster alone (a view to print or screenshot).
const char* kScript = R"js(
function kilnSelect() {
  var query = /[?&]cluster=([^&]+)/.exec(window.location.search);
  var id = query ? query[1] : window.location.hash.substring(1);
  document.querySelectorAll('section.cluster').forEach(function (s) {
    var on = s.id === id;
    s.classList.toggle('selected', on);
    if (on) s.querySelectorAll('details').forEach(function (d) { d.open = true; });
  });
  document.body.classList.toggle('focus', !!query);
  document.body.setAttribute('data-selected', id);
}
window.addEventListener('hashchange', kilnSelect);
window.addEventListener('DOMContentLoaded', kilnSelect);
)js";

std::string Pre(const std::string& text) { return "<pre>" + XmlEscape(text) + "</pre>\n"; }

// "; kernel ew_1 (...)" and "; fuses: a, b" from an .asm file's header.
std::string AsmSummary(const jit::DumpFile& f) {
  std::istringstream in(f.content);
  std::string line, out = f.name;
  while (std::getline(in, line) && line.rfind(";", 0) == 0) {
    if (line.rfind("; fuses:", 0) == 0) out += " — " + line.substr(2);
    if (line.find(" bytes, ") != std::string::npos) out += " (" + line.substr(2, line.find(" bytes") - 2) + " bytes)";
  }
  return out;
}

std::string ClusterSection(const HtmlCluster& c) {
  std::ostringstream s;
  s << "<section class=\"cluster\" id=\"" << c.id << "\">\n<h2>Cluster " << c.id << " <small><code>" << c.key
    << "</code></small></h2>\n";
  if (c.object == nullptr) {
    s << "<p>Not compiled: " << XmlEscape(c.failure) << "</p>\n</section>\n";
    return s.str();
  }
  auto file = [&c](const std::string& name) -> const jit::DumpFile* {
    for (const auto& f : c.files) {
      if (f.name == name) return &f;
    }
    return nullptr;
  };
  const std::pair<const char*, const char*> parts[] = {
      {"subgraph.txt", "Ops and shapes"},
      {"lowering.txt", "Lowering: what each step matched, the kernel each op became"},
      {"kernels.txt", "Instructions, buffer plan and generated kernels' IR"},
      {"aliases.txt", "Outputs that alias inputs"},
      {"reorders.txt", "oneDNN reorders a launch runs"}};
  for (const auto& [name, heading] : parts) {
    const jit::DumpFile* f = file(name);
    if (f == nullptr) continue;
    const bool open = std::string(name) == "subgraph.txt" || std::string(name) == "lowering.txt";
    s << "<details" << (open ? " open" : "") << "><summary>" << heading << " (" << name << ")</summary>\n"
      << Pre(f->content) << "</details>\n";
  }
  s << "<h3>Graph</h3>\n";
  if (!c.graph_svg.empty()) {
    s << "<div class=\"graph\">\n" << c.graph_svg << "</div>\n";
  } else {
    s << "<p class=\"note\">Not drawn: " << XmlEscape(c.graph_note.empty() ? "no graph" : c.graph_note)
      << ". graph.dot in the cluster's folder holds it.</p>\n";
  }
  s << "<h3>Machine code</h3>\n";
  bool any = false;
  for (const auto& f : c.files) {
    if (f.name.size() < 4 || f.name.compare(f.name.size() - 4, 4, ".asm") != 0) continue;
    any = true;
    s << "<details><summary>" << XmlEscape(AsmSummary(f)) << "</summary>\n" << Pre(f.content) << "</details>\n";
  }
  if (!any) s << "<p class=\"note\">No generated code: oneDNN primitives and framework kernels only.</p>\n";
  s << "<h3>Arena</h3>\n" << ArenaChartSvg(*c.object) << "</section>\n";
  return s.str();
}

}  // namespace

std::string ArenaChartSvg(const jit::CompiledObject& obj) {
  const runtime::BufferPlan& plan = obj.program.plan;
  const int n = static_cast<int>(obj.program.instructions.size());
  std::vector<int> first(plan.buffers.size(), n), last(plan.buffers.size(), -1);
  for (int i = 0; i < n; ++i) {
    for (int b : obj.program.instructions[i].args) {
      const int r = runtime::RootBuffer(plan, b);
      first[r] = std::min(first[r], i);
      last[r] = std::max(last[r], i);
    }
  }
  const double w = 720, h = 200, left = 70, top = 10, bottom = 30;
  const double arena = std::max<double>(1.0, static_cast<double>(plan.arena_bytes));
  const double col = (w - left - 10) / std::max(1, n);
  std::ostringstream s;
  int boxes = 0;
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const runtime::BufferInfo& info = plan.buffers[b];
    if (info.role != runtime::BufferRole::kTemp || info.view_of >= 0 || info.region >= 0 || last[b] < 0) continue;
    const double y = top + (h - top - bottom) * static_cast<double>(info.offset) / arena;
    const double bh = std::max(2.0, (h - top - bottom) * static_cast<double>(info.bytes()) / arena);
    s << "<rect x=\"" << left + col * first[b] << "\" y=\"" << y << "\" width=\"" << col * (last[b] - first[b] + 1) - 1
      << "\" height=\"" << bh - 1 << "\" fill=\"" << SeriesColour(boxes++) << "\" fill-opacity=\"0.7\"><title>"
      << XmlEscape(info.name + " " + DimsToString(info.dims) + ": " + std::to_string(info.bytes()) + " bytes at +" +
                   std::to_string(info.offset) + ", live in instructions " + std::to_string(first[b]) + "-" +
                   std::to_string(last[b]))
      << "</title></rect>\n";
  }
  s << "<text x=\"" << left << "\" y=\"" << h - 8 << "\" font-size=\"11\">instructions 0-" << n - 1
    << " (left to right); arena offset (top to bottom), " << plan.arena_bytes << " bytes planned, "
    << plan.arena_bytes_no_reuse << " without reuse; " << boxes << " temporaries"
    << (plan.donated_bytes > 0 ? ", " + std::to_string(plan.donated_bytes) + " bytes of them in dying inputs" : "")
    << "</text>\n<text x=\"4\" y=\"" << top + 10 << "\" font-size=\"11\">+0</text><text x=\"4\" y=\"" << h - bottom
    << "\" font-size=\"11\">+" << plan.arena_bytes << "</text>\n";
  return SvgDocument(w, h, s.str());
}

std::string DumpHtml(const HtmlDump& d) {
  std::ostringstream s;
  s << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>kiln dump</title>\n<style>"
    << kStyle << "</style>\n<script>" << kScript << "</script>\n</head>\n<body>\n<h1>kiln dump</h1>\n<p>"
    << XmlEscape(d.description) << "</p>\n<nav>Clusters:";
  for (const auto& c : d.clusters) s << " <a href=\"#" << c.id << "\">" << c.id << "</a>";
  s << "</nav>\n<h2>Program</h2>\n";
  if (!d.graph_coarse.empty()) {
    s << "<p class=\"note\">Drawn at cluster granularity: " << XmlEscape(d.graph_coarse)
      << ". Each cluster's section has its own graph.</p>\n";
  }
  if (!d.graph_svg.empty()) {
    s << "<p class=\"note\">Clusters are the coloured boxes: click one for its kernels. Ops left out of clusters are "
         "dashed; hover for the reason.</p>\n<div class=\"graph\">\n"
      << d.graph_svg << "</div>\n";
  } else if (d.graph_not_installed) {
    s << "<p class=\"note\">Graphviz is not installed, so the program graph is not drawn here: <code>apt-get install "
         "graphviz</code> (or <code>bash tools/setup.sh</code>), then dump again. program.dot holds the graph; the "
         "tables below list every cluster and every op left out.</p>\n";
  } else {
    s << "<p class=\"note\">The program graph is not drawn: " << XmlEscape(d.graph_note)
      << ". program.dot holds it (<code>dot -Tsvg program.dot -o program.svg</code> draws it without a time limit); "
         "the tables below list every cluster and every op left out.</p>\n";
  }
  s << "<h2>Clusters, ops left out, cache statistics</h2>\n" << Pre(d.index_md);
  for (const auto& c : d.clusters) s << ClusterSection(c);
  s << "</body>\n</html>\n";
  return s.str();
}

}  // namespace kiln::tools
