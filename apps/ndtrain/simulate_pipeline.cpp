// `ndtrain simulate-pipeline`: a pipeline schedule's action lists timed with per-action
// costs (parallel/pipeline/simulator.h): the timeline of every rank, the bubble per
// rank and its mean against the theory, the peak of live activations per rank, and
// optionally the timeline as an SVG file.
#include "apps/ndtrain/commands.h"
#include "core/output_file.h"
#include "parallel/pipeline/simulator.h"

#include <fmt/format.h>

namespace ndt {

int run_simulate_pipeline(const SimulatePipelineOptions& o) {
  const PipelineSchedule schedule = pipeline_schedule_from_name(o.schedule);
  const PipelineShape shape = pipeline_shape(schedule, o.pp, o.virtual_stages, o.micro_batches, o.seq_chunks);
  const PipelineSimulation s = simulate_pipeline(schedule, shape, o.costs);
  const PipelineBubbleTheory theory = pipeline_bubble_theory(schedule, shape, o.costs);

  fmt::print("schedule {}: pp {}, virtual stages {}, micro-batches {}{}; costs F {:g}, B {:g}, BI {:g}, BW {:g}, "
             "communication {:g}\n",
             o.schedule, shape.pp, shape.v, shape.m,
             shape.seq_chunks > 1 ? fmt::format(", sequence chunks {}", shape.seq_chunks) : "", o.costs.forward, o.costs.backward, o.costs.backward_input,
             o.costs.backward_weight, o.costs.communication);
  fmt::print("{}", render_pipeline_text(s));
  fmt::print("makespan {:g}\n", s.makespan);
  fmt::print("rank  busy      bubble   peak live activations{}\n",
             shape.v > 1            ? " ((micro-batch, chunk) pairs; micro-batch contexts)"
             : shape.seq_chunks > 1 ? fmt::format(" ((micro-batch, sequence chunk) units of 1/{})", shape.seq_chunks)
                                    : "");
  for (int r = 0; r < shape.pp; ++r) {
    fmt::print("{:>4}  {:<8g}  {:>5.1f}%   {}", r, s.busy[r], 100 * s.bubble[r], s.peak_live_activations[r]);
    if (shape.v > 1) fmt::print("; {} contexts", s.peak_live_contexts[static_cast<size_t>(r)]);
    fmt::print("\n");
  }
  fmt::print("mean bubble {:.2f}%; theory {:.2f}% from {}", 100 * s.mean_bubble, 100 * theory.fraction,
             theory.formula);
  fmt::print("{}\n", o.costs.communication > 0 ? " (the theory assumes no communication time)" : "");
  if (!o.svg.empty()) {
    const std::string title = fmt::format("{}: pp = {}, v = {}, m = {}; bubble {:.1f}%", o.schedule, shape.pp,
                                          shape.v, shape.m, 100 * s.mean_bubble);
    const std::string svg = render_pipeline_svg(s, title);
    AtomicFile file(o.svg);
    file.write(svg.data(), svg.size());
    file.commit();
    fmt::print("timeline written to {}\n", o.svg);
  }
  return 0;
}

}  // namespace ndt
