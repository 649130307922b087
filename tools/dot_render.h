// Runs Graphviz `dot` on DOT text under a time budget: the text goes to the
// child's stdin and the SVG comes back on its stdout, so no temporary file is
// ever left behind; a child still running at the deadline is killed.
#pragma once

#include <string>
#include <vector>

namespace kiln::tools {

struct DotBudget {
  std::string program = "dot";  // looked up on PATH; tests name a script
  double seconds = 5;           // wall-clock limit for this one drawing
};

struct DotRender {
  std::string svg;   // the <svg> element (XML prolog left out), "" when not drawn
  std::string note;  // why not drawn (not installed, ran out of time, failed), "" when drawn
  bool timed_out = false;
  bool not_installed = false;
};

// Draws `dot` as SVG with `budget.program -Tsvg`. Never throws for a missing
// program, a failure or a timeout: the result's note says which.
DotRender RenderDotSvg(const std::string& dot, const DotBudget& budget);

// Draws each DOT text in order, all of them within budget.seconds together:
// each gets what is left of it, and one whose turn comes after the deadline
// is not started (its note says so). Once Graphviz is found missing, the
// rest are not tried.
std::vector<DotRender> RenderAllDotSvg(const std::vector<std::string>& dots, const DotBudget& budget);

}  // namespace kiln::tools
