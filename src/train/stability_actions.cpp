#include "train/stability_actions.h"

#include "core/error.h"

namespace ndt {

std::string_view spike_action_name(SpikeAction action) {
  switch (action) {
    case SpikeAction::warn: return "warn";
    case SpikeAction::skip: return "skip";
    case SpikeAction::rollback: return "rollback";
  }
  return "?";
}

SpikeAction spike_action_from_name(std::string_view name) {
  for (SpikeAction a : {SpikeAction::warn, SpikeAction::skip, SpikeAction::rollback}) {
    if (name == spike_action_name(a)) return a;
  }
  fail("stability.on_spike = \"{}\" is not an action: warn, skip or rollback", name);
}

std::string_view nonfinite_action_name(NonfiniteAction action) {
  switch (action) {
    case NonfiniteAction::stop: return "stop";
    case NonfiniteAction::skip: return "skip";
    case NonfiniteAction::rollback: return "rollback";
  }
  return "?";
}

NonfiniteAction nonfinite_action_from_name(std::string_view name) {
  for (NonfiniteAction a : {NonfiniteAction::stop, NonfiniteAction::skip, NonfiniteAction::rollback}) {
    if (name == nonfinite_action_name(a)) return a;
  }
  fail("stability.on_nonfinite = \"{}\" is not an action: stop, skip or rollback", name);
}

}  // namespace ndt
