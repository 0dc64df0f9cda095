"""Write the JSON Schema of the settings, docs/settings.schema.json, from ray_efa.core.settings.

    python tools/settings_schema.py            print it
    python tools/settings_schema.py --write    update docs/settings.schema.json

The schema describes a cdk.json whose "context" holds the settings: editors that read "$schema" (VS Code, JetBrains)
then complete the keys, show each setting's description and default, and flag unknown keys and bad values while you
type. tests/core/test_settings_schema.py fails when the file differs from what this prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_PATH = ROOT / "docs" / "settings.schema.json"

from ray_efa.core.settings import context_json_schema  # noqa: E402


def render() -> str:
    return json.dumps(context_json_schema(), indent=2) + "\n"


def main() -> None:
    if "--write" in sys.argv:
        SCHEMA_PATH.write_text(render())
        print(f"wrote {SCHEMA_PATH.relative_to(ROOT)}")
    else:
        print(render(), end="")


if __name__ == "__main__":
    main()
