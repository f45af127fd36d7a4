#!/usr/bin/env python3
"""Step time of the GPT training loop (tests/gpu/gpt_train.py) in one run: unconstrained, under
libmemshim.so with room for everything (the cost of interception), and with a device budget of a
half and a third of the loop's peak memory (2x and 3x oversubscription). Prints a Markdown table
of median step times and their ratios to the unconstrained run, and checks that every run's
losses equal the unconstrained run's bit for bit.

Usage (the simulated driver, from the build tree):
  LD_LIBRARY_PATH=build/lib/sim MEMSIM_KERNELS=build/tests/bin/gpt_kernels_host.so \\
    $(tests/pytorch/setup_venv.sh) bench/pytorch/gpt_step_time.py \\
    --lib build/tests/bin/libgpt_kernels.so --shim build/lib/libmemshim.so [--steps 10]
On a GPU, leave out LD_LIBRARY_PATH and MEMSIM_KERNELS.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "tests", "gpu", "gpt_train.py")


def run(args, env_extra):
    env = dict(os.environ, MEMSHIM_DAEMON_SOCKET="/nonexistent/memvirtd.sock",
               MEMSHIM_HOST_BUDGET=str(1 << 30), **env_extra)
    out = subprocess.run([sys.executable, TRAIN, "--lib", args.lib, "--steps", str(args.steps)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", required=True)
    parser.add_argument("--shim", required=True)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    base = run(args, {"LD_PRELOAD": ""})
    peak = base["peak_reserved_bytes"]
    rows = [("unconstrained", base)]
    rows.append(("shim, room for everything", run(args, {"LD_PRELOAD": args.shim})))
    for factor in (2, 3):
        rows.append(("shim, budget 1/%d of peak (%dx)" % (factor, factor),
                     run(args, {"LD_PRELOAD": args.shim,
                                "MEMSHIM_DEVICE_BUDGET": str(peak // factor)})))
    print("peak reserved by PyTorch: %.1f MiB; %d steps, median of steps 3..%d" % (
        peak / (1 << 20), args.steps, args.steps))
    print("| configuration | median step (s) | ratio | losses equal |")
    print("|---|---|---|---|")
    for name, r in rows:
        print("| %s | %.3f | %.3f | %s |" % (name, r["median_step_s"],
                                            r["median_step_s"] / base["median_step_s"],
                                            "yes" if r["losses_hex"] == base["losses_hex"] else "NO"))
    return 0 if all(r["losses_hex"] == base["losses_hex"] for _, r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
