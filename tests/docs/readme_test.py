#!/usr/bin/env python3
"""Runs what README.md shows, so that it cannot rot.

  readme_test.py --build BUILD_DIR --source SOURCE_DIR            the README's blocks
  readme_test.py --build BUILD_DIR --source SOURCE_DIR --main-job deploy/main-job.sh

Every fenced block of README.md has an info string that says how it is
checked; a block with any other info string fails the test, so nothing in the
README goes unchecked by accident:

  sh setup   the two set-up commands: must be exactly those of deploy/setup.sh
             (CI runs the test one itself: .ci/run)
  sh daemon  starts ktuned: run in the background, then the daemon must answer
  sh         run with bash -e -o pipefail; must exit 0
  sh gpu     needs a GPU daemon: run, and must be refused as such (exit 1,
             naming the compile-only daemon), which proves it parses and
             reaches the daemon
  python     run with Debian's /usr/bin/python3; must exit 0
  cpp        must appear verbatim in client/examples/get_config.cc, which the
             build compiles; that binary is run and must exit 0
  yaml       a shapes file: `ktune prewarm FILE --dry-run` must accept it
  text       output shown for reading; not run

Blocks run in README order, in one scratch directory holding links to the
checkout's deploy/, tests/, proto/ and bench/, against a compile-only ktuned
(CUDA_VISIBLE_DEVICES is emptied) on the default socket and database, which
XDG_RUNTIME_DIR, XDG_DATA_HOME and XDG_CACHE_HOME (the kernel cache) move into
the scratch directory. The built
ktuned and ktune come first on PATH.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

BLOCK_TIMEOUT_S = 120
# The README's Python uses Debian's python3-grpcio and python3-protobuf, which
# only Debian's interpreter sees (a pyenv or venv python3 on PATH would not).
DEBIAN_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
SETUP_COMMANDS = ["deploy/setup.sh run", "deploy/setup.sh test"]


def blocks(readme_text):
    """(line number, info string, body) of every fenced block."""
    out, lines, i = [], readme_text.split("\n"), 0
    while i < len(lines):
        m = re.match(r"^```(.*)$", lines[i])
        if not m:
            i += 1
            continue
        start, info, body = i + 1, m.group(1).strip(), []
        i += 1
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        if i == len(lines):
            sys.exit(f"README.md:{start}: block never closed")
        out.append((start, info, "\n".join(body) + "\n"))
        i += 1
    return out


def run(cmd, cwd, env, timeout=BLOCK_TIMEOUT_S):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def wait_for_daemon(env, cwd):
    for _ in range(200):
        if run(["ktune", "status"], cwd, env, timeout=10).returncode == 0:
            return True
        time.sleep(0.1)
    return False


def scratch_env(build, scratch):
    env = dict(os.environ)
    for name in ("XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        path = os.path.join(scratch, name.lower())
        os.makedirs(path, mode=0o700)
        env[name] = path
    env["CUDA_VISIBLE_DEVICES"] = ""  # compile-only, whatever the machine has
    env["PATH"] = os.pathsep.join([os.path.join(build, "daemon"), os.path.join(build, "client"), env["PATH"]])
    env.pop("KTUNE_TOKEN", None)
    return env


def check_readme(build, source):
    readme = open(os.path.join(source, "README.md")).read()
    scratch = tempfile.mkdtemp(prefix="ktune-readme-")
    work = os.path.join(scratch, "work")
    os.makedirs(work)
    for name in ("deploy", "tests", "proto", "bench"):
        os.symlink(os.path.join(source, name), os.path.join(work, name))
    env = scratch_env(build, scratch)
    daemons, failures, counts = [], [], {}

    def fail(line, what, result=None):
        detail = ""
        if result is not None:
            detail = f" (exit {result.returncode})\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
        failures.append(f"README.md:{line}: {what}{detail}")

    try:
        for line, info, body in blocks(readme):
            counts[info] = counts.get(info, 0) + 1
            if info == "text":
                continue
            if info == "sh setup":
                got = [l.split("#")[0].strip() for l in body.splitlines() if l.strip()]
                if got != SETUP_COMMANDS:
                    fail(line, f"the set-up block must be exactly {SETUP_COMMANDS}, got {got}")
                continue
            if info == "sh daemon":
                log = open(os.path.join(scratch, f"ktuned-{line}.log"), "w")
                daemons.append(subprocess.Popen(["bash", "-c", "exec " + body.strip().rstrip("&").strip()],
                                                cwd=work, env=env, stdout=log, stderr=log))
                if not wait_for_daemon(env, work):
                    fail(line, "the daemon it starts never answered `ktune status`")
                    break
                continue
            if info in ("sh", "sh gpu"):
                result = run(["bash", "-e", "-o", "pipefail", "-c", body], work, env)
                if info == "sh" and result.returncode != 0:
                    fail(line, "command failed", result)
                if info == "sh gpu" and not (result.returncode == 1 and "compile-only" in result.stdout + result.stderr):
                    fail(line, "a GPU command must be refused by the compile-only daemon (exit 1, naming it)", result)
                continue
            if info == "python":
                result = run([DEBIAN_PYTHON, "-c", body], work, env)
                if result.returncode != 0:
                    fail(line, "Python block failed", result)
                continue
            if info == "cpp":
                example = open(os.path.join(source, "client", "examples", "get_config.cc")).read()
                if body not in example:
                    fail(line, "the C++ block is not client/examples/get_config.cc's text")
                result = run([os.path.join(build, "client", "ktune_example_get_config")], work, env)
                if result.returncode != 0:
                    fail(line, "client/examples/get_config.cc failed", result)
                continue
            if info == "yaml":
                path = os.path.join(work, f"readme-{line}.yaml")
                open(path, "w").write(body)
                result = run(["ktune", "prewarm", path, "--dry-run"], work, env)
                if result.returncode != 0:
                    fail(line, "the shapes file is refused", result)
                continue
            fail(line, f"unknown block kind '{info}' (see tests/docs/readme_test.py)")
    finally:
        for d in daemons:
            d.terminate()
            try:
                d.wait(timeout=30)
            except subprocess.TimeoutExpired:
                d.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    for f in failures:
        print(f, file=sys.stderr)
    runnable = sum(n for kind, n in counts.items() if kind != "text")
    kinds = ", ".join(f"{kind or 'none'}: {n}" for kind, n in sorted(counts.items()))
    print(f"README.md: {sum(counts.values())} blocks ({kinds}); "
          f"{runnable - len(failures)} of {runnable} checked blocks pass")
    if runnable == 0 or counts.get("sh setup", 0) != 1:
        print("README.md: expected one 'sh setup' block and runnable blocks", file=sys.stderr)
        return 1
    return 1 if failures else 0


def check_main_job(build, source, script, limit_s=60):
    """deploy/main-job.sh on a compile-only machine: under a minute, every
    problem answered, the bundle exported and inspected."""
    scratch = tempfile.mkdtemp(prefix="ktune-main-job-")
    env = scratch_env(build, scratch)
    env["KTUNE_LOG"] = os.path.join(scratch, "ktuned.log")
    try:
        start = time.monotonic()
        result = run(["bash", os.path.join(source, script), build], source, env, timeout=3 * limit_s)
        seconds = time.monotonic() - start
        out = result.stdout
        problems = re.search(r"^(\d+) problems \((\d+) norm, (\d+) gemm\)$", out, re.M)
        rows = [l for l in out.splitlines() if re.match(r"^(rmsnorm|layernorm|gemm)\S* .* HEURISTIC ", l)]
        checks = [
            (result.returncode == 0, f"exit {result.returncode}"),
            (seconds < limit_s, f"took {seconds:.1f} s, over {limit_s} s"),
            (problems is not None, "no problem count line"),
            (problems is not None and int(problems.group(2)) > 0 and int(problems.group(3)) > 0,
             "the model's norms and GEMMs"),
            (problems is not None and len(rows) == int(problems.group(1)),
             f"{len(rows)} HEURISTIC answers for {problems.group(1) if problems else '?'} problems"),
            ("rmsnorm.bwd" in out, "a backward norm among the answers"),
            ("compile-only" in out, "says the daemon is compile-only"),
            (re.search(r"^exported \d+ entries", out, re.M) is not None, "the bundle export"),
            ("(valid: checksum and every entry)" in out, "the bundle inspected and valid"),
        ]
        bad = [what for ok, what in checks if not ok]
        for what in bad:
            print(f"{script}: {what}", file=sys.stderr)
        if bad:
            print(f"--- stdout\n{out[-4000:]}\n--- stderr\n{result.stderr[-4000:]}", file=sys.stderr)
        print(f"{script}: {seconds:.1f} s, {len(rows)} answers, {len(checks) - len(bad)} of {len(checks)} checks pass")
        return 1 if bad else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--main-job", help="check this main-job script instead of the README")
    args = parser.parse_args()
    build, source = os.path.abspath(args.build), os.path.abspath(args.source)
    if args.main_job:
        return check_main_job(build, source, args.main_job)
    return check_readme(build, source)


if __name__ == "__main__":
    sys.exit(main())
