#!/usr/bin/env bash
# The project's default job against torchtitan on the same GPU and model shape, in one device call (one H200 stands in
# for the p5.4xlarge row, as in bench/cli_defaults.sh):
#   1. the user's path: `ray start` + `ray-efa train` with the plan's defaults (PROJECT_STEPS steps);
#   2. torchtitan 0.2.2's trainer (bench/titan_train.py: its Qwen3 model code in the Qwen2.5-1.5B shape, random tokens,
#      FSDP2 on one GPU) at the plan's batch shape, compile and checkpointing, for each precision in TITAN_RUNS;
#   3. bench/titan_compare.py: tokens/s per GPU over the steps after the first, MFU in both FLOP conventions, one table.
# Before the call, here: bench/titan_carry.sh fills .whl/. On the GPU machine, after the install line of
# ../shared/device/README.md. Each part has its own timeout, so one that fails leaves the others' numbers.
# Writes under $OUT (at most 8 files): plan.json, project.log, project/{summary,metrics}.json*, titan-<run>.log per
# run, compare.json; the table goes to stdout. Deletes the project's final checkpoint (19 GB; the disk is 64 GB).
set -u
OUT=${OUT:?set OUT to the folder for the results}
PROJECT_STEPS=${PROJECT_STEPS:-6}
TITAN_STEPS=${TITAN_STEPS:-6}
TITAN_RUNS=${TITAN_RUNS:-fp8 bf16}
PROJECT_TIMEOUT=${PROJECT_TIMEOUT:-270}
TITAN_TIMEOUT=${TITAN_TIMEOUT:-160}
HERE=$(cd "$(dirname "$0")" && pwd)
ROW=(-c gpuInstanceType=p5.4xlarge -c gpuNodeCount=1 -c checkpointEvery=0)
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p /tmp/titan-bench && cp "$HERE/titan_train.py" "$HERE/titan_compare.py" /tmp/titan-bench/
cd /tmp  # never from a checkout: its ray_efa/ would shadow the installed wheel
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# 1. The project's default job, as a user runs it.
python3 -m ray_efa.cli plan --json "${ROW[@]}" -c steps="$PROJECT_STEPS" > "$OUT/plan.json" || echo "plan: exit $?"
start=$SECONDS
if timeout 90 ray start --head --num-gpus=1 --disable-usage-stats --include-dashboard=false >/dev/null; then
    export RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2.0  # Ray's own default, what a cluster's controller polls at
    timeout -k 20 "$PROJECT_TIMEOUT" python3 -m ray_efa.cli train "${ROW[@]}" -c steps="$PROJECT_STEPS" --name project \
        > /tmp/project.log 2>&1
    echo "project: exit $? after $((SECONDS - start)) s (the gate exits 1 on this VM: no EFA device)"
else
    echo "project: ray start failed" | tee /tmp/project.log
fi
tail -n 4000 /tmp/project.log > "$OUT/project.log"
mkdir -p "$OUT/project"
cp ~/ray_results/project/{metrics.jsonl,summary.json} "$OUT/project/" 2>/dev/null
rm -rf ~/ray_results/project/checkpoint_*  # a final checkpoint of the 1.5B model is 19 GB
timeout 60 ray stop --force >/dev/null 2>&1
sleep 2
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/GPU memory in use before torchtitan: /'

# 2. torchtitan, one run per precision.
for run in $TITAN_RUNS; do
    start=$SECONDS
    if mapfile -t args < <(python3 /tmp/titan-bench/titan_compare.py args "$OUT/plan.json" "$run" "$TITAN_STEPS") \
        && [ "${#args[@]}" -gt 0 ]; then
        (cd /tmp/titan-bench && timeout -k 20 "$TITAN_TIMEOUT" python3 -m torch.distributed.run --standalone \
            --nproc-per-node 1 titan_train.py "${args[@]}") > "$OUT/titan-$run.log" 2>&1
        echo "torchtitan $run: exit $? after $((SECONDS - start)) s"
    else
        echo "torchtitan $run: no arguments (plan.json missing?)" | tee "$OUT/titan-$run.log"
    fi
    rm -rf "/tmp/titan-$run"
done

# 3. The table.
python3 /tmp/titan-bench/titan_compare.py report "$OUT"
