// Where ktune keeps per-user state by default. Shared by ktuned (where it
// listens, where its database lives) and the ktune CLI (where it connects).
#pragma once

#include <string>

namespace ktune {

// $XDG_RUNTIME_DIR/ktune, else /tmp/ktune-$UID. Not created.
std::string DefaultRuntimeDir();
// "unix:" + DefaultRuntimeDir() + "/ktuned.sock".
std::string DefaultServerAddress();
// $XDG_DATA_HOME/ktune/cache.db, else $HOME/.local/share/ktune/cache.db.
std::string DefaultDatabasePath();

}  // namespace ktune
