"""`make bench`: every benchmark in bench/, one after the other, in fresh processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    failed = 0
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        failed |= subprocess.call([sys.executable, str(script)]) != 0
    raise SystemExit(failed)
