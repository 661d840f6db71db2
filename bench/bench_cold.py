"""The first request of a process: fsm_agent against the bare SDK, from spawn to the first result.

Run: .venv/bin/python bench/bench_cold.py [--runs 9] [--baseline DIR] [--only NAME ...] [--instructions]

Each run is a fresh `python` process that imports the SDK (and fsm_agent), builds a client, makes
one short streamed request over loopback HTTP and takes its text; the time measured is from just
before the spawn to the moment the parent reads the child's result line (interpreter start-up,
every import, the client's build and the request itself are counted, the child's exit is not).
The emulator runs in a process of its own, so the measured process does only the client side;
bytecode is compiled once (the warm-up run) into a cache of its own, as an installed package has
it. The bare SDK is its own streaming helper (`messages.stream()` for Anthropic) and, for
Anthropic, its raw event loop too (`sdk-raw`). The contenders are taken in turn run after run
(interleaved, so the machine's load weighs on each alike). Printed per contender: the median and
the spread (min..max) of spawn-to-result, of the child's "imports done" mark and of its first
request alone (both from the child's own clock), and of the process's CPU time; then fsm_agent's
added cost over the bare SDK's, per interleaved pair. `import Session` times
`from fsm_agent import Session` alone in a fresh process, `python` an empty one. `--baseline DIR`
runs fsm_agent's rows again with the fsm_agent package of another checkout. `--instructions`
counts each contender's instructions once, spawn to exit, under valgrind's callgrind instead of
timing runs: a figure the host's load and speed do not move (the wall-clock rows spread by
hundreds of milliseconds on a busy two-core host). Nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The child programs: each prints "t_imports t_done text" (perf_counter marks since its own start).
_CHILD_HEAD = "import time; _t0 = time.perf_counter()\n"
_CHILDREN: dict[str, str] = {
    "chat/sdk": """
import openai
_ti = time.perf_counter()
client = openai.OpenAI(base_url=URL + "/v1", api_key="x", max_retries=0)
stream = client.chat.completions.create(
    model="m", messages=[{"role": "user", "content": "hi"}], stream=True
)
text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
""",
    "chat/fsm_agent": """
import openai
from fsm_agent import Session
_ti = time.perf_counter()
client = openai.OpenAI(base_url=URL + "/v1", api_key="x", max_retries=0)
text = Session().stream(client, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}).content
""",
    "anthropic/sdk": """
import anthropic
_ti = time.perf_counter()
client = anthropic.Anthropic(base_url=URL, api_key="x", max_retries=0)
with client.messages.stream(
    model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
) as stream:
    text = "".join(stream.text_stream)
""",
    "anthropic/sdk-raw": """
import anthropic
_ti = time.perf_counter()
client = anthropic.Anthropic(base_url=URL, api_key="x", max_retries=0)
stream = client.messages.create(
    model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}], stream=True
)
deltas = (e.delta for e in stream if e.type == "content_block_delta")
text = "".join(d.text for d in deltas if d.type == "text_delta")
""",
    "anthropic/fsm_agent": """
import anthropic
from fsm_agent import Session
_ti = time.perf_counter()
client = anthropic.Anthropic(base_url=URL, api_key="x", max_retries=0)
text = Session().stream(
    client, {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
).content
""",
    "import Session": """
from fsm_agent import Session
_ti = time.perf_counter()
text = "-"
""",
    "python": """
_ti = time.perf_counter()
text = "-"
""",
}
_CHILD_TAIL = """
_td = time.perf_counter()
print(f"{_ti - _t0:.6f} {_td - _t0:.6f} {text!r}", flush=True)
"""


@functools.cache
def _pycache() -> str:
    """The benchmark's own bytecode cache: made by the first run, removed at the end of `main`
    (importing this module makes nothing)."""
    return tempfile.mkdtemp(prefix="bench_cold_pycache_")


def child_source(name: str, url: str) -> str:
    return _CHILD_HEAD + f"URL = {url!r}\n" + _CHILDREN[name.split("@", 1)[0]] + _CHILD_TAIL


def _child_setup(name: str, baseline: Path | None) -> tuple[Path, dict[str, str]]:
    """Where a child runs (its checkout: fsm_agent is imported from the working directory) and
    its environment."""
    cwd = baseline if name.endswith("@baseline") and baseline is not None else ROOT
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "OTEL_"))}
    # An installed package has its bytecode compiled (pip does it): so do ours, once, in the
    # warm-up run, into a cache of the benchmark's own (PYTHONDONTWRITEBYTECODE would have every
    # run compile fsm_agent's sources, while the SDKs' are compiled at install).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = _pycache()
    return cwd, env


def count_instructions(name: str, url: str, python: str, baseline: Path | None) -> float:
    """Millions of instructions one fresh process of `name` executes, spawn to exit (callgrind,
    the hash seed fixed): the same on a loaded host as on a quiet one, unlike its wall time."""
    cwd, env = _child_setup(name, baseline)
    env["PYTHONHASHSEED"] = "0"
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", python, "-c"]
        done = subprocess.run(
            [*command, child_source(name, url)], cwd=cwd, env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"{name}: the child failed under valgrind: {done.stderr[-400:]}")
        totals = [line for line in out.read_text().splitlines() if line.startswith("totals:")]
    return int(totals[-1].split()[1]) / 1e6


def run_child(
    name: str, url: str, python: str, baseline: Path | None
) -> tuple[float, float, float, str, float]:
    """(spawn-to-result, imports mark, done mark, text, CPU seconds) of one fresh process; a
    contender named `...@baseline` imports fsm_agent from the `--baseline` tree instead."""
    cwd, env = _child_setup(name, baseline)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-c", child_source(name, url)], stdout=subprocess.PIPE, text=True, env=env, cwd=cwd
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    wall = time.perf_counter() - start
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU time: less swayed by the load
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or not line:
        raise SystemExit(f"{name}: the child failed")
    t_imports, t_done, text = line.rstrip("\n").split(" ", 2)
    return wall, float(t_imports), float(t_done), text, usage.ru_utime + usage.ru_stime


def start_emulator(python: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [python, "-m", "fsm_agent", "emulate", "--scenario", "happy"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    url = first.split(" on ", 1)[1].split(",", 1)[0].strip()
    return proc, url


# (label, the bare SDK's contender, fsm_agent's) of each comparison printed
_PAIRS = [
    (f"{api}{tag}{versus}", f"{api}/sdk{versus}", f"{api}/fsm_agent{tag}")
    for tag in ("", "@baseline")
    for api, versus in (("chat", ""), ("anthropic", ""), ("anthropic", "-raw"))
]


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:7.1f} [{min(values) * 1000:6.1f}..{max(values) * 1000:6.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="fresh processes per contender (>= 7)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--only", nargs="*", default=None, help="contender names to run")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout of fsm_agent (e.g. a worktree of main): its fsm_agent rows run beside",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count each contender's instructions once under valgrind instead of timing runs",
    )
    opts = parser.parse_args()
    if opts.instructions and shutil.which("valgrind") is None:
        raise SystemExit("--instructions counts with valgrind's callgrind, which is not installed")
    names = list(_CHILDREN) if not opts.only else opts.only
    if opts.baseline is not None:
        names += [f"{n}@baseline" for n in names if n.endswith("/fsm_agent") or n == "import Session"]
    emulator, url = start_emulator(opts.python)
    try:
        for name in names:  # one warm-up each: the page cache and .pyc files, not measured
            run_child(name, url, opts.python, opts.baseline)
        if opts.instructions:
            counts = {name: count_instructions(name, url, opts.python, opts.baseline) for name in names}
            print_instructions(counts)
            return
        results: dict[str, list[tuple[float, float, float, str, float]]] = {n: [] for n in names}
        load0 = os.getloadavg()
        for _ in range(opts.runs):
            for name in names:
                results[name].append(run_child(name, url, opts.python, opts.baseline))
        load1 = os.getloadavg()
    finally:
        emulator.terminate()
        emulator.wait(5)
        shutil.rmtree(_pycache(), ignore_errors=True)
    texts = {name: {r[3] for r in rows} for name, rows in results.items()}
    for name, seen in texts.items():
        if name in ("python", "import Session", "import Session@baseline"):
            continue
        if len(seen) != 1 or seen == {"''"}:
            raise SystemExit(f"{name}: results empty or differing between runs: {seen}")
    for sdk_name in [name for name in texts if "/sdk" in name]:
        ours_name = sdk_name.split("/", 1)[0] + "/fsm_agent"
        if ours_name in texts and texts[sdk_name] != texts[ours_name]:
            raise SystemExit(f"{sdk_name}: fsm_agent and the SDK got different texts")
    print(
        f"bench_cold: {opts.runs} fresh processes per contender, interleaved;"
        f" load {load0[0]:.2f} -> {load1[0]:.2f}"
    )
    print(
        f"{'contender':20} {'spawn->result ms':>26} {'imports ms':>26} {'first request ms':>26}"
        f" {'process CPU ms':>26}"
    )
    for name, rows in results.items():
        walls = [r[0] for r in rows]
        imps = [r[1] for r in rows]
        reqs = [r[2] - r[1] for r in rows]
        cpus = [r[4] for r in rows]
        print(f"{name:20} {ms(walls):>26} {ms(imps):>26} {ms(reqs):>26} {ms(cpus):>26}")
    for api, sdk_name, ours_name in _PAIRS:
        sdk, ours = results.get(sdk_name), results.get(ours_name)
        if not sdk or not ours:
            continue
        added = [o[0] - s[0] for o, s in zip(ours, sdk, strict=True)]
        req_added = [(o[2] - o[1]) - (s[2] - s[1]) for o, s in zip(ours, sdk, strict=True)]
        cpu_added = [o[4] - s[4] for o, s in zip(ours, sdk, strict=True)]
        print(
            f"{api}: fsm_agent's added cost (per interleaved pair): spawn->result {ms(added)} ms;"
            f" first request alone {ms(req_added)} ms; process CPU {ms(cpu_added)} ms"
        )


def print_instructions(counts: dict[str, float]) -> None:
    """`--instructions`: each contender's count, and fsm_agent's over the bare SDK's."""
    print("bench_cold --instructions: one fresh process per contender under callgrind")
    for name, count in counts.items():
        print(f"{name:28} {count:10.1f} M instructions")
    for label, sdk_name, ours_name in _PAIRS:
        sdk, ours = counts.get(sdk_name), counts.get(ours_name)
        if sdk is not None and ours is not None:
            print(f"{label}: fsm_agent's added instructions {ours - sdk:+.1f} M")


if __name__ == "__main__":
    main()
