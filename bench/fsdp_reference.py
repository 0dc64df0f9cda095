"""The project's FSDP2 training step in a plain torchrun loop, without Ray: the reference for Ray Train's overhead.

    torchrun --standalone --nproc_per_node=N bench/fsdp_reference.py SETTINGS_JSON SUMMARY_JSON [nccl|gloo]

The same model, parallelize(), optimizer, learning-rate schedule, loss and batches as training/train.py, and the
same training.metrics.Meter timing (report steps only), so the two runs differ only in what Ray adds.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from ray_efa.core.settings import Settings
from ray_efa.training.data import TokenBatches
from ray_efa.training.metrics import Meter, Throughput, peak_flops_per_s
from ray_efa.training.model import build_model
from ray_efa.training.parallelize import ParallelPlan, mixed_precision_policy, parallelize
from ray_efa.training.train import build_optimizer, learning_rate, train_step


def main(settings_path: str, summary_path: str, backend: str = "nccl") -> None:
    settings = Settings.from_json(Path(settings_path).read_text())
    t = settings.training
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)

    model = build_model(t.preset, seed=t.seed, device=device, loss_chunk_size=t.loss_chunk)
    model = parallelize(
        model,
        ParallelPlan(
            activation_checkpointing=t.checkpointing, compile=t.compile, mixed_precision=mixed_precision_policy(device)
        ),
    )
    optimizer = build_optimizer(model, t, device)
    data = TokenBatches(
        vocab_size=t.preset.vocab_size,
        seq_len=t.seq_len,
        micro_batch=t.micro_batch_size,
        seed=t.seed,
        rank=rank,
        pool_size=t.data_pool_size,
    )
    meter = Meter(
        throughput=Throughput(
            tokens_per_step_per_device=t.micro_batch_size * t.seq_len,
            world_size=world,
            flops_per_token=t.preset.flops_per_token(t.seq_len),
            peak_flops_per_s=peak_flops_per_s(device),
        ),
        total_steps=t.steps,
        start_step=0,
        device=device,
    )
    model.train()
    for step in range(1, t.steps + 1):
        loss, _ = train_step(
            model, optimizer, data.batch(step), lr=learning_rate(step, t), grad_clip=t.grad_clip, device=device
        )
        if step == 1 or step % t.report_every == 0 or step == t.steps:
            mean = loss.detach().float().clone()
            dist.all_reduce(mean)
            meter.measure(step, (mean / world).item())
    if rank == 0:
        Path(summary_path).write_text(json.dumps(meter.summary()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
