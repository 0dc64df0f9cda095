"""Train functions "of yours" for the real local runs (tests/training/test_train_ray.py), imported by name in the
workers and the controller from the checkout (on the local cluster's PYTHONPATH: training.driver.init_ray)."""

from __future__ import annotations

import os
from typing import Any


class TwoPartError(Exception):
    """An exception Ray cannot rebuild on the controller: unpickling calls TwoPartError(message), without `code`."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def fit_and_raise_two_part_error(config: dict[str, Any]) -> None:
    """Leave a mark per call (rank, process; the sharding and reduction dtype it was handed), then raise."""
    import ray.train

    settings = config["settings"]
    rank = ray.train.get_context().get_world_rank()
    with open(os.path.join(config["marks"], f"rank{rank}-pid{os.getpid()}"), "w") as mark:
        mark.write(f"{settings['sharding']} {settings['gradReduceDtype']}")
    raise TwoPartError("the data is bad", 7)
