#!/usr/bin/env python3
"""The C++ sources are as .clang-format writes them.

  clang_format.py --source SOURCE_DIR

Every .cc and .h under daemon/, cache/, client/, tuner/, tests/ and bench/ is
checked with clang-format --dry-run --Werror; the first files that differ are
named. kernel_templates/ is left out: its text is hashed into every entry's
software fingerprint, so it changes only when a kernel does. To fix:
  clang-format-14 -i FILE...
"""
import argparse
import os
import shutil
import subprocess
import sys

FOLDERS = ("daemon", "cache", "client", "tuner", "tests", "bench")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    tool = shutil.which("clang-format-14") or shutil.which("clang-format")
    if tool is None:
        sys.exit("clang_format.py: no clang-format (Debian: clang-format-14, which deploy/setup.sh test installs)")
    files = []
    for folder in FOLDERS:
        for root, _, names in os.walk(os.path.join(args.source, folder)):
            files += [os.path.join(root, n) for n in sorted(names) if n.endswith((".cc", ".h"))]
    if len(files) < 100:
        sys.exit(f"clang_format.py: only {len(files)} sources found under {args.source}")
    unformatted = []
    for i in range(0, len(files), 50):
        batch = files[i:i + 50]
        r = subprocess.run([tool, "--dry-run", "--Werror", f"--style=file"] + batch, cwd=args.source,
                           capture_output=True, text=True)
        if r.returncode != 0:
            unformatted += sorted({line.split(":")[0] for line in r.stderr.splitlines() if ": error:" in line})
    for path in unformatted[:20]:
        print(f"{os.path.relpath(path, args.source)}: not as .clang-format writes it", file=sys.stderr)
    print(f"clang-format: {len(files)} sources, {len(unformatted)} not formatted")
    return 1 if unformatted else 0


if __name__ == "__main__":
    sys.exit(main())
