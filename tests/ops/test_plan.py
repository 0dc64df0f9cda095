"""`ops.plan` and `ray-efa plan`: every number comes from core, each setting shows where it came from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from ray_efa.core import catalog
from ray_efa.core.context import resolve_settings
from ray_efa.core.cost import hourly_cost
from ray_efa.core.strategy import estimate
from ray_efa.ops.plan import build_plan, render_plan
from tests.ops.cli_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path):
    """A project directory with its own cdk.json, so the tests do not depend on the repository's."""
    (tmp_path / "cdk.json").write_text(
        json.dumps({"app": "true", "context": {"region": "us-west-2", "gpuNodeCount": 2}})
    )
    return tmp_path


def plan_of(project, **overrides):
    return build_plan(resolve_settings({k: str(v) for k, v in overrides.items()}, root=project))


def test_each_setting_names_its_source(project):
    # GIVEN region from cdk.json, gpuNodeCount from cdk.json overridden by -c, the rest defaults
    plan = plan_of(project, gpuNodeCount=4)
    rows = {r.key: r for r in plan.rows}
    # THEN each row says where its value came from
    assert (rows["region"].value, rows["region"].source) == ("us-west-2", "cdk.json")
    assert (rows["gpuNodeCount"].value, rows["gpuNodeCount"].source) == (4, "-c")
    assert (rows["steps"].source, rows["steps"].section) == ("default", "training")


def test_cdk_context_json_overrides_cdk_json_and_is_named(project):
    (project / "cdk.context.json").write_text(json.dumps({"gpuAvailabilityZone": "us-west-2c"}))
    plan = plan_of(project)
    row = next(r for r in plan.rows if r.key == "gpuAvailabilityZone")
    assert (row.source, plan.availability_zone) == ("cdk.context.json", "us-west-2c")


def test_efa_interfaces_and_rdma_come_from_the_catalog(project):
    # GIVEN p5.48xlarge (32 EFA interfaces, GPUDirect RDMA)
    plan = plan_of(project, gpuInstanceType="p5.48xlarge")
    # THEN the launch template lists one interface per card, card 0 primary, and RDMA is on
    assert list(plan.efa_interfaces) == catalog.efa_network_interfaces(catalog.gpu_instance("p5.48xlarge"))
    assert len(plan.efa_interfaces) == 32 and plan.efa_interfaces[1]["DeviceIndex"] == 1
    assert plan.use_device_rdma is True


def test_pods_match_the_catalog(project):
    plan = plan_of(project, gpuInstanceType="g6e.48xlarge", systemInstanceType="m7i.2xlarge")
    worker, head = plan.pods
    w = catalog.worker_pod_resources(catalog.gpu_instance("g6e.48xlarge"))
    assert (worker.cpu, worker.memory_gib, worker.gpus, worker.efa, worker.shm_gib) == (
        w.cpu,
        w.memory_gib,
        8,
        4,
        w.shm_gib,
    )
    assert (head.cpu, head.memory_gib, head.gpus) == (
        *catalog.head_pod_resources(catalog.system_instance("m7i.2xlarge")),
        0,
    )


@pytest.fixture
def eight_byte_logits(monkeypatch):
    """Every chunk logit at 8 bytes, compiled too (the model before the measured 5.4 beyond 1024 tokens): the L4 shape
    where a 4096-token chunk keeps hsdp from fitting, which the advice tests were written at. Resolved plans are
    cached by settings, so the cache is emptied on both sides."""
    from ray_efa.core import memory, strategy

    strategy._RESOLVED.clear()
    monkeypatch.setattr(memory, "COMPILED_LOSS_BYTES_PER_LOGIT", 8)
    yield
    strategy._RESOLVED.clear()


OLD_SHAPE = (
    "-c",
    "microBatch=2",
    "-c",
    "gradAccumulation=1",
    "-c",
    "precision=bf16",
    "-c",
    "activationCheckpointing=false",
    "-c",
    "lossChunkSize=1024",
)
"""The batch shape and precision the defaults had before auto: what these step-model tests were written at."""


def test_memory_and_cost_are_core_s(project):
    plan = plan_of(project)
    assert plan.memory == estimate(plan.settings)
    assert plan.cost == hourly_cost(plan.settings)
    assert plan.as_dict()["usd_per_hour"]["after_destroying_gpu_stack"] == pytest.approx(
        plan.cost.total - plan.cost.gpu_nodes
    )


def test_a_run_that_does_not_fit_carries_the_planners_advice(project):
    # GIVEN 8 x 32k tokens per L4
    plan = plan_of(project, seqLen=32768, microBatch=8)
    # THEN it does not fit and the advice names a setting to change
    assert not plan.fits and plan.memory_advice is not None
    assert "lossChunkSize" in plan.memory_advice or "microBatch" in plan.memory_advice


def test_teardown_destroys_the_gpu_stack_first(project):
    plan = plan_of(project, clusterName="demo")
    assert plan.teardown == ("npx cdk destroy demo-gpu", "npx cdk destroy demo-cluster")
    # ...and says what stays behind, with its monthly cost: only the checkpoint bucket
    (left,) = plan.retained_after_destroy
    assert left.startswith("the checkpoint S3 bucket") and "per GB-month" in left


def test_a_capacity_reservation_turns_the_placement_group_off(project):
    plan = plan_of(project, capacityReservationId="cr-0123456789abcdef0")
    assert plan.placement_group is False
    assert plan.as_dict()["deployment"]["capacity_reservation_id"] == "cr-0123456789abcdef0"


@pytest.mark.parametrize(
    "context, network, at_most, source",
    [
        ({}, "efa", 1.5, "catalog: no GPUDirect RDMA"),  # 2 x g6.12xlarge over EFA
        ({"network": "tcp"}, "tcp", 1.5, "socket model"),  # its TCP comparison run
        ({"gpuInstanceType": "g6e.24xlarge"}, "efa", 2.5, "catalog: no GPUDirect RDMA"),
        ({"gpuInstanceType": "g6e.48xlarge"}, "efa", 2.5, "catalog: no GPUDirect RDMA"),
        ({"gpuInstanceType": "p5.48xlarge"}, "efa", 160.0, "catalog: GPUDirect RDMA"),
        ({"preflightMinBusbwGbps": 2.2}, "efa", 2.2, "setting preflightMinBusbwGbps"),
    ],
)
def test_command_json_reports_the_floor_the_job_runs_with(capsys, context, network, at_most, source):
    options = [arg for key, value in context.items() for arg in ("-c", f"{key}={value}")]
    assert run_cli("plan", *options, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    floor = out["preflight"]
    assert floor["network"] == network == out["deployment"]["network"]
    assert 0 < floor["floor_gb_s"] <= at_most and floor["source"].startswith(source)
    assert out["efa"]["allreduce_floor_gbps"] == floor["floor_gb_s"]  # one floor, shown twice


def test_render_prints_every_section(project):
    console = Console(record=True, width=200)
    # WHEN the plan of the defaults is rendered
    render_plan(plan_of(project), console, settings_table=True)
    text = " ".join(console.export_text().split())  # wrapped at 80 columns
    # THEN every section is there, with the numbers
    for title in (
        "Settings",
        "Deployment",
        "Instances",
        "EFA interfaces",
        "Ray pods",
        "Memory per GPU",
        "USD per hour",
        "Teardown",
    ):
        assert title in text
    assert "after `cdk destroy ray-train-gpu`" in text and "$0.045" in text and "npx cdk destroy ray-train-gpu" in text


# -- the command ----------------------------------------------------------------------------------------------------


def test_command_json_is_complete(capsys):
    code = run_cli("plan", "-c", "gpuInstanceType=p5en.48xlarge", "-c", "gpuNodeCount=2", "--json")
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(out) == {
        "settings",
        "deployment",
        "instances",
        "efa",
        "pods",
        "memory_per_gpu",
        "usd_per_hour",
        "performance",
        "teardown",
        "retained_after_destroy",
        "scaling",
        "preflight",
    }
    assert out["settings"]["gpuInstanceType"] == {"value": "p5en.48xlarge", "source": "-c", "section": "nodes"}
    assert len(out["efa"]["interfaces"]) == 16 and out["efa"]["fi_efa_use_device_rdma"] == "1"
    assert out["pods"]["worker"]["efa"] == 16


def test_command_json_predicts_the_step_on_efa_and_on_tcp(capsys):
    # GIVEN the default deployment (2 x g6.12xlarge) at the shape of the defaults before auto (2 x 2048, bf16)
    assert run_cli("plan", "--json", *OLD_SHAPE) == 0
    performance = json.loads(capsys.readouterr().out)["performance"]
    # THEN each network has the strategy the job would run and its predicted step, in snake_case keys
    assert set(performance) == {"efa", "tcp"}
    for row in performance.values():
        assert {
            "strategy",
            "step_time_s",
            "compute_s",
            "network_s",
            "tokens_per_s_per_gpu",
            "mfu",
            "bottleneck",
        } <= set(row)
        assert row["strategy"] in ("fsdp", "hsdp") and set(row["strategies"]) == {"fsdp", "hsdp"}
    # and the default step waits on the one EFA link, more so over TCP
    assert performance["efa"]["bottleneck"] == "network"
    assert performance["tcp"]["step_time_s"] > performance["efa"]["step_time_s"]


def test_command_prints_the_predicted_step_and_when_more_nodes_are_slower(capsys):
    assert run_cli("plan", *OLD_SHAPE) == 0
    out = " ".join(capsys.readouterr().out.split())
    # at the old default shape the job runs hsdp with bf16 gradients on the wire; over TCP its 2 nodes are slower than 1, and the
    # plan says by how much and what would change that
    assert "Predicted step" in out and "hsdp*" in out and "bf16" in out
    assert "nodes (tcp): 2 x g6.12xlarge are predicted at" in out and "0.72x of 1 node" in out
    assert "would give" in out and "x of 1 node now" in out
    # MFU is given under both FLOP conventions
    assert "6N + 12 L d S / causal 6N + 6 L d S" in out


def test_command_advises_the_change_that_lets_a_faster_strategy_fit(capsys, eight_byte_logits):
    assert run_cli("plan", *OLD_SHAPE, "-c", "lossChunkSize=4096") == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "lossChunkSize=1024" in out and "hsdp (bf16 reduction) would be" in out


def test_command_reports_every_bad_setting_at_once_with_allowed_values(capsys):
    # GIVEN three bad settings
    code = run_cli("plan", "-c", "network=ib", "-c", "gpuNodeCount=65", "-c", "kubernetesVersion=1.20", "--json")
    problems = {p["key"]: p["message"] for p in json.loads(capsys.readouterr().out)["problems"]}
    # THEN exit 2, each named with what is allowed
    assert code == 2
    assert problems["network"] == "must be one of efa, tcp"
    assert problems["kubernetesVersion"] == "must be one of 1.35, 1.36"
    assert "between 0 and 64" in problems["gpuNodeCount"]


def test_command_exits_1_when_training_does_not_fit(capsys):
    assert (
        run_cli("plan", "-c", "gpuInstanceType=g6.12xlarge", "-c", "seqLen=32768", "-c", "microBatch=8", "--json") == 1
    )
    assert json.loads(capsys.readouterr().out)["memory_per_gpu"]["fits"] is False


def test_scaled_to_zero_plans_no_training_shows_the_cost_at_zero_and_how_to_come_back(project, capsys):
    # GIVEN gpuNodeCount 0 (both stacks kept, the GPU node group at zero nodes)
    plan = plan_of(project, gpuNodeCount=0)
    # THEN nothing divides by zero: no memory plan or step prediction, GPU nodes cost nothing, the plan "fits"
    assert plan.memory is None and plan.performance == {} and plan.fits
    assert plan.cost.gpu_nodes == 0 and plan.cost.total == pytest.approx(plan.cost.without_gpu_stack)
    console = Console(record=True, width=80)
    render_plan(plan, console)
    text = console.export_text()
    assert "scaled to zero" in text and "npx cdk deploy ray-train-gpu -c gpuNodeCount=2" in " ".join(text.split())
    # ...and `plan --json` exits 0 with the same, snake_case
    capsys.readouterr()
    assert run_cli("plan", "--json", "-c", "gpuNodeCount=0") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["memory_per_gpu"] is None and out["performance"] == {} and out["usd_per_hour"]["gpu_nodes"] == 0
    assert out["deployment"]["scaled_to_zero"] is True
    assert out["deployment"]["come_back_command"] == "npx cdk deploy ray-train-gpu -c gpuNodeCount=2"


def test_a_running_plan_shows_what_scaling_to_zero_would_cost(project):
    console = Console(record=True, width=120)
    render_plan(plan_of(project), console)
    assert "scaled to zero (gpuNodeCount=0, both stacks kept)" in console.export_text()


def test_a_described_gpu_type_without_efa_is_exit_2_naming_the_setting(capsys):
    description = json.dumps(
        {
            "name": "p6-b300.48xlarge",
            "gpus": 8,
            "gpuName": "B300",
            "gpuMemoryGib": 268,
            "peakBf16Tflops": 2250,
            "memoryBandwidthGbS": 8000,
            "vcpus": 192,
            "memoryGib": 4096,
            "efaInterfaces": 0,
            "networkGbps": 6400,
            "usdPerHour": 150.0,
        }
    )
    code = run_cli(
        "plan", "--json", "-c", "gpuInstanceType=p6-b300.48xlarge", "-c", f"extraGpuInstanceTypes={description}"
    )
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert code == 2 and [p["key"] for p in problems] == ["extraGpuInstanceTypes"]
    assert "efaInterfaces must be >= 1" in problems[0]["message"]
    # ...and with EFA the plan is the described node's: 8 GPUs, 16 EFA interfaces, its price
    ok = description.replace('"efaInterfaces": 0', '"efaInterfaces": 16')
    assert run_cli("plan", "--json", "-c", "gpuInstanceType=p6-b300.48xlarge", "-c", f"extraGpuInstanceTypes={ok}") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pods"]["worker"]["gpus"] == 8 and out["pods"]["worker"]["efa"] == 16
    assert out["usd_per_hour"]["gpu_nodes"] == 300.0


def test_a_function_of_your_own_is_not_judged_by_the_built_in_models_memory(project):
    # GIVEN settings whose built-in model would not fit, running a function of your own
    plan = plan_of(project, seqLen=32768, microBatch=8, trainFunction="own_training.train:train_func")
    # THEN the plan does not refuse it, and says that it predicts nothing about it
    assert plan.fits and not plan.judged and plan.as_dict()["memory_per_gpu"] is None
    console = Console(record=True, width=80)
    render_plan(plan, console)
    text = " ".join(console.export_text().split())  # wrapped at 80 columns
    assert "not predicted: the planner's memory and step model is the built-in train function's" in text
    assert "Memory per GPU" not in text and "Predicted step" not in text


OWN = (
    "-c",
    "trainFunction=own_training.train:train_func",
    "-c",
    f"codeDir={ROOT / 'examples' / 'own-training' / 'src'}",
)


def test_plan_of_a_function_of_your_own_describes_the_job_and_no_built_in_model(capsys):
    # GIVEN a function of your own on 2 EFA nodes
    assert run_cli("plan", "--json", "-c", "gpuNodeCount=2", *OWN) == 0
    out = json.loads(capsys.readouterr().out)
    # THEN the cluster, pods, EFA, cost and preflight are there
    assert out["deployment"]["gpu_nodes"] == 2 and out["pods"]["worker"]["efa"] > 0 and out["efa"]["interfaces"]
    assert out["usd_per_hour"]["total"] > 0 and out["preflight"]["floor_gb_s"] > 0
    # and it says whose step model the planner has, with no built-in model's rows or curve anywhere but the settings
    assert "built-in train function's" in out["deployment"]["step_model"]
    assert out["memory_per_gpu"] is None and out["performance"] == {} and out["scaling"] == {}
    assert out["deployment"]["model_architecture"] is None and out["deployment"]["sharding"] is None
    out.pop("settings")
    assert "qwen" not in json.dumps(out).lower()


def test_plan_plot_of_a_function_of_your_own_draws_no_built_in_curve(tmp_path, capsys):
    code = run_cli("plan", "--plot", str(tmp_path / "curve.png"), *OWN)
    assert code == 2 and not (tmp_path / "curve.png").exists()
    assert "--plot: no scaling curve for trainFunction own_training.train:train_func" in capsys.readouterr().err


def test_with_model_path_every_caption_names_that_model_and_its_size(project, tmp_path):
    # GIVEN modelPath, a folder whose config.json is the tiny Qwen2 shape (427 K parameters)
    from ray_efa.core.models import model_preset

    folder = tmp_path / "my-tiny-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**model_preset("tiny").config_dict(), "model_type": "qwen2"}))
    plan = plan_of(project, modelPath=str(folder))
    console = Console(record=True, width=200)
    render_plan(plan, console, settings_table=True)
    text = console.export_text()
    # THEN the deployment row, the memory and step captions and the scaling curve name it, with its size
    assert "my-tiny-model, 427.14 K parameters" in text
    assert text.count("my-tiny-model, microBatch") == 1 and text.count("my-tiny-model, 32 x") == 1
    assert plan.scaling["model"] == "my-tiny-model"
    assert "0.00 B" not in text
    # and the built-in preset only where the settings list the `model` setting
    assert [line for line in text.splitlines() if "qwen" in line] == [
        line for line in text.splitlines() if "qwen" in line and "│ model " in line
    ]


def test_fp8_on_a_described_v100_is_exit_2_naming_precision(capsys):
    # a V100 described in extraGpuInstanceTypes (no fp8 tensor cores): before, plan crashed dividing by its fp8 peak
    v100 = json.dumps(
        {
            "name": "p3dn.24xlarge",
            "gpus": 8,
            "gpuName": "V100",
            "gpuMemoryGib": 31.7,
            "peakBf16Tflops": 125,
            "memoryBandwidthGbS": 900,
            "vcpus": 96,
            "memoryGib": 768,
            "efaInterfaces": 1,
            "networkGbps": 100,
            "usdPerHour": 31.2,
        }
    )
    code = run_cli(
        "plan",
        "--json",
        "-c",
        "gpuInstanceType=p3dn.24xlarge",
        "-c",
        f"extraGpuInstanceTypes={v100}",
        "-c",
        "precision=fp8",
    )
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert code == 2 and [p["key"] for p in problems] == ["precision"]
    assert run_cli("plan", "--json", "-c", "gpuInstanceType=p3dn.24xlarge", "-c", f"extraGpuInstanceTypes={v100}") == 0
    assert json.loads(capsys.readouterr().out)["deployment"]["precision"] == "bf16"


def test_plan_json_reports_the_global_batch_and_its_split(capsys):
    assert run_cli("plan", "--json", "-c", "gpuInstanceType=p5.4xlarge", "-c", "gpuNodeCount=1") == 0
    deployment = json.loads(capsys.readouterr().out)["deployment"]
    split = deployment["global_batch"]
    assert deployment["global_batch_tokens"] == split["tokens"] == 524_288 and split["exact"]
    assert (
        split["micro_batch"] * split["seq_len"] * split["grad_accumulation"] * split["data_parallel_ranks"] == 524_288
    )
    assert deployment["micro_batch"] == split["micro_batch"] and deployment["precision"] == "fp8"


def test_recommend_ranks_every_instance_type_by_usd_per_million_tokens(capsys):
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "4", "--tokens", "1e9") == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["recommendations"]
    # THEN at least five plans over three types, cheapest first, each with its own plan, all fitting memory
    assert len(rows) >= 5 and len({r["instance_type"] for r in rows}) >= 3
    costs = [r["usd_per_million_tokens"] for r in rows]
    assert costs == sorted(costs)
    assert all(r["memory_gib"] <= r["capacity_gib"] and 1 <= r["nodes"] <= 4 for r in rows)
    assert {"instance_type", "nodes", "tokens_per_s", "usd_per_million_tokens", "hours", "usd"} <= set(rows[0])
    # the hours and USD are those of the tokens asked for, at the predicted speed and the hourly price
    first = rows[0]
    assert first["hours"] == pytest.approx(1e9 / first["tokens_per_s"] / 3600, rel=1e-3)
    assert first["usd"] == pytest.approx(first["hours"] * first["usd_per_hour"], rel=1e-3)
    assert out["tokens"] == 1_000_000_000


def test_recommend_includes_a_described_type(capsys):
    v100 = json.dumps(
        {
            "name": "p3dn.24xlarge",
            "gpus": 8,
            "gpuName": "V100",
            "gpuMemoryGib": 31.7,
            "peakBf16Tflops": 125,
            "memoryBandwidthGbS": 900,
            "vcpus": 96,
            "memoryGib": 768,
            "efaInterfaces": 1,
            "networkGbps": 100,
            "usdPerHour": 31.2,
        }
    )
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "2", "-c", f"extraGpuInstanceTypes={v100}") == 0
    rows = json.loads(capsys.readouterr().out)["recommendations"]
    described = [r for r in rows if r["instance_type"] == "p3dn.24xlarge"]
    assert described and all(r["precision"] == "bf16" for r in described)


def test_tokens_without_recommend_is_refused(capsys):
    assert run_cli("plan", "--tokens", "1e9") == 2


def test_plan_says_which_step_model_constants_are_measured_and_which_assumed(capsys):
    # GIVEN an L4 node (no L4 run measured) and an H200 node (the calibration's own GPU)
    assert run_cli("plan", "--json", "-c", "gpuInstanceType=g6.12xlarge") == 0
    l4 = json.loads(capsys.readouterr().out)["performance"]["efa"]["constants"]
    assert run_cli("plan", "--json", "-c", "gpuInstanceType=p5en.48xlarge", "-c", "gpuNodeCount=1") == 0
    h200 = json.loads(capsys.readouterr().out)["performance"]["efa"]["constants"]
    # THEN the L4's compute efficiency is its own, labelled assumed with a source; the H200's is measured
    assert l4["compute_efficiency"]["status"] == "assumed" and l4["compute_efficiency"]["source"]
    assert l4["compute_efficiency"]["value"] < h200["compute_efficiency"]["value"]
    assert h200["compute_efficiency"]["status"] == "measured"
    # and PCIe has its own share, not NVLink's
    assert l4["intra_node_link_share"]["status"] == "assumed" and h200["intra_node_link_share"]["status"] == "measured"
    assert l4["intra_node_link_share"]["value"] != h200["intra_node_link_share"]["value"]
    # the text plan says so too
    assert run_cli("plan", "-c", "gpuInstanceType=g6.12xlarge") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "compute efficiency 0.45 (assumed: a prior:" in text  # each source said once, with its constants
    assert "fp8 compute efficiency 0.29 (assumed: a prior: no published fp8 training run on L4" in text
    # and precision auto says why it stays bf16 there, and what would change that
    assert "precision: precision auto stays bf16 on L4" in text and "ray-efa calibrate" in text
    assert "intra node link share 0.65 (assumed:" in text


def test_recommend_says_what_each_row_rests_on_and_prices_in_the_stacks_region(capsys):
    # GIVEN the default token budget (20 tokens per parameter) in us-east-2, and the same in ap-southeast-2
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "2") == 0
    ohio = json.loads(capsys.readouterr().out)
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "2", "-c", "region=ap-southeast-2") == 0
    sydney = json.loads(capsys.readouterr().out)
    # THEN the budget gives real hours and dollars, the model is named, and each row says how its constants are known
    assert ohio["tokens"] == 20 * ohio["model_parameters"] and ohio["model"] == "qwen2.5-1.5b"
    rows = ohio["recommendations"]
    assert all(r["hours"] > 1 and r["usd"] > 100 for r in rows)
    assert {
        "instance_type",
        "nodes",
        "tokens_per_s",
        "usd_per_million_tokens",
        "usd_per_hour",
        "hours",
        "usd",
        "constants",
    } <= set(rows[0])
    statuses = {r["gpu"]: r["constants"]["status"] for r in rows if r["nodes"] == 1}
    assert statuses["H200"] == "measured" and statuses["H100"] == "published" and statuses["L4"] == "assumed"
    # a row's status covers every constant it uses, not the compute constant's alone: the eager share always, the
    # links and the scale term where they are crossed
    order = ("measured", "published", "assumed")
    for r in rows:
        used = {k: v for k, v in r["constants"].items() if k != "status"}
        assert {"compute_efficiency", "eager_speed"} <= set(used)
        assert ("inter_node_link" in used and "scale_loss_per_doubling" in used) == (r["nodes"] > 1)
        assert r["constants"]["status"] == max((v["status"] for v in used.values()), key=order.index)
    # an A100 row rests on the H200's eager share, lent (no same-machine compile pair for it): assumed
    p4d = next(r for r in rows if r["instance_type"] == "p4d.24xlarge")
    assert p4d["constants"]["eager_speed"]["status"] == "assumed" and p4d["constants"]["status"] == "assumed"

    # an assumed constant gets a wider predicted range than a measured one
    def spread(r):
        return r["tokens_per_s_range"][1] / r["tokens_per_s"] - 1

    assert spread(next(r for r in rows if r["gpu"] == "L4")) > spread(next(r for r in rows if r["gpu"] == "H200"))
    # the region's prices: both regions are recorded (core/data/on_demand_prices.csv for Sydney, with its source)
    assert ohio["prices_recorded"] and ohio["region"] == "us-east-2"
    assert sydney["prices_recorded"] and sydney["region"] == "ap-southeast-2"
    assert all(r["price"]["ranked"]["recorded"] and r["price"]["ranked"]["region"] == "us-east-2" for r in rows)
    # Capacity Blocks where a price is recorded (p5, p4d in us-east-2), and Spot said to be unrecorded
    p4d = next(r for r in rows if r["instance_type"] == "p4d.24xlarge")
    assert p4d["price"]["capacity_block"]["usd_per_hour"] == 14.75 and p4d["price"]["capacity_blocks_offered"]
    assert all(r["price"]["spot"] is None and "Spot" in r["price"]["spot_note"] for r in rows)
    assert ohio["note"] is None


def test_recommend_prices_ap_southeast_2_as_sydney_lists_them_not_as_us_east_2(capsys):
    # GIVEN the same ranking in us-east-2 and in ap-southeast-2 (the stack's region, -c region=...)
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "2") == 0
    ohio = json.loads(capsys.readouterr().out)
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "2", "-c", "region=ap-southeast-2") == 0
    sydney = json.loads(capsys.readouterr().out)
    on_demand = {r["instance_type"]: r["price"]["on_demand"] for r in sydney["recommendations"]}
    # THEN Sydney's rows carry Sydney's On-Demand list prices, dated and sourced, dearer than Ohio's
    p5 = on_demand["p5.48xlarge"]
    assert p5["recorded"] and p5["usd_per_hour"] == 71.552 and p5["region"] == "ap-southeast-2"
    assert "skypilot-org/skypilot-catalog" in p5["source"] and p5["date"] == "2026-12-03"
    ohio_usd = {(r["instance_type"], r["nodes"]): r["usd_per_hour"] for r in ohio["recommendations"]}
    for r in sydney["recommendations"]:
        if r["price"]["on_demand"]["recorded"]:
            assert r["usd_per_hour"] > ohio_usd[(r["instance_type"], r["nodes"])]
    # a type Sydney does not offer is left out, saying why; so is a type offered there without an On-Demand price and
    # without a recorded Capacity Block (p5e): never ranked at another region's price
    assert (
        "p6-b200.48xlarge" not in on_demand and "not offered in ap-southeast-2" in sydney["skipped"]["p6-b200.48xlarge"]
    )
    assert "p5e.48xlarge" not in on_demand
    assert "no On-Demand or Capacity Block price recorded for ap-southeast-2" in sydney["skipped"]["p5e.48xlarge"]
    # and the table says what it left out
    assert run_cli("plan", "--recommend", "--max-nodes", "1", "-c", "region=ap-southeast-2") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Only types with a recorded price are ranked" in text and "Left out: g6e.24xlarge" in text


@pytest.mark.parametrize("region", ["us-east-2", "us-east-1", "us-west-2", "ap-southeast-2", "eu-west-1"])
def test_recommend_ranks_only_prices_recorded_for_the_region(capsys, region):
    # GIVEN the ranking in a recorded region
    assert (
        run_cli(
            "plan",
            "--recommend",
            "--json",
            "--max-nodes",
            "1",
            "-c",
            f"region={region}",
            "-c",
            "gpuInstanceType=p4d.24xlarge",
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    rows = out["recommendations"]
    # THEN every ranked row's price is recorded for that region, On-Demand or a Capacity Block labelled as such
    assert rows and all(r["price"]["ranked"]["recorded"] and r["price"]["ranked"]["region"] == region for r in rows)
    for r in rows:
        assert r["purchase"] == r["price"]["ranked"]["option"] in ("on-demand", "capacity-block")
        if r["purchase"] == "on-demand":
            assert r["price"]["on_demand"]["recorded"]
    # p5e has no On-Demand price anywhere: it is never ranked On-Demand (it was, at p5en's price, as #1)
    assert not any(r["instance_type"] == "p5e.48xlarge" and r["purchase"] == "on-demand" for r in rows)
    if region == "us-east-2":  # a Capacity Block is recorded for p5e in Ohio: ranked as one, said so
        p5e = [r for r in rows if r["instance_type"] == "p5e.48xlarge"]
        assert p5e and all(r["purchase"] == "capacity-block" for r in p5e)
        assert "not offered in us-east-2" in out["skipped"]["p4de.24xlarge"]
    if region == "us-east-1":
        assert "not offered in us-east-1" in out["skipped"]["p5e.48xlarge"]
    # p5 on a Capacity Block is ranked beside p5 On-Demand where both are recorded
    p5 = {r["purchase"] for r in rows if r["instance_type"] == "p5.48xlarge"}
    assert p5 == (
        {"on-demand", "capacity-block"}
        if region in ("us-east-1", "us-east-2")
        else set()
        if region == "eu-west-1"
        else {"on-demand"}
    )  # p5 is not offered in eu-west-1


def test_recommend_in_a_region_without_a_record_says_so(capsys):
    # GIVEN a region no price table records (sa-east-1)
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "1", "-c", "region=sa-east-1") == 1
    out = json.loads(capsys.readouterr().out)
    # THEN nothing is ranked at a price borrowed from us-east-2: every type is left out, saying why
    assert not out["prices_recorded"] and not out["recommendations"]
    assert out["skipped"] and all("no price recorded for sa-east-1" in why for why in out["skipped"].values())
    assert run_cli("plan", "--recommend", "--max-nodes", "1", "-c", "region=sa-east-1") == 1
    assert "No GPU price is recorded for sa-east-1: nothing is ranked" in " ".join(capsys.readouterr().out.split())


def test_recommend_table_names_the_model_fits_100_columns_and_shows_the_top_rows(capsys):
    assert run_cli("plan", "--recommend", "--max-nodes", "2") == 0
    out = capsys.readouterr().out
    assert "Cheapest to train qwen2.5-1.5b" in out and "in us-east-2" in out
    assert max(len(line) for line in out.splitlines()) <= 100

    def table_rows(text):
        return [line for line in text.splitlines() if re.match(r"^\s*\d+\s+\d+ x [a-z0-9-]+\.", line)]

    assert len(table_rows(out)) == 10 and "(--all for every one)" in out
    assert run_cli("plan", "--recommend", "--max-nodes", "2", "--top", "3") == 0
    assert len(table_rows(capsys.readouterr().out)) == 3
    assert run_cli("plan", "--all") == 2  # only with --recommend


def test_recommend_for_an_own_train_function_says_it_ranks_the_built_in_architecture(capsys, tmp_path, monkeypatch):
    module = tmp_path / "mytrain.py"
    module.write_text("def train(config):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert run_cli("plan", "--recommend", "--json", "--max-nodes", "1", "-c", "trainFunction=mytrain:train") == 0
    out = json.loads(capsys.readouterr().out)
    assert "trainFunction is your own" in out["note"] and "qwen2.5-1.5b" in out["note"]


def test_plan_prices_the_gpu_nodes_from_the_regions_record_or_says_it_cannot(capsys):
    # GIVEN p5.48xlarge in Sydney (recorded), p5e in Ohio (Capacity Blocks only) and p5 in an unrecorded region
    def gpu_price(*context: str) -> dict:
        assert run_cli("plan", "--json", *(a for c in context for a in ("-c", c))) == 0
        return json.loads(capsys.readouterr().out)["usd_per_hour"]

    sydney = gpu_price("gpuInstanceType=p5.48xlarge", "gpuNodeCount=2", "region=ap-southeast-2")
    # THEN the GPU nodes cost Sydney's list price, said to be Sydney's
    assert sydney["gpu_nodes"] == 2 * 71.552 and sydney["gpu_price"]["recorded"]
    assert sydney["gpu_price"]["region"] == "ap-southeast-2" and sydney["gpu_price"]["option"] == "on-demand"
    ohio = gpu_price("gpuInstanceType=p5e.48xlarge", "gpuNodeCount=1")
    assert ohio["gpu_price"]["option"] == "capacity-block" and ohio["gpu_price"]["usd_per_hour"] == 43.26
    brazil = gpu_price("gpuInstanceType=p5.48xlarge", "region=sa-east-1")
    assert not brazil["gpu_price"]["recorded"] and "not recorded for sa-east-1" in brazil["gpu_price"]["source"]
    # and the table says so
    assert run_cli("plan", "-c", "gpuInstanceType=p5.48xlarge", "-c", "region=sa-east-1") == 0
    assert "NO price recorded for p5.48xlarge in sa-east-1" in " ".join(capsys.readouterr().out.split())
