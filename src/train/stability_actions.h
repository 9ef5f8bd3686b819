// What the stability settings may ask for (docs/stability.md): stability.on_spike (a
// loss or gradient-norm spike) and stability.on_nonfinite (a NaN or infinite loss or
// gradient norm that the loss scaler did not handle). The names are the config's;
// from_name throws naming the key and the choices.
#pragma once

#include <string_view>

namespace ndt {

// warn: log it and apply the update; skip: do not apply it on any rank; rollback:
// reload the newest checkpoint and skip the data since it.
enum class SpikeAction { warn, skip, rollback };
std::string_view spike_action_name(SpikeAction action);
SpikeAction spike_action_from_name(std::string_view name);

// stop: save the last finite state and end the run with an error; skip; rollback.
enum class NonfiniteAction { stop, skip, rollback };
std::string_view nonfinite_action_name(NonfiniteAction action);
NonfiniteAction nonfinite_action_from_name(std::string_view name);

}  // namespace ndt
