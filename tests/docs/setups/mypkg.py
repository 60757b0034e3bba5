"""A package ``mypkg`` with a client class, for the ``instrument.patch`` example."""

import pathlib
import sys

pathlib.Path("mypkg").mkdir()
pathlib.Path("mypkg/__init__.py").write_text("")
pathlib.Path("mypkg/client.py").write_text(
    "class Client:\n    def complete(self, prompt):\n        return prompt.upper()\n"
)
sys.path.insert(0, ".")

from agent_replay import instrument  # noqa: E402, F401
