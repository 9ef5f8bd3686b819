#include "parallel/gradient_sync.h"

#include "comm/device_mesh.h"
#include "core/error.h"
#include "parallel/data_parallel.h"
#include "parallel/fsdp.h"
#include "parallel/zero.h"

namespace ndt {

std::unique_ptr<GradientSync> make_gradient_sync(ParameterStore& store, DeviceMesh* mesh,
                                                 const DataParallelOptions& o) {
  NDT_CHECK(o.zero_stage >= 0 && o.zero_stage <= 3, "parallel.zero_stage = {} must be 0, 1, 2 or 3", o.zero_stage);
  NDT_CHECK(o.zero_stage == 0 || mesh != nullptr, "parallel.zero_stage = {} needs a job launched with mpirun",
            o.zero_stage);
  if (o.zero_stage >= 2) {
    return std::make_unique<FullyShardedDataParallel>(store, *mesh, o.zero_stage, o.adamw, o.reshard_after_forward,
                                                      o.prefetch);
  }
  if (o.zero_stage == 1) return std::make_unique<ZeroDataParallel>(store, *mesh, o.bucket_bytes, o.adamw);
  return std::make_unique<DataParallel>(store, mesh ? &mesh->axis("dp") : nullptr, o.bucket_bytes, o.adamw);
}

}  // namespace ndt
