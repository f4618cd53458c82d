// Where ktune keeps per-user state by default. Shared by ktuned (where it
// listens, where its database lives) and the ktune CLI (where it connects).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace ktune {

// $XDG_RUNTIME_DIR/ktune, else /tmp/ktune-$UID. Not created.
std::string DefaultRuntimeDir();
// "unix:" + DefaultRuntimeDir() + "/ktuned.sock".
std::string DefaultServerAddress();
// A socket directory only this user can reach, the way ssh-agent and tmux keep
// theirs: another local user who could create or write it (it sits in /tmp)
// could swap the socket and receive our calls and token.
//
// EnsurePrivateDir: creates `dir` 0700 when missing (mkdir, then lstat: a
// directory another user created in the meantime is judged like any other).
// CheckPrivateDir: the same judgement without creating; OK when `dir` is
// missing (nothing listens there then, and connecting just fails).
// Both answer FAILED_PRECONDITION naming the directory and what is wrong: a
// symlink, not a directory, owned by another user, or writable by group or
// others.
absl::Status EnsurePrivateDir(const std::string& dir);
absl::Status CheckPrivateDir(const std::string& dir);

// $XDG_DATA_HOME/ktune/cache.db, else $HOME/.local/share/ktune/cache.db.
std::string DefaultDatabasePath();

}  // namespace ktune
