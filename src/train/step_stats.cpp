#include "train/step_stats.h"

namespace ndt {

std::string_view event_kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::spike: return "spike";
    case EventKind::skip: return "skip";
    case EventKind::rollback: return "rollback";
    case EventKind::clip: return "clip";
    case EventKind::overflow: return "overflow";
    case EventKind::nonfinite: return "nonfinite";
  }
  return "event";
}

}  // namespace ndt
