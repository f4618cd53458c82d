#!/usr/bin/env python3
"""clang's thread-safety analysis over ktune's own sources.

  thread_safety.py --build BUILD_DIR --source SOURCE_DIR

The ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations say which
mutex guards what; GCC, which builds ktune, ignores them. This runs clang's
-Wthread-safety (syntax only: no code is generated) on every translation
unit of daemon/, cache/, client/ and tuner/, with the include paths and
definitions of build/compile_commands.json, and fails on any finding.

First it checks that the analysis is live: a snippet that reads a guarded
member without its lock must be flagged, or the test fails (a build where the
annotations expand to nothing would otherwise pass without checking anything).
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

FOLDERS = ("daemon", "cache", "client", "tuner")
ANALYSIS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]

CANARY = """
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
struct Counter {
  absl::Mutex mu;
  int n ABSL_GUARDED_BY(mu) = 0;
};
int Read(Counter& c) { return c.n; }  // no lock: must be flagged
"""


def clang():
    for name in ("clang++-14", "clang++"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("thread_safety.py: no clang++ (Debian: clang, which deploy/setup.sh test installs)")


def analysis_command(compiler, entry):
    """The entry's compile command with clang, its -I/-D/-std flags, and the analysis."""
    args = shlex.split(entry["command"])[1:]
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a == "-c" or a == entry["file"] or a.startswith(("-O", "-g", "-W", "-M")):
            continue
        kept.append(a)
    return [compiler] + ANALYSIS + kept + [entry["file"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    source = os.path.abspath(args.source)
    compiler = clang()
    database = os.path.join(args.build, "compile_commands.json")
    if not os.path.exists(database):
        sys.exit(f"thread_safety.py: {database} is missing (CMAKE_EXPORT_COMPILE_COMMANDS)")
    entries = [e for e in json.load(open(database))
               if os.path.relpath(e["file"], source).split(os.sep)[0] in FOLDERS]
    if not entries:
        sys.exit(f"thread_safety.py: no translation unit of {', '.join(FOLDERS)} in {database}")

    # The canary, with the include flags of a real entry.
    with tempfile.NamedTemporaryFile("w", suffix=".cc", delete=False) as f:
        f.write(CANARY)
        canary = f.name
    try:
        cmd = analysis_command(compiler, dict(entries[0], file=canary, command=entries[0]["command"]))
        r = subprocess.run(cmd, cwd=entries[0]["directory"], capture_output=True, text=True)
        if r.returncode == 0 or "requires holding mutex" not in r.stderr:
            print("thread_safety.py: the analysis did not flag an unguarded read; it is not running:\n"
                  + r.stderr[-2000:], file=sys.stderr)
            return 1
    finally:
        os.unlink(canary)

    def run(entry):
        r = subprocess.run(analysis_command(compiler, entry), cwd=entry["directory"], capture_output=True, text=True)
        return entry["file"], r.returncode, r.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for path, code, err in pool.map(run, entries):
            if code != 0:
                failed += 1
                print(f"{os.path.relpath(path, source)}:\n{err[-4000:]}", file=sys.stderr)
    print(f"thread-safety analysis: {len(entries)} translation units, {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
