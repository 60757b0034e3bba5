"""Every Python example in README.md and docs/*.md runs as written.

Each block runs in a fresh folder, in its own interpreter, as a user would paste it. A block
that uses names it does not define says where they come from in an HTML comment on the line
above its fence, ``<!-- example: NAME -->``: ``setups/NAME.py`` runs first, in the same script
(a recorded run as ``traj``, a store as ``store``, ...). A block that defines ``test_``
functions is a pytest file and runs under pytest, which must collect and pass them all.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
SETUPS = Path(__file__).resolve().parent / "setups"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = "```python\n"
#: setups that need a package of the dev extra (`.ci/lowest` runs the suite without them)
NEEDS = {"openai_agent": "openai"}
BLOCK = re.compile(
    r"^(?:<!-- example: (?P<setup>[\w-]+) -->\n)?```python\n(?P<code>.*?)^```$", re.M | re.S
)


def blocks() -> list:
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))
            name = f"{doc.relative_to(ROOT)}:{line}"
            found.append(pytest.param(match["setup"], match["code"], id=name))
    return found


EXAMPLES = blocks()


def test_every_python_fence_is_an_example():
    fences = sum(
        line == FENCE.rstrip("\n")
        for doc in DOCS
        for line in doc.read_text(encoding="utf-8").splitlines()
    )
    assert fences == len(EXAMPLES) > 10


def test_every_setup_is_used_and_exists():
    used = {param.values[0] for param in EXAMPLES} - {None}
    assert used == {path.stem for path in SETUPS.glob("*.py")}


@pytest.mark.parametrize(("setup", "code"), EXAMPLES)
def test_example_runs(setup, code, tmp_path):
    if setup in NEEDS:
        pytest.importorskip(NEEDS[setup])
    (tmp_path / "docs_paths.py").write_text(
        f"from pathlib import Path\n\nEXAMPLES = Path({str(ROOT / 'examples')!r})\n"
        f"FIXTURES = Path({str(FIXTURES)!r})\n"
    )
    preamble = (SETUPS / f"{setup}.py").read_text() + "\n" if setup else ""
    if re.search(r"^def test_", code, re.M):
        script = tmp_path / "test_doc_example.py"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", script.name]
    else:
        script = tmp_path / "doc_example.py"
        command = [sys.executable, script.name]
    script.write_text(preamble + code)
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    if script.name.startswith("test_"):
        assert re.search(r"^\d+ passed", run.stdout.splitlines()[-1]), run.stdout[-1000:]


def command_lines() -> list[str]:
    """Every line of a code block or inline code of the docs that holds ``agent-replay``, after
    the name of its file and a colon, with continuation lines joined."""
    found = []
    for doc in [*DOCS, *sorted(ROOT.glob("*/README.md"))]:
        text = doc.read_text(encoding="utf-8").replace("\\\n", " ")
        code = re.findall(r"^```[a-z]*\n(.*?)^```$", text, re.M | re.S)
        code += re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)
        found += [
            f"{doc.relative_to(ROOT)}: {line.strip()}" for c in code for line in c.splitlines()
        ]
    return [line for line in found if "agent-replay " in line]


def test_every_documented_command_and_option_exists():
    from agent_replay.cli import main

    wrong, checked = [], 0
    for line in command_lines():
        pattern = r"(?:: |[$&;]\s*)agent-replay\s+([a-z]+)((?:\s+[^\s`|;&#)]+)*)"
        for match in re.finditer(pattern, line):
            command = main.commands.get(match[1])
            if command is None:
                wrong.append(f"no command {match[1]!r}: {line}")
                continue
            options = {"--help", "-h"}
            for param in command.params:
                options.update(param.opts, param.secondary_opts)
            for flag in re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", match[2]):
                checked += 1
                if flag not in options:
                    wrong.append(f"{match[1]} has no {flag}: {line}")
    assert not wrong and checked > 50, (checked, wrong)
