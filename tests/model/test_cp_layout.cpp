// CpLayout (model/activation_layout.h) under USP: each ring position's rows split
// contiguously over its cp_ulysses ranks, also where a rank's share straddles two runs.
#include "model/activation_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

namespace ndt {
namespace {

// cp = 6 as 3 Ulysses ranks x a ring of 2, zigzag, T = 120: ring chunks of 30 tokens,
// position 0 holds chunks 0 and 3 (positions 0-29, 90-119), position 1 chunks 1 and 2.
// Each rank holds 20 rows: the middle rank of a group straddles its position's two runs.
// Catches: a slice that drops or repeats rows at a run boundary, or loses positions.
TEST(CpLayoutUsp, RanksSplitTheirRingPositionContiguously) {
  const CpLayout layout{6, CpMode::usp, CpChunks::zigzag, 3};
  const int T = 120;
  const std::vector<TokenRun> middle = layout.runs(1, T);
  ASSERT_EQ(middle.size(), 2u);
  EXPECT_EQ(middle[0].begin, 0);
  EXPECT_EQ(middle[0].count, 10);
  EXPECT_EQ(middle[0].position, 20);
  EXPECT_EQ(middle[1].begin, 10);
  EXPECT_EQ(middle[1].count, 10);
  EXPECT_EQ(middle[1].position, 90);
  std::vector<int32_t> all;
  for (int p = 0; p < 2; ++p) {
    std::vector<int32_t> group;
    for (int u = 0; u < 3; ++u) {
      const std::vector<int32_t> mine = layout.positions(3 * p + u, T);
      EXPECT_EQ(mine.size(), size_t{20});
      group.insert(group.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(group, layout.ring().positions(p, T)) << "position " << p;
    all.insert(all.end(), group.begin(), group.end());
  }
  std::sort(all.begin(), all.end());
  for (int t = 0; t < T; ++t) EXPECT_EQ(all[static_cast<size_t>(t)], t);
}

// The sequence must divide into 2 x cp chunks (zigzag) or cp (contiguous), and the
// message says how USP cuts them.
TEST(CpLayoutUsp, SequenceMustDivideIntoTheChunks) {
  EXPECT_NO_THROW(CpLayout({6, CpMode::usp, CpChunks::contiguous, 3}).check_sequence(18));
  try {
    CpLayout({6, CpMode::usp, CpChunks::zigzag, 3}).check_sequence(18);
    ADD_FAILURE() << "18 tokens in 12 chunks";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("train.seq_len = 18 must divide into 12 chunks of equal length for "
                                         "parallel.cp = 6 with zigzag chunks"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("each split over parallel.cp_ulysses ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ndt
