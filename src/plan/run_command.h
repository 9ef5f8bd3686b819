// Runs of this binary that `ndtrain plan` starts on this machine (--validate's training
// runs, --calibrate's measuring ranks): the command line that starts it on N ranks the
// way a user would under mpirun, and a runner that fails with the command's output.
#pragma once

#include <string>

namespace ndt {

// `text` as one word of a POSIX shell command line (single-quoted): paths with spaces
// or quotes reach the command as they are.
std::string shell_quoted(const std::string& text);

// This executable, under `mpirun -np ranks --oversubscribe --bind-to none` for more than
// one rank (ranks share the cores as validate's runs do), directly for one.
// Throws if the executable's file was deleted or replaced while it runs (a rebuild): the
// runs would start another binary than the one planning them.
std::string this_binary_on_ranks(int ranks);

// Runs `command` (stderr with stdout); echo: print its output as it comes. Throws with
// the exit status and the output's tail when it fails; returns the output.
std::string run_command(const std::string& command, bool echo);

}  // namespace ndt
