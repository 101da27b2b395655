#!/usr/bin/env python3
"""What a quill process that does nothing costs: wall time and peak RSS of a command, fresh processes.

    process_floor.py [--runs 10] [--] COMMAND...      (default: build/quill data build --help)

Runs COMMAND --runs times one after the other (output discarded) and prints one JSON line: the
median, minimum and maximum wall milliseconds (perf_counter around posix_spawn and wait) and the
median peak resident set of 3 more runs under /usr/bin/time (%M), in MiB. Used for the start-up
figures of bench/tokenizer/results/2026-12-04-local-startup.txt: before the CUDA libraries were
loaded lazily, libcublasLt's static initializer ran at every start.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def one_run(cmd):
    devnull = os.open(os.devnull, os.O_WRONLY)
    t0 = time.perf_counter()
    pid = os.posix_spawnp(cmd[0], cmd, os.environ,
                          file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, status, _ = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    os.close(devnull)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"process_floor.py: {' '.join(cmd)} exited with {code}")
    return wall


def peak_rss_mib(cmd):
    # Through GNU time (a small process of its own): a child spawned from this Python process has
    # Python's resident set (~15 MiB) counted in its ru_maxrss before the exec.
    proc = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, check=True)
    return int(proc.stderr.strip().splitlines()[-1]) / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("command", nargs="*", default=["build/quill", "data", "build", "--help"])
    args = ap.parse_args()
    walls = [one_run(args.command) for _ in range(args.runs)]
    rss = [peak_rss_mib(args.command) for _ in range(3)] if os.path.exists("/usr/bin/time") else [float("nan")]
    print(json.dumps({"command": " ".join(args.command), "runs": args.runs,
                      "wall_ms_median": round(1000 * statistics.median(walls), 2),
                      "wall_ms_min": round(1000 * min(walls), 2), "wall_ms_max": round(1000 * max(walls), 2),
                      "rss_mib_median": round(statistics.median(rss), 1)}))


if __name__ == "__main__":
    main()
