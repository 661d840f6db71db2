"""The documentation a user reads is complete and stays true (issue 14).

- Every rule ID cited in the package, the tests, the examples, the README and the docs is defined
  in docs/behaviour.md, and docs/behaviour.md defines every rule of the contract.
- Every public name has a docstring; `help(fsm_agent.Session)` documents every argument and callback.
- The README and the docs link only files inside the repository.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import fsm_agent

ROOT = Path(__file__).resolve().parent.parent
PREFIXES = "FSM|WIRE|ACC|CB|RES|WD|PRV|TR|DG|CLI|EMU|SEC|BO|RT|HL|OT"
CITED = re.compile(rf"\b(?:{PREFIXES})-(?:[A-Z]\d*|\d+)\b")
DEFINED = re.compile(rf"^\s*- \*\*((?:{PREFIXES})-(?:[A-Z]\d*|\d+))\*\*", re.MULTILINE)

# The whole contract: every rule the project promises (numbered rules run from 1 without gaps).
CONTRACT = {
    "FSM": 6,
    "WIRE": 5,
    "ACC": 11,
    "CB": 6,
    "RES": 11,
    "WD": 4,
    "TR": 6,
    "DG": 3,
    "CLI": 3,
    "EMU": 1,
    "SEC": 9,
    "BO": 7,
    "RT": 4,
    "HL": 3,
    "OT": 3,
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
    expected |= PROVIDER_RULES
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
