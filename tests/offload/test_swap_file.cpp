// Swap files (src/offload/swap_file.h) on both I/O backends: chunks written and read
// back, never-written chunks as zeros without I/O, a damaged or truncated chunk named,
// a full disk (a real tmpfs) named, partial element ranges, and the all-or-nothing
// restore a checkpoint load uses.
#include "../common/temp_dir.h"
#include "../common/tmpfs.h"
#include "offload/io_buffer.h"
#include "offload/io_stats.h"
#include "offload/swap_file.h"
#include "offload/swap_space.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <numeric>

namespace ndt::offload {
namespace {

constexpr int64_t kChunk = 8192;  // bytes: 2048 floats

#define EXPECT_MENTIONS(message, text) \
  EXPECT_NE(std::string(message).find(text), std::string::npos) << "message lacks '" << (text) << "': " << (message)

class SwapFileTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  std::unique_ptr<AsyncIo> io_ = make_async_io(GetParam(), 8);
  testing::TempDir dir_;
};

void fill(IoBuffer& b, float base) {
  std::iota(b.floats(), b.floats() + b.bytes() / sizeof(float), base);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const SwapError& e) {
    return e.what();
  }
  return "";
}

// Catches: a backend that loses, reorders or mixes up concurrent chunks.
TEST_P(SwapFileTest, ChunksComeBackAsWrittenWithSeveralInFlight) {
  SwapFile file(dir_.path() / "a.swap", 6, kChunk, MemTag::optimizer, *io_);
  std::vector<IoBuffer> out, in;
  std::vector<SwapFile::Pending> writes;
  for (int c = 0; c < 6; ++c) {
    out.emplace_back(kChunk, MemTag::other);
    fill(out.back(), 1000.0f * c);
    writes.push_back(file.start_write(c, out.back().data()));
  }
  for (auto& w : writes) file.finish(w);
  std::vector<SwapFile::Pending> reads;
  for (int c = 5; c >= 0; --c) {
    in.emplace_back(kChunk, MemTag::other);
    reads.push_back(file.start_read(c, in.back().data()));
  }
  for (auto& r : reads) file.finish(r);
  for (int c = 0; c < 6; ++c) {
    const IoBuffer& got = in[static_cast<size_t>(5 - c)];
    for (int64_t i = 0; i < kChunk / 4; ++i) ASSERT_EQ(got.floats()[i], 1000.0f * c + i) << "chunk " << c;
  }
}

// Catches: a fresh optimizer state costing reads (or garbage) before it was ever written.
TEST_P(SwapFileTest, NeverWrittenChunksReadAsZerosWithoutIo) {
  SwapFile file(dir_.path() / "z.swap", 3, kChunk, MemTag::optimizer, *io_);
  IoBuffer b(kChunk, MemTag::other);
  fill(b, 7);
  const IoCounters before = io_counters();
  SwapFile::Pending p = file.start_read(1, b.data());
  file.finish(p);
  EXPECT_EQ((io_counters() - before).read_bytes, 0);
  for (int64_t i = 0; i < kChunk / 4; ++i) ASSERT_EQ(b.floats()[i], 0.0f);
  EXPECT_EQ(file.allocated_bytes(), 0) << "nothing written, nothing allocated";
}

// Catches: a chunk changed on disk behind the run's back going unnoticed, or an error that does not say where.
TEST_P(SwapFileTest, ADamagedChunkIsFoundAndNamed) {
  SwapFile file(dir_.path() / "d.swap", 4, kChunk, MemTag::optimizer, *io_);
  IoBuffer b(kChunk, MemTag::other);
  for (int c = 0; c < 4; ++c) {
    fill(b, static_cast<float>(c));
    SwapFile::Pending w = file.start_write(c, b.data());
    file.finish(w);
  }
  const int fd = ::open(file.path().c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char byte = 0x5a;
  ASSERT_EQ(::pwrite(fd, &byte, 1, 2 * kChunk + 100), 1);  // inside chunk 2
  ::fsync(fd);
  ::close(fd);
  SwapFile::Pending ok = file.start_read(1, b.data());
  file.finish(ok);  // the others are fine
  const std::string error = error_of([&] {
    SwapFile::Pending r = file.start_read(2, b.data());
    file.finish(r);
  });
  EXPECT_MENTIONS(error, file.path().string());
  EXPECT_MENTIONS(error, "chunk 2 (bytes 16384 to 24576)");
  EXPECT_MENTIONS(error, "is damaged");
}

// Catches: a swap file cut short outside the run read as a short chunk without an error.
TEST_P(SwapFileTest, ATruncatedFileIsNamed) {
  SwapFile file(dir_.path() / "t.swap", 2, kChunk, MemTag::optimizer, *io_);
  IoBuffer b(kChunk, MemTag::other);
  fill(b, 1);
  for (int c = 0; c < 2; ++c) {
    SwapFile::Pending w = file.start_write(c, b.data());
    file.finish(w);
  }
  ASSERT_EQ(::truncate(file.path().c_str(), kChunk + 4096), 0);
  const std::string error = error_of([&] {
    SwapFile::Pending r = file.start_read(1, b.data());
    file.finish(r);
  });
  EXPECT_MENTIONS(error, "chunk 1");
  EXPECT_MENTIONS(error, "moved 4096 of its 8192 bytes: the file was truncated or replaced outside this run");
}

// Catches: element ranges across chunk borders losing the rest of a partially written chunk.
TEST_P(SwapFileTest, ElementRangesReadModifyWritePartialChunks) {
  SwapFile file(dir_.path() / "e.swap", 3, kChunk, MemTag::params, *io_);
  std::vector<float> all(3 * kChunk / 4);
  std::iota(all.begin(), all.end(), 0.0f);
  file.write_elements(0, static_cast<int64_t>(all.size()), all.data());
  std::vector<float> patch(3000, -1.0f);
  file.write_elements(1500, 3000, patch.data());  // the end of chunk 0, all but the end of chunk 1
  std::fill(all.begin() + 1500, all.begin() + 4500, -1.0f);
  std::vector<float> back(all.size());
  file.read_elements(0, static_cast<int64_t>(back.size()), back.data());
  EXPECT_EQ(back, all);
}

// Catches: a failed load leaving a half-restored state, or a restore that never takes effect.
TEST_P(SwapFileTest, ARestoreReplacesEverythingOrNothing) {
  SwapFile file(dir_.path() / "r.swap", 2, kChunk, MemTag::optimizer, *io_);
  std::vector<float> old(2 * kChunk / 4, 3.0f), fresh(100, 9.0f), back(old.size());
  file.write_elements(0, static_cast<int64_t>(old.size()), old.data());
  file.begin_restore();
  file.write_elements(10, 100, fresh.data());
  file.abort_restore();
  file.read_elements(0, static_cast<int64_t>(back.size()), back.data());
  EXPECT_EQ(back, old) << "an aborted restore changes nothing";
  EXPECT_FALSE(std::filesystem::exists(dir_.path() / "r.swap.restore"));
  file.begin_restore();
  file.write_elements(10, 100, fresh.data());
  file.commit_restore();
  file.read_elements(0, static_cast<int64_t>(back.size()), back.data());
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], i >= 10 && i < 110 ? 9.0f : 0.0f) << i;
}

// Catches: a full disk turning into a silent short write or an error that names neither the file nor the cause.
TEST_P(SwapFileTest, AFullDiskIsNamed) {
  testing::Tmpfs disk(64 * 1024);
  if (!disk.mounted()) GTEST_SKIP() << disk.reason();
  SwapFile file(disk.path() / "full.swap", 32, kChunk, MemTag::grads, *io_);  // 256 KiB into 64 KiB
  IoBuffer b(kChunk, MemTag::other);
  fill(b, 0);
  const std::string error = error_of([&] {
    for (int c = 0; c < 32; ++c) {
      SwapFile::Pending w = file.start_write(c, b.data());
      file.finish(w);
    }
  });
  EXPECT_MENTIONS(error, (disk.path() / "full.swap").string());
  EXPECT_MENTIONS(error, "No space left on device");
  EXPECT_MENTIONS(error, "the disk holding offload.dir is full");
}

// Catches: a swap folder too small for the run found only in the middle of a step.
TEST_P(SwapFileTest, ASwapSpaceRefusesFilesTheDiskCannotHold) {
  testing::Tmpfs disk(256 * 1024);
  if (!disk.mounted()) GTEST_SKIP() << disk.reason();
  OffloadOptions o;
  o.dir = disk.path();
  o.chunk_bytes = kChunk;
  o.backend = GetParam();
  SwapSpace space(o);
  auto first = space.create("exp_avg", 16, MemTag::optimizer);  // 128 KiB: fits
  const std::string error = error_of([&] { space.create("exp_avg_sq", 24, MemTag::optimizer); });  // 192 more
  EXPECT_MENTIONS(error, "offload.dir: " + disk.path().string());
  EXPECT_MENTIONS(error, "exp_avg_sq.swap");
  EXPECT_MENTIONS(error, "GiB more");
}

INSTANTIATE_TEST_SUITE_P(Backends, SwapFileTest, ::testing::Values(IoBackend::io_uring, IoBackend::threads),
                         [](const auto& info) { return std::string(io_backend_name(info.param)); });

}  // namespace
}  // namespace ndt::offload
