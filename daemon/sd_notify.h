// systemd readiness notification (sd_notify(3)) without libsystemd: one
// datagram to the socket named by $NOTIFY_SOCKET. ktuned sends "READY=1" once
// its listeners accept calls (so Type=notify units and their dependents start
// only then) and "STOPPING=1" when it begins to drain.
// Thread-safe: no shared state besides the environment, which it only reads.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace ktune {

// Sends `state` (e.g. "READY=1\nSTATUS=serving") to $NOTIFY_SOCKET. OK and
// nothing sent when the variable is unset (not run by systemd). A path
// starting with '@' is an abstract socket. UNAVAILABLE if the send fails,
// INVALID_ARGUMENT for an unusable socket name.
absl::Status SdNotify(std::string_view state);

}  // namespace ktune
