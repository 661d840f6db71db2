"""Every benchmark in bench/ can be started: its module imports in a fresh interpreter (importing
runs none of it), with what it takes from the tests found where the tests now live. A benchmark
that cannot start is a goal nobody can check (bench_caps once imported a test module by an old
path and died before its first row)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib.util, json, sys
from pathlib import Path
failed = {}
sys.path.insert(0, "bench")  # as running a script puts its own directory first
for path in sorted(Path("bench").glob("bench_*.py")) + [Path("bench/run_all.py")]:
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - reported by name, the test fails on any
        failed[path.name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"failed": failed, "count": len(list(Path("bench").glob("bench_*.py")))}))
"""


def test_every_benchmark_imports(tmp_path: Path) -> None:
    """Every benchmark module imports, and importing one leaves nothing behind (no temporary
    directory made at import)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "TMPDIR": str(scratch),
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["count"] >= 15
    assert report["failed"] == {}
    assert sorted(p.name for p in scratch.iterdir()) == []
