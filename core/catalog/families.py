"""The built-in GPU instance families: one record each (core.catalog.types.GpuFamily), the one place a GPU type is added.

A record holds every fact of its family: the GPU model and its step-model constants (core.perf), the GPUs' link inside
a node, GPUDirect RDMA and `efa-only` secondary cards, NCCL's share of the EFA line (core.catalog.network), and each size's
GPUs, vCPUs, memory, EFA interfaces, bandwidth, us-east-2 price and Capacity Blocks offer. Everything keyed by instance
type, family or GPU name derives from FAMILIES: the catalog's rows and views (core.catalog.rows: GPU_INSTANCES, GPUS,
GPU_LINKS, the chart allowlists' rows, Capacity Blocks, efa-only families), the constants by GPU
(core.catalog.gpu_constants.GPU_CONSTANTS) and the EFA shares by family (core.catalog.network.EFA_SHARE). Prices in other regions are
market data, keyed by type and region, in core/data/on_demand_prices.csv (tests/core/test_prices.py names a type
without a price row, and a price row without a type). docs/development.md, "Adding a GPU type", is the checklist.

Sources (core.catalog's docstring says which types and why): AWS "Specifications for Amazon EC2 accelerated computing
instances" (ac.html), the EFA user guide (GPUDirect RDMA), NVIDIA data sheets (dense bf16 and fp8 tensor throughput),
the AWS on-demand price list for Linux in us-east-2; the constants' and shares' sources are in their records. Nothing
here imports aws_cdk, cdk8s or torch.
"""

from __future__ import annotations

from ray_efa.core.catalog.types import (
    H200_EAGER_SPEED,
    NVLINK3,
    NVLINK4,
    NVLINK5,
    PCIE4,
    EfaShare,
    Gpu,
    GpuConstants,
    GpuFamily,
)
from ray_efa.core.catalog.types import InstanceSize as Size

__all__ = ["FAMILIES"]

_PUBLISHED = "core/data/published_runs.csv"
_NO_FP8 = "no fp8 tensor cores (NVIDIA data sheet): precision fp8 is refused"

# The H200 is the GPU of two families (p5e, p5en): one model, one set of constants.
_H200 = Gpu(
    name="H200",
    memory_gib=139.8,
    peak_bf16_tflops=989.0,
    device_names=("H200",),
    memory_bandwidth_gb_s=4800.0,
    peak_fp8_tflops=1979.0,
)
_H200_CONSTANTS = GpuConstants(
    # bench/calibrate.py on one H200 gave 0.666 (658 TFLOP/s of 989 over four shapes), which predicted the project's
    # own measured steps up to 10% fast (docs/BENCHMARKS.md); refitted with tools/fit_constants.py to the measured and
    # published H200 rows of core/data/published_runs.csv (the project's bf16 runs on one H200, 48,930-51,828
    # tokens/s at 8 x 4096; Trainy's torchtitan on 8 x 8 H200).
    compute_efficiency=0.63,
    compute_status="measured",
    compute_source="bench/calibrate.py on one H200 (docs/BENCHMARKS.md); held against published torchtitan H200 "
    f"runs ({_PUBLISHED})",
    # tools/fit_constants.py on the H200 fp8 rows of core/data/published_runs.csv (the project's 12 x 4096 fp8 run on
    # one H200, 1.17x its bf16; Trainy's torchtitan float8 on 8 x 8 H200), with the casts timed at memory bandwidth
    # (core.fp8) and the k/v projections left in bf16.
    fp8_compute_efficiency=0.419,
    fp8_status="measured",
    fp8_source="bench/speed.py on one H200: fp8 1.16x bf16 at 8 x 4096, 0.70x at 2 x 2048 (docs/BENCHMARKS.md)",
    eager_speed=H200_EAGER_SPEED,
    eager_status="measured",
    eager_source="eager vs compiled on 2 x H200, 4 x 4096, the same machine (the maintainers' reference notes, outside the repository)",
    band=0.17,
)

_A10G = Gpu(name="A10G", memory_gib=22.49, peak_bf16_tflops=70.0, device_names=("A10G",), memory_bandwidth_gb_s=600.0)
_L4 = Gpu(
    name="L4",
    memory_gib=22.49,
    peak_bf16_tflops=121.0,
    device_names=("L4",),
    memory_bandwidth_gb_s=300.0,
    peak_fp8_tflops=242.5,
)
_L40S = Gpu(
    name="L40S",
    memory_gib=44.99,
    peak_bf16_tflops=362.0,
    device_names=("L40S",),
    memory_bandwidth_gb_s=864.0,
    peak_fp8_tflops=733.0,
)

# fmt: off
FAMILIES: tuple[GpuFamily, ...] = (
    # One network card each (g5, g6, g6e.8-16xlarge); no NVLink (AWS instance pages); no GPUDirect RDMA
    # (aws/aws-ofi-nccl#547: host-staged, core.catalog.network). Sizes without EFA are known so that choosing one fails with a
    # helpful message, not "unknown". Prices: the 8x/16x sizes as read from the AWS Price List API for us-east-2
    # (2026-10); g5.24xlarge, g6.24xlarge and g6e.12xlarge are the list prices as recorded here without that re-read:
    # check them with `aws pricing get-products` before relying on them.
    GpuFamily(
        name="g5", gpu=_A10G, gpu_link=PCIE4, gpudirect_rdma=False,
        constants=GpuConstants(
            compute_efficiency=0.40, compute_status="assumed",
            compute_source="a prior: a 150 W Ampere part, power-capped like the L4 but less so",
            fp8_compute_efficiency=0.0, fp8_status="published", fp8_source=_NO_FP8),
        sizes=(
            Size(name="g5.xlarge",   gpus=1, vcpus=  4, memory_gib=  16, efa_interfaces=0, network_gbps= 10, usd_per_hour= 1.006),
            Size(name="g5.8xlarge",  gpus=1, vcpus= 32, memory_gib= 128, efa_interfaces=1, network_gbps= 25, usd_per_hour= 2.448),
            Size(name="g5.12xlarge", gpus=4, vcpus= 48, memory_gib= 192, efa_interfaces=1, network_gbps= 40, usd_per_hour= 5.672),
            Size(name="g5.16xlarge", gpus=1, vcpus= 64, memory_gib= 256, efa_interfaces=1, network_gbps= 25, usd_per_hour= 4.096),
            Size(name="g5.24xlarge", gpus=4, vcpus= 96, memory_gib= 384, efa_interfaces=1, network_gbps= 50, usd_per_hour= 8.144),
            Size(name="g5.48xlarge", gpus=8, vcpus=192, memory_gib= 768, efa_interfaces=1, network_gbps=100, usd_per_hour=16.288),
        )),
    GpuFamily(
        name="g6", gpu=_L4, gpu_link=PCIE4, gpudirect_rdma=False,
        constants=GpuConstants(
            compute_efficiency=0.45, compute_status="assumed",
            compute_source="a prior: a 72 W Ada part is power-capped under dense tensor load (its clock drops below the "
                           "2,040 MHz boost the 121 TFLOP/s peak assumes); two thirds of the H200's share, until `ray-efa "
                           "calibrate` on an L4 run replaces it",
            fp8_compute_efficiency=0.29, fp8_status="assumed",
            fp8_source="a prior: no published fp8 training run on L4, and what exists points the other way (fp8 0.70x "
                       "bf16 at 2 x 2048 on an H200; the L4 has 16x less memory bandwidth for 8x less compute); precision "
                       "auto stays bf16 until `ray-efa calibrate` on an fp8 run of this family measures it"),
        sizes=(
            Size(name="g6.xlarge",   gpus=1, vcpus=  4, memory_gib=  16, efa_interfaces=0, network_gbps= 10, usd_per_hour= 0.8048),
            Size(name="g6.4xlarge",  gpus=1, vcpus= 16, memory_gib=  64, efa_interfaces=0, network_gbps= 25, usd_per_hour= 1.3232),
            Size(name="g6.8xlarge",  gpus=1, vcpus= 32, memory_gib= 128, efa_interfaces=1, network_gbps= 25, usd_per_hour= 2.0144),
            Size(name="g6.12xlarge", gpus=4, vcpus= 48, memory_gib= 192, efa_interfaces=1, network_gbps= 40, usd_per_hour= 4.6016),
            Size(name="g6.16xlarge", gpus=1, vcpus= 64, memory_gib= 256, efa_interfaces=1, network_gbps= 25, usd_per_hour= 3.3968),
            Size(name="g6.24xlarge", gpus=4, vcpus= 96, memory_gib= 384, efa_interfaces=1, network_gbps= 50, usd_per_hour= 6.6752),
            Size(name="g6.48xlarge", gpus=8, vcpus=192, memory_gib= 768, efa_interfaces=1, network_gbps=100, usd_per_hour=13.3504),
        )),
    GpuFamily(
        name="g6e", gpu=_L40S, gpu_link=PCIE4, gpudirect_rdma=False,
        constants=GpuConstants(
            compute_efficiency=0.45, compute_status="assumed",
            compute_source="a prior: a 350 W Ada part sustains well under its boost-clock peak under dense tensor load; "
                           "about two thirds of the H200's share, until `ray-efa calibrate` on an L40S run replaces it",
            fp8_compute_efficiency=0.30, fp8_status="assumed",
            fp8_source="a prior: no published fp8 training run on L40S; precision auto stays bf16 until `ray-efa "
                       "calibrate` on an fp8 run of this family measures it"),
        sizes=(
            Size(name="g6e.xlarge",   gpus=1, vcpus=  4, memory_gib=  32, efa_interfaces=0, network_gbps= 20, usd_per_hour= 1.861),
            Size(name="g6e.8xlarge",  gpus=1, vcpus= 32, memory_gib= 256, efa_interfaces=1, network_gbps= 25, usd_per_hour= 4.52856),
            Size(name="g6e.12xlarge", gpus=4, vcpus= 48, memory_gib= 384, efa_interfaces=1, network_gbps=100, usd_per_hour=10.49264),
            Size(name="g6e.16xlarge", gpus=1, vcpus= 64, memory_gib= 512, efa_interfaces=1, network_gbps= 35, usd_per_hour= 7.57719),
            Size(name="g6e.24xlarge", gpus=4, vcpus= 96, memory_gib= 768, efa_interfaces=2, network_gbps=200, usd_per_hour=15.0656),
            Size(name="g6e.48xlarge", gpus=8, vcpus=192, memory_gib=1536, efa_interfaces=4, network_gbps=400, usd_per_hour=30.1312),
        )),
    GpuFamily(
        name="p4d", gpu_link=NVLINK3, gpudirect_rdma=True,
        gpu=Gpu(name="A100-40GB", memory_gib=39.39, peak_bf16_tflops=312.0,
                device_names=("A100-SXM4-40GB", "A100-PCIE-40GB"), memory_bandwidth_gb_s=1555.0),
        constants=GpuConstants(
            compute_efficiency=0.692, compute_status="published",
            compute_source=f"fitted to llm-foundry's A100-40GB FSDP tables, 8-128 GPUs ({_PUBLISHED})",
            fp8_compute_efficiency=0.0, fp8_status="published", fp8_source=_NO_FP8),
        efa_share=EfaShare(0.8, "published", "NVIDIA/nccl#527: 2 x p4d.24xlarge (4 x 100 Gbit/s = 50 GB/s) reach "
                                             "all-reduce busbw 57.2 GB/s at 1 GiB, so 0.8 of line is no overstatement"),
        sizes=(
            Size(name="p4d.24xlarge", gpus=8, vcpus=96, memory_gib=1152, efa_interfaces=4, network_gbps=400, usd_per_hour=21.9576,
                 capacity_blocks=True),
        )),
    GpuFamily(
        name="p4de", gpu_link=NVLINK3, gpudirect_rdma=True,
        gpu=Gpu(name="A100-80GB", memory_gib=79.15, peak_bf16_tflops=312.0,
                device_names=("A100-SXM4-80GB", "A100 80GB"), memory_bandwidth_gb_s=2039.0),
        constants=GpuConstants(
            compute_efficiency=0.70, compute_status="published",
            compute_source="fitted to llm-foundry's A100-80GB FSDP tables and torchtitan's 64 x A100 runs "
                           f"({_PUBLISHED})",
            fp8_compute_efficiency=0.0, fp8_status="published", fp8_source=_NO_FP8, band=0.14),
        efa_share=EfaShare(0.8, "published", "as p4d (the same 4 x 100 Gbit/s EFA and NVSwitch): NVIDIA/nccl#527"),
        sizes=(
            Size(name="p4de.24xlarge", gpus=8, vcpus=96, memory_gib=1152, efa_interfaces=4, network_gbps=400, usd_per_hour=27.4470),
        )),
    # p5 and later: `efa-only` secondary cards (31, 15 or 7 private IPs saved per node). p5.4xlarge: one network card,
    # an EFA node of one GPU (ac.html); its price as a public snapshot of the us-east-1 list quotes it.
    GpuFamily(
        name="p5", gpu_link=NVLINK4, gpudirect_rdma=True, efa_only_secondary=True,
        gpu=Gpu(name="H100", memory_gib=79.65, peak_bf16_tflops=989.0, device_names=("H100",),
                memory_bandwidth_gb_s=3350.0, peak_fp8_tflops=1979.0),
        constants=GpuConstants(
            compute_efficiency=0.552, compute_status="published",
            compute_source="fitted to published FSDP runs on H100 SXM (AWS's torchtitan sample on 4 x p5.48xlarge, "
                           f"llm-foundry's H100 tables; {_PUBLISHED}) with the H100's own eager share: not the H200's, "
                           "the same GH100 die at 3.35 instead of 4.8 TB/s",
            fp8_compute_efficiency=0.460, fp8_status="published",
            fp8_source="fitted to the same-machine fp8/bf16 pairs of torchtitan's H100 tables (Llama 3.1 8B, 8 and 128 "
                       "GPUs, compiled: 1.28x and 1.29x; torchao's README: up to 1.25x at 8 GPUs / 8B), so power and "
                       f"clock cancel ({_PUBLISHED}; tools/fit_constants.py)",
            eager_speed=0.858, eager_status="published",
            eager_source="fitted to the same-machine eager/compiled pairs of torchtitan's H100 tables (Llama 3.1 8B, "
                         "5,762 vs 6,667 and 5,605 vs 6,514 tokens/s/GPU: compile 1.16x; "
                         "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md)",
            band=0.24),
        efa_share=EfaShare(0.6, "published", "published nccl-tests on 2 x p5.48xlarge: about 0.6 of the 3,200 Gbit/s line "
                                             "at >= 1 GiB and 0.4 at 128 MiB (issue 38's reading); aws/aws-k8s-tester#503 "
                                             "expects 124-125 GB/s all-reduce busbw on 2 x p5.48xlarge in its EKS test, "
                                             "0.31 of line: a floor, not a target"),
        sizes=(
            Size(name="p5.4xlarge",  gpus=1, vcpus= 16, memory_gib= 256, efa_interfaces= 1, network_gbps= 100, usd_per_hour= 6.88),
            Size(name="p5.48xlarge", gpus=8, vcpus=192, memory_gib=2048, efa_interfaces=32, network_gbps=3200, usd_per_hour=55.04,
                 capacity_blocks=True),
        )),
    GpuFamily(
        name="p5e", gpu=_H200, constants=_H200_CONSTANTS, gpu_link=NVLINK4, gpudirect_rdma=True,
        efa_only_secondary=True,
        efa_share=EfaShare(0.6, "published", "as p5 (the same 32 x 100 Gbit/s EFA and NVSwitch)"),
        sizes=(
            # No On-Demand price in any region (core/data/on_demand_prices.csv: no-price or not-offered); its figure is
            # the us-east-2 Capacity Block rate core.prices records, never shown as an On-Demand price (it was p5en's,
            # copied).
            Size(name="p5e.48xlarge", gpus=8, vcpus=192, memory_gib=2048, efa_interfaces=32, network_gbps=3200, usd_per_hour=43.26,
                 capacity_blocks=True),
        )),
    GpuFamily(
        name="p5en", gpu=_H200, constants=_H200_CONSTANTS, gpu_link=NVLINK4, gpudirect_rdma=True,
        efa_only_secondary=True,
        efa_share=EfaShare(0.6, "assumed", "as p5: 16 x 200 Gbit/s EFA, the same aggregate line; no p5en nccl-tests "
                                           "recorded here"),
        sizes=(
            Size(name="p5en.48xlarge", gpus=8, vcpus=192, memory_gib=2048, efa_interfaces=16, network_gbps=3200, usd_per_hour=63.296,
                 capacity_blocks=True),
        )),
    # 8 network cards, 3,200 Gbit/s; GPUDirect RDMA read and write (EFA user guide); 1432 GiB of GPU memory; the price
    # as a public snapshot of the us-east-1 list quotes it.
    GpuFamily(
        name="p6-b200", gpu_link=NVLINK5, gpudirect_rdma=True, efa_only_secondary=True,
        # NVIDIA HGX B200 data sheet: BF16 tensor 36 PFLOPS with sparsity for 8 GPUs = 2.25 PFLOPS dense each. Memory
        # and bandwidth as CUDA reports them on p6-b200 (178.35 GiB; 7,680-bit bus at 3,996 MHz: 7.67 TB/s,
        # pytorch/ao#4002); AWS lists 179 GiB per GPU. FP8 tensor: 72 PFLOPS with sparsity for 8 = 4.5 dense each.
        gpu=Gpu(name="B200", memory_gib=178.35, peak_bf16_tflops=2250.0, device_names=("B200",),
                memory_bandwidth_gb_s=7672.0, peak_fp8_tflops=4500.0),
        constants=GpuConstants(
            compute_efficiency=0.30, compute_status="assumed",
            compute_source="a prior: no FSDP run on B200 recorded here with its configuration; issue 38's independent "
                           "check found published B200 FSDP runs 2.1-2.3x below what the H200's 0.666 predicted (about "
                           "0.30 of the 2,250 TFLOP/s peak); held below NeMo's "
                           "Megatron-LM/Transformer Engine Llama3-8B on DGX-B200 (26,006 tokens/s/GPU in fp8, NeMo 25.02 "
                           "performance summary): a faster stack than FSDP2 with torchao",
            fp8_compute_efficiency=0.20, fp8_status="assumed",
            fp8_source="a prior (two thirds of the bf16 share, as on the H100 and H200), held below NeMo's Megatron-LM fp8 "
                       "Llama3-8B on DGX-B200 (26,006 tokens/s/GPU); "
                       "torchao's MXFP8 on B200 was 1.22-1.28x bf16 at Llama3-70B scale (PyTorch blog, Crusoe B200)"),
        efa_share=EfaShare(0.6, "assumed", "as p5: 8 x 400 Gbit/s EFA, the same aggregate line; no p6-b200 nccl-tests "
                                           "recorded here"),
        sizes=(
            Size(name="p6-b200.48xlarge", gpus=8, vcpus=192, memory_gib=2048, efa_interfaces=8, network_gbps=3200,
                 usd_per_hour=113.9328),
        )),
)
"""Every built-in GPU instance family, one record each; core.catalog.rows derives the rows in this order."""
# fmt: on
