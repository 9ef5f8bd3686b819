// `ndtrain simulate-pipeline` run as a user would (the built binary): what it prints,
// the SVG it writes, and its errors.
#include "../common/temp_dir.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <string>

namespace ndt {
namespace {

using testing::TempDir;

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs the built ndtrain with `args`, its output captured in a file of `dir`.
CommandResult ndtrain(const std::string& args, const TempDir& dir) {
  const std::string output = dir.file("output.txt");
  const std::string command = std::string(NDT_BINARY_DIR) + "/ndtrain " + args + " > " + output + " 2>&1";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, testing::read_bytes(output)};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Catches: the subcommand not wired to the options (costs or shape ignored), the
// summary missing the bubble against the theory or the peaks, or no SVG written.
TEST(SimulatePipelineCli, PrintsTimelineBubbleAndPeaksAndWritesSvg) {
  TempDir dir;
  const CommandResult r =
      ndtrain("simulate-pipeline --schedule zb_h1 --pp 4 --micro-batches 8 --svg " + dir.file("zb.svg"), dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "schedule zb_h1: pp 4, virtual stages 1, micro-batches 8")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank  3 |......F0I0F1I1")) << r.output;
  EXPECT_TRUE(contains(r.output, "mean bubble 11.11%; theory 11.11% from (p-1)(F+BI-BW)")) << r.output;
  EXPECT_TRUE(contains(r.output, "   0  24         11.1%   4\n")) << r.output;
  EXPECT_TRUE(contains(testing::read_bytes(dir.file("zb.svg")), "</svg>"));

  const CommandResult costly = ndtrain("simulate-pipeline --schedule 1f1b --pp 2 --micro-batches 1 --forward-cost 2 "
                                       "--backward-cost 3 --communication-cost 1",
                                       dir);
  ASSERT_EQ(costly.exit_code, 0) << costly.output;
  EXPECT_TRUE(contains(costly.output, "makespan 12\n")) << costly.output;  // 2 + 1 + 2 + 3 + 1 + 3
  EXPECT_TRUE(contains(costly.output, "the theory assumes no communication time")) << costly.output;

  const CommandResult interleaved =
      ndtrain("simulate-pipeline --schedule interleaved_1f1b --pp 4 --virtual-stages 2 --micro-batches 8", dir);
  ASSERT_EQ(interleaved.exit_code, 0) << interleaved.output;
  EXPECT_TRUE(contains(interleaved.output, "theory 15.79% from (p-1)/(v*m+p-1) = 3/19")) << interleaved.output;

  const CommandResult seq =
      ndtrain("simulate-pipeline --schedule seq1f1b --pp 4 --seq-chunks 2 --micro-batches 4", dir);
  ASSERT_EQ(seq.exit_code, 0) << seq.output;
  EXPECT_TRUE(contains(seq.output, "micro-batches 4, sequence chunks 2;")) << seq.output;
  EXPECT_TRUE(contains(seq.output, "rank  3 |............F0.0F0.1B0.1    F1.0B0.0")) << seq.output;
  EXPECT_TRUE(contains(seq.output, "units of 1/2)\n   0  12         27.3%   5\n")) << seq.output;
  EXPECT_TRUE(contains(seq.output, "theory 27.27% from (p-1)/(k*m+p-1) = 3/11")) << seq.output;
  // The V schedules: their chunk letters and formulas (docs/pipeline.md's figures).
  const CommandResult zb_v = ndtrain("simulate-pipeline --schedule zb_v --pp 4 --virtual-stages 2 --micro-batches 8", dir);
  ASSERT_EQ(zb_v.exit_code, 0) << zb_v.output;
  EXPECT_TRUE(contains(zb_v.output, "rank  3 |.........F0aF0bF1aF1b")) << zb_v.output;
  EXPECT_TRUE(contains(zb_v.output, "mean bubble 5.88%; theory 5.88%")) << zb_v.output;
  const CommandResult dual =
      ndtrain("simulate-pipeline --schedule dualpipev --pp 4 --virtual-stages 2 --micro-batches 8", dir);
  ASSERT_EQ(dual.exit_code, 0) << dual.output;
  EXPECT_TRUE(contains(dual.output, "mean bubble 11.11%; theory 11.11% from (p-1)(F&B+B-3W)")) << dual.output;
}

// Catches: bad input accepted, or refused without naming the setting and the value.
TEST(SimulatePipelineCli, BadInputIsRefusedWithTheValues) {
  TempDir dir;
  CommandResult r = ndtrain("simulate-pipeline --schedule zb-h1 --pp 4 --micro-batches 8", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "parallel.pp_schedule = \"zb-h1\" is not a known schedule (gpipe, 1f1b, "
                                 "interleaved_1f1b, zb_h1, zb_v, dualpipev, seq1f1b)"))
      << r.output;
  r = ndtrain("simulate-pipeline --schedule 1f1b --pp 4 --micro-batches 8 --seq-chunks 2", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "parallel.pp_seq_chunks = 2 cuts micro-batches into sequence chunks")) << r.output;
  r = ndtrain("simulate-pipeline --schedule interleaved_1f1b --pp 4 --virtual-stages 2 --micro-batches 6", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "micro-batches (6) to be a multiple of parallel.pp (4)")) << r.output;
  r = ndtrain("simulate-pipeline --schedule dualpipev --pp 4 --micro-batches 8", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "\"dualpipev\" places two chunks per rank in a V: it needs "
                                 "parallel.pp_virtual_stages = 2, got 1"))
      << r.output;
  r = ndtrain("simulate-pipeline --schedule 1f1b --pp 4 --micro-batches 8 --backward-cost -2", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.output, "--backward-cost) = -2")) << r.output;
}

}  // namespace
}  // namespace ndt
