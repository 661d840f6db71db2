"""MkDocs hook: every rule ID on the site (`RES-4`, `PRV-A1`) links to that rule on the behaviour page.

The behaviour page gives each rule an anchor (`<a id="res-4"></a>`); this hook turns the IDs cited
in every page's HTML (the docstrings of the API reference included) into links to those anchors.
IDs inside code blocks, inside links and in the page's headings' permalinks are left as they are,
and an ID the behaviour page does not define is not linked (tests/surface/test_docs.py fails on those).
A docstring's mention of a page by its path in the repository (`docs/behaviour.md`, as `help()`
shows it) becomes a link to that page too.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PREFIXES = "FSM|WIRE|ACC|CB|RES|WD|PRV|TR|DG|CLI|EMU|SEC|BO|RT|HL|OT|RC|WR|PX|CAP|COST"
RULE = re.compile(rf"\b(?:{PREFIXES})-(?:[A-Z]\d*|\d+)\b")
DOC_PATH = re.compile(r"\bdocs/([a-z-]+\.md)\b")
ANCHOR = re.compile(r'<a id="([a-z]+-[a-z0-9]+)"></a>')
TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9]*)\b[^>]*?(/?)>")
SKIP = {"a", "pre", "script", "style", "textarea"}
BEHAVIOUR = "behaviour.md"


def defined_anchors(behaviour_md: str) -> set[str]:
    """The rule anchors the behaviour page defines."""
    return set(ANCHOR.findall(behaviour_md))


def link_rules(html: str, href_base: str, anchors: set[str], pages: dict[str, str] | None = None) -> str:
    """`html` with every rule ID outside code blocks and links made a link to `href_base#id`, and
    every `docs/NAME.md` that `pages` maps (NAME.md -> its URL from this page) a link to it."""
    pages = pages or {}
    out: list[str] = []
    skipping: list[str] = []
    position = 0

    def link(match: re.Match[str]) -> str:
        rule = match.group(0)
        anchor = rule.lower()
        if anchor not in anchors:
            return rule
        return f'<a class="rule-ref" href="{href_base}#{anchor}" title="rule {rule}">{rule}</a>'

    def link_page(match: re.Match[str]) -> str:
        href = pages.get(match.group(1))
        return match.group(0) if href is None else f'<a href="{href}">{match.group(0)}</a>'

    def linked(text: str) -> str:
        return DOC_PATH.sub(link_page, RULE.sub(link, text))

    for tag in TAG.finditer(html):
        text = html[position : tag.start()]
        out.append(text if skipping else linked(text))
        closing, name, self_closing = tag.group(1), tag.group(2).lower(), tag.group(3)
        if name in SKIP and not self_closing:
            if closing:
                while name in skipping and skipping.pop() != name:
                    pass  # an element left open inside it ends with it
            else:
                skipping.append(name)
        out.append(tag.group(0))
        position = tag.end()
    rest = html[position:]
    out.append(rest if skipping else linked(rest))
    return "".join(out)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    behaviour = files.get_file_from_path(BEHAVIOUR)
    if behaviour is None:
        return html
    anchors = defined_anchors(Path(behaviour.abs_src_path).read_text(encoding="utf-8"))
    href_base = "" if page.file.src_uri == BEHAVIOUR else behaviour.url_relative_to(page.file)
    pages = {
        file.src_uri: file.url_relative_to(page.file)
        for file in files.documentation_pages()
        if "/" not in file.src_uri
    }
    return link_rules(html, href_base, anchors, pages)
