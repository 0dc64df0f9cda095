"""Draw the chart of docs/performance.md: `ray-efa plan --plot` of the project's default settings, into
docs/scaling-default.png.

    python tools/scaling_chart.py

It draws what `ray-efa plan --json` prints as "scaling" (settings resolved from this repository's cdk.json, as `plan`
run here resolves them) with ops.plots.scaling_chart, the function behind `plan --plot`. Run it after a change to
core.perf, core.memory, core.cost or the chart, and commit the picture. (`plan --plot` itself refuses to write into
docs/, a source folder; this tool is how the repository's own picture is made.)
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

from PIL import Image
from PIL.PngImagePlugin import PngInfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ray_efa.core.context import parse_overrides, resolve_settings  # noqa: E402
from ray_efa.ops.plan import build_plan  # noqa: E402
from ray_efa.ops.plots import png_bytes, scaling_chart  # noqa: E402

OUT = ROOT / "docs" / "scaling-default.png"


def main() -> int:
    os.chdir(ROOT)  # the project's cdk.json, as `ray-efa plan` here reads it
    plan = build_plan(resolve_settings(parse_overrides([])))
    png = png_bytes(scaling_chart(plan.as_dict()["scaling"]), command="plan --plot (tools/scaling_chart.py)", dpi=90)
    # a 256-colour palette keeps the committed picture small (a chart has few colours); Software text kept
    image = Image.open(io.BytesIO(png))
    info = PngInfo()
    info.add_text("Software", image.info.get("Software", "ray-efa"))
    buffer = io.BytesIO()
    image.convert("RGB").quantize(colors=256).save(buffer, format="PNG", optimize=True, pnginfo=info)
    OUT.write_bytes(buffer.getvalue())
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
