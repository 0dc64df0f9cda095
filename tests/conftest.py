"""Shared test setup. Area fixtures live in tests/<area>/conftest.py, mirroring the source layout."""

import os

from tests.cdk_cli import cdk_cli  # noqa: F401 (the fixture behind tests.cdk_cli.needs_cdk_cli, for every test folder)

# jsii prints an end-of-life banner for Node 20 on every process start; it is noise in test output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
