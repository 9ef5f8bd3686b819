#include "parallel/data/offloaded_shards.h"

#include "core/error.h"

#include <cstring>

namespace ndt {

OffloadedShards::OffloadedShards(offload::SwapSpace& space, const offload::SwapLayout& layout,
                                 const std::vector<std::vector<int>>& group_units)
    : layout_(layout) {
  params_ = space.create("params", layout.chunks(), MemTag::params);
  grads_ = space.create("grads", layout.chunks(), MemTag::grads);
  for (const std::vector<int>& units : group_units) {
    std::vector<int> here;
    int64_t chunks = 0;
    for (int u : units) {
      if (layout.region(u).chunks == 0) continue;
      here.push_back(u);
      chunks += layout.region(u).chunks;
    }
    units_.push_back(here);
    chunks_.push_back(chunks);
  }
  param_reads_.resize(units_.size());
  grad_buffers_.resize(units_.size());
  grads_written_.assign(units_.size(), 0);
}

OffloadedShards::~OffloadedShards() {
  for (auto& r : param_reads_) {
    if (r) abandon(*params_, *r);
  }
  for (auto& r : grad_buffers_) {
    if (r) abandon(*grads_, *r);
  }
}

void OffloadedShards::initialise(const std::function<void(int unit, float* values)>& fill) {
  const int64_t chunk_bytes = params_->chunk_bytes();
  for (int u = 0; u < layout_.units(); ++u) {
    const offload::SwapRegion& region = layout_.region(u);
    if (region.chunks == 0) continue;
    offload::IoBuffer buffer(static_cast<size_t>(region.chunks * chunk_bytes), MemTag::params);
    std::memset(buffer.data(), 0, buffer.bytes());
    fill(u, buffer.floats());
    for (int64_t c = 0; c < region.chunks; ++c) {
      offload::SwapFile::Pending w =
          params_->start_write(region.first_chunk + c, static_cast<char*>(buffer.data()) + c * chunk_bytes);
      params_->finish(w);
    }
  }
}

int64_t OffloadedShards::position(size_t g, int64_t a) const {
  int64_t at = 0;
  for (int u : units_[g]) {
    const offload::SwapRegion& r = layout_.region(u);
    if (a >= r.arena_begin && a < r.arena_end) return at + (a - r.arena_begin);
    at += r.chunks * layout_.chunk_elements();
  }
  fail("offload: shard-arena element {} is in no unit of FSDP group {}", a, g);
}

void OffloadedShards::start(offload::SwapFile& file, size_t g, Resident& r, bool write) {
  char* bytes = static_cast<char*>(r.buffer.data());
  for (int u : units_[g]) {
    const offload::SwapRegion& region = layout_.region(u);
    for (int64_t c = 0; c < region.chunks; ++c, bytes += file.chunk_bytes()) {
      r.pending.push_back(write ? file.start_write(region.first_chunk + c, bytes)
                                : file.start_read(region.first_chunk + c, bytes));
    }
  }
}

void OffloadedShards::finish(offload::SwapFile& file, Resident& r) {
  for (offload::SwapFile::Pending& p : r.pending) file.finish(p);
  r.pending.clear();
}

void OffloadedShards::abandon(offload::SwapFile& file, Resident& r) noexcept {
  for (offload::SwapFile::Pending& p : r.pending) file.abandon(p);
  r.pending.clear();
}

void OffloadedShards::read_ahead(size_t g) {
  if (param_reads_[g] || chunks_[g] == 0) return;
  param_reads_[g].emplace();
  Resident& r = *param_reads_[g];
  r.buffer = offload::IoBuffer(static_cast<size_t>(chunks_[g] * params_->chunk_bytes()), MemTag::params);
  start(*params_, g, r, /*write=*/false);
}

void OffloadedShards::wait(size_t g) {
  read_ahead(g);
  if (param_reads_[g]) finish(*params_, *param_reads_[g]);
}

const float* OffloadedShards::shard(size_t g, int64_t a) const {
  NDT_CHECK(param_reads_[g] && param_reads_[g]->pending.empty(), "offload: FSDP group {} is not read", g);
  return param_reads_[g]->buffer.floats() + position(g, a);
}

void OffloadedShards::release(size_t g) {
  if (!param_reads_[g]) return;
  abandon(*params_, *param_reads_[g]);
  param_reads_[g].reset();
}

void OffloadedShards::begin_step() { std::fill(grads_written_.begin(), grads_written_.end(), 0); }

float* OffloadedShards::grad(size_t g, int64_t a) {
  if (!grad_buffers_[g]) {
    if (writing_ == g) finish_writes();  // accumulating onto the write in flight
    grad_buffers_[g].emplace();
    Resident& r = *grad_buffers_[g];
    r.buffer = offload::IoBuffer(static_cast<size_t>(chunks_[g] * grads_->chunk_bytes()), MemTag::grads);
    if (grads_written_[g]) {  // an earlier micro-step of this step wrote it: sum onto that
      start(*grads_, g, r, /*write=*/false);
      finish(*grads_, r);
    } else {
      std::memset(r.buffer.data(), 0, r.buffer.bytes());
    }
  }
  return grad_buffers_[g]->buffer.floats() + position(g, a);
}

void OffloadedShards::write_grads(size_t g) {
  if (!grad_buffers_[g]) return;
  if (writing_ && *writing_ != g) {  // the previous group's write first: two buffers at most
    finish(*grads_, *grad_buffers_[*writing_]);
    grad_buffers_[*writing_].reset();
  }
  start(*grads_, g, *grad_buffers_[g], /*write=*/true);
  grads_written_[g] = 1;
  writing_ = g;
}

void OffloadedShards::finish_writes() {
  if (writing_) {
    finish(*grads_, *grad_buffers_[*writing_]);
    grad_buffers_[*writing_].reset();
    writing_.reset();
  }
  for (size_t g = 0; g < units_.size(); ++g) {
    if (grads_written_[g] || chunks_[g] == 0 || grad_buffers_[g]) continue;
    grad(g, layout_.region(units_[g].front()).arena_begin);  // zeros
    write_grads(g);
    finish(*grads_, *grad_buffers_[g]);
    grad_buffers_[g].reset();
    writing_.reset();
  }
}

}  // namespace ndt
