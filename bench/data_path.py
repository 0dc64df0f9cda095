"""What the Ray Data input path costs a fine-tune: tokens/s of train_func on random tokens against the same run fed by
`dataset` through Ray Data (training.dataset), on the visible GPUs, everything made here (no network, no Hub).

    python bench/data_path.py --out DIR [--work DIR] [-c key=value ...] [--runs random,text,ids] [--data-cpus 1] [--cpu]

Made in --work first (default /tmp/ray-efa-data-path: gigabytes, kept out of --out): a BPE tokenizer (`tokenizers`, vocabulary 8,192, or the model's if smaller) trained on the license texts installed with the
Python packages, saved with a random-initialized Qwen2.5-1.5B (save_pretrained, bf16) as the fine-tune's modelPath;
parquet files of those texts (paragraphs in seeded orders, repeated until one epoch holds every step's tokens), and
the same text pre-tokenized into input_ids rows. Then, each through Ray Train's TorchTrainer exactly as the driver
builds it (training.inputs.driver_datasets, training.dataset.data_config), the same modelPath and settings:

  random  dataset unset: the job's random tokens (the baseline)
  text    dataset = the text parquet: read, tokenized and packed by Ray Data tasks while training runs
  ids     dataset = the input_ids parquet: read and packed, no tokenization

Ray Data gets --data-cpus CPUs (the worker takes the rest): the cluster keeps DATA_CPUS_PER_NODE = 4 per node
(training.driver), about 0.5 per GPU on 8-GPU nodes, so 1 CPU for one GPU is the stricter case. Each run's steady
state comes from training.metrics (first report interval, with compilation, left out); reportEvery 10 keeps Ray
Train's per-report cost (docs/BENCHMARKS.md) out of the comparison. Also measured: the text pipeline alone (Ray Data
tokenizing and packing on --data-cpus CPUs, no training), in tokens/s, the headroom over what training consumes.
Prints one JSON line per run and the ratios (data_cost_pct: 100 x (1 - data / random)); writes DIR/bench.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import site
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import NAMESPACE, STORAGE, steady_metrics  # noqa: E402  (also makes ray_efa importable)

from ray_efa.core.context import parse_overrides  # noqa: E402
from ray_efa.core.settings import Settings  # noqa: E402

BENCH_CONTEXT = {
    "model": "qwen2.5-1.5b",
    "steps": 30,
    "seqLen": 4096,
    "microBatch": 4,
    "warmupSteps": 5,
    "reportEvery": 10,
    "checkpointEvery": 0,
    "preflight": False,
    "compile": True,
    "lossChunkSize": 4096,
    "learningRate": 3e-4,
    "gpuInstanceType": "p5en.48xlarge",
    "gpuNodeCount": 1,
}
CPU_SMOKE = {
    "model": "tiny",
    "seqLen": 128,
    "microBatch": 2,
    "steps": 12,
    "reportEvery": 4,
    "compile": False,
    "lossChunkSize": 64,
}
TOKENIZER_VOCAB = 8192
EOS = "<|endoftext|>"


def license_paragraphs() -> list[str]:
    """Real English: the paragraphs of every license file of the installed packages, sorted, deduplicated."""
    roots = {Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]}
    files = sorted({f for root in roots if root.is_dir() for f in root.glob("*.dist-info/**/LICENSE*") if f.is_file()})
    seen: dict[str, None] = {}
    for path in files:
        for block in path.read_text(encoding="utf-8", errors="ignore").split("\n\n"):
            text = " ".join(block.split())
            if len(text) >= 80:
                seen.setdefault(text)
    return list(seen)


def make_model(folder: Path, paragraphs: list[str], settings: Settings) -> None:
    """save_pretrained of a random-initialized model of the settings' preset, with a tokenizer trained here."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM

    from ray_efa.training.model import qwen2_config

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        paragraphs,
        trainer=trainers.BpeTrainer(
            vocab_size=min(TOKENIZER_VOCAB, settings.training.preset.vocab_size),
            special_tokens=[EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS).save_pretrained(folder)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(qwen2_config(settings.training.preset)).to(torch.bfloat16)  # pyright: ignore[reportArgumentType]
    model.save_pretrained(folder)


def make_data(
    out: Path, paragraphs: list[str], tokens_needed: int, model_folder: Path, row: int, files: int = 8
) -> tuple[Path, Path, int]:
    """Text parquet files holding at least `tokens_needed` tokens, and the same text as input_ids rows of `row`."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_folder / "tokenizer.json"))
    eos = tokenizer.token_to_id(EOS)
    per_copy = sum(len(e.ids) + 1 for e in tokenizer.encode_batch(paragraphs))
    copies = max(1, -(-tokens_needed // per_copy))
    rng = np.random.default_rng(0)
    documents = [paragraphs[i] for _ in range(copies) for i in rng.permutation(len(paragraphs))]
    text_dir, ids_dir = out / "data-text", out / "data-ids"
    for folder in (text_dir, ids_dir):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    for index in range(files):
        part = documents[index::files]
        pq.write_table(pa.table({"text": part}), text_dir / f"part-{index:05d}.parquet")
        stream = np.concatenate([np.asarray(e.ids + [eos], dtype=np.int32) for e in tokenizer.encode_batch(part)])
        rows = stream[: stream.size // row * row].reshape(-1, row)
        pq.write_table(
            pa.table({"input_ids": pa.array(list(rows), type=pa.list_(pa.int32()))}),
            ids_dir / f"part-{index:05d}.parquet",
        )
    return text_dir, ids_dir, per_copy * copies


def pipeline_tokens_per_s(settings: Settings) -> dict:
    """The train split's pipeline alone (read, tokenize, pack on the Ray Data CPUs): packed tokens per second."""
    from ray_efa.training.dataset import ROW_COLUMN
    from ray_efa.training.inputs import driver_datasets

    dataset = driver_datasets(settings)["train"]
    started, tokens = time.perf_counter(), 0
    for batch in dataset.iter_batches(batch_size=64, batch_format="numpy"):
        tokens += batch[ROW_COLUMN].size
    seconds = time.perf_counter() - started
    return {
        "run": "text-pipeline-alone",
        "tokens": tokens,
        "seconds": round(seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def run_fit(settings: Settings, world: int, gpu: bool, worker_cpus: float, name: str) -> dict:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from ray_efa.training.dataset import data_config
    from ray_efa.training.inputs import check_inputs, driver_datasets
    from ray_efa.training.train import train_func

    check_inputs(settings)  # as the driver does before Ray Train starts
    datasets: dict[str, Any] | None = driver_datasets(settings) if settings.training.dataset else None
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"settings": settings.to_context()},
        torch_config=TorchConfig(backend="nccl" if gpu else "gloo"),
        scaling_config=ScalingConfig(
            num_workers=world, use_gpu=gpu, resources_per_worker={"CPU": worker_cpus, **({"GPU": 1} if gpu else {})}
        ),
        run_config=RunConfig(name=f"{name}-{time.strftime('%H%M%S')}", storage_path=STORAGE),
        datasets=datasets,
        dataset_config=data_config() if datasets else None,
    )
    result = trainer.fit().return_value
    assert result is not None, "train_func returned nothing"
    return result["summary"]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/ray-efa-data-path"),
        help="where the model and the data sets are made (not --out: they are gigabytes)",
    )
    parser.add_argument("--runs", default="random,text,ids")
    parser.add_argument("--data-cpus", type=int, default=1, help="CPUs Ray Data may use (default 1)")
    parser.add_argument("--cpu", action="store_true", help="smoke-test on 2 CPU workers (tiny model, gloo)")
    args = parser.parse_args()
    args.out, args.work = args.out.resolve(), args.work.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    os.chdir(args.out)  # not the repository root: its bare ray_efa/ would shadow the package on the workers

    import ray
    import torch

    gpu = not args.cpu
    world = torch.cuda.device_count() if gpu else 2
    base = Settings.from_context({**BENCH_CONTEXT, **({} if gpu else CPU_SMOKE), **parse_overrides(args.context)})
    t = base.training
    started = time.time()
    paragraphs = license_paragraphs()
    model_folder = args.work / "model"
    shutil.rmtree(model_folder, ignore_errors=True)
    make_model(model_folder, paragraphs, base)
    # One epoch holds every step's micro-batches (x 1.5): no epoch restart inside the measured steps.
    needed = int(1.5 * t.steps * t.accumulation_steps * t.micro_batch_size * world * (t.seq_len + 1))
    text_dir, ids_dir, tokens = make_data(args.work, paragraphs, needed, model_folder, row=t.seq_len + 1)
    made = {
        "made": {
            "paragraphs": len(paragraphs),
            "text_tokens": tokens,
            "model": str(model_folder),
            "seconds": round(time.time() - started, 1),
        }
    }
    versions = {
        "versions": {
            "torch": torch.__version__,
            "ray": ray.__version__,
            "gpus": world,
            "device": torch.cuda.get_device_name(0) if gpu else "cpu",
            "data_cpus": args.data_cpus,
        }
    }
    print(json.dumps(versions), json.dumps(made), sep="\n", flush=True)

    total_cpus = os.cpu_count() or 2
    worker_cpus = max(1, (total_cpus - args.data_cpus) // world) if gpu else 1
    pythonpath = os.pathsep.join(p for p in (NAMESPACE, os.environ.get("PYTHONPATH")) if p)
    ray.init(
        include_dashboard=False,
        num_cpus=world * worker_cpus + args.data_cpus,
        runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
    )
    with_model = base.replace(modelPath=str(model_folder))
    plans = {
        "random": with_model,
        "text": with_model.replace(dataset=str(text_dir)),
        "ids": with_model.replace(dataset=str(ids_dir)),
    }
    results: dict[str, dict] = {}
    with (args.out / "bench.jsonl").open("w") as sink:
        for line in (versions, made):
            sink.write(json.dumps(line) + "\n")
        for name in args.runs.split(","):
            run_started = time.time()
            try:
                summary = run_fit(plans[name], world, gpu, worker_cpus, name)
            except Exception as error:  # one failed run must not hide the others' numbers
                line = {"run": name, "error": f"{type(error).__name__}: {error}"[:2000]}
            else:
                line = {
                    "run": name,
                    "batch": t.micro_batch_size,
                    "seq_len": t.seq_len,
                    "steps": t.steps,
                    **steady_metrics(summary, plans[name], world),
                    "wall_s": round(time.time() - run_started, 1),
                }
                results[name] = line
            print(json.dumps(line), flush=True)
            sink.write(json.dumps(line) + "\n")
            sink.flush()
            shutil.rmtree(STORAGE, ignore_errors=True)
        alone = pipeline_tokens_per_s(plans["text"])
        print(json.dumps(alone), flush=True)
        sink.write(json.dumps(alone) + "\n")
        tps = {k: v["tokens_per_s_per_gpu"] for k, v in results.items()}
        ratios = {
            f"{name}_cost_pct": round(100 * (1 - tps[name] / tps["random"]), 2)
            for name in ("text", "ids")
            if {name, "random"} <= tps.keys()
        }
        if "random" in tps:
            ratios["pipeline_headroom_x"] = round(alone["tokens_per_s"] / (tps["random"] * world), 2)
        print(json.dumps({"ratios": ratios}), flush=True)
        sink.write(json.dumps({"ratios": ratios}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
