#include "report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

namespace ndt {

namespace {

constexpr double kLeft = 70, kRight = 20, kTop = 48, kBottom = 42;
// A line with more points than this per pixel column of the plot is drawn downsampled.
constexpr double kMaxPointsPerColumn = 4;

// A tick step of 1, 2 or 5 times a power of ten giving about `ticks` intervals.
double nice_step(double span, int ticks) {
  const double rough = span / ticks;
  const double decade = std::pow(10.0, std::floor(std::log10(rough)));
  double step = 10 * decade;
  for (double m : {5.0, 2.0, 1.0}) {
    if (m * decade >= rough) step = m * decade;
  }
  return step;
}

// "v v v" with every value exact (shortest round-trip form).
std::string value_list(const std::vector<double>& values) {
  std::string out;
  for (double v : values) {
    if (!out.empty()) out += ' ';
    out += fmt::format("{}", v);
  }
  return out;
}

std::string tick_label(double v) { return fmt::format("{:.6g}", std::abs(v) < 1e-12 ? 0.0 : v); }

}  // namespace

std::string xml_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: {
        // XML 1.0 has no place for most control characters, even as references.
        const auto byte = static_cast<unsigned char>(c);
        if ((byte < 0x20 && c != '\t' && c != '\n' && c != '\r') || byte == 0x7f) {
          out += fmt::format("\\x{:02x}", byte);
        } else {
          out += c;
        }
      }
    }
  }
  return out;
}

const char* event_colour(const std::string& kind) {
  if (kind == "clip") return "#ff7f0e";
  if (kind == "spike") return "#9467bd";
  if (kind == "skip" || kind == "overflow" || kind == "nonfinite") return "#d62728";
  if (kind == "rollback") return "#8c564b";
  if (kind == "resume") return "#2ca02c";
  return "#7f7f7f";
}

ChartFrame chart_frame(const LineChart& chart) {
  ChartFrame f;
  f.left = kLeft, f.top = kTop;
  f.width = chart.width - kLeft - kRight, f.height = chart.height - kTop - kBottom;
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const ChartLine& line : chart.lines) {
    for (size_t i = 0; i < line.x.size(); ++i) {
      if (!std::isfinite(line.y[i])) continue;
      xmin = std::min(xmin, line.x[i]), xmax = std::max(xmax, line.x[i]);
      ymin = std::min(ymin, line.y[i]), ymax = std::max(ymax, line.y[i]);
    }
  }
  if (chart.threshold) ymin = std::min(ymin, *chart.threshold), ymax = std::max(ymax, *chart.threshold);
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (xmin == xmax) xmin -= 1, xmax += 1;
  if (ymin > ymax) ymin = 0, ymax = 1;
  if (ymin == ymax) {
    const double pad = ymin == 0 ? 1 : std::abs(ymin) * 0.1;
    ymin -= pad, ymax += pad;
  }
  const double step = nice_step(ymax - ymin, 5);
  f.x0 = xmin, f.x1 = xmax;
  f.y0 = std::floor(ymin / step) * step, f.y1 = std::ceil(ymax / step) * step;
  return f;
}

namespace {

// The points of `line` a chart draws: all of them up to kMaxPointsPerColumn per pixel
// column of the plot; beyond, for each column the first, last, lowest and highest finite
// points (M4: the line looks the same, and a spike stays a spike) and its first
// non-finite one, in step order.
std::vector<size_t> drawn_points(const ChartLine& line, const ChartFrame& f) {
  std::vector<size_t> all(line.x.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  if (static_cast<double>(line.x.size()) <= kMaxPointsPerColumn * f.width) return all;
  std::vector<size_t> kept;
  size_t begin = 0;
  while (begin < line.x.size()) {
    const auto column = static_cast<int64_t>(std::floor(f.px(line.x[begin])));
    size_t end = begin, first = SIZE_MAX, last = 0, low = SIZE_MAX, high = SIZE_MAX, nonfinite = SIZE_MAX;
    for (; end < line.x.size() && static_cast<int64_t>(std::floor(f.px(line.x[end]))) == column; ++end) {
      const double y = line.y[end];
      if (!std::isfinite(y)) {
        if (nonfinite == SIZE_MAX) nonfinite = end;
        continue;
      }
      if (first == SIZE_MAX) first = end;
      last = end;
      if (low == SIZE_MAX || y < line.y[low]) low = end;
      if (high == SIZE_MAX || y > line.y[high]) high = end;
    }
    std::vector<size_t> column_points;
    for (size_t i : {first, low, high, last, nonfinite}) {
      if (i != SIZE_MAX) column_points.push_back(i);
    }
    std::sort(column_points.begin(), column_points.end());
    column_points.erase(std::unique(column_points.begin(), column_points.end()), column_points.end());
    kept.insert(kept.end(), column_points.begin(), column_points.end());
    begin = end;
  }
  return kept;
}

std::string axes_svg(const LineChart& chart, const ChartFrame& f) {
  std::string svg = fmt::format("<text x=\"{:g}\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", f.left,
                                xml_text(chart.title));
  // Grid and tick labels.
  const double ystep = nice_step(f.y1 - f.y0, 5);
  for (double k = std::round(f.y0 / ystep); k * ystep <= f.y1 + ystep * 1e-9; ++k) {
    const double y = f.py(k * ystep);
    svg += fmt::format("<line x1=\"{:g}\" y1=\"{:.2f}\" x2=\"{:g}\" y2=\"{:.2f}\" stroke=\"#e6e6e6\"/>\n", f.left, y,
                       f.left + f.width, y);
    svg += fmt::format("<text x=\"{:g}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text>\n", f.left - 6, y + 4,
                       tick_label(k * ystep));
  }
  const double xstep = std::max(1.0, nice_step(f.x1 - f.x0, 8));
  for (double k = std::ceil(f.x0 / xstep); k * xstep <= f.x1 + xstep * 1e-9; ++k) {
    const double x = f.px(k * xstep), bottom = f.top + f.height;
    svg += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1:g}\" x2=\"{0:.2f}\" y2=\"{2:g}\" stroke=\"#444\"/>\n", x, bottom,
                       bottom + 5);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:g}\" text-anchor=\"middle\">{}</text>\n", x, bottom + 18,
                       tick_label(k * xstep));
  }
  svg += fmt::format("<rect x=\"{:g}\" y=\"{:g}\" width=\"{:g}\" height=\"{:g}\" fill=\"none\" stroke=\"#888\"/>\n",
                     f.left, f.top, f.width, f.height);
  svg += fmt::format("<text x=\"{:g}\" y=\"{:g}\" text-anchor=\"middle\">{}</text>\n", f.left + f.width / 2,
                     chart.height - 6, xml_text(chart.x_label));
  svg += fmt::format("<text transform=\"translate(14 {:g}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     f.top + f.height / 2, xml_text(chart.y_label));
  if (chart.threshold) {
    const double y = f.py(*chart.threshold);
    svg += fmt::format("<line class=\"threshold\" data-y=\"{}\" x1=\"{:g}\" y1=\"{:.2f}\" x2=\"{:g}\" y2=\"{:.2f}\" "
                       "stroke=\"#ff7f0e\" stroke-dasharray=\"6 4\"/>\n",
                       *chart.threshold, f.left, y, f.left + f.width, y);
    svg += fmt::format("<text x=\"{:g}\" y=\"{:.2f}\" text-anchor=\"end\" fill=\"#ff7f0e\">{}</text>\n",
                       f.left + f.width - 4, y - 4, xml_text(chart.threshold_label));
  }
  return svg;
}

// One line's group: its drawn points' exact values, polylines through runs of finite
// values, a triangle at the top edge for each non-finite value, dots where asked or alone.
std::string series_svg(const ChartLine& line, const ChartFrame& f, bool& any_point) {
  const std::vector<size_t> drawn = drawn_points(line, f);
  std::vector<double> xs, ys;
  for (size_t i : drawn) xs.push_back(line.x[i]), ys.push_back(line.y[i]);
  std::string svg = fmt::format("<g class=\"series\" data-series=\"{}\" data-x=\"{}\" data-y=\"{}\"", xml_text(line.name),
                                value_list(xs), value_list(ys));
  if (drawn.size() < line.x.size()) svg += fmt::format(" data-points=\"{} of {}\"", drawn.size(), line.x.size());
  svg += ">\n";
  std::string points;
  int in_run = 0;
  const auto flush = [&] {
    if (in_run > 1) {
      svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{}/>\n", points,
                         line.colour, line.dashed ? " stroke-dasharray=\"5 3\"" : "");
    }
    points.clear();
    in_run = 0;
  };
  for (size_t k = 0; k < xs.size(); ++k) {
    const double x = f.px(xs[k]);
    if (!std::isfinite(ys[k])) {
      flush();
      svg += fmt::format("<path class=\"nonfinite\" data-x=\"{}\" d=\"M{:.2f} {:g}l-5 -9h10z\" fill=\"#d62728\">"
                         "<title>{} = {} at step {}</title></path>\n",
                         xs[k], x, f.top, xml_text(line.name), ys[k], xs[k]);
      continue;
    }
    const double y = f.py(ys[k]);
    any_point = true;
    points += fmt::format("{}{:.2f},{:.2f}", points.empty() ? "" : " ", x, y);
    ++in_run;
    // A lone point (or a sparse series) is drawn as a dot.
    const bool alone = (k == 0 || !std::isfinite(ys[k - 1])) && (k + 1 == xs.size() || !std::isfinite(ys[k + 1]));
    if (line.dots || alone) {
      svg += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"2.5\" fill=\"{}\"/>\n", x, y, line.colour);
    }
  }
  flush();
  return svg + "</g>\n";
}

std::string legend_svg(const LineChart& chart, const ChartFrame& f) {
  std::string svg;
  double x = f.left;
  for (const ChartLine& line : chart.lines) {
    svg += fmt::format("<line x1=\"{:g}\" y1=\"34\" x2=\"{:g}\" y2=\"34\" stroke=\"{}\" stroke-width=\"2\"{}/>\n", x,
                       x + 18, line.colour, line.dashed ? " stroke-dasharray=\"5 3\"" : "");
    svg += fmt::format("<text x=\"{:g}\" y=\"38\">{}</text>\n", x + 22, xml_text(line.name));
    x += 36 + 7.5 * static_cast<double>(line.name.size());
  }
  std::set<std::string> kinds;
  for (const ChartMarker& m : chart.markers) {
    if (!kinds.insert(m.kind).second) continue;
    svg += fmt::format("<circle cx=\"{:g}\" cy=\"34\" r=\"5\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\n",
                       x + 5, event_colour(m.kind));
    svg += fmt::format("<text x=\"{:g}\" y=\"38\">{}</text>\n", x + 14, xml_text(m.kind));
    x += 28 + 7.5 * static_cast<double>(m.kind.size());
  }
  return svg;
}

}  // namespace

std::string render_line_chart(const LineChart& chart) {
  const ChartFrame f = chart_frame(chart);
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}\" class=\"chart\" width=\"{:g}\" height=\"{:g}\" "
      "viewBox=\"0 0 {:g} {:g}\" font-family=\"sans-serif\" font-size=\"12\" data-x-range=\"{} {}\" "
      "data-y-range=\"{} {}\" data-plot=\"{:g} {:g} {:g} {:g}\">\n",
      xml_text(chart.id), chart.width, chart.height, chart.width, chart.height, f.x0, f.x1, f.y0, f.y1, f.left, f.top,
      f.width, f.height);
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += axes_svg(chart, f);
  for (const ChartMarker& m : chart.markers) {
    if (m.y) continue;
    const double x = f.px(m.x);
    svg += fmt::format("<line class=\"marker\" data-kind=\"{}\" data-x=\"{}\" x1=\"{:.2f}\" y1=\"{:g}\" x2=\"{:.2f}\" "
                       "y2=\"{:g}\" stroke=\"{}\" stroke-width=\"1.5\" stroke-dasharray=\"3 3\"><title>step {}: {}"
                       "</title></line>\n",
                       xml_text(m.kind), m.x, x, f.top, x, f.top + f.height, event_colour(m.kind), m.x, xml_text(m.text));
  }
  bool any_point = false;
  for (const ChartLine& line : chart.lines) svg += series_svg(line, f, any_point);
  for (const ChartMarker& m : chart.markers) {
    if (!m.y || !std::isfinite(*m.y)) continue;
    svg += fmt::format("<circle class=\"marker\" data-kind=\"{}\" data-x=\"{}\" data-y=\"{}\" cx=\"{:.2f}\" "
                       "cy=\"{:.2f}\" r=\"5\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"><title>step {}: {}"
                       "</title></circle>\n",
                       xml_text(m.kind), m.x, *m.y, f.px(m.x), f.py(*m.y), event_colour(m.kind), m.x,
                       xml_text(m.text));
  }
  if (!any_point) {
    svg += fmt::format("<text x=\"{:g}\" y=\"{:g}\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n",
                       f.left + f.width / 2, f.top + f.height / 2);
  }
  return svg + legend_svg(chart, f) + "</svg>\n";
}

}  // namespace ndt
