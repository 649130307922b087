// Small self-contained SVG charts (no scripts, no fonts fetched): line
// charts for training curves (kiln plot) and horizontal bar charts (the
// dump's profile). Deterministic text, so tests can compare it.
#pragma once

#include <string>
#include <vector>

namespace kiln::tools {

struct Series {
  std::string label;
  std::vector<double> x, y;
};

struct LineChart {
  std::string title;
  std::string x_label, y_label;
  std::vector<Series> series;
  bool log_y = false;
};

// One chart as an SVG <g> group of `width` x `height` pixels at (x0, y0):
// axes with a few round ticks, one polyline per series in its own colour,
// a legend. An empty chart says "no data".
std::string LineChartSvg(const LineChart& chart, double x0, double y0, double width, double height);

struct Bar {
  std::string label;
  double value = 0;
  std::string detail;  // printed after the value
};

// Horizontal bars, largest first as given, with their labels and values.
std::string BarChartSvg(const std::string& title, const std::vector<Bar>& bars, const std::string& unit,
                        double width);

// A whole SVG document around `body` (groups of the functions above).
std::string SvgDocument(double width, double height, const std::string& body);

// The colour of series i (a fixed palette that prints and reads in grey).
const char* SeriesColour(size_t i);

// "<", ">", "&" and quotes escaped for SVG/HTML text.
std::string XmlEscape(const std::string& s);

}  // namespace kiln::tools
