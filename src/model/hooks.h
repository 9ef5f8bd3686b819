// Hooks that whoever runs the units calls around them, so a parallel layout can act at
// the right moment: gather a unit's parameters before it computes, release them after,
// start communicating a unit's gradients as soon as its backward is done. Units are
// numbered as in model/unit.h (0 the embedding, 1 + l block l, the last the head).
#pragma once

namespace ndt {

class ModelHooks {
 public:
  virtual ~ModelHooks() = default;
  virtual void before_forward(int unit) {}
  virtual void after_forward(int unit) {}
  // A forward-only pass (evaluation, generation) is done: nothing needs to stay for a backward.
  virtual void after_forward_only() {}
  virtual void before_backward(int unit) {}
  // The unit's backward is done. Backward runs units from the last to the first, and a
  // unit's parameters follow the earlier units' in the arenas, so the gradients at
  // gradient-arena offsets >= store.unit_grad_begin(unit) are final for this backward.
  virtual void after_backward(int unit) {}
  // Called by units between the kernels of backward: a chance to progress communication.
  virtual void poll() {}
};

}  // namespace ndt
