#include "parallel/pipeline/tied_embedding.h"

namespace ndt {

namespace {
constexpr const char* kEmbedding = "wte.weight";
}  // namespace

TiedEmbedding::TiedEmbedding(Communicator& pp, const PipelineShape& shape) {
  const int rank = pp.rank();
  const bool end = rank == shape.rank_of(0) || rank == shape.rank_of(shape.chunks() - 1);
  ends_ = pp.split(end ? 0 : 1, rank, "pp");
}

void TiedEmbedding::sum_gradients(const ParameterStore& store, GradientSync& sync) {
  if (ends_->size() != 2) return;
  const std::vector<Parameter>& params = store.params();
  for (size_t p = 0; p < params.size(); ++p) {
    if (params[p].name() != kEmbedding) continue;
    sync.update_reduced_gradient(p, [&](float* grad, int64_t numel) {
      ends_->all_reduce(grad, static_cast<size_t>(numel), DType::f32, ReduceOp::sum);
    });
  }
}

}  // namespace ndt
