"""The documentation holds: README.md stays a short front door, every relative
link in README.md and docs/*.md reaches a file (and a heading, when it names
one), and every documented ``opsboard ...`` or ``python -m worker ...`` command
parses with the real command-line parser.

Commands are read from ```sh, ```bash and ```console blocks: a line (joined
with its ``\\`` continuations) is cut at ``&&``, ``||``, ``|`` and ``;``; a
piece is a command when, after an optional ``$ `` prompt, leading ``NAME=value``
assignments and a ``flock FILE`` wrapper, it starts with ``opsboard`` (or a
path ending in ``/opsboard``) or ``python -m worker`` (any ``python``/``python3``).
``[--option value]`` brackets, the usage notation for "optional", are dropped;
``# comments`` are ignored.  Nothing is skipped: a placeholder a parser cannot
take (``--jobs N``) belongs in prose, not in a command block.
"""
from __future__ import annotations

import json

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from opsboard.config import CHECKOUT

pytestmark = pytest.mark.skipif(CHECKOUT is None, reason="needs the source checkout (README.md, docs/)")

README_MAX_LINES = 300
COMMAND_BLOCKS = {"sh", "bash", "console", "shell"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")


def doc_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


# ------------------------------------------------------------------ blocks


def fenced_blocks(text: str):
    """(language, [(line number, line)]) for every fenced code block."""
    lang, body, fence = None, [], None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence, lang, body = m.group(1), m.group(2).lower(), []
        elif fence is not None and line.startswith(fence[0] * len(fence)) and not line.strip(fence[0]).strip():
            yield lang, body
            fence = None
        elif fence is not None:
            body.append((number, line))


def prose(text: str) -> str:
    """The text outside fenced blocks, inline code spans blanked (links there are not links)."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if line.startswith(fence[0] * len(fence)) and not line.strip(fence[0]).strip():
                fence = None
            out.append("")
        else:
            out.append(re.sub(r"`+[^`]*`+", "``", line))
    return "\n".join(out)


# ------------------------------------------------------------------ links

INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
HTML_HREF = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.I)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def heading_anchors(path: Path) -> set[str]:
    """Anchors of the headings of ``path`` (code spans kept: GitHub keeps their text)."""
    seen: dict[str, int] = {}
    out = set()
    fence = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.startswith(fence[0] * len(fence)) and not line.strip(fence[0]).strip():
                fence = None
            continue
        h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            base = slug(h.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path):
    """(line number, target) for every link of ``path`` that is not a URL."""
    text = prose(path.read_text(encoding="utf-8"))
    for pattern in (INLINE_LINK, REFERENCE_DEF, HTML_HREF):
        for m in pattern.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            yield text.count("\n", 0, m.start()) + 1, target


def broken_links(root: Path) -> list[str]:
    problems = []
    for doc in doc_files(root):
        for number, target in relative_links(doc):
            where = f"{doc.relative_to(root)}:{number}"
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            if not dest.exists():
                problems.append(f"{where}: {target} -> no such file")
                continue
            if root.resolve() not in (dest, *dest.parents):
                problems.append(f"{where}: {target} -> outside the repository")
                continue
            if anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest):
                problems.append(f"{where}: {target} -> no heading #{anchor} in {dest.relative_to(root.resolve())}")
    return problems


# ------------------------------------------------------------------ commands


def _quotes_closed(text: str) -> bool:
    try:
        split_pipeline(text)
    except ValueError:
        return False
    return True


def command_lines(path: Path):
    """(line number, text) of every line of a shell block, joined with its ``\\``
    continuations and with the lines a quoted string spans (as the shell reads it)."""
    for lang, body in fenced_blocks(path.read_text(encoding="utf-8")):
        if lang not in COMMAND_BLOCKS:
            continue
        pending, start = "", None
        for number, line in body:
            if start is None:
                start = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            pending += line
            if not _quotes_closed(pending):
                pending += "\n"
                continue
            yield start, pending
            pending, start = "", None
        if pending:
            yield start, pending


def split_pipeline(line: str) -> list[list[str]]:
    """Words of each simple command of ``line`` (cut at && || | ;), comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    pieces, words = [], []
    for token in lexer:
        if token and set(token) <= set(";&|"):
            pieces.append(words)
            words = []
        else:
            words.append(token)
    pieces.append(words)
    return [p for p in pieces if p]


def as_command(words: list[str]):
    """('opsboard' | 'worker', argv) when ``words`` run one of ours, else None."""
    if words and words[0] == "$":
        words = words[1:]
    while words and ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    if words[:1] == ["env"]:
        words = words[1:]
        while words and ENV_ASSIGNMENT.match(words[0]):
            words = words[1:]
    if words[:1] == ["flock"] and len(words) > 2:
        words = words[2:]
    if not words:
        return None
    argv = [w.strip("[]") if (w.startswith("[") or w.endswith("]")) else w for w in words[1:]]
    argv = [w for w in argv if w]
    if words[0] == "opsboard" or words[0].endswith("/opsboard"):
        return "opsboard", argv
    if re.fullmatch(r"(.*/)?python3?(\.\d+)?", words[0]) and argv[:2] == ["-m", "worker"]:
        return "worker", argv[2:]
    return None


def documented_commands(root: Path):
    for doc in doc_files(root):
        for number, line in command_lines(doc):
            text = line.strip()
            if text.startswith("$ "):
                text = text[2:]
            try:
                pieces = split_pipeline(text)
            except ValueError as exc:  # unbalanced quotes: not a shell line we can read
                raise AssertionError(f"{doc.relative_to(root)}:{number}: cannot split {line!r}: {exc}") from None
            for words in pieces:
                found = as_command(words)
                if found:
                    yield f"{doc.relative_to(root)}:{number}", found[0], found[1], line.strip()


def parse_error(program: str, argv: list[str]) -> str | None:
    """None when the real parser accepts ``argv``, else its message."""
    if program == "opsboard":
        from opsboard.cli import _parser
        parser = _parser()
    else:
        from worker.cli import build_parser
        parser = build_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):  # 0: --help / --version
            return err.getvalue().strip() or f"exit status {exc.code}"
    return None


def bad_commands(root: Path) -> list[str]:
    problems = []
    for where, program, argv, line in documented_commands(root):
        message = parse_error(program, argv)
        if message:
            problems.append(f"{where}: {line}\n    {message}")
    return problems


# ------------------------------------------------------------------ tests


def readme_too_long(root: Path) -> str | None:
    lines = (root / "README.md").read_text(encoding="utf-8").splitlines()
    if len(lines) > README_MAX_LINES:
        return f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail into docs/"
    return None


def test_readme_is_a_short_front_door():
    assert readme_too_long(CHECKOUT) is None, readme_too_long(CHECKOUT)


PERFORMANCE_MAX_LINES = 250


def test_the_performance_page_is_a_reference_not_a_lab_notebook():
    """docs/performance.md says how to run and read each scenario, with one current table per area;
    the run history is data (docs/performance/history.jsonl, one JSON object a line)."""
    lines = (CHECKOUT / "docs" / "performance.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= PERFORMANCE_MAX_LINES, f"docs/performance.md has {len(lines)} lines"
    history = (CHECKOUT / "docs" / "performance" / "history.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in history]
    assert records and all(r["date"] and r["metric"] and r["machine"] for r in records)


def test_readme_runs_the_product_first_and_keeps_the_test_command():
    text = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    first_lang, first_block = next(fenced_blocks(text))
    assert "opsboard demo" in first_block[0][1], "the README's first command must run the product (opsboard demo)"
    # .ci/run takes the first line inside the first ``` block after the marker.
    after = text.split("<!-- test-command -->", 1)
    assert len(after) == 2, "README.md lost its <!-- test-command --> marker"
    _, block = next(fenced_blocks(after[1]))
    assert "pytest" in block[0][1], block


def test_every_relative_link_reaches_a_file():
    assert not broken_links(CHECKOUT), "broken links:\n" + "\n".join(broken_links(CHECKOUT))


def test_documented_commands_parse_with_the_real_parsers():
    found = list(documented_commands(CHECKOUT))
    programs = {program for _, program, _, _ in found}
    assert programs == {"opsboard", "worker"}, f"expected both kinds of command in the docs, found {programs}"
    problems = bad_commands(CHECKOUT)
    assert not problems, "documented commands the parser refuses:\n" + "\n".join(problems)


# ------------------------------------------------------------------ the check can fail


def _tree(tmp_path: Path, readme: str, docs: dict[str, str] | None = None) -> Path:
    (tmp_path / "docs").mkdir(parents=True)
    (tmp_path / "README.md").write_text(readme, encoding="utf-8")
    for name, text in (docs or {}).items():
        (tmp_path / "docs" / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_a_bogus_option_or_subcommand_is_reported_with_file_and_line(tmp_path):
    root = _tree(tmp_path, "# x\n\n```sh\nopsboard demo --port 8001\n```\n", {"ops.md": (
        "# ops\n\n```bash\n"
        "$ DATABASE_URL=postgresql://db/x opsboard bench --scenario fanout --no-such-option\n"
        "opsboard migrate --print-roles-sql | psql \"$URL\"   # fine\n"
        "opsboard frobnicate\n"
        "python -m worker --processes 4 \\\n  --queus default=8\n"
        "opsboard bench --peers [--jobs 20000] [--json peers.json]\n"
        "```\n")})
    problems = bad_commands(root)
    assert len(problems) == 3, problems
    assert problems[0].startswith("docs/ops.md:4: ") and "--no-such-option" in problems[0]
    assert problems[1].startswith("docs/ops.md:6: ") and "frobnicate" in problems[1]
    assert problems[2].startswith("docs/ops.md:7: ") and "--queus" in problems[2]


def test_a_broken_link_or_anchor_is_reported(tmp_path):
    root = _tree(tmp_path, "# x\n\n[a](docs/a.md) [b](docs/b.md) [c](docs/a.md#nope) [d](docs/a.md#one-two)\n"
                           "`[not a link](nowhere.md)`\n\n```\n[nor](this.md)\n```\n",
                 {"a.md": "# A\n\n## One: `two`\n\n[up](../README.md#x) [web](https://example.com/x.md)\n"})
    problems = broken_links(root)
    assert problems == ["README.md:3: docs/b.md -> no such file",
                        "README.md:3: docs/a.md#nope -> no heading #nope in docs/a.md"], problems


def test_an_overlong_readme_fails(tmp_path):
    assert readme_too_long(_tree(tmp_path, "line\n" * README_MAX_LINES)) is None
    assert "301 lines" in readme_too_long(_tree(tmp_path / "long", "line\n" * (README_MAX_LINES + 1)))
