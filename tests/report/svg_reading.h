// Reading the report's SVG back in tests: a chart by its id, its attributes, and each
// series' exact values and drawn points (the forms report/svg_chart.h documents).
#pragma once

#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace ndt::testing {

// The <svg ...>...</svg> element whose start tag has id="id" ("" if none).
inline std::string svg_by_id(const std::string& html, const std::string& id) {
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    const std::string tag = html.substr(at, html.find('>', at) - at);
    if (tag.find(" id=\"" + id + "\"") != std::string::npos) return html.substr(at, html.find("</svg>", at) + 6 - at);
  }
  return "";
}

// The value of attribute `name` in the first tag of `element`.
inline std::string attribute(const std::string& element, const std::string& name) {
  const std::string tag = element.substr(0, element.find('>'));
  std::smatch m;
  if (!std::regex_search(tag, m, std::regex(" " + name + "=\"([^\"]*)\""))) return "";
  return m[1];
}

// "1 2.5 nan" -> numbers (std::stod reads nan and inf).
inline std::vector<double> numbers(const std::string& text) {
  std::vector<double> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t used = 0;
    out.push_back(std::stod(text.substr(at), &used));
    at += used;
    while (at < text.size() && (text[at] == ' ' || text[at] == ',')) ++at;
  }
  return out;
}

struct SvgSeries {
  bool found = false;
  std::vector<double> x, y;                              // data-x, data-y
  std::vector<std::vector<std::pair<double, double>>> polylines;  // drawn points
};

inline SvgSeries series_of(const std::string& svg, const std::string& name) {
  SvgSeries s;
  const size_t at = svg.find("<g class=\"series\" data-series=\"" + name + "\"");
  if (at == std::string::npos) return s;
  const std::string group = svg.substr(at, svg.find("</g>", at) - at);
  s.found = true;
  s.x = numbers(attribute(group, "data-x"));
  s.y = numbers(attribute(group, "data-y"));
  const std::regex polyline("<polyline points=\"([^\"]*)\"");
  for (std::sregex_iterator it(group.begin(), group.end(), polyline), end; it != end; ++it) {
    const std::vector<double> v = numbers((*it)[1]);
    std::vector<std::pair<double, double>> points;
    for (size_t i = 0; i + 1 < v.size(); i += 2) points.emplace_back(v[i], v[i + 1]);
    s.polylines.push_back(points);
  }
  return s;
}

// How many times `needle` occurs in `text`.
inline size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace ndt::testing
