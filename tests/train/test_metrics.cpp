// The metrics log (train/metrics.h): records as whole lines, and write errors surfaced.
#include "../common/errors.h"
#include "../common/temp_dir.h"
#include "train/metrics.h"

#include <gtest/gtest.h>

namespace ndt {
namespace {

// Catches: a resumed run truncating the log, or a fresh one appending to an old one.
TEST(MetricsLog, OneLinePerRecordAppendingOnResume) {
  testing::TempDir dir;
  const std::string path = dir.file("run/metrics.jsonl");
  MetricsLog(path).write({{"step", 0}});
  MetricsLog(path, /*append=*/true).write({{"step", 1}});
  EXPECT_EQ(testing::read_bytes(path), "{\"step\":0}\n{\"step\":1}\n");
  MetricsLog(path).write({{"step", 0}});
  EXPECT_EQ(testing::read_bytes(path), "{\"step\":0}\n");
}

// Catches: a full disk ignored, so the run goes on and exits 0 with the log cut
// mid-record.
TEST(MetricsLog, WriteErrorIsAnErrorNamingTheFileAndTheReason) {
  MetricsLog log("/dev/full");
  testing::expect_error([&] { log.write({{"step", 1}, {"loss", 5.5}}); },
                        {"/dev/full", "No space left on device"});
}

}  // namespace
}  // namespace ndt
