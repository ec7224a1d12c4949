#!/usr/bin/env python3
"""Checks the repository's Markdown: every relative link and anchor resolves, and every code
block that rustdoc compiles is meant to be compiled.

- Links: each relative link (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`, and
  reference definitions `[name]: path`) of the pages below must name a file or directory that
  exists, and its `#anchor` a heading of that page, by the slug GitHub gives it (lower case,
  punctuation dropped, spaces as hyphens, `-1`, `-2` ... after a repeated heading). Links with a
  scheme (https:, mailto:) are not followed. Links in code blocks and code spans are not links.
- Fences: README.md and every docs/*.md page are compiled by rustdoc as doc tests of
  lambda-idempotency (shared/src/lib.rs, one item per page); each of their fenced code blocks must
  name its language (`rust`, `yaml`, `sh`, `text`, `toml`, ...), since rustdoc compiles a bare
  fence as Rust, and each docs/*.md page must have its item.

Run from anywhere: `python3 docs/check-links.py` (part of `make lint`). Exits 0 when all holds,
1 with one line per fault, 2 on a bad command line.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The pages checked, as globs from the repository's root.
PAGES = [
    "README.md",
    "docs/*.md",
    "shared/README.md",
    "shared/CHANGELOG.md",
    "examples/*/README.md",
    "infra/*/README.md",
    "bench/*/README.md",
]
# The pages whose code blocks rustdoc compiles (see shared/src/lib.rs).
DOCTESTED = ["README.md", "docs/*.md"]
LIB_RS = ROOT / "shared/src/lib.rs"

FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages(globs):
    found = []
    for pattern in globs:
        found.extend(sorted(ROOT.glob(pattern)))
    return [p for p in found if p.is_file()]


def prose_lines(text):
    """(line number, line, fence info or None) for each line; code block lines as None lines."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)
            yield number, None, match.group(3).strip()
        elif fence is not None:
            if match and match.group(2).startswith(fence[0]) and len(match.group(2)) >= len(fence) and not match.group(3).strip():
                fence = None
            yield number, None, None
        else:
            yield number, line, None


def slug(heading):
    """The anchor GitHub gives a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "").replace("~", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        for _, line, _ in prose_lines(path.read_text(encoding="utf-8")):
            if line is None:
                continue
            match = ATX_HEADING.match(line)
            if not match:
                continue
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        for name in re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text(encoding="utf-8")):
            found.add(name)
        _anchors[path] = found
    return _anchors[path]


def check_link(page, number, target, faults):
    if not target or SCHEME.match(target) or target.startswith("//"):
        return
    path_part, _, anchor = target.partition("#")
    where = f"{page.relative_to(ROOT)}:{number}"
    if path_part:
        resolved = (page.parent / path_part).resolve()
        if not resolved.exists():
            faults.append(f"{where}: {target}: no such file")
            return
    else:
        resolved = page
    if anchor:
        if resolved.is_dir() or resolved.suffix.lower() != ".md":
            return  # an anchor of a source file or a folder: GitHub's, not checked here
        if anchor not in anchors(resolved):
            faults.append(f"{where}: {target}: no heading with the anchor #{anchor} in {resolved.relative_to(ROOT)}")


def check_links(page, faults):
    for number, line, _ in prose_lines(page.read_text(encoding="utf-8")):
        if line is None:
            continue
        definition = REFERENCE_DEF.match(line)
        if definition:
            check_link(page, number, definition.group(1), faults)
            continue
        for match in INLINE_LINK.finditer(CODE_SPAN.sub("", line)):
            check_link(page, number, match.group(1), faults)


def check_fences(page, faults):
    for number, _, info in prose_lines(page.read_text(encoding="utf-8")):
        if info is not None and not info:
            faults.append(
                f"{page.relative_to(ROOT)}:{number}: a code block without a language "
                "(rustdoc would compile it as Rust): name it (rust, yaml, sh, text, toml, ...)"
            )


def check_doctest_items(faults):
    lib = LIB_RS.read_text(encoding="utf-8")
    for page in pages(["docs/*.md"]):
        needle = f'include_str!("../../{page.relative_to(ROOT)}")'
        if needle not in lib:
            faults.append(
                f"{page.relative_to(ROOT)}: no doc-test item in shared/src/lib.rs "
                f"(`#[doc = {needle}]` in `docs_doctests`)"
            )


def main(argv):
    if len(argv) > 1:
        print(__doc__.strip(), file=sys.stderr)
        return 0 if argv[1] in ("-h", "--help") else 2
    faults = []
    checked = pages(PAGES)
    for page in checked:
        check_links(page, faults)
    for page in pages(DOCTESTED):
        check_fences(page, faults)
    check_doctest_items(faults)
    for fault in faults:
        print(fault)
    if faults:
        print(f"check-links: {len(faults)} fault(s) in {len(checked)} pages", file=sys.stderr)
        return 1
    print(f"check-links: {len(checked)} pages, every relative link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
