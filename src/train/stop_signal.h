// Stopping a run from outside (docs/checkpoints.md). SIGTERM (what a scheduler sends
// before it kills a job; what mpirun sends every rank when it is itself interrupted)
// and SIGINT (Ctrl-C on a run in a terminal) both ask the run to stop: the ranks agree
// at the next step boundary (or between evaluation batches), save a checkpoint and
// end with exit code 128 + the signal (143, 130); a stop during the final evaluation
// ends it, the state being saved already. A second SIGINT ends the process at once,
// without saving, as Ctrl-C does elsewhere.
#pragma once

namespace ndt {

// Installs the handlers for SIGTERM and SIGINT.
void install_stop_handler();
// The first stop signal received (SIGTERM or SIGINT), 0 for none.
int stop_signal();
bool stop_requested();
// Forgets a stop request (tests that raise a signal in-process, before the next run).
void clear_stop_request();
// "SIGTERM" / "SIGINT".
const char* stop_signal_name(int signal);

}  // namespace ndt
