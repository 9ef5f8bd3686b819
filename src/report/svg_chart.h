// Line charts as inline SVG for the run report: axes with ticks at 1-2-5 steps, a
// legend, lines that break at non-finite values (marked at the top edge), event
// markers (a vertical line at a step, or a ring on a point) and an optional horizontal
// threshold. No script, no external resource: any browser shows it, and it is
// well-formed XML.
//
// The data are in the SVG, not only their pixels, so tests and tools can read them
// back: the root carries data-x-range="x0 x1", data-y-range="y0 y1" and
// data-plot="left top width height"; each line is a <g class="series"
// data-series="NAME" data-x="..." data-y="..."> holding the exact values (shortest
// round-trip decimal; "nan", "inf") and polylines whose points are
//   px = left + (x - x0) / (x1 - x0) * width,  py = top + (y1 - y) / (y1 - y0) * height
// with two decimals; each marker is an element of class "marker" with data-kind and
// data-x (and data-y for a point marker).
//
// A line with more than 4 points per pixel column of the plot (a long run: 200,000
// steps on 670 columns) is downsampled as it is drawn: per column the first, last,
// lowest and highest finite points (M4, so the drawing is that of every point and a
// spike stays visible) and the first non-finite one. data-x and data-y then hold the
// drawn points, each an exact value of the run, and the group carries
// data-points="DRAWN of TOTAL"; every value is in the run's metrics.jsonl.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ndt {

struct ChartLine {
  std::string name;  // legend and data-series
  std::vector<double> x, y;
  std::string colour = "#1f77b4";
  bool dashed = false;
  bool dots = false;  // a dot on every point (sparse series, e.g. validation loss)
};

struct ChartMarker {
  double x = 0;
  std::optional<double> y;  // set: a ring on the point (x, y); unset: a vertical line at x
  std::string kind;         // data-kind, and the colour (report/run_metrics.h's event kinds)
  std::string text;         // shown on hover (<title>)
};

struct LineChart {
  std::string id;  // the svg's id
  std::string title;
  std::string x_label = "step";
  std::string y_label;
  std::vector<ChartLine> lines;
  std::vector<ChartMarker> markers;
  std::optional<double> threshold;  // a dashed horizontal line (e.g. optim.grad_clip)
  std::string threshold_label;
  double width = 760, height = 300;
};

// The data ranges and the plot area: the mapping of the header comment.
struct ChartFrame {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  double left = 0, top = 0, width = 0, height = 0;
  double px(double x) const { return left + (x - x0) / (x1 - x0) * width; }
  double py(double y) const { return top + (y1 - y) / (y1 - y0) * height; }
};
// x: the lines' finite x extent; y: their finite values and the threshold, widened to
// whole tick steps (a single value or none: a range around it).
ChartFrame chart_frame(const LineChart& chart);

std::string render_line_chart(const LineChart& chart);

// Text for XML/HTML content and attribute values: & < > " ' escaped.
std::string xml_text(const std::string& text);

// The colour of an event kind's markers.
const char* event_colour(const std::string& kind);

}  // namespace ndt
