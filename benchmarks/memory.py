"""Memory over a long run: resident set size of ``python -m rlplug run`` at 10% and at 100% of its frames.

A run that keeps something per step or per update (an ever-growing list, a graph kept alive) shows it as
growth between the two. The child's RSS is read from /proc while it trains; progress from the run's
metrics.csv.

    python benchmarks/memory.py --frames 1000000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rss_mib(pid: int, field: str = "VmRSS") -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        return None
    return None


def frames_done(metrics: Path) -> int:
    try:
        with metrics.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            last = f.read().decode(errors="ignore").strip().splitlines()[-1]
        return int(last.split(",")[0])
    except (FileNotFoundError, IndexError, ValueError):
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "cartpole-ppo.toml"))
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp()) / "run"
    command = [sys.executable, "-m", "rlplug", "run", args.recipe, "--out", str(out),
               "--set", f"run.total_frames={args.frames}"]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    samples: list[tuple[int, float]] = []
    peak = 0.0
    while child.poll() is None:
        rss, hwm = rss_mib(child.pid), rss_mib(child.pid, "VmHWM")
        if rss is not None:
            samples.append((frames_done(out / "metrics.csv"), rss))
            peak = max(peak, hwm or 0.0)
        time.sleep(0.5)
    if child.returncode:
        sys.exit(f"the run failed with exit status {child.returncode}")
    training = [(f, r) for f, r in samples if f > 0]
    at_10 = next(r for f, r in training if f >= args.frames // 10)
    at_end = training[-1][1]
    print(f"command: {' '.join(command[1:])}")
    print(f"frames {args.frames}: RSS at 10% {at_10:.0f} MiB, at 100% {at_end:.0f} MiB "
          f"(growth {at_end - at_10:+.0f} MiB, {100 * (at_end - at_10) / at_10:+.1f}%), peak {peak:.0f} MiB")


if __name__ == "__main__":
    main()
