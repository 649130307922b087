// kiln dump's index.html: the whole dump as one self-contained page (inline
// SVG and CSS, a few lines of plain JavaScript, nothing fetched): the
// program graph with the clusters as coloured boxes that link to their
// sections, per cluster its own graph, its ops, lowering, kernels, machine code and
// aliases, and its arena plan as a buffer-lifetime chart; the ops left out
// and the cache statistics. `#c1` in the URL selects cluster c1.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/compiled_object.h"
#include "compiler/dump/jit_dump.h"

namespace kiln::tools {

struct HtmlCluster {
  std::string id;   // "c0"
  std::string key;
  std::vector<jit::DumpFile> files;                   // the cluster folder's files (none when it failed)
  std::shared_ptr<const jit::CompiledObject> object;  // its compiled object, or null
  std::string failure;
  std::string graph_svg;   // its own graph (graph.dot drawn), or ""
  std::string graph_note;  // why it is not drawn
};

struct HtmlDump {
  std::string description;  // index.md's header paragraph
  std::string graph_svg;    // `dot -Tsvg program.dot`, or "" when not drawn
  std::string graph_note;   // why not drawn (tools/dot_render.h)
  bool graph_not_installed = false;
  std::string graph_coarse;  // why the program is drawn at cluster granularity, or ""

  std::string index_md;     // the tables (shown as text inside the page)
  std::vector<HtmlCluster> clusters;
};

std::string DumpHtml(const HtmlDump& dump);

// The arena plan of `obj` as an SVG chart: temporaries as boxes, offset
// against instruction index (boxes sharing rows are memory reused).
std::string ArenaChartSvg(const jit::CompiledObject& obj);

}  // namespace kiln::tools
