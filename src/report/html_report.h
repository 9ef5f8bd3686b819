// `ndtrain report`'s page: one self-contained HTML file (inline SVG charts from
// report/svg_chart.h, inline CSS, no script, no network), written as well-formed XML
// (XHTML syntax) so that it opens in any browser and any XML parser can check it.
// It shows the digest (report/run_summary.h), the run's mesh and config (its latest
// "run" record), the charts, the measured pipeline timeline when there is one, the
// events, and the lines the reader skipped. Every text taken from the run is escaped.
#pragma once

#include "report/pipeline_timeline.h"
#include "report/run_metrics.h"

#include <string>

namespace ndt {

// pipeline: null for a run without one.
std::string render_html_report(const RunMetrics& metrics, const MeasuredPipeline* pipeline, const std::string& title);

}  // namespace ndt
