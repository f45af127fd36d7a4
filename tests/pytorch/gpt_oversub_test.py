"""The GPT training loop (tests/gpu/gpt_train.py) unconstrained and under libmemshim.so with a
device budget of a half and a third of its peak memory (2x and 3x oversubscription): the losses
must equal the unconstrained run's bit for bit. Prints the step-time ratios (reported, not
asserted: timing belongs to bench/pytorch).

Usage: gpt_oversub_test.py LIBGPT_KERNELS LIBMEMSHIM [STEPS]
"""
import json
import os
import subprocess
import sys

from harness import check, finish

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "gpu", "gpt_train.py")


def run(lib, steps, env_extra):
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, TRAIN, "--lib", lib, "--steps", str(steps)], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        print(out.stderr[-3000:])
        return None, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def main():
    lib, shim = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    base, _ = run(lib, steps, {"LD_PRELOAD": ""})
    if not check(base is not None, "unconstrained run"):
        finish()
    peak = base["peak_reserved_bytes"]
    print("unconstrained: peak %d bytes, median step %.3f s" % (peak, base["median_step_s"]))
    for factor in (2, 3):
        budget = peak // factor
        shimmed, log = run(lib, steps, {"LD_PRELOAD": shim, "MEMSHIM_DEVICE_BUDGET": str(budget),
                                        "MEMSHIM_LOG": "info"})
        if not check(shimmed is not None, "run under the shim at %dx" % factor):
            continue
        check("virtual device memory: %d MiB device budget" % (budget >> 20) in log,
              "the shim ran with a %d MiB device budget" % (budget >> 20))
        check(shimmed["losses_hex"] == base["losses_hex"],
              "losses at %dx oversubscription equal the unconstrained run's bit for bit" % factor,
              "%s vs %s" % (shimmed["losses"][-1], base["losses"][-1]))
        print("%dx: step-time ratio %.3f (%.3f s vs %.3f s)" % (
            factor, shimmed["median_step_s"] / base["median_step_s"], shimmed["median_step_s"],
            base["median_step_s"]))
    finish()


if __name__ == "__main__":
    main()
