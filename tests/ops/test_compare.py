"""`ray-efa compare`: the EFA-versus-TCP ratio from the two runs' driver logs, as kubectl logs carries them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_efa.ops.compare import CompareError, compare_logs
from ray_efa.training.run_summary import find_summaries, summary_line, summary_record
from tests.ops.cli_helpers import run_cli


def _summary(tokens_per_s: float, step_s: float) -> dict:
    return {
        "steps": 20,
        "first_loss": 12.24,
        "final_loss": 12.18,
        "time/step_s": step_s,
        "throughput/tokens_per_s": tokens_per_s,
        "throughput/tokens_per_s_per_device": tokens_per_s / 8,
        "throughput/mfu_pct": 30.0,
        "device": "NVIDIA L4",
    }


def _proven(network: str, hosts: int = 2) -> dict:
    """The gate fields of a run whose gate proved its network's transport across `hosts` hosts."""
    return {
        "gate_status": "pass",
        "gate_exit_code": 0,
        "transport": {"efa": "efa", "tcp": "socket"}[network],
        "gate_hosts": hosts,
    }


def _driver_log(path, network: str, tokens_per_s: float, step_s: float, prefix: str = ""):
    # What the driver prints at the end of a run, behind whatever prefix the log's carrier adds.
    line = summary_line(
        name=f"ray-train-{network}",
        network=network,
        instance_type="g6.12xlarge",
        nodes=2,
        summary={**_summary(tokens_per_s, step_s), **_proven(network)},
    )
    path.write_text(f"{prefix}step 20/20 | loss 12.1800\n{prefix}{line}\n{prefix}transport gate: PASS\n")
    return path


def test_the_summary_line_round_trips_behind_prefixes():
    line = summary_line(name="n", network="efa", instance_type="p5.48xlarge", nodes=4, summary=_summary(1e6, 0.5))
    found = find_summaries([f"2026-11-29T10:00:00Z stdout F {line}", "noise", f"(pid=1) {line[:40]}"])
    assert len(found) == 1  # the truncated copy is not trusted
    assert found[0]["network"] == "efa" and found[0]["nodes"] == 4 and found[0]["throughput/tokens_per_s"] == 1e6


def test_ratio_of_efa_over_tcp(tmp_path):
    # GIVEN the EFA run at 2.06x the TCP run's throughput (the AWS reference's g6.12xlarge figure)
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40, prefix="2026-11-29T10:00:00.000Z ")
    tcp = _driver_log(tmp_path / "tcp.log", "tcp", 10_000, 0.82)
    comparison = compare_logs([tcp, efa])
    assert comparison.ratio == pytest.approx(2.06)
    assert comparison.efa["name"] == "ray-train-efa"


def test_a_missing_run_is_an_error(tmp_path):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    with pytest.raises(CompareError, match="no finished tcp run"):
        compare_logs([efa])


def test_runs_on_different_hardware_are_not_compared(tmp_path):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    tcp = tmp_path / "tcp.log"
    tcp.write_text(summary_line(name="t", network="tcp", instance_type="p5.48xlarge", nodes=2, summary=_summary(1, 1)))
    with pytest.raises(CompareError, match="different hardware"):
        compare_logs([efa, tcp])


def test_cli_prints_the_ratio_and_json(tmp_path, capsys):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    tcp = _driver_log(tmp_path / "tcp.log", "tcp", 10_000, 0.82)
    assert run_cli("compare", str(efa), str(tcp)) == 0
    assert "2.06x as fast as TCP" in capsys.readouterr().out
    assert run_cli("compare", "--json", str(efa), str(tcp)) == 0
    assert json.loads(capsys.readouterr().out)["efa_over_tcp"] == pytest.approx(2.06)
    assert run_cli("compare", str(efa)) == 2


def _summary_log(path, record: dict):
    path.write_text(f"RAY_EFA_RUN_SUMMARY {json.dumps(record)}\n")
    return path


@pytest.mark.parametrize(
    "change, field",
    [
        ({"throughput/tokens_per_s": 0}, "throughput/tokens_per_s=0"),
        ({"throughput/tokens_per_s": -5.0}, "throughput/tokens_per_s=-5.0"),
        ({"throughput/tokens_per_s": "fast"}, "throughput/tokens_per_s='fast'"),
        ({"throughput/tokens_per_s": None}, "throughput/tokens_per_s=None"),
        ({"throughput/tokens_per_s": ...}, "no field 'throughput/tokens_per_s'"),
        ({"name": ...}, "no field 'name'"),
        ({"network": "carrier-pigeon"}, "network='carrier-pigeon'"),
    ],
)
def test_a_bad_summary_exits_2_naming_the_file_and_the_field(change, field, tmp_path, capsys):
    # GIVEN a good EFA run and a TCP run whose summary is zero, missing a key, or wrong
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    record = find_summaries((tmp_path / "efa.log").read_text().splitlines())[0]
    record = {**record, "name": "t", "network": "tcp", **change}
    record = {k: v for k, v in record.items() if v is not ...}
    tcp = _summary_log(tmp_path / "tcp.log", record)
    # WHEN compared THEN exit 2, one message naming the file and the field, no traceback (ZeroDivisionError, KeyError)
    assert run_cli("compare", str(efa), str(tcp)) == 2
    err = capsys.readouterr().err
    assert str(tcp) in err and field in err and "Traceback" not in err
    assert run_cli("compare", "--json", str(efa), str(tcp)) == 2
    assert field in json.loads(capsys.readouterr().out)["error"]


def test_a_summary_that_is_not_an_object_is_exit_2(tmp_path, capsys):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    tcp = tmp_path / "tcp.log"
    tcp.write_text("RAY_EFA_RUN_SUMMARY {}\nRAY_EFA_RUN_SUMMARY [1, 2]\n".replace("{}", '{"a": 1}'))
    assert run_cli("compare", str(efa), str(tcp)) == 2
    assert str(tcp) in capsys.readouterr().err


def test_unreadable_logs_are_exit_2(tmp_path, capsys):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600, 0.40)
    # a missing file, and a folder that is no run folder (a run folder holds the driver's summary.json)
    for bad, said in (
        (tmp_path / "missing.log", f"cannot read {tmp_path / 'missing.log'}"),
        (tmp_path, f"{tmp_path}: a folder without summary.json"),
    ):
        assert run_cli("compare", str(efa), str(bad)) == 2
        assert said in capsys.readouterr().err


def test_a_local_run_is_not_compared_with_a_cluster_run(tmp_path, capsys):
    # GIVEN a cluster EFA run and a laptop TCP run (what `ray-efa train --local -c network=tcp` prints)
    efa = tmp_path / "efa.log"
    efa.write_text(
        summary_line(
            name="e",
            network="efa",
            instance_type="g6.12xlarge",
            nodes=2,
            summary={**_summary(20_600, 0.4), "devices": 8, "hosts": 2},
        )
    )
    tcp = tmp_path / "tcp.log"
    tcp.write_text(
        summary_line(
            name="t",
            network="tcp",
            instance_type="local",
            nodes=1,
            summary={**_summary(100, 1.0), "device": "cpu", "devices": 2, "hosts": 1},
        )
    )
    # THEN compare refuses, naming both machines
    assert run_cli("compare", str(efa), str(tcp)) == 2
    err = capsys.readouterr().err
    assert "2 x g6.12xlarge, 8 x NVIDIA L4" in err and "this machine, 2 x cpu" in err
    assert "--allow-different-hardware" in err
    # and even when told to compare different hardware, a one-host run carried no network traffic: still no ratio
    assert run_cli("compare", "--allow-different-hardware", "--json", str(efa), str(tcp)) == 2
    captured = capsys.readouterr()
    assert "one host exercises no network" in json.loads(captured.out)["error"]


def _local_log(path, network: str, tokens_per_s: float, gate: dict):
    # What `ray-efa train --local -c network=...` prints: one host, 2 CPU workers, gloo; the gate proves nothing (3).
    path.write_text(
        summary_line(
            name=f"local-{network}",
            network=network,
            instance_type="local",
            nodes=1,
            summary={**_summary(tokens_per_s, 1.0), "device": "cpu", "devices": 2, "hosts": 1, **gate},
        )
        + "\n"
    )
    return path


def test_two_one_host_runs_get_no_ratio_and_no_chart(tmp_path, capsys):
    # GIVEN two local gloo runs labelled efa and tcp (the gate: no proof) WHEN compare --plot runs
    no_proof = {"gate_status": "no-proof", "gate_exit_code": 3, "transport": None, "gate_hosts": 1}
    efa = _local_log(tmp_path / "demo.log", "efa", 170, no_proof)
    tcp = _local_log(tmp_path / "tcp.log", "tcp", 100, no_proof)
    plot = tmp_path / "c.png"
    code = run_cli("compare", str(efa), str(tcp), "--plot", str(plot))
    captured = capsys.readouterr()
    # THEN exit 2 naming each run's lack, no ratio anywhere, and no chart drawn
    assert code == 2 and not plot.exists()
    assert "x as fast" not in captured.out + captured.err
    assert "local-efa" in captured.err and "local-tcp" in captured.err and "one host" in captured.err


def test_the_ratio_needs_proof_of_each_transport(tmp_path, capsys):
    # GIVEN cluster runs on the same hardware: the tcp one proven, the efa one unproven, then both proven socket
    tcp = tmp_path / "tcp.log"
    tcp.write_text(
        summary_line(
            name="t",
            network="tcp",
            instance_type="g6.12xlarge",
            nodes=2,
            summary={**_summary(10_000, 0.8), **_proven("tcp")},
        )
    )
    efa = tmp_path / "efa.log"
    efa.write_text(
        summary_line(
            name="e",
            network="efa",
            instance_type="g6.12xlarge",
            nodes=2,
            summary={
                **_summary(20_000, 0.4),
                "gate_status": "no-proof",
                "gate_exit_code": 3,
                "transport": None,
                "gate_hosts": 2,
            },
        )
    )
    assert run_cli("compare", "--json", str(efa), str(tcp)) == 2
    assert "e (" in json.loads(capsys.readouterr().out)["error"]
    efa.write_text(
        summary_line(
            name="e",
            network="efa",
            instance_type="g6.12xlarge",
            nodes=2,
            summary={**_summary(20_000, 0.4), **_proven("tcp")},
        )
    )
    assert run_cli("compare", str(efa), str(tcp)) == 2
    assert "the gate proved socket, not efa" in capsys.readouterr().err
    # AND an older summary without the verdict is refused, saying so
    efa.write_text(
        summary_line(name="e", network="efa", instance_type="g6.12xlarge", nodes=2, summary=_summary(20_000, 0.4))
    )
    assert run_cli("compare", str(efa), str(tcp)) == 2
    assert "no transport gate verdict" in capsys.readouterr().err


@pytest.mark.parametrize("field, value", [("hosts", 4), ("devices", 16), ("device", "NVIDIA A10G")])
def test_runs_on_different_host_or_device_counts_are_refused(field, value, tmp_path, capsys):
    base = {**_summary(1000, 1.0), "devices": 8, "hosts": 2}
    efa = tmp_path / "efa.log"
    efa.write_text(summary_line(name="e", network="efa", instance_type="g6.12xlarge", nodes=2, summary=base))
    tcp = tmp_path / "tcp.log"
    tcp.write_text(
        summary_line(name="t", network="tcp", instance_type="g6.12xlarge", nodes=2, summary={**base, field: value})
    )
    assert run_cli("compare", str(efa), str(tcp)) == 2
    assert "different hardware" in capsys.readouterr().err


def test_json_numbers_are_rounded(tmp_path, capsys):
    efa = _driver_log(tmp_path / "efa.log", "efa", 20_600.123456789, 0.4)
    tcp = _driver_log(tmp_path / "tcp.log", "tcp", 3, 0.82)
    assert run_cli("compare", "--json", str(efa), str(tcp)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["efa_over_tcp"] == 6866.71 and out["efa"]["throughput/tokens_per_s"] == 20600.1


_LEVERS = {
    "model": "qwen2.5-1.5b",
    "seq_len": 2048,
    "micro_batch": 16,
    "grad_accumulation": 1,
    "precision": "bf16",
    "compile": True,
    "activation_checkpointing": False,
    "sharding": "fsdp",
    "grad_reduce_dtype": "fp32",
}


def _run(path: Path, network: str, tokens_per_s: float, **training) -> Path:
    """A driver log of one finished run on 2 x p5.48xlarge whose gate proved its network, with its training levers."""
    line = summary_line(
        name=f"ray-train-{network}",
        network=network,
        instance_type="p5.48xlarge",
        nodes=2,
        summary={**_summary(tokens_per_s, 0.5), **_proven(network), "training": {**_LEVERS, **training}},
    )
    path.write_text(f"{line}\n")
    return path


def test_a_transport_ratio_of_two_differently_trained_runs_is_refused_naming_the_settings(tmp_path, capsys):
    # GIVEN the EFA job (bf16, FSDP) and a TCP run that re-decided its levers (fp8, HSDP, a bf16 wire)
    efa = _run(tmp_path / "efa.log", "efa", 900_000)
    tcp = _run(tmp_path / "tcp.log", "tcp", 470_000, precision="fp8", sharding="hsdp", grad_reduce_dtype="bf16")
    # THEN no transport ratio: the message names each setting that differs, with both values
    with pytest.raises(CompareError, match="trained differently") as raised:
        compare_logs([efa, tcp])
    message = str(raised.value)
    assert "precision: efa 'bf16', tcp 'fp8'" in message and "sharding: efa 'fsdp', tcp 'hsdp'" in message
    assert "grad_reduce_dtype" in message and "micro_batch" not in message
    assert run_cli("compare", str(efa), str(tcp)) == 2
    # and the same job on both transports is a transport ratio
    same = _run(tmp_path / "tcp-same.log", "tcp", 200_000)
    assert compare_logs([efa, same]).ratio == pytest.approx(4.5)


def test_any_two_runs_side_by_side_from_run_folders_never_a_transport_ratio(tmp_path, capsys):
    # GIVEN two run folders (summary.json, as the driver writes it): bf16 and fp8 of the same job on EFA
    for name, precision, tokens in (("bf16", "bf16", 900_000), ("fp8", "fp8", 1_100_000)):
        folder = tmp_path / name
        folder.mkdir()
        record = summary_record(
            name=f"run-{name}",
            network="efa",
            instance_type="p5.48xlarge",
            nodes=2,
            summary={**_summary(tokens, 0.5), **_proven("efa"), "training": {**_LEVERS, "precision": precision}},
        )
        (folder / "summary.json").write_text(json.dumps(record))
    # WHEN compared
    assert run_cli("compare", "--json", str(tmp_path / "bf16"), str(tmp_path / "fp8")) == 0
    out = json.loads(capsys.readouterr().out)
    # THEN both runs, what differs, and the ratio of the two runs: never called a transport ratio
    assert out["transport_ratio"] is False and out["b_over_a"] == pytest.approx(1_100_000 / 900_000, rel=1e-4)
    assert out["differences"] == {"precision": ["bf16", "fp8"]}
    assert "efa_over_tcp" not in out
    assert run_cli("compare", str(tmp_path / "bf16"), str(tmp_path / "fp8")) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "not a transport ratio" in text and "precision (bf16 vs fp8)" in text and "1.22x" in text
    # and --runs puts an EFA and a TCP run side by side too, saying all they differ in
    efa = _run(tmp_path / "efa.log", "efa", 900_000)
    tcp = _run(tmp_path / "tcp.log", "tcp", 470_000, precision="fp8")
    assert run_cli("compare", "--runs", "--json", str(efa), str(tcp)) == 0
    differences = json.loads(capsys.readouterr().out)["differences"]
    assert differences["network"] == ["efa", "tcp"] and differences["precision"] == ["bf16", "fp8"]


def test_a_folder_that_is_no_run_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    efa = _run(tmp_path / "efa.log", "efa", 900_000)
    assert run_cli("compare", str(tmp_path / "empty"), str(efa)) == 2
    assert "without summary.json" in capsys.readouterr().err


def test_a_run_summary_records_the_levers_its_driver_decided():
    from ray_efa.core.settings import Settings
    from ray_efa.core.strategy import resolve
    from ray_efa.training.run_summary import TRAINING_LEVERS, training_levers

    settings = Settings.from_context({"gpuInstanceType": "p5.48xlarge", "gpuNodeCount": 2})
    levers = training_levers(settings)
    # every lever decided (no auto), as the driver's own resolve decides it: what compare holds equal
    assert set(levers) == set(TRAINING_LEVERS) and "auto" not in levers.values()
    decided = resolve(settings).training
    assert (levers["precision"], levers["sharding"], levers["micro_batch"]) == (
        decided.precision,
        decided.sharding,
        decided.micro_batch,
    )
