// Errors that ranks agree on. A check that fails on some ranks only (a file one rank
// cannot read, a folder only rank 0 looks at) must still stop every rank, or the others
// would wait forever in the next collective; and every rank should say why, not only
// the one that saw it. One call after such a check does both.
#pragma once

#include "comm/device_mesh.h"

#include <string>

namespace ndt {

// Collective over the world (nothing to send on a one-rank mesh). `error` is
// this rank's message, empty when its part succeeded. When any rank has one, every rank
// throws ndt::Error with the message of the lowest such rank, prefixed "rank R: " on a
// world of several ranks.
void throw_if_any_rank_failed(DeviceMesh& mesh, const std::string& error);

}  // namespace ndt
