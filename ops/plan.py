"""What `cdk deploy` would build and run from the resolved settings: nothing is synthesized, nothing reaches AWS.

`build_plan(resolved)` derives every number from core (settings and where each came from, the instance catalog, the
EFA launch-template interfaces, the pod resources, the memory planner, the hourly cost, the stack names) into a
frozen `Plan`; `render_plan(plan, console)` prints it as rich tables; `Plan.as_dict()` is the --json form.
`make demo` prints the same summary through these two functions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_efa.core import catalog
from ray_efa.core.context import ResolvedSettings
from ray_efa.core.cost import HourlyCost, hourly_cost, retained_after_destroy
from ray_efa.core.memory import MemoryEstimate
from ray_efa.core.models import parameters_label
from ray_efa.core.perf import Calibration
from ray_efa.core.preflight_floor import PreflightFloor, preflight_floor
from ray_efa.core.settings import Settings, SettingsError, setting_keys
from ray_efa.core.strategy import check_fits, choose, estimate, global_batch, performance, resolve

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["SettingRow", "PodResources", "Plan", "build_plan", "render_plan", "OWN_FUNCTION_NOTE"]

OWN_FUNCTION_NOTE = (
    "the planner's memory and step model is the built-in train function's (its own model, FSDP2), "
    "not a trainFunction of your own, which builds what it builds; the cluster, pods, EFA, cost and "
    "preflight floor are the job's"
)
"""What plan says instead of the memory, step and scaling predictions when trainFunction is your own."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SettingRow:
    key: str
    section: str
    value: Any
    source: str
    """default, ~/.cdk.json, cdk.context.json, cdk.json, -c, or another named layer."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PodResources:
    """Requests (= limits) of one Ray pod."""

    role: str
    cpu: int
    memory_gib: int
    gpus: int = 0
    efa: int = 0
    shm_gib: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    settings: Settings
    rows: tuple[SettingRow, ...]
    gpu_instance: catalog.GpuInstanceType
    system_instance: catalog.InstanceType
    availability_zone: str
    placement_group: bool
    efa_interfaces: tuple[catalog.NetworkInterface, ...]
    """The GPU launch template's network interfaces (security groups are added by infra/)."""
    use_device_rdma: bool
    allreduce_floor_gbps: float
    allreduce_floor_source: str
    """"setting" (preflightMinBusbwGbps), "catalog" (EFA) or "socket model" (TCP): preflight.source says more."""
    pods: tuple[PodResources, ...]
    """The Ray worker pod (one per GPU node), then the Ray head (on a system node)."""
    memory: MemoryEstimate | None
    """None with the GPU node group scaled to zero (gpuNodeCount 0): no GPU, no training plan."""
    memory_advice: str | None
    """When the estimate does not fit: which settings to change (core.strategy.check_fits)."""
    cost: HourlyCost
    performance: dict[str, dict[str, Any]]
    """core.perf's predicted step for each network (efa, tcp): the strategy the job would run and every strategy."""
    stacks: tuple[str, str]
    """(cluster stack, GPU stack)."""
    teardown: tuple[str, ...]
    retained_after_destroy: tuple[str, ...] = ()
    """What both `cdk destroy` leave in the account, each with its monthly cost (core.cost.retained_after_destroy)."""
    scaling: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The predicted scaling curve over 1..N nodes (ops.scaling): what `plan --plot` draws."""
    preflight: PreflightFloor | None = None
    """The all-reduce floor the job runs with (core.preflight_floor)."""

    @property
    def judged(self) -> bool:
        """Whether the memory and step predictions describe the job: the built-in train function's model, not a
        trainFunction of your own (which builds what it builds)."""
        return self.settings.training.builtin

    @property
    def fits(self) -> bool:
        """Whether the training run fits GPU memory; scaled to zero there is no run, and nothing to refuse."""
        return self.memory is None or self.memory.fits or not self.judged

    @property
    def scaled_to_zero(self) -> bool:
        return self.settings.nodes.scaled_to_zero

    @property
    def decided(self) -> Settings:
        """The settings with every auto decided (core.strategy.resolve): the shape and precision the job runs."""
        return resolve(self.settings)

    def _decided(self) -> dict[str, Any]:
        if not self.judged:  # the built-in's levers, decided for its model: nothing your function is held to
            return {
                "precision": None,
                "micro_batch": None,
                "seq_len": None,
                "grad_accumulation": None,
                "activation_checkpointing": None,
                "loss_chunk_size": None,
                "global_batch_tokens": None,
                "achieved_global_batch_tokens": None,
                "global_batch": None,
            }
        t = self.decided.training
        split = None if self.scaled_to_zero else global_batch(self.settings).as_dict()
        return {
            "precision": t.precision,
            "micro_batch": t.micro_batch,
            "seq_len": t.seq_len,
            "grad_accumulation": t.grad_accumulation,
            "activation_checkpointing": t.activation_checkpointing,
            "loss_chunk_size": t.loss_chunk_size,
            "global_batch_tokens": t.global_batch_tokens,
            "achieved_global_batch_tokens": None if split is None else split["tokens"],
            "global_batch": split,
        }

    def as_dict(self) -> dict[str, Any]:
        s = self.settings
        return {
            "settings": {r.key: {"value": r.value, "source": r.source, "section": r.section} for r in self.rows},
            "deployment": {
                "region": s.cluster.region,
                "availability_zone": self.availability_zone,
                "cluster_stack": self.stacks[0],
                "gpu_stack": self.stacks[1],
                "gpu_nodes": s.nodes.gpu_node_count,
                "world_size": s.world_size,
                "placement_group": self.placement_group,
                "capacity_reservation_id": s.nodes.capacity_reservation_id,
                "network": s.workload.network,
                "sharding": None if s.nodes.scaled_to_zero or not self.judged else choose(s).strategy,
                "grad_reduce_dtype": None if s.nodes.scaled_to_zero or not self.judged else choose(s).reduce_dtype,
                **self._decided(),
                # what trains: the architecture (modelPath's config.json, or the preset) and on what data; a function
                # of your own builds its own model, which the plan does not know
                "model_architecture": s.training.preset.name if self.judged else None,
                "model_parameters": s.training.preset.num_parameters if self.judged else None,
                "model_type": s.training.preset.model_type if self.judged else None,
                "dataset": s.training.dataset,
                "train_function": s.training.train_function,
                "step_model": None if self.judged else OWN_FUNCTION_NOTE,
                "scaled_to_zero": self.scaled_to_zero,
                "scale_to_zero_command": s.scale_commands[0],
                "come_back_command": s.scale_commands[1],
            },
            "instances": {
                "gpu": dataclasses.asdict(self.gpu_instance),
                "system": dataclasses.asdict(self.system_instance),
            },
            "efa": {
                # snake_case like every key of the CLI's JSON (the launch template's own names are in CamelCase)
                "interfaces": [
                    {
                        "network_card_index": i["NetworkCardIndex"],
                        "device_index": i["DeviceIndex"],
                        "interface_type": i["InterfaceType"],
                    }
                    for i in self.efa_interfaces
                ],
                "fi_efa_use_device_rdma": "1" if self.use_device_rdma else "0",
                "allreduce_floor_gbps": self.allreduce_floor_gbps,
                "allreduce_floor_source": self.allreduce_floor_source,
            },
            "pods": {p.role: dataclasses.asdict(p) for p in self.pods},
            "memory_per_gpu": None
            if self.memory is None
            else {
                **dataclasses.asdict(self.memory),
                "fits": self.memory.fits,
                "headroom_gib": self.memory.headroom_gib,
                "advice": self.memory_advice,
                "judged": self.judged,
            },
            "usd_per_hour": {
                **{k: v for k, v in dataclasses.asdict(self.cost).items() if k != "gpu_price"},
                "total": self.cost.total,
                "after_destroying_gpu_stack": self.cost.without_gpu_stack,
                "gpu_price": None if self.cost.gpu_price is None else self.cost.gpu_price.as_dict(),
            },
            "performance": self.performance,
            "teardown": list(self.teardown),
            "retained_after_destroy": list(self.retained_after_destroy),
            "scaling": self.scaling,
            "preflight": None if self.preflight is None else self.preflight.as_dict(),
        }


def _rows(resolved: ResolvedSettings) -> tuple[SettingRow, ...]:
    values = resolved.settings.to_context()
    return tuple(
        SettingRow(key=key, section=section, value=values[key], source=resolved.sources.get(key, "default"))
        for key, (section, _) in setting_keys().items()
    )


def _memory_advice(settings: Settings, memory: MemoryEstimate | None) -> str | None:
    if memory is None or memory.fits:
        return None
    try:
        check_fits(settings)
    except SettingsError as error:
        return "; ".join(p.message for p in error.problems)
    return None


def build_plan(
    resolved: ResolvedSettings, calibration: Calibration | None = None, *, max_nodes: int | None = None
) -> Plan:
    """Everything `cdk deploy` would create and run, derived from the resolved settings (pure; no I/O); the scaling
    curve runs to `max_nodes` (default ops.scaling.default_max_nodes).

    calibration: constants measured on a finished run (core.calibrate), used by the step-time predictions."""
    from ray_efa.ops.scaling import scaling

    s = resolved.settings
    gpu, system = s.nodes.gpu_instance, s.nodes.system_instance
    worker = catalog.worker_pod_resources(gpu)
    head_cpu, head_memory = catalog.head_pod_resources(system)
    floor = preflight_floor(s)
    judged = s.training.builtin  # a function of your own: no built-in model's memory, step or curve
    memory = None if s.nodes.scaled_to_zero or not judged else estimate(s)
    return Plan(
        settings=s,
        rows=_rows(resolved),
        gpu_instance=gpu,
        system_instance=system,
        availability_zone=s.gpu_availability_zone,
        placement_group=s.nodes.use_placement_group,
        efa_interfaces=tuple(catalog.efa_network_interfaces(gpu)),
        use_device_rdma=catalog.use_device_rdma(gpu),
        allreduce_floor_gbps=floor.floor_gb_s,
        allreduce_floor_source=(
            "setting"
            if s.workload.preflight_min_busbw_gbps is not None
            else "catalog"
            if floor.network == "efa"
            else "socket model"
        ),
        preflight=floor,
        pods=(
            PodResources(
                role="worker",
                cpu=worker.cpu,
                memory_gib=worker.memory_gib,
                gpus=worker.gpus,
                efa=worker.efa,
                shm_gib=worker.shm_gib,
            ),
            PodResources(role="head", cpu=head_cpu, memory_gib=head_memory),
        ),
        memory=memory,
        memory_advice=_memory_advice(s, memory),
        cost=hourly_cost(s),
        performance=performance(s, calibration) if judged else {},
        stacks=(s.cluster_stack_name, s.gpu_stack_name),
        teardown=s.teardown_commands,
        retained_after_destroy=retained_after_destroy(s),
        scaling=scaling(s, max_nodes=max_nodes) if judged else {},
    )


# -- rendering ------------------------------------------------------------------------------------------------------


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    if isinstance(value, dict):  # a node selector, as -c takes it
        return ",".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)


def _usd(amount: float) -> str:
    return f"${amount:,.3f}"  # three decimals: a NAT gateway costs $0.045


def _folding(table_class):
    """rich's Table whose columns wrap (fold) rather than cut with an ellipsis: at 80 columns (CI logs) every value
    stays whole, a long one on several lines."""

    class FoldingTable(table_class):
        def add_column(self, *args, **kwargs):
            kwargs.setdefault("overflow", "fold")
            return super().add_column(*args, **kwargs)

    return FoldingTable


def answer_lines(plan: Plan) -> list[str]:
    """The plan's answer in a few lines of at most 80 columns, what `plan` prints first: the nodes, what they cost,
    how fast the job is predicted to train and whether it fits GPU memory."""
    s = plan.settings
    gpu, nodes = plan.gpu_instance, s.nodes.gpu_node_count
    c = plan.cost
    lines = [f"Plan: {nodes} x {gpu.name} ({s.world_size} x {gpu.gpu.name}), {s.cluster.region}, {s.workload.network}"]
    priced = "" if c.gpu_price is None or c.gpu_price.recorded else " (GPU price NOT recorded there)"
    lines.append(f"  cost: {_usd(c.total)}/h running, {_usd(c.without_gpu_stack)}/h scaled to zero{priced}")
    if plan.scaled_to_zero:
        lines.append(f"  training: none (gpuNodeCount 0); back with `{s.scale_commands[1]}`")
    elif not plan.judged:
        lines.append("  speed, memory: not predicted for a trainFunction of your own")
    else:
        chosen = plan.performance.get(s.workload.network) or {}
        tokens = chosen.get("tokens_per_s") or 0.0
        lines.append(
            f"  speed: {tokens:,.0f} tokens/s predicted ({chosen.get('step_time_s', 0.0):.2f} s a step, "
            f"{chosen.get('strategy', '?')})"
        )
        if tokens:
            lines.append(f"  {_usd(c.total / (tokens * 3600) * 1e6)} per million tokens")
        memory = plan.memory
        if memory is not None:
            lines.append(
                f"  memory: {memory.total_gib:.1f} of {memory.capacity_gib:.1f} GiB per GPU: "
                + ("fits" if memory.fits else "DOES NOT FIT (exit 1)")
            )
    lines.append("  --settings: every setting and its source; --json: everything")
    return lines


def render_plan(plan: Plan, console: Console, *, settings_table: bool = False) -> None:
    """Print the plan: the answer first (answer_lines), then rich tables: deployment, instances, EFA, pods, memory,
    step, cost, teardown; with `settings_table` every setting and its source last.

    Every table stays whole at 80 columns: long values wrap, and the instance table has one column per role
    rather than one per attribute.
    """
    s = plan.settings
    for line in answer_lines(plan):
        console.print(line, highlight=False)
    for render in (_render_deployment, _render_instances, _render_efa, _render_pods):
        render(plan, console)
    if plan.scaled_to_zero:
        console.print(
            f"No training plan: gpuNodeCount is 0 (the GPU node group scaled to zero, both stacks kept, the "
            f"job not applied). Come back with `{s.scale_commands[1]}`.",
            highlight=False,
        )
    elif not plan.judged:
        console.print(
            f"memory per GPU, step time and scaling curve: not predicted: {OWN_FUNCTION_NOTE}", highlight=False
        )
    else:
        _render_memory(plan, console)
        _render_performance(plan, console)
    _render_cost(plan, console)
    if settings_table:
        _render_settings(plan, console)


def _render_settings(plan: Plan, console: Console) -> None:
    """Every setting, its value and where it came from (a value not the default in bold)."""
    from rich.table import Table as RichTable

    Table = _folding(RichTable)
    settings = Table(
        title="Settings",
        caption="source: default, ~/.cdk.json, cdk.context.json, cdk.json or -c (later wins, as in the CDK CLI)",
    )
    for column in ("section", "key", "value", "source"):
        settings.add_column(column)
    previous = None
    for r in plan.rows:
        style = None if r.source == "default" else "bold"
        settings.add_row(r.section if r.section != previous else "", r.key, _value(r.value), r.source, style=style)
        previous = r.section
    console.print(settings)


def _render_deployment(plan: Plan, console: Console) -> None:
    """Where the stacks put what: region and AZ, nodes, placement, reservation, network, model and data."""
    from rich.table import Table as RichTable

    Table = _folding(RichTable)
    s = plan.settings
    gpu, system = plan.gpu_instance, plan.system_instance
    deployment = Table(title="Deployment", show_header=False)
    deployment.add_column("what")
    deployment.add_column("value")
    for what, value in (
        ("stacks", f"{plan.stacks[0]} (VPC, EKS, system nodes, charts), {plan.stacks[1]} (GPU node group)"),
        ("region / GPU AZ", f"{s.cluster.region} / {plan.availability_zone}"),
        (
            "GPU nodes",
            f"0 x {gpu.name}: scaled to zero, no job applied; come back with `{s.scale_commands[1]}`"
            if plan.scaled_to_zero
            else f"{s.nodes.gpu_node_count} x {gpu.name} = {s.world_size} x {gpu.gpu.name} (world size {s.world_size})",
        ),
        ("system nodes", f"{s.nodes.system_node_count} x {system.name}"),
        ("placement group", "cluster strategy" if plan.placement_group else "none"),
        ("capacity reservation", s.nodes.capacity_reservation_id or "none (On-Demand capacity)"),
        ("network", s.workload.network),
        *(
            (
                (
                    "model",
                    f"{s.training.preset.name}, {parameters_label(s.training.preset.num_parameters)}"
                    + ("" if s.training.model_path else " (random initialization)"),
                ),
                ("data", s.training.dataset or "random tokens"),
            )
            if plan.judged
            else (("trainFunction", f"{s.training.train_function} (your own: its model and data are its own)"),)
        ),
    ):
        deployment.add_row(what, value)
    console.print(deployment)


def _render_instances(plan: Plan, console: Console) -> None:
    """The GPU worker and system instance types side by side (one column per role)."""
    from rich.table import Table as RichTable

    Table = _folding(RichTable)
    gpu, system = plan.gpu_instance, plan.system_instance
    instances = Table(title="Instances")
    for column in ("", "GPU worker", "system"):
        instances.add_column(column)
    for what, value in (
        ("type", lambda r: r.name),
        ("GPUs", lambda r: f"{r.gpus} x {r.gpu.name}" if r.gpu else "-"),
        ("GPU memory", lambda r: f"{r.gpu.memory_gib:g} GiB" if r.gpu else "-"),
        ("vCPUs", lambda r: str(r.vcpus)),
        ("memory", lambda r: f"{r.memory_gib} GiB"),
        ("EFA interfaces", lambda r: str(r.efa_interfaces)),
        ("GPUDirect RDMA", lambda r: "yes" if r.gpudirect_rdma else "no"),
        ("network", lambda r: f"{r.network_gbps} Gbit/s" if r.network_gbps else "-"),
        ("USD/h each", lambda r: _usd(r.usd_per_hour)),
    ):
        instances.add_row(what, value(gpu), value(system))
    console.print(instances)


def _render_efa(plan: Plan, console: Console) -> None:
    """The launch template's EFA interfaces, with the device-RDMA setting and the all-reduce floor."""
    from rich.table import Table as RichTable

    Table = _folding(RichTable)
    s = plan.settings
    efa = Table(
        title=f"EFA interfaces of the GPU launch template ({len(plan.efa_interfaces)})",
        caption=f"FI_EFA_USE_DEVICE_RDMA={'1' if plan.use_device_rdma else '0'}; all-reduce floor "
        f"{plan.allreduce_floor_gbps:g} GB/s at 1 GiB over {s.workload.network} "
        f"({plan.preflight.source if plan.preflight else plan.allreduce_floor_source})",
    )
    for column in ("NetworkCardIndex", "DeviceIndex", "InterfaceType"):  # the launch template's field names
        efa.add_column(column)
    for interface in plan.efa_interfaces:
        efa.add_row(str(interface["NetworkCardIndex"]), str(interface["DeviceIndex"]), str(interface["InterfaceType"]))
    console.print(efa)


def _render_pods(plan: Plan, console: Console) -> None:
    """The Ray pods' requests (= limits)."""
    from rich.table import Table as RichTable

    Table = _folding(RichTable)
    pods = Table(title="Ray pods (requests = limits)")
    for column in ("pod", "cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa", "/dev/shm"):
        pods.add_column(column)
    for p in plan.pods:
        pods.add_row(
            p.role, str(p.cpu), f"{p.memory_gib} GiB", str(p.gpus), str(p.efa), f"{p.shm_gib} GiB" if p.shm_gib else "-"
        )
    console.print(pods)


def _render_memory(plan: Plan, console: Console) -> None:
    from rich.table import Table as RichTable

    Table = _folding(RichTable)
    m = plan.memory
    s = plan.settings
    t = plan.decided.training
    assert m is not None  # render_plan says why there is no plan at zero GPU nodes
    memory = Table(
        title="Memory per GPU",
        caption=f"{s.training.preset.name}, microBatch {t.micro_batch} x seqLen {t.seq_len}, "
        f"FSDP2 over {m.world_size} GPUs",
    )
    memory.add_column("part")
    memory.add_column("GiB", justify="right")
    rows = m.breakdown()
    for part, gib in rows[:-1]:
        memory.add_row(part, f"{gib:.2f}")
    part, gib = rows[-1]
    memory.add_row(part, f"{gib:.2f}", style="bold", end_section=True)
    memory.add_row(f"capacity of one {m.gpu}", f"{m.capacity_gib:.2f}")
    verdict = "[green]fits[/]" if m.fits else "[red]does NOT fit[/]"
    memory.add_row(verdict, f"{m.headroom_gib:+.2f}")
    console.print(memory)
    if plan.memory_advice:
        console.print(f"[red]memory:[/] {plan.memory_advice}", highlight=False)


def _render_cost(plan: Plan, console: Console) -> None:
    """USD per hour by item, and the teardown order."""
    from rich.table import Table as RichTable

    Table = _folding(RichTable)
    s = plan.settings
    gpu, system = s.nodes.gpu_instance, s.nodes.system_instance
    c = plan.cost
    price = c.gpu_price
    if price is None or (price.recorded and price.option == "on-demand"):
        priced = f"GPU nodes at {s.cluster.region}'s On-Demand list price"
    elif price.recorded:
        priced = f"GPU nodes at {s.cluster.region}'s Capacity Block rate (no On-Demand price recorded there)"
    else:
        priced = f"GPU nodes: NO price recorded for {gpu.name} in {s.cluster.region}: {price.source}"
    cost = Table(
        title="USD per hour",
        caption=f"{priced}; the rest at us-east-2's list prices; an estimate; excludes "
        "data transfer, NAT data processing, EBS and S3",
    )
    cost.add_column("item")
    cost.add_column("USD/h", justify="right")
    nat = 0 if s.cluster.vpc_id else s.cluster.nat_gateways
    for item, amount in (
        (f"GPU nodes ({s.nodes.gpu_node_count} x {gpu.name})", c.gpu_nodes),
        (f"system nodes ({s.nodes.system_node_count} x {system.name})", c.system_nodes),
        ("EKS control plane", c.control_plane),
        (f"NAT gateways ({nat})" if nat else "NAT gateways (existing VPC: not ours)", c.nat_gateways),
    ):
        cost.add_row(item, _usd(amount))
    cost.add_row("total", _usd(c.total), style="bold", end_section=True)
    cost.add_row(f"after `cdk destroy {plan.stacks[1]}`", _usd(c.without_gpu_stack))
    if not plan.scaled_to_zero:
        cost.add_row("scaled to zero (gpuNodeCount=0, both stacks kept)", _usd(c.without_gpu_stack))
    console.print(cost)

    teardown = Table(
        title="Teardown, in order", caption="the GPU stack first, alone: it stops the GPU bill", show_header=False
    )
    teardown.add_column("step")
    teardown.add_column("command")
    for step, command in enumerate(plan.teardown, start=1):
        teardown.add_row(str(step), command)
    teardown.add_row("left", "; ".join(plan.retained_after_destroy) or "nothing")
    console.print(teardown)


_BOUND = {"network": "net", "intra-node link": "intra", "compute": "compute"}


def _render_performance(plan: Plan, console: Console) -> None:
    """The predicted step (core.perf) on EFA and on TCP: one row per network and strategy, the job's choice in bold."""
    from rich.table import Table as RichTable

    Table = _folding(RichTable)  # whole at 80 columns: short headers, values wrap rather than cut

    s = plan.settings
    t = plan.decided.training
    table = Table(
        title="Predicted step (core.perf)",
        caption=f"{s.training.preset.name}, {t.micro_batch} x {t.seq_len} tokens x gradAccumulation {t.grad_accumulation} per GPU, "
        f"{t.precision}; red: gradients on the wire between nodes (gradReduceDtype {t.grad_reduce_dtype}); "
        f"net s: busiest link (compute in --json); tok/s per GPU; * what the job runs (sharding {t.sharding}); GiB per GPU, ✗ does not fit memory; "
        "MFU % with 6N + 12 L d S / causal 6N + 6 L d S FLOPs per token. "
        + (
            f"Calibrated by {plan.performance['efa']['calibration']}."
            if plan.performance["efa"].get("calibration")
            else "A model calibrated on H200: a lead, not a measurement"
        ),
    )
    for column in ("net", "shard", "red", "step s", "net s", "tok/s", "MFU %", "bound", "GiB"):
        table.add_column(column, justify="left" if column in ("net", "shard", "red", "bound") else "right")
    for net, prediction in plan.performance.items():
        for strategy, row in prediction["strategies"].items():
            chosen = strategy == prediction["strategy"]
            table.add_row(
                net,
                strategy + ("*" if chosen else ""),
                row["reduce_dtype"],
                f"{row['step_time_s']:.2f}",
                f"{row['network_s']:.2f}",
                f"{row['tokens_per_s_per_gpu']:,.0f}",
                f"{100 * row['mfu']:.1f}/{100 * row['mfu_causal']:.1f}",
                _BOUND.get(row["bottleneck"], row["bottleneck"]),
                f"{row['memory_gib']:.1f}" + ("" if row["fits"] else " ✗"),
                style="bold" if chosen else None,
            )
    console.print(table)
    constants = plan.performance["efa"].get("constants") or {}
    by_source: dict[tuple[object, object], list[str]] = {}  # constants of one source said once, with it
    for name, c in constants.items():
        by_source.setdefault((c["status"], c["source"]), []).append(f"{name.replace('_', ' ')} {c['value']:g}")
    console.print(
        "step-model constants: "
        + "; ".join(f"{', '.join(names)} ({status}: {source})" for (status, source), names in by_source.items()),
        highlight=False,
    )
    split = global_batch(s)
    console.print(
        f"global batch: {split.tokens:,} tokens = microBatch {split.micro_batch} x seqLen {split.seq_len} x "
        f"gradAccumulation {split.grad_accumulation} x {split.ranks} ranks"
        + (
            ""
            if split.exact
            else f" [yellow](not globalBatchTokens {split.target_tokens:,}: no split reaches it exactly)[/]"
        ),
        highlight=False,
    )
    note = plan.performance["efa"].get("precision_note")
    if note:
        console.print(f"[yellow]precision:[/] {note}", highlight=False)
    for net, prediction in plan.performance.items():
        if prediction.get("advice"):
            console.print(f"[yellow]performance ({net}):[/] {prediction['advice']}", highlight=False)
        scaling = prediction.get("scaling") or {}
        if scaling.get("slower_than_fewer_nodes"):
            console.print(f"[yellow]nodes ({net}):[/] {scaling['advice']}", highlight=False)
