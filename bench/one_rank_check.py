"""training.one_rank on CUDA with NCCL: the one-rank post-backward's gradients against FSDP2's own, bit for bit.

    python bench/one_rank_check.py --out DIR [--model qwen2.5-0.5b] [--micro-batch 2] [--seq-len 1024]

One process on ONE GPU, a one-rank NCCL process group (FSDP2's one-rank branch, as `ray-efa train` runs on a single
GPU): the job's model and parallelize() with bf16 parameters and fp32 reduction, then one step's accumulated backward as
train_step runs it (set_gradient_sync and set_hold_gathered per micro-batch, no synchronization between them), for
1, 2 and 4 micro-batches in bf16 and 2 with fp8 decoder linears (the fp8 all-gather). Each case builds the model from
the same seed three times: FSDP2's post-backward (the reference), FSDP2's again (the control: the step is
deterministic; attention runs its math kernel, the rest under torch.use_deterministic_algorithms), and
OneRankPostBackward with the fused one-pass sum (the compiled kernel the job uses on a GPU). The layers are not
compiled, so the comparison is of the post-backward alone.

DIR/one-rank-check.json: per case, whether the control and ours are bitwise equal to the reference, the relative L2
difference of all gradients, and how many parameters differ. Exit status 0 when every control and every one of ours
is bitwise equal to its reference, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from ray_efa.core.models import model_preset
from ray_efa.training import one_rank
from ray_efa.training import parallelize as par
from ray_efa.training.data import TokenBatches
from ray_efa.training.model import build_model

CASES = (("bf16", 1), ("bf16", 2), ("bf16", 4), ("fp8", 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--micro-batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=1024)
    args = parser.parse_args()

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("nccl", init_method=f"file://{tmp}/store", rank=0, world_size=1, device_id=device)
        cases = [_case(args, device, precision, accumulation) for precision, accumulation in CASES]
        dist.destroy_process_group()
    ok = all(c["control"]["bitwise_equal"] and c["ours"]["bitwise_equal"] for c in cases)
    result = {
        "torch": torch.__version__,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),  # pyright: ignore[reportAttributeAccessIssue]
        "gpu": torch.cuda.get_device_name(0),
        "model": args.model,
        "micro_batch": args.micro_batch,
        "seq_len": args.seq_len,
        "seconds": round(time.monotonic() - started, 1),
        "cases": cases,
        "verdict": "pass" if ok else "fail",
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "one-rank-check.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    print(f"wrote {path}")
    sys.exit(0 if ok else 1)


def _case(args, device: torch.device, precision: str, accumulation: int) -> dict:
    preset = model_preset(args.model)
    data = TokenBatches(
        vocab_size=preset.vocab_size, seq_len=args.seq_len, micro_batch=args.micro_batch * accumulation, seed=0, rank=0
    )
    inputs, labels = (x.to(device) for x in data.batch(1))
    batches = list(zip(inputs.chunk(accumulation), labels.chunk(accumulation)))
    sums = [0]
    real_sum = one_rank.sum_in_fp32

    def counted(a, b, fused):
        sums[0] += 1
        assert fused
        return real_sum(a, b, fused)

    def gradients(ours: bool) -> tuple[dict[str, torch.Tensor], int]:
        plan = par.ParallelPlan(
            mixed_precision=par.mixed_precision_policy(device), fp8=precision == "fp8", one_rank_gradients=False
        )
        model = par.parallelize(build_model(preset, seed=0, device=device, loss_chunk_size=1024), plan)
        units = one_rank.use_one_rank_gradients(model, fused=True) if ours else 0
        one_rank.sum_in_fp32 = counted  # type: ignore[assignment]
        try:
            with sdpa_kernel(SDPBackend.MATH):  # flash / cuDNN attention's backward is not deterministic
                for index, (x, y) in enumerate(batches):  # as train_step: no synchronization between micro-batches
                    par.set_gradient_sync(model, index == accumulation - 1)
                    par.set_hold_gathered(model, index < accumulation - 1)
                    (model(x, y) / accumulation).backward()
            torch.cuda.synchronize()
        finally:
            one_rank.sum_in_fp32 = real_sum  # type: ignore[assignment]
        out = {}
        for name, p in model.named_parameters():
            assert isinstance(p.grad, DTensor) and p.grad.dtype == torch.float32, (name, type(p.grad))
            out[name] = p.grad.to_local().detach().clone()
        del model
        torch.cuda.empty_cache()
        return out, units

    reference, _ = gradients(False)
    control, _ = gradients(False)
    sums[0] = 0
    ours, units = gradients(True)
    case = {
        "precision": precision,
        "accumulation": accumulation,
        "units": units,
        "fused_sums": sums[0],
        "control": _compare(control, reference),
        "ours": _compare(ours, reference),
    }
    print(
        f"{precision} x{accumulation}: {units} units, {sums[0]} fused sums; control equal "
        f"{case['control']['bitwise_equal']}, ours equal {case['ours']['bitwise_equal']} "
        f"(relative difference {case['ours']['relative_difference']:.3g})",
        flush=True,
    )
    return case


def _compare(run: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> dict:
    num = sum(float((run[n] - reference[n]).pow(2).sum()) for n in reference)
    den = sum(float(reference[n].pow(2).sum()) for n in reference)
    return {
        "bitwise_equal": all(torch.equal(run[n], reference[n]) for n in reference),
        "relative_difference": (num / den) ** 0.5,
        "parameters_differing": sum(1 for n in reference if not torch.equal(run[n], reference[n])),
    }


if __name__ == "__main__":
    main()
