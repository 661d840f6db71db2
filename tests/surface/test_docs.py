"""The documentation a user reads is complete and stays true (issue 14).

- Every rule ID cited in the package, the tests, the examples, the README and the docs is defined
  in docs/behaviour.md, and docs/behaviour.md defines every rule of the contract.
- Every public name has a docstring; `help(fsm_agent.Session)` documents every argument and callback.
- The README and the docs link only files inside the repository.
- Every rule of docs/behaviour.md has its anchor, and the site's hook links rule IDs to them.
- The README's emulator-in-your-tests snippet and every complete program of the guide
  (docs/guide/*.md: a Python block that starts with an import) run as pasted.
- No docstring shows a Sphinx role (`:class:`), which MkDocs would print raw; the user docs cite
  no tracker numbers; the API reference pages name every public name.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from test_examples import user_env

import fsm_agent
import fsm_agent.testing

ROOT = Path(__file__).resolve().parents[2]
PREFIXES = "FSM|WIRE|ACC|CB|RES|WD|PRV|TR|DG|CLI|EMU|SEC|BO|RT|HL|OT|RC|WR|PX|CAP|COST"
CITED = re.compile(rf"\b(?:{PREFIXES})-(?:[A-Z]\d*|\d+)\b")
# A rule is defined as a list item opening with its anchor and its bold ID: `- <a id="res-4"></a>**RES-4**`.
DEFINED = re.compile(
    rf'^\s*- (?:<a id="[a-z0-9-]+"></a>)?\*\*((?:{PREFIXES})-(?:[A-Z]\d*|\d+))\*\*', re.MULTILINE
)
ANCHORED = re.compile(
    rf'^\s*- <a id="([a-z0-9-]+)"></a>\*\*((?:{PREFIXES})-(?:[A-Z]\d*|\d+))\*\*', re.MULTILINE
)

# The whole contract: every rule the project promises (numbered rules run from 1 without gaps).
CONTRACT = {
    "FSM": 6,
    "WIRE": 5,
    "ACC": 11,
    "CB": 6,
    "RES": 11,
    "WD": 12,  # WD-5..WD-12: the phases and clocks (issue 26)
    "TR": 6,
    "DG": 3,
    "CLI": 3,
    "EMU": 1,
    "SEC": 9,
    "BO": 7,
    "RT": 4,
    "HL": 3,
    "OT": 3,
    "WR": 4,
    "PX": 8,  # the proxy (issue 28)
    "CAP": 3,  # issue 29: capacity
    "COST": 1,  # issue 29: the cost ledger
}
PROVIDER_RULES = {
    "PRV-C",
    "PRV-R",
    "PRV-A",
    "PRV-A1",
    "PRV-A2",
    "PRV-A3",
    "PRV-A4",
    "PRV-A5",
    "PRV-B",
    "PRV-B1",
    "PRV-B2",
    "PRV-B3",
    "PRV-G",
    "PRV-N",
}
# Section 15 of the contract, so far the rules of route-owned faults (the recovery ladder's rules,
# the others of section 15, are not in yet).
RECOVERY_RULES = {f"RC-{n}" for n in range(1, 12)}  # section 15, the recovery ladder and the route side


def _sources() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder, pattern in (
        ("fsm_agent", "*.py"),
        ("tests", "*.py"),
        ("examples", "*.py"),
        ("bench", "*.py"),
        ("docs", "*.md"),
    ):
        files.extend(sorted((ROOT / folder).rglob(pattern)))
    return files


def defined_rules() -> set[str]:
    return set(DEFINED.findall((ROOT / "docs" / "behaviour.md").read_text(encoding="utf-8")))


def test_behaviour_md_defines_the_whole_contract_once() -> None:
    text = (ROOT / "docs" / "behaviour.md").read_text(encoding="utf-8")
    found = DEFINED.findall(text)
    assert len(found) == len(set(found)), "a rule is defined twice"
    expected = {f"{prefix}-{n}" for prefix, count in CONTRACT.items() for n in range(1, count + 1)}
    expected |= PROVIDER_RULES | RECOVERY_RULES
    assert set(found) == expected, (expected - set(found), set(found) - expected)


def test_every_cited_rule_id_is_defined_in_behaviour_md() -> None:
    defined = defined_rules()
    undefined: dict[str, list[str]] = {}
    for path in _sources():
        for rule in set(CITED.findall(path.read_text(encoding="utf-8"))):
            if rule not in defined:
                undefined.setdefault(rule, []).append(str(path.relative_to(ROOT)))
    assert not undefined, f"rule IDs cited but not defined in docs/behaviour.md: {undefined}"


def test_the_check_finds_an_undefined_rule() -> None:
    """The scan above can fail: a made-up ID is found and is not defined."""
    made_up = "RES-" + "99", "PRV-" + "Z7"  # spelled apart, so this file cites neither
    assert CITED.findall(f"as {made_up[0]} and {made_up[1]} say, not UTF-8") == list(made_up)
    assert made_up[0] not in defined_rules()


def test_every_public_name_has_a_docstring() -> None:
    missing = [name for name in fsm_agent.__all__ if not inspect.getdoc(getattr(fsm_agent, name))]
    assert not missing
    import fsm_agent.testing as testing

    assert not [
        name
        for name in testing.__all__
        if not isinstance(getattr(testing, name), (str, int, dict))
        and not inspect.getdoc(getattr(testing, name))
    ]


def test_help_session_documents_every_argument_and_callback() -> None:
    session_doc = inspect.getdoc(fsm_agent.Session) or ""
    for name in inspect.signature(fsm_agent.Session).parameters:
        assert re.search(rf"^\s+{name}: \S", session_doc, re.MULTILINE), f"Session({name}=) undocumented"
    for variable in (
        "FSM_AGENT_STREAM_RETRIES",
        "FSM_AGENT_STREAM_STALE_TIMEOUT",
        "FSM_AGENT_STREAM_STALE_GIVEUP",
    ):
        assert variable in session_doc
    for method in (fsm_agent.Session.stream, fsm_agent.Session.astream):
        doc = inspect.getdoc(method) or ""
        for name in inspect.signature(method).parameters:
            if name != "self":
                assert re.search(rf"^\s+{name}: \S", doc, re.MULTILINE), f"{method.__name__}({name}=)"
        assert "`on_tool_call(index: int, name: str)`" in doc and "`on_text(text: str)`" in doc
        for api in ("chat_completions", "responses", "anthropic_messages", "bedrock_converse"):
            assert f'"{api}"' in (inspect.getdoc(fsm_agent.Session.stream) or "")
    for name, member in inspect.getmembers(fsm_agent.Session, inspect.isfunction):
        if not name.startswith("_"):
            assert inspect.getdoc(member), f"Session.{name} has no docstring"


def test_readme_and_docs_link_only_files_in_the_repository() -> None:
    link = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        assert "../shared" not in text and "SPEC.md" not in text, path
        for target in link.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            resolved = (path.parent / target).resolve()
            assert resolved.is_relative_to(ROOT) and resolved.exists(), (path.name, target)


def test_every_rule_has_an_anchor_named_after_it() -> None:
    """`behaviour.md#res-4` is rule RES-4: the site's rule links (docs/hooks/rule_links.py) land on it."""
    text = (ROOT / "docs" / "behaviour.md").read_text(encoding="utf-8")
    anchored = ANCHORED.findall(text)
    assert all(anchor == rule.lower() for anchor, rule in anchored), anchored
    assert {rule for _, rule in anchored} == defined_rules()


def _rule_links_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rule_links", ROOT / "docs" / "hooks" / "rule_links.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_links_rule_ids_outside_code_blocks_and_links() -> None:
    hook = _rule_links_hook()
    assert hook.PREFIXES == PREFIXES  # the site links the same rule families this file checks
    anchors = hook.defined_anchors((ROOT / "docs" / "behaviour.md").read_text(encoding="utf-8"))
    assert {"res-4", "prv-a1", "ot-3"} <= anchors
    made_up = "RES-" + "99"  # spelled apart, so this file cites no undefined rule
    html = (
        f"<p>Retried (RES-4, <code>PRV-A1</code>); not {made_up}.</p><pre><code>RES-4</code></pre>"
        '<a href="x">RES-4</a><p>OT-3<br/></p>'
    )
    linked = hook.link_rules(html, "../behaviour/", anchors)
    assert linked.count('href="../behaviour/#res-4"') == 1  # in the text, not in the code block or link
    assert (
        '<code><a class="rule-ref" href="../behaviour/#prv-a1" title="rule PRV-A1">PRV-A1</a></code>'
        in linked
    )
    assert f"{made_up}." in linked and "#res-99" not in linked  # not a rule: left alone
    assert "<pre><code>RES-4</code></pre>" in linked
    assert 'href="../behaviour/#ot-3"' in linked  # after a self-closing tag
    paths = hook.link_rules(
        "<p>see docs/behaviour.md and docs/nowhere.md</p>", "", anchors, {"behaviour.md": "../b/"}
    )
    assert paths == '<p>see <a href="../b/">docs/behaviour.md</a> and docs/nowhere.md</p>'


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


def _run_as_a_user(source: str, name: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run a pasted program (a test module under pytest, with the plugin as installed) in a fresh
    interpreter, no provider key in the environment, from an empty directory."""
    (tmp_path / name).write_text(source, encoding="utf-8")
    if "\ndef test_" in source:
        from importlib.metadata import entry_points

        module = "fsm_agent.testing.pytest_plugin"
        installed = any(ep.value == module for ep in entry_points(group="pytest11"))
        plugin = [] if installed else ["-p", module]
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin]
        command += ["--rootdir", str(tmp_path), name]
    else:
        command = [sys.executable, name]
    return subprocess.run(command, capture_output=True, text=True, env=user_env(), cwd=tmp_path, timeout=120)


def test_the_readme_emulator_snippet_runs_as_pasted(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### The emulator in your own tests", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert snippet is not None
    done = _run_as_a_user(snippet.group(1), "test_readme_snippet.py", tmp_path)
    assert done.returncode == 0 and re.search(r"^1 passed", done.stdout, re.MULTILINE), (
        done.stdout + done.stderr
    )


GUIDE_PROGRAMS = [
    (path.name, index, block)
    for path in sorted((ROOT / "docs" / "guide").glob("*.md"))
    for index, block in enumerate(_python_blocks(path))
    if block.startswith(("import ", "from "))
]
GUIDE_OUTPUT = {
    ("first-stream.md", 0): "Red, green, blue. stop 2",
    ("routes.md", 0): "Red. claude",
    ("testing.md", 0): "9 passed",
    ("testing.md", 1): "ToolCall(id='call_emu1_0', name='get_weather'",
    ("telemetry.md", 0): '"name": "chat emulator-1"',
    ("wrap.md", 0): 'get_weather {"city": "Paris"}\nattempts: 2',
}


def test_the_guide_has_its_programs() -> None:
    assert set(GUIDE_OUTPUT) <= {(name, index) for name, index, _ in GUIDE_PROGRAMS}


@pytest.mark.slow  # a fresh interpreter each, and the testing guide's module runs nine tests
@pytest.mark.parametrize(
    ("page", "index", "source"), GUIDE_PROGRAMS, ids=[f"{n}-{i}" for n, i, _ in GUIDE_PROGRAMS]
)
def test_a_guide_program_runs_as_pasted(page: str, index: int, source: str, tmp_path: Path) -> None:
    name = f"test_guide_{index}.py" if "\ndef test_" in source else f"guide_{index}.py"
    done = _run_as_a_user(source, name, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr  # (a failed test module exits non-zero)
    assert GUIDE_OUTPUT.get((page, index), "") in done.stdout, done.stdout


SPHINX_ROLE = re.compile(r":(?:class|func|meth|attr|exc|mod|data|obj|ref|py:\w+):`")


def _docstrings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((getattr(node, "lineno", 1), doc))
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):  # attribute docstrings: mkdocstrings renders them too
            found.append((node.lineno, node.value.value))
    return found


def test_no_docstring_shows_a_sphinx_role() -> None:
    """The site renders docstrings as Markdown: `:class:`Emulator`` would show as typed."""
    assert SPHINX_ROLE.search("a :class:`Scenario` and :meth:`Scenario.build`")  # the check can fail
    raw = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "fsm_agent").rglob("*.py"))
        for line, doc in _docstrings(path)
        if SPHINX_ROLE.search(doc)
    ]
    assert not raw, f"Sphinx roles in docstrings (write `Name` instead): {raw}"
    for module in (fsm_agent, fsm_agent.testing):
        for name in module.__all__:
            doc = inspect.getdoc(getattr(module, name)) or ""
            assert not SPHINX_ROLE.search(doc), name


# A tracker citation: "#13", "issue 13", "issues 10-17", "stop 19" — numbers a user cannot look up.
# A quoted "#2" (a route's name) is text, not a citation.
TRACKER = re.compile(r"(?<![\w\"'`])#\d+\b|\b(?:issues?|stops?|PR)\s+#?\d+", re.IGNORECASE)


def _prose(markdown: str) -> str:
    """The text of a page without its code blocks (a program's output may say `stop 2`)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)


def test_the_user_docs_cite_no_tracker_numbers() -> None:
    assert TRACKER.search("as decided (issue 13)") and TRACKER.search("see #21") and TRACKER.search("stop 19")
    assert not TRACKER.search('are numbered `"#2"`, `"#3"`')
    cited = {
        str(path.relative_to(ROOT)): TRACKER.findall(_prose(path.read_text(encoding="utf-8")))
        for path in [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
    }
    assert not {path: found for path, found in cited.items() if found}


def test_the_api_reference_pages_name_every_public_name() -> None:
    pages = {
        fsm_agent: (ROOT / "docs" / "api.md").read_text(encoding="utf-8"),
        fsm_agent.testing: (ROOT / "docs" / "testing-reference.md").read_text(encoding="utf-8"),
    }
    for module, page in pages.items():
        rendered = set(re.findall(r"^::: ([\w.]+)", page, re.MULTILINE))
        members = set(re.findall(r"^\s+- (\w+)$", page, re.MULTILINE))
        for name in module.__all__:
            shown = any(target.endswith(f".{name}") for target in rendered) or name in members
            assert shown or f"`{name}`" in page, f"{module.__name__}.{name} is not on its reference page"


def test_the_result_documents_every_field() -> None:
    doc = inspect.getdoc(fsm_agent.StreamResult) or ""
    for field in dataclasses.fields(fsm_agent.StreamResult):
        assert re.search(rf"^\s+{field.name}: \S", doc, re.MULTILINE), f"StreamResult.{field.name}"
