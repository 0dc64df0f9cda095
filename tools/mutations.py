"""The mutation check the project keeps (`make test-mutations`): each edit of MUTATIONS is a realistic bug in code a
torch upgrade or a refactor touches first, and each must make at least one of its tests fail.

    python tools/mutations.py              every mutation, one after another
    python tools/mutations.py NAME...      those named
    python tools/mutations.py --list       the names, files and tests

Each mutation is applied to a fresh temporary copy of the working tree (the files git tracks or would track, as they
are now, committed or not), never to the checkout; its tests run there (`python -m pytest -n 0 -x`, the copy's root
as the working folder, so the copy's code is what imports). A mutation is killed when pytest reports a failed test
(exit 1); it survives when its tests pass. An edit whose old text is not in its file exactly once, a copy that cannot
be made, or a pytest that stops for another reason (no test selected, a collection error) is an error, said as
such: the list cannot rot silently when the code it mutates moves. Exit 0 when every mutation is killed, 1 when one
survives, 2 on an error. docs/testing.md says what it runs, how long it takes and what it found.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, kw_only=True)
class Mutation:
    """One edit: in `file`, the text `old` (exactly once) becomes `new`; `tests` (pytest arguments) must fail."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    why: str


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        name="hsdp-fallback-shard-mesh",
        file="training/parallelize.py",
        old='mp["mesh"] = mesh["shard"] if own_all_reduce else mesh',
        new='mp["mesh"] = mesh["shard"] if plan.bf16_wire else mesh',
        tests=("tests/training/test_replica_all_reduce_hook.py", "-k", "falls_back"),
        why="the native-HSDP fallback shards 1-D over the node and drops every all-reduce across nodes",
    ),
    Mutation(
        name="stream-tie-default-stream",
        file="training/parallelize.py",
        old="tensor.record_stream(torch.cuda.current_stream(tensor.device))",
        new="tensor.record_stream(torch.cuda.default_stream(tensor.device))",
        tests=("tests/training/test_replica_all_reduce_hook.py", "-k", "keep_for_current_stream"),
        why="the hook's buffer is tied to the default stream, not the all-reduce stream it runs on",
    ),
    Mutation(
        name="stream-tie-no-op",
        file="training/parallelize.py",
        old="    if tensor.is_cuda:\n        tensor.record_stream(torch.cuda.current_stream(tensor.device))",
        new="    return",
        tests=("tests/training/test_replica_all_reduce_hook.py", "-k", "keep_for_current_stream"),
        why="keep_for_current_stream does nothing: a later layer's reduce-scatter may reuse the block",
    ),
    Mutation(
        name="held-past-the-last-micro-batch",
        file="training/train.py",
        old="set_hold_gathered(model, index < k - 1)",
        new="set_hold_gathered(model, index == k - 1)",
        tests=("tests/training/test_hold_gathered.py",),
        why="the gathered parameters outlive the step: the next step's forward runs on weights the optimizer never updated",
    ),
    Mutation(
        name="held-on-every-shard-group",
        file="training/parallelize.py",
        old="else _shard_ranks(plan) == 1",
        new="else True",
        tests=("tests/training/test_hold_gathered.py",),
        why="every rank holds the whole gathered model, where sharding it was the point (2 bytes a parameter per GPU)",
    ),
    Mutation(
        name="fp8-cast-every-micro-batch-when-held",
        file="training/parallelize.py",
        old="else hold or _shard_ranks(plan) > 1",
        new="else _shard_ranks(plan) > 1",
        tests=("tests/training/test_fp8.py", "-k", "one_rank or hsdp"),
        why="one GPU holds the gathered model for the step but casts its fp8 weights again in every micro-batch's "
        "forward (0.5% of the default step on an H100)",
    ),
    Mutation(
        name="fp8-evidence-rule-dropped",
        file="core/strategy.py",
        old='return ("bf16", "fp8") if gpu_constants.constants_for(gpu.name).fp8_evidenced else ("bf16",)',
        new='return ("bf16", "fp8")',
        tests=("tests/core/test_auto.py", "-k", "default_cluster"),
        why="precision auto takes fp8 on an assumed efficiency constant (the default 2 x g6.12xlarge)",
    ),
    Mutation(
        name="fused-clip-not-applied",
        file="training/train.py",
        old="optimizer.grad_scale = torch.clamp((whole + 1e-6) / grad_clip, min=1.0)",
        new="optimizer.grad_scale = None",
        tests=("tests/training/test_clip.py",),
        why="on GPU (fused AdamW) the gradients are never clipped: gradClip is reported but not applied",
    ),
    Mutation(
        name="one-rank-first-gradient-dropped",
        file="training/one_rank.py",
        old="fsdp_param.unsharded_accumulated_grad = sum_in_fp32(self.pending.pop(index), grad, self.fused)",
        new="fsdp_param.unsharded_accumulated_grad = grad.float()",
        tests=("tests/training/test_one_rank.py", "-k", "bit_for_bit"),
        why="on one GPU the first micro-batch's gradients are lost when the second arrives: half the step's gradient",
    ),
    Mutation(
        name="one-rank-replicated-group-taken",
        file="training/one_rank.py",
        old="and not isinstance(mesh, HSDPMeshInfo)",
        new="and True",
        tests=("tests/training/test_one_rank.py", "-k", "replicated"),
        why="HSDP with one GPU a node takes the one-rank path: gradients never cross the replicas",
    ),
    Mutation(
        name="loss-scale-rounded-to-bf16",
        file="training/loss.py",
        old="torch._foreach_mul_([grad_weight], grad_output)  #",
        new="torch._foreach_mul_([grad_weight], grad_output.to(torch.bfloat16))  #",
        tests=("tests/training/test_loss.py", "-k", "value_for_value"),
        why="the output projection's fp32 gradient scaled by 1/k rounded to bf16: every step's lm_head gradient off",
    ),
    Mutation(
        name="tokens-per-step-without-accumulation",
        file="training/train.py",
        old="tokens_per_step_per_device=t.micro_batch_size * t.seq_len * t.accumulation_steps,",
        new="tokens_per_step_per_device=t.micro_batch_size * t.seq_len,",
        tests=("tests/training/test_train_metrics.py", "-k", "plan_and_calibrate or hand_computed"),
        why="tokens/s and MFU counted for one micro-batch a step (32x too low on the default plan)",
    ),
    Mutation(
        name="mfu-flops-doubled",
        file="core/models.py",
        old="return 6 * self.matmul_parameters + 12 * self.q_width * 2 * self.attended_keys(seq_len)",
        new="return 12 * self.matmul_parameters + 12 * self.q_width * 2 * self.attended_keys(seq_len)",
        tests=("tests/training/test_train_metrics.py", "-k", "hand_computed"),
        why="FLOPs per token with 12N instead of 6N: MFU ~1.8x inflated",
    ),
    Mutation(
        name="qk-norms-uncounted",
        file="core/models.py",
        old="return linears + self.norms_per_layer * self.hidden_size + self.qk_norm_parameters",
        new="return linears + self.norms_per_layer * self.hidden_size",
        tests=("tests/core/test_models.py", "-k", "published_parameters"),
        why="Qwen3's and OLMo 2's q/k norms left out of the parameter count (and the memory plan)",
    ),
    Mutation(
        name="phi3-qkv-one-kv-wide",
        file="core/models.py",
        old='("qkv_proj", d, q + 2 * kv, False)',
        new='("qkv_proj", d, q + kv, False)',
        tests=("tests/core/test_models_meta.py", "-k", "phi"),
        why="Phi-3's fused qkv_proj counted one key/value width short of what transformers builds",
    ),
    Mutation(
        name="auto-checkpointing-skips-selective",
        file="core/strategy.py",
        old='CHECKPOINTING_CHOICES: tuple[bool | str, ...] = (False, "selective", True)',
        new="CHECKPOINTING_CHOICES: tuple[bool | str, ...] = (False, True)",
        tests=("tests/core/test_models.py", "-k", "least_recompute"),
        why="auto activationCheckpointing jumps from none to full, recomputing the whole forward where selective fits",
    ),
    Mutation(
        name="selective-keeps-only-the-input",
        file="core/models.py",
        old="return 2 * self.hidden_size + 2 * sum(n for _, _, n, _ in saved) + 2 * self.q_width",
        new="return 2 * self.hidden_size",
        tests=("tests/core/test_models.py", "-k", "torchtitan or selective"),
        why="selective checkpointing planned with full's memory: the saved products' outputs left out",
    ),
    Mutation(
        name="selective-compiled-keeps-unread-outputs",
        file="core/models.py",
        old="if compiled and self.model_type not in _POST_NORMS:",
        new="if False:",
        tests=("tests/core/test_memory_measured.py", "-k", "b16"),
        why="compiled selective checkpointing planned with down_proj's output, which no backward reads (+6%)",
    ),
    Mutation(
        name="recomputed-layer-beside-the-logits",
        file="core/memory.py",
        old="+ max(0.0, tokens * recomputed - _loss_chunk_bytes(p, tokens, t.loss_chunk, compiled=t.compile)),",
        new="+ tokens * recomputed,",
        tests=("tests/core/test_memory_measured.py", "-k", "b16"),
        why="the layer checkpointing recomputes planned beside the loss's logits, freed before it (b16 +8%)",
    ),
    Mutation(
        name="sliding-window-ignored",
        file="core/models.py",
        old="if kind == SLIDING_ATTENTION and window is not None and window < seq_len:",
        new="if False:",
        tests=("tests/core/test_models.py", "-k", "sliding_window"),
        why="Gemma 2's and Mistral's sliding-window layers charged full attention FLOPs",
    ),
    Mutation(
        name="save-counted-as-a-step",
        file="training/reporting.py",
        old="            self.restart_clock()  # the save is not a training step",
        new="            pass  # the save is not a training step",
        tests=("tests/training/test_reporting.py", "-k", "checkpoint_saves_seconds"),
        why="a checkpoint save's seconds land in the next step's time",
    ),
    Mutation(
        name="grad-norm-of-a-shard",
        file="training/reporting.py",
        old="grad_norm = grad_norm.full_tensor()",
        new="grad_norm = grad_norm.to_local()",
        tests=("tests/training/test_sharding.py", "-k", "reported_gradient_norm"),
        why="the reported gradient norm is this rank's shard's, not the model's",
    ),
    Mutation(
        name="evaluation-not-a-measure-step",
        file="training/reporting.py",
        old="if not self.is_measure_step(step, save=save or evaluate):",
        new="if not self.is_measure_step(step, save=save):",
        tests=("tests/training/test_reporting.py", "-k", "evaluation_due_between"),
        why="an evaluation due between measure steps (reportEvery > 1) is skipped",
    ),
    Mutation(
        name="fp8-over-the-whole-model",
        file="training/parallelize.py",
        old="convert_to_float8_training(\n        model.layers,",
        new="convert_to_float8_training(\n        model,",
        tests=("tests/training/test_fp8.py", "-k", "converts_the_decoder_layer"),
        why="fp8 converts the output projection too, not only the decoder layers' linears",
    ),
    Mutation(
        name="gate-protocol-lowercase-only",
        file="training/transport/lines.py",
        old="(?i:sendrecv|rdma) protocol",
        new="(?:sendrecv|rdma) protocol",
        tests=("tests/training/test_transport_fixtures.py", "-k", "rdma_protocol"),
        why="aws-ofi-nccl 1.18-1.21's 'Failed to initialize RDMA protocol' is judged a failed NCCL call",
    ),
    Mutation(
        name="runtime-error-is-a-lost-worker",
        file="training/failure_policy.py",
        old="return isinstance(error, (*_DIED, WorkerHealthCheckTimeoutError))",
        new="return isinstance(error, (*_DIED, WorkerHealthCheckTimeoutError, RuntimeError))",
        tests=("tests/training/test_failure_policy.py",),
        why="a RuntimeError of the code is retried as a lost worker",
    ),
    Mutation(
        name="lr-schedule-restarted-on-resume",
        file="training/train.py",
        old="lr = learning_rate(step, t)",
        new="lr = learning_rate(step - start, t)",
        tests=("tests/training/test_learning_rate.py", "-k", "resumed_loop"),
        why="a resumed run warms up again instead of going on with the schedule",
    ),
    Mutation(
        name="resume-order-depends-on-micro-batch",
        file="training/dataset.py",
        old="self.shard.iter_batches(batch_size=SHUFFLE_WINDOW,",
        new="self.shard.iter_batches(batch_size=16 * self.micro_batch,",
        tests=("tests/training/test_resume_shape.py", "-k", "exactly_once"),
        why="the rows' order follows the micro batch: a resume at another one trains some samples twice",
    ),
    Mutation(
        name="clip-computed-never-applied",
        file="training/train.py",
        old="norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n",
        new="norm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)\n",
        tests=("tests/training/test_train_loop.py", "-k", "clip_value"),
        why="gradClip's norm is computed and reported but never clips: AdamW's runs barely notice",
    ),
    Mutation(
        name="micro-batches-overlap-across-steps",
        file="training/train.py",
        old="batches = [data.batch((step - 1) * k + i) for i in range(1, k + 1)]",
        new="batches = [data.batch(step - 1 + i) for i in range(1, k + 1)]",
        tests=("tests/training/test_train_loop.py", "-k", "accumulation"),
        why="consecutive steps share k - 1 of their micro-batches at gradAccumulation k > 1 (random tokens)",
    ),
    Mutation(
        name="eval-loss-not-token-weighted",
        file="training/evaluate.py",
        old="total += torch.stack([loss.double() * n,",
        new="total += torch.stack([loss.double() * weight,",
        tests=("tests/training/test_evaluate.py", "-k", "every_held_out_token"),
        why="eval_loss sums the batches' mean losses over the tokens: about microBatch x seqLen times too small",
    ),
    Mutation(
        name="eval-loss-mean-of-batch-means",
        file="training/evaluate.py",
        old="n = weight * labels.numel()",
        new="n = weight",
        tests=("tests/training/test_evaluate.py", "-k", "every_held_out_token"),
        why="eval_loss is the mean of the batches' means: a short last batch weighs as much as a full one",
    ),
    Mutation(
        name="same-shuffle-every-epoch",
        file="training/dataset.py",
        old="np.random.default_rng([self.seed, self.epoch, window])",
        new="np.random.default_rng([self.seed, window])",
        tests=("tests/training/test_resume_shape.py", "-k", "order_of_its_own"),
        why="every epoch presents a rank's samples in the same order",
    ),
    Mutation(
        name="epoch-rollover-keeps-the-count",
        file="training/dataset.py",
        old="self.epoch, self.consumed = self.epoch + 1, 0",
        new="self.epoch, self.consumed = self.epoch + 1, self.consumed",
        tests=("tests/training/test_resume_shape.py", "-k", "rollover"),
        why="a checkpoint after an epoch's end records the whole last epoch as consumed in the new one: a resume "
        "skips it",
    ),
    Mutation(
        name="optimizer-state-not-restored",
        file="training/checkpoint.py",
        old="dcp.load(state, checkpoint_id=directory)",
        new='dcp.load({"model": model_state}, checkpoint_id=directory)',
        tests=("tests/training/test_checkpoint.py", "-k", "adamw_state"),
        why="a resumed run restores the weights but starts AdamW's moments and step count from zero",
    ),
    Mutation(
        name="resumed-first-step-not-measured",
        file="training/reporting.py",
        old="return save or step == self.meter.start_step + 1 or step % self.report_every == 0",
        new="return save or step == 1 or step % self.report_every == 0",
        tests=("tests/training/test_reporting.py", "-k", "resumed"),
        why="a resumed run's first step is no measure step: no progress line or report until reportEvery",
    ),
    Mutation(
        name="gate-provider-suffix-not-efa",
        file="training/transport/lines.py",
        old='"efa" if p.split(";")[0].lower() == "efa"',
        new='"efa" if p.lower() == "efa"',
        tests=("tests/training/test_transport_fixtures.py", "-k", "efa_provider_with_suffix"),
        why="a provider printed as efa;ofi_rxr (aws-ofi-nccl 1.7) makes a genuine EFA job FAIL provider-efa",
    ),
    Mutation(
        name="gate-folded-ranks-boundary",
        file="training/transport/verdict.py",
        old="if absent and len(absent) > folded:",
        new="if absent and len(absent) >= folded:",
        tests=("tests/training/test_transport_fixtures.py", "-k", "one_rank_folded"),
        why="a Ray driver log of one rank's lines [repeated 7x], seven ranks absent, is NO PROOF instead of PASS",
    ),
    Mutation(
        name="gate-one-host-overrides-nccl",
        file="training/transport/verdict.py",
        old="if multi is None and given == 1 and not report.multi_node:",
        new="if multi is None and given == 1:",
        tests=("tests/training/test_transport_fixtures.py", "-k", "hosts"),
        why="--hosts 1 with NCCL's nNodes 2 (pods on one machine) makes a rank that chose Socket single-node",
    ),
    Mutation(
        name="nccl-debug-subsys-without-net",
        file="core/settings/checks.py",
        old="if missing := [name for name in GATE_LOG_SUBSYSTEMS if name not in kept]:",
        new='if missing := [name for name in ("INIT",) if name not in kept]:',
        tests=("tests/training/test_transport_network.py", "-k", "nccl_debug_subsys"),
        why="an NCCL_DEBUG_SUBSYS without NET passes the settings check",
    ),
    Mutation(
        name="lean-layer-for-a-sliding-mistral",
        file="training/lean_block.py",
        old='return bool(getattr(config, "sliding_window", None)) and getattr(config, "use_sliding_window", True)',
        new="return False",
        tests=("tests/training/test_families.py", "-k", "lean_computes and mistral-sliding"),
        why="the lean layer (full causal attention) stands in for a Mistral whose layers attend over a sliding window",
    ),
    Mutation(
        name="lean-layer-drops-qwen3-head-norms",
        file="training/lean_block.py",
        old="            q, k = self.q_norm(q), self.k_norm(k)\n",
        new="            pass\n",
        tests=("tests/training/test_families.py", "-k", "lean_computes and qwen3"),
        why="the lean layer runs Qwen3 without its per-head q/k RMSNorms before RoPE",
    ),
    Mutation(
        name="netpol-denies-all-egress",
        file="k8s/network_policy.py",
        old='policy_types=["Ingress"], ingress=ingress',
        new='policy_types=["Ingress", "Egress"], ingress=ingress',
        tests=("tests/cluster/test_network_policy.py", "-k", "dns_s3"),
        why="the Ray pods' policy lists Egress with no egress rules: on EKS no DNS, S3 or PyPI, no Ray cluster",
    ),
    Mutation(
        name="kubelet-reserve-first-core-40m",
        file="core/catalog/__init__.py",
        old="_KUBE_RESERVED_CPU_SHARES = (60, 10, 5, 5)",
        new="_KUBE_RESERVED_CPU_SHARES = (40, 10, 5, 5)",
        tests=("tests/core/test_kubelet_reserve.py",),
        why="the catalog reserves 40m of the first core, not EKS's 60m: pods sized for CPU a real node does not offer",
    ),
    Mutation(
        name="submit-field-validation-dropped",
        file="ops/submit.py",
        old='STRICT = "Strict"',
        new="STRICT = None",
        tests=("tests/cluster/test_submit.py", "-k", "unknown_field"),
        why="submit's writes send no fieldValidation: the API server stores an object without a misspelt field",
    ),
    Mutation(
        name="researcher-role-without-pod-logs",
        file="k8s/researcher_rbac.py",
        old='    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},\n',
        new="",
        tests=("tests/cluster/test_rbac.py", "-k", "reads_the_submitters_log"),
        why="the researcher Role cannot get pods/log: `ray-efa follow` is refused the submitter's log",
    ),
)


def _tree_files(root: Path) -> list[str]:
    """The working tree's files git tracks or would track (not ignored), as they are now."""
    listed = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    return sorted(
        {name for name in listed.split("\0") if name and ((root / name).is_file() or (root / name).is_symlink())}
    )


def _copy_tree(root: Path, files: list[str], into: Path) -> None:
    for name in files:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (root / name).is_symlink():  # ray_efa/core -> ../core: the copy's ray_efa is the copy's folders
            target.symlink_to(os.readlink(root / name))
        else:
            shutil.copy2(root / name, target)
    for link in (".venv", "node_modules"):  # the installed trees, shared (the copy's own code is what imports)
        if (root / link).exists():
            (into / link).symlink_to((root / link).resolve())


class MutationError(Exception):
    """A mutation that cannot be checked: its edit no longer applies, or its tests did not run."""


def apply(mutation: Mutation, tree: Path) -> None:
    """Make the edit in the copy `tree`; MutationError unless the old text is in the file exactly once."""
    path = tree / mutation.file
    if not path.is_file():
        raise MutationError(f"{mutation.name}: {mutation.file} does not exist")
    text = path.read_text(encoding="utf-8")
    count = text.count(mutation.old)
    if count != 1:
        raise MutationError(
            f"{mutation.name}: the old text is in {mutation.file} {count} times, not once (the code "
            f"moved: update tools/mutations.py): {mutation.old!r}"
        )
    path.write_text(text.replace(mutation.old, mutation.new), encoding="utf-8")


def check(mutation: Mutation, files: list[str]) -> tuple[str, float, str]:
    """("killed" | "survived", seconds, the tests' last lines) of one mutation on a fresh copy of the tree."""
    with tempfile.TemporaryDirectory(prefix=f"mutation-{mutation.name}-") as folder:
        tree = Path(folder)
        _copy_tree(ROOT, files, tree)
        apply(mutation, tree)
        started = time.perf_counter()
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "0", "-x", "-q", "-p", "no:cacheprovider", *mutation.tests],
            cwd=tree,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
    tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-3:])
    if run.returncode == 1:
        return "killed", seconds, tail
    if run.returncode == 0:
        return "survived", seconds, tail
    raise MutationError(
        f"{mutation.name}: pytest stopped with exit {run.returncode} (no test ran, or collection "
        f"failed), so the mutation was not checked:\n{tail}"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to check (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MUTATIONS}
    if unknown := [n for n in args.names if n not in by_name]:
        parser.error(f"no mutation named {', '.join(unknown)}; --list shows them")
    chosen = [by_name[n] for n in args.names] or list(MUTATIONS)
    if args.list:
        for m in chosen:
            print(f"{m.name}\n    {m.file}: {m.why}\n    pytest {' '.join(m.tests)}")
        return 0
    files = _tree_files(ROOT)
    survived, errors, total = [], [], time.perf_counter()
    for m in chosen:
        try:
            outcome, seconds, tail = check(m, files)
        except MutationError as error:
            errors.append(m.name)
            print(f"ERROR     {m.name}: {error}", flush=True)
            continue
        print(f"{outcome:<9} {m.name} ({seconds:.0f} s): {m.why}", flush=True)
        if outcome == "survived":
            survived.append(m.name)
            print(f"          its tests passed: pytest {' '.join(m.tests)}\n          {tail}", flush=True)
    killed = len(chosen) - len(survived) - len(errors)
    print(
        f"\n{killed} of {len(chosen)} mutations killed, {len(survived)} survived, {len(errors)} errors "
        f"({time.perf_counter() - total:.0f} s)"
    )
    return 2 if errors else (1 if survived else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
