"""The offline OpenAI-SDK agent of examples/openai_sdk_agent.py as ``agent`` and ``check``."""

import sys

from docs_paths import EXAMPLES

sys.path.insert(0, str(EXAMPLES))
from openai_sdk_agent import FakeOpenAI, make_agent
from openai_sdk_agent import verifier as check  # noqa: F401

agent = make_agent(FakeOpenAI().client())
