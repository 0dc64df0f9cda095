"""bench/step_profile.py's parts that run without a GPU: the variant words and the replay of the allocator's history
that says what is allocated at the peak (`variants --memory`). The timings themselves are a GPU's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.load_script import load_script

step_profile = load_script(Path(__file__).resolve().parents[2] / "bench" / "step_profile.py")
GIB = 2**30


def _frames(*where: tuple[str, int, str]) -> list[dict]:
    return [{"filename": f, "line": line, "name": name} for f, line, name in where]


def test_variant_words_set_the_plan_and_an_unknown_one_is_named():
    v = step_profile.parse_variant("hold+fp8ag+cdt+nor1g+full+chunk16384")
    assert v["one_rank_gradients"] is False and v["checkpointing"] == "full" and v["loss_chunk_override"] == 16384
    assert step_profile.parse_variant("hold")["one_rank_gradients"] is None  # neither word: the plan's default
    assert step_profile.parse_variant("r1g+sel")["one_rank_gradients"] is True
    assert step_profile.parse_variant("r1g+sel")["checkpointing"] == "selective"
    with pytest.raises(SystemExit, match="unknown r2g; allowed"):
        step_profile.parse_variant("hold+r2g")


def test_the_peak_is_replayed_from_what_was_allocated_before_the_recording():
    model = _frames(("/site/torch/utils/x.py", 1, "helper"), ("/site/ray_efa/training/model.py", 10, "build"))
    loss = _frames(("/site/torch/nn/functional.py", 5, "linear"), ("/site/ray_efa/training/loss.py", 3, "chunk"))
    events = [
        # a block from before the recording freed (requested, then completed: counted once)
        {"action": "free_requested", "addr": 99, "size": GIB // 2},
        {"action": "free_completed", "addr": 99, "size": GIB // 2},
        {"action": "alloc", "addr": 1, "size": GIB, "frames": model},
        {"action": "alloc", "addr": 2, "size": 2 * GIB, "frames": loss},  # the peak: 1.5 + 1 + 2
        {"action": "free_requested", "addr": 2, "size": 2 * GIB},
        {"action": "alloc", "addr": 2, "size": GIB // 4, "frames": loss},  # the address again, a new block
    ]
    peak = step_profile.peak_breakdown({"device_traces": [events]}, allocated_before=2 * GIB)
    assert peak["peak_gib"] == 4.5 and peak["peak_event"] == 3 and peak["blocks"] == 2
    assert peak["by_project_frame"] == [
        ["loss.py:3 chunk", 2.0],
        ["(allocated before the recording)", 1.5],
        ["model.py:10 build", 1.0],
    ]
    # the innermost frame outside torch's helpers: functional.py's linear for the loss, the project's for the model
    assert ["functional.py:5 linear", 2.0] in peak["by_inner_frame"]
    assert ["model.py:10 build", 1.0] in peak["by_inner_frame"]
