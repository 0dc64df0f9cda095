"""GPU throughput of the train function, against two baselines, in one process on the same GPUs.

    python bench/throughput.py --out DIR [-c key=value ...] [--runs project,reference,aws_sample@6,...]

Runs, each on every visible GPU, Qwen2.5-1.5B architecture, random tokens, bf16:
  project     the project's train_func through Ray Train TorchTrainer (FSDP2, the settings' levers)
  reference   the same FSDP2 step (the same model, parallelize(), optimizer, loss and batches) in a plain torchrun
              loop, no Ray: the reference for Ray Train's overhead
  eager       the project's train_func through Ray Train with every lever off (no compile, unchunked loss): the
              plain FSDP2 step, and the loss reference that the optimized step must match on the same seed
  aws_sample  the AWS reference sample's approach: ray.train.torch.prepare_model(parallel_strategy="fsdp"), FSDP1
              with size-based auto-wrap at 1e7 parameters, bf16 model weights, the model's own full-logits loss
A run may name its micro-batch, `aws_sample@6` or `project@4`, to sweep each approach's batch up to its
out-of-memory point: the ratios then compare each approach at its best batch and at every batch both ran.
Every run is timed by training.metrics.Meter (steady state: the first report interval, with compilation, is left
out). Prints the versions, one JSON line per run (tokens/s per GPU, MFU against 989 TFLOP/s under both FLOP
conventions, step time, peak memory, the memory planner's estimate), then the ratios, and writes bench.jsonl into --out.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def namespace_root() -> str | None:
    """A folder that makes `import ray_efa.core` work for this process and its workers, or None where it already
    does (an install, or the checkout's root on PYTHONPATH: its ray_efa/ links to the top-level folders). Elsewhere
    (a copy that lost the links), builds /tmp/ray-efa-ns/ray_efa from ray_efa/__init__.py and links to the folders."""
    try:
        import ray_efa.core  # noqa: F401

        return None
    except ImportError:
        pass
    package = Path("/tmp/ray-efa-ns/ray_efa")
    package.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "ray_efa" / "__init__.py", package / "__init__.py")
    for name in ("core", "training"):
        link = package / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    sys.path.insert(0, str(package.parent))
    return str(package.parent)


NAMESPACE = namespace_root()

from ray_efa.core.context import parse_overrides  # noqa: E402
from ray_efa.core.settings import Settings  # noqa: E402

# The benchmark's own defaults; -c overrides them. Sized for 2 x H200 (141 GB each).
BENCH_CONTEXT = {
    "model": "qwen2.5-1.5b",
    "steps": 20,
    "seqLen": 4096,
    "microBatch": 8,
    "warmupSteps": 5,
    "reportEvery": 5,
    "checkpointEvery": 0,
    "preflight": False,
    "compile": True,
    "lossChunkSize": 4096,
    "learningRate": 3e-4,
    # The instance type only feeds the memory planner's capacity; the world size is the visible GPUs.
    "gpuInstanceType": "p5en.48xlarge",
    "gpuNodeCount": 1,
}
PEAK_TFLOPS = 989.0  # H100/H200 dense bf16 (NVIDIA data sheet, without sparsity)
# train_func saves a DCP checkpoint at its last step (18 GB for 1.5B with AdamW): keep it in memory, off the clock.
STORAGE = "/dev/shm/ray-efa-bench" if os.path.isdir("/dev/shm") else "/tmp/ray-efa-bench"


def steady_metrics(summary: dict, settings: Settings, world: int) -> dict:
    """The comparable numbers of one run, from a training.metrics summary."""
    t = settings.training
    per_gpu = summary["throughput/tokens_per_s_per_device"]
    return {
        "tokens_per_s_per_gpu": round(per_gpu, 1),
        # 12 L d S attention FLOPs per token (the project's convention, training.metrics) and causal 6 L d S
        "mfu_pct": round(100 * per_gpu * t.preset.flops_per_token(t.seq_len) / (PEAK_TFLOPS * 1e12), 2),
        "mfu_causal_pct": round(
            100
            * per_gpu
            * (t.preset.flops_per_token(t.seq_len) - 6 * t.preset.num_hidden_layers * t.preset.hidden_size * t.seq_len)
            / (PEAK_TFLOPS * 1e12),
            2,
        ),
        "step_time_s": round(summary["time/step_s"], 4),
        "peak_allocated_gib": round(summary.get("memory/peak_allocated_gib", float("nan")), 2),
        "peak_reserved_gib": round(summary.get("memory/peak_reserved_gib", float("nan")), 2),
        "first_loss": summary["first_loss"],
        "final_loss": summary["final_loss"],
        "world_size": world,
    }


def planner_estimate(settings: Settings, world: int) -> float:
    """core.memory's estimate of peak GiB per GPU for this run's world size (None if the planner cannot say)."""
    from ray_efa.core import catalog, memory

    return round(memory.estimate_for(settings.training, world_size=world, gpu=catalog.GPUS["H200"]).total_gib, 2)


def _trainer(loop, settings: Settings, world: int, name: str, gpu: bool):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    return TorchTrainer(
        loop,
        train_loop_config={"settings": settings.to_context()},
        torch_config=TorchConfig(backend="nccl" if gpu else "gloo"),
        scaling_config=ScalingConfig(num_workers=world, use_gpu=gpu),
        run_config=RunConfig(name=f"{name}-{time.strftime('%H%M%S')}", storage_path=STORAGE),
    )


def _summary(result) -> dict:
    """The summary a train function returned, from the trainer's Result (return_value is None when it returned none)."""
    if result.return_value is None:
        raise RuntimeError("the train function returned no summary")
    return result.return_value["summary"]


def run_project(settings: Settings, world: int, name: str, gpu: bool) -> dict:
    from ray_efa.training.train import train_func

    return _summary(_trainer(train_func, settings, world, name, gpu).fit())


def aws_sample_loop(config: dict) -> dict:
    """The AWS sample's train loop: prepare_model(fsdp) on a bf16 model, size-based wrap, HF loss on full logits."""
    import ray.train
    import ray.train.torch
    import torch
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
    from transformers import Qwen2ForCausalLM

    from ray_efa.core.settings import Settings
    from ray_efa.training.data import TokenBatches
    from ray_efa.training.metrics import Meter, Throughput, peak_flops_per_s
    from ray_efa.training.model import qwen2_config

    settings = Settings.from_context(config["settings"])
    t = settings.training
    context = ray.train.get_context()
    device = ray.train.torch.get_device()
    torch.manual_seed(t.seed)
    # functools.wraps on PreTrainedModel.to: pyright reads the dtype as `self` (see training/model.py).
    model = Qwen2ForCausalLM(qwen2_config(t.preset)).to(torch.bfloat16)  # pyright: ignore[reportArgumentType]
    model = ray.train.torch.prepare_model(
        model,
        parallel_strategy="fsdp",
        parallel_strategy_kwargs={
            "auto_wrap_policy": functools.partial(size_based_auto_wrap_policy, min_num_params=int(1e7))
        },
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.learning_rate)
    data = TokenBatches(
        vocab_size=t.preset.vocab_size,
        seq_len=t.seq_len,
        micro_batch=t.micro_batch_size,
        seed=t.seed,
        rank=context.get_world_rank(),
    )
    meter = Meter(
        throughput=Throughput(
            tokens_per_step_per_device=t.micro_batch_size * t.seq_len,
            world_size=context.get_world_size(),
            flops_per_token=t.preset.flops_per_token(t.seq_len),
            peak_flops_per_s=peak_flops_per_s(device),
        ),
        total_steps=t.steps,
        start_step=0,
        device=device,
    )
    model.train()
    for step in range(1, t.steps + 1):
        inputs, labels = data.batch(step)
        # HF shifts labels itself; pass inputs as labels so the targets are the next tokens, as in the sample.
        loss = model(input_ids=inputs.to(device), labels=inputs.to(device)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 1 or step % t.report_every == 0 or step == t.steps:
            meter.measure(step, loss.item())
    return {"summary": meter.summary()}


def run_aws_sample(settings: Settings, world: int, name: str, gpu: bool) -> dict:
    return _summary(_trainer(aws_sample_loop, settings, world, name, gpu).fit())


def run_reference(settings: Settings, world: int, out: Path, gpu: bool) -> dict:
    """torchrun bench/fsdp_reference.py: the same step without Ray."""
    settings_file = out / "reference-settings.json"
    summary_file = out / "reference-summary.json"
    settings_file.write_text(settings.to_json())
    subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={world}",
            str(ROOT / "bench" / "fsdp_reference.py"),
            str(settings_file),
            str(summary_file),
            "nccl" if gpu else "gloo",
        ],
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (NAMESPACE, os.environ.get("PYTHONPATH")) if p)},
    )
    return json.loads(summary_file.read_text())


def _sweep_ratios(results: dict[str, dict]) -> dict[str, float]:
    """The project's step (through Ray, `project`, or without, `reference`) against aws_sample at each one's best
    batch and at every batch both ran: a batch sweep's comparison."""
    by = {
        name: {v["batch"]: v["tokens_per_s_per_gpu"] for k, v in results.items() if k.partition("@")[0] == name}
        for name in ("project", "reference", "aws_sample")
    }
    out: dict[str, float] = {}
    if not by["aws_sample"]:
        return out
    aws_batch, aws_best = max(by["aws_sample"].items(), key=lambda kv: kv[1])
    out["best_aws_sample_batch"] = aws_batch
    for name in ("project", "reference"):
        if not by[name]:
            continue
        batch, best = max(by[name].items(), key=lambda kv: kv[1])
        out[f"best_{name}_batch"] = batch
        out[f"{name}_vs_aws_sample_best_to_best"] = round(best / aws_best, 3)
        for common in sorted(by[name].keys() & by["aws_sample"].keys()):
            out[f"{name}_vs_aws_sample_at_batch_{common}"] = round(by[name][common] / by["aws_sample"][common], 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--runs", default="project,reference,eager,aws_sample")
    parser.add_argument(
        "--cpu", action="store_true", help="smoke-test the plumbing on 2 CPU workers (tiny model, gloo)"
    )
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    # Ray puts the driver's working directory first on its workers' sys.path: in the repository root, the bare
    # ray_efa/ folder there (no core/ or training/ inside) would hide the real package from them.
    os.chdir(args.out)

    import ray
    import torch
    import torch.cuda.nccl  # not imported by `import torch`; used for the NCCL version

    gpu = not args.cpu
    world = torch.cuda.device_count() if gpu else 2
    smoke = (
        {}
        if gpu
        else {"model": "tiny", "seqLen": 128, "microBatch": 2, "steps": 10, "compile": False, "lossChunkSize": 64}
    )
    settings = Settings.from_context({**BENCH_CONTEXT, **smoke, **parse_overrides(args.context)})
    # The plain step (no compile, full logits) on the same batches: the loss reference. At the optimized run's batch its
    # fp32 logits alone would not fit, so it recomputes activations, which changes the speed, not the arithmetic.
    eager = settings.replace(compile=False, lossChunkSize=0, activationCheckpointing=True)
    # The AWS sample's approach at the largest batch it fits (full fp32 logits of 151,936 tokens).
    aws_sample = settings.replace(compile=False, lossChunkSize=0, microBatch=4)
    plans = {
        "project": (settings, lambda s: run_project(s, world, "project", gpu)),
        "reference": (settings, lambda s: run_reference(s, world, args.out, gpu)),
        "eager": (eager, lambda s: run_project(s, world, "eager", gpu)),
        "aws_sample": (aws_sample, lambda s: run_aws_sample(s, world, "aws_sample", gpu)),
    }
    versions = {
        "versions": {
            "torch": torch.__version__,
            "ray": ray.__version__,
            "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(0) if gpu else "cpu",
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if gpu else None,
            "gpus": world,
        }
    }
    import transformers

    versions["versions"]["transformers"] = transformers.__version__
    print(json.dumps(versions), flush=True)
    # Workers inherit the driver's PYTHONPATH plus the namespace root (ray_efa.core, ray_efa.training).
    pythonpath = os.pathsep.join(p for p in (NAMESPACE, os.environ.get("PYTHONPATH")) if p)
    ray.init(include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    results: dict[str, dict] = {}
    with (args.out / "bench.jsonl").open("w") as sink:
        sink.write(json.dumps(versions) + "\n")
        for label in args.runs.split(","):
            name, _, batch = label.partition("@")
            run_settings, runner = plans[name]
            if batch:
                run_settings = run_settings.replace(microBatch=int(batch))
            started = time.time()
            try:
                summary = runner(run_settings)
                summary = _summary(summary) if hasattr(summary, "return_value") else summary
            except Exception as error:  # one failed run must not hide the others' numbers
                line = {
                    "run": label,
                    "batch": run_settings.training.micro_batch,
                    "error": f"{type(error).__name__}: {error}"[:2000],
                }
            else:
                t = run_settings.training
                line = {
                    "run": label,
                    "batch": t.micro_batch_size,
                    "grad_accumulation": t.accumulation_steps,
                    "sharding": t.sharding,
                    "grad_reduce_dtype": t.grad_reduce_dtype,
                    "report_every": t.report_every,
                    "seq_len": t.seq_len,
                    "compile": t.compile,
                    "loss_chunk_size": t.loss_chunk_size,
                    **steady_metrics(summary, run_settings, world),
                    "planner_total_gib": planner_estimate(run_settings, world),
                    "wall_s": round(time.time() - started, 1),
                }
                results[label] = line
            print(json.dumps(line), flush=True)
            sink.write(json.dumps(line) + "\n")
            sink.flush()
            shutil.rmtree(STORAGE, ignore_errors=True)
        ratios = {}
        tps = {k: v["tokens_per_s_per_gpu"] for k, v in results.items()}
        ratios.update(_sweep_ratios(results))
        if {"project", "aws_sample"} <= tps.keys():
            ratios["project_vs_aws_sample"] = round(tps["project"] / tps["aws_sample"], 3)
        if {"project", "reference"} <= tps.keys():
            ratios["ray_overhead_pct"] = round(100 * (1 - tps["project"] / tps["reference"]), 2)
        if {"project", "eager"} <= tps.keys():
            ratios["project_vs_eager"] = round(tps["project"] / tps["eager"], 3)
        if {"project", "eager"} <= results.keys():
            first = results["project"]["first_loss"], results["eager"]["first_loss"]
            ratios["first_loss_rel_diff"] = round(abs(first[0] - first[1]) / abs(first[1]), 5)
        line = {"ratios": ratios}
        print(json.dumps(line), flush=True)
        sink.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
