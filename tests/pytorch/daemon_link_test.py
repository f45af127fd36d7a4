"""The shim's daemon link inside a Python process beside PyTorch's libraries: started by a
memvirtd this test runs on a temporary socket, the process registers, and `memctl status --json`
lists it with device memory in use.

Usage: daemon_link_test.py MEMVIRTD MEMCTL LIBMEMSHIM   (the test re-runs itself as the client)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from harness import check, finish


def client(memctl, socket):
    import torch

    x = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    x.copy_(torch.full((32 << 20,), 7, dtype=torch.uint8))
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    seen = None
    for _ in range(100):
        out = subprocess.run([memctl, "--socket=" + socket, "status", "--json"], env=env,
                             capture_output=True, text=True, timeout=10)
        status = json.loads(out.stdout) if out.returncode == 0 else {}
        mine = [p for p in status.get("processes", []) if p["pid"] == os.getpid()]
        if mine and any(g["resident_bytes"] > 0 for g in mine[0]["gpus"]):
            seen = mine[0]
            break
        time.sleep(0.1)
    check(seen is not None, "memctl status lists this Python process with resident memory",
          seen["name"] if seen else json.dumps(status)[:1500])
    check(bool((x.cpu() == 7).all()), "its tensor is intact")
    finish()


def main():
    if sys.argv[1] == "--client":
        return client(sys.argv[2], sys.argv[3])
    memvirtd, memctl, shim = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        socket = os.path.join(tmp, "memvirtd.sock")
        daemon = subprocess.Popen([memvirtd, "--socket=" + socket, "--restart_grace_ms=0",
                                   "--reserve=" + str(32 << 20)],
                                  stderr=open(os.path.join(tmp, "memvirtd.log"), "w"))
        try:
            for _ in range(100):
                if subprocess.run([memctl, "--socket=" + socket, "health"],
                                  capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            env = dict(os.environ, LD_PRELOAD=shim, MEMSHIM_DAEMON_SOCKET=socket,
                       MEMSHIM_LOG="info")
            run = subprocess.run([sys.executable, __file__, "--client", memctl, socket], env=env,
                                 capture_output=True, text=True, timeout=240)
            sys.stdout.write("".join("  client: " + line + "\n" for line in run.stdout.splitlines()))
            registered = "registered with memvirtd" in run.stderr
            check(registered, "the shim registered with memvirtd from inside Python",
                  "" if registered else run.stderr[-2000:])
            check(run.returncode == 0, "the client process succeeded", run.returncode)
        finally:
            daemon.terminate()
            daemon.wait(timeout=10)
    finish()


if __name__ == "__main__":
    main()
