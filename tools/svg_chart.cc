#include "tools/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace kiln::tools {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A tick label: few digits, no trailing zeros.
std::string TickText(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.0e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

// About `n` round ticks (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> Ticks(double lo, double hi, int n) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  double step = p;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) {
      step = m * p;
      break;
    }
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(t);
  return out;
}

}  // namespace

const char* SeriesColour(size_t i) {
  static const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  return kColours[i % (sizeof kColours / sizeof kColours[0])];
}

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string LineChartSvg(const LineChart& c, double x0, double y0, double width, double height) {
  std::ostringstream s;
  s << "<g transform=\"translate(" << Num(x0) << "," << Num(y0) << ")\">\n";
  s << "<text x=\"" << Num(width / 2) << "\" y=\"14\" text-anchor=\"middle\" font-weight=\"bold\">"
    << XmlEscape(c.title) << "</text>\n";
  const double left = 60, right = 10, top = 24, bottom = 40;
  const double pw = width - left - right, ph = height - top - bottom;
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  auto ty = [&c](double y) { return c.log_y ? std::log10(std::max(y, 1e-12)) : y; };
  for (const Series& se : c.series) {
    for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (!std::isfinite(se.y[i])) continue;
      xmin = std::min(xmin, se.x[i]), xmax = std::max(xmax, se.x[i]);
      ymin = std::min(ymin, ty(se.y[i])), ymax = std::max(ymax, ty(se.y[i]));
    }
  }
  s << "<rect x=\"" << Num(left) << "\" y=\"" << Num(top) << "\" width=\"" << Num(pw) << "\" height=\"" << Num(ph)
    << "\" fill=\"none\" stroke=\"#888\"/>\n";
  if (!std::isfinite(xmin)) {
    s << "<text x=\"" << Num(left + pw / 2) << "\" y=\"" << Num(top + ph / 2) << "\" text-anchor=\"middle\">no data</text>\n</g>\n";
    return s.str();
  }
  if (xmax == xmin) xmax = xmin + 1;
  if (ymax == ymin) ymax = ymin + 1;
  const double ypad = (ymax - ymin) * 0.05;
  ymin -= ypad, ymax += ypad;
  auto px = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto py = [&](double y) { return top + ph - (y - ymin) / (ymax - ymin) * ph; };
  for (double t : Ticks(xmin, xmax, 5)) {
    s << "<line x1=\"" << Num(px(t)) << "\" y1=\"" << Num(top + ph) << "\" x2=\"" << Num(px(t)) << "\" y2=\""
      << Num(top + ph + 4) << "\" stroke=\"#888\"/><text x=\"" << Num(px(t)) << "\" y=\"" << Num(top + ph + 16)
      << "\" text-anchor=\"middle\" font-size=\"11\">" << TickText(t) << "</text>\n";
  }
  for (double t : Ticks(ymin, ymax, 4)) {
    s << "<line x1=\"" << Num(left) << "\" y1=\"" << Num(py(t)) << "\" x2=\"" << Num(left + pw) << "\" y2=\""
      << Num(py(t)) << "\" stroke=\"#eee\"/><text x=\"" << Num(left - 4) << "\" y=\"" << Num(py(t) + 4)
      << "\" text-anchor=\"end\" font-size=\"11\">" << TickText(c.log_y ? std::pow(10.0, t) : t) << "</text>\n";
  }
  s << "<text x=\"" << Num(left + pw / 2) << "\" y=\"" << Num(height - 6) << "\" text-anchor=\"middle\" font-size=\"12\">"
    << XmlEscape(c.x_label) << "</text>\n";
  s << "<text transform=\"translate(12," << Num(top + ph / 2) << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">"
    << XmlEscape(c.y_label) << (c.log_y ? " (log)" : "") << "</text>\n";
  for (size_t k = 0; k < c.series.size(); ++k) {
    const Series& se = c.series[k];
    s << "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" << SeriesColour(k) << "\" points=\"";
    for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (std::isfinite(se.y[i])) s << Num(px(se.x[i])) << "," << Num(py(ty(se.y[i]))) << " ";
    }
    s << "\"><title>" << XmlEscape(se.label) << "</title></polyline>\n";
    s << "<text x=\"" << Num(left + pw - 4) << "\" y=\"" << Num(top + 14 + 14 * k) << "\" text-anchor=\"end\" "
      << "font-size=\"11\" fill=\"" << SeriesColour(k) << "\">" << XmlEscape(se.label) << "</text>\n";
  }
  s << "</g>\n";
  return s.str();
}

std::string BarChartSvg(const std::string& title, const std::vector<Bar>& bars, const std::string& unit,
                        double width) {
  std::ostringstream s;
  const double label_w = 170, row = 18;
  double vmax = 0;
  for (const Bar& b : bars) vmax = std::max(vmax, b.value);
  s << "<g>\n<text x=\"0\" y=\"14\" font-weight=\"bold\">" << XmlEscape(title) << "</text>\n";
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = 24 + row * static_cast<double>(i);
    const double w = vmax > 0 ? bars[i].value / vmax * (width - label_w - 220) : 0;
    s << "<text x=\"" << Num(label_w - 6) << "\" y=\"" << Num(y + 12) << "\" text-anchor=\"end\" font-size=\"11\">"
      << XmlEscape(bars[i].label) << "</text><rect x=\"" << Num(label_w) << "\" y=\"" << Num(y + 2) << "\" width=\""
      << Num(std::max(w, 1.0)) << "\" height=\"" << Num(row - 4) << "\" fill=\"" << SeriesColour(0)
      << "\"/><text x=\"" << Num(label_w + w + 4) << "\" y=\"" << Num(y + 12) << "\" font-size=\"11\">"
      << TickText(bars[i].value) << " " << XmlEscape(unit) << " " << XmlEscape(bars[i].detail) << "</text>\n";
  }
  s << "</g>\n";
  return s.str();
}

std::string SvgDocument(double width, double height, const std::string& body) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(width) + "\" height=\"" + Num(height) +
         "\" viewBox=\"0 0 " + Num(width) + " " + Num(height) +
         "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n" +
         body + "</svg>\n";
}

}  // namespace kiln::tools
