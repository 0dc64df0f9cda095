#!/usr/bin/env bash
# The project's default job against torchtitan on the same GPU and model shape, in one device call (one H200 stands in
# for the p5.4xlarge row, as in bench/cli_defaults.sh):
#   1. the user's path: `ray start` + `ray-efa train` with the plan's defaults (PROJECT_STEPS steps);
#   2. torchtitan 0.2.2's trainer (bench/titan_train.py: its Qwen3 model code in the Qwen2.5-1.5B shape, random tokens,
#      FSDP2 on one GPU) at the plan's batch shape, compile and checkpointing, for each precision in TITAN_RUNS;
#   3. bench/titan_compare.py: tokens/s per GPU over the steps after the first, MFU in both FLOP conventions, one table.
# Before the call, here: bench/titan_carry.sh fills .whl/. On the GPU machine, after the install line of
# ../shared/device/README.md. Each part has its own timeout, so one that fails leaves the others' numbers.
# Writes under $OUT (7 files with the default TITAN_RUNS): plan.json, project.log, project/summary.json,
# project/metrics.jsonl, titan-<run>.log per run, compare.json; the table goes to stdout. Deletes the project's final
# checkpoint (19 GB; the disk is 64 GB). Expected wall time ~8.5 min; PROJECT_STEPS=4 TITAN_STEPS=4 saves ~25 s.
set -u
OUT=${OUT:?set OUT to the folder for the results}
PROJECT_STEPS=${PROJECT_STEPS:-5}     # ~8.4 s a step after a first of ~90 s (compile); 5 steps: 4 steady, 2.1 M tokens
TITAN_STEPS=${TITAN_STEPS:-5}
TITAN_RUNS=${TITAN_RUNS:-fp8 bf16}    # fp8 first: the default job's precision; fp8-amp, bf16-amp: torchtitan's own
                                      # one-GPU path (no FSDP, autocast over fp32 weights) instead of FSDP2 on one GPU
PROJECT_TIMEOUT=${PROJECT_TIMEOUT:-250}
TITAN_TIMEOUT=${TITAN_TIMEOUT:-170}
BUDGET=${BUDGET:-555}  # s for this script (the call has 600, the install ~25): no part runs past it less 15 s for the report
HERE=$(cd "$(dirname "$0")" && pwd)
ROW=(-c gpuInstanceType=p5.4xlarge -c gpuNodeCount=1 -c checkpointEvery=0)
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p /tmp/titan-bench && cp "$HERE/titan_train.py" "$HERE/titan_compare.py" /tmp/titan-bench/
cd /tmp  # never from a checkout: its ray_efa/ would shadow the installed wheel
left() {  # the timeout for a part: its own, or what the budget has left less 15 s for the report
    local own=$1 rest=$((BUDGET - SECONDS - 15))
    echo $((own < rest ? own : rest))
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

# 1. The project's default job, as a user runs it.
python3 -m ray_efa.cli plan --json "${ROW[@]}" -c steps="$PROJECT_STEPS" > "$OUT/plan.json" || echo "plan: exit $?"
start=$SECONDS
if timeout 90 ray start --head --num-gpus=1 --disable-usage-stats --include-dashboard=false >/dev/null; then
    export RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2.0  # Ray's own default, what a cluster's controller polls at
    timeout -k 10 "$(left "$PROJECT_TIMEOUT")" python3 -m ray_efa.cli train "${ROW[@]}" -c steps="$PROJECT_STEPS" \
        --name project > /tmp/project.log 2>&1
    echo "project: exit $? after $((SECONDS - start)) s (the gate exits 1 on this VM: no EFA device)"
else
    echo "project: ray start failed" | tee /tmp/project.log
fi
tail -n 4000 /tmp/project.log > "$OUT/project.log"
mkdir -p "$OUT/project"
cp ~/ray_results/project/{metrics.jsonl,summary.json} "$OUT/project/" 2>/dev/null
rm -rf ~/ray_results/project/checkpoint_*  # a final checkpoint of the 1.5B model is 19 GB
timeout 30 ray stop --force >/dev/null 2>&1
sleep 2
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/GPU memory in use before torchtitan: /'

# 2. torchtitan, one run per precision.
for run in $TITAN_RUNS; do
    start=$SECONDS limit=$(left "$TITAN_TIMEOUT")
    if [ "$limit" -lt 60 ]; then
        echo "torchtitan $run: not run, $limit s left of the ${BUDGET} s budget" | tee "$OUT/titan-$run.log"
        continue
    fi
    if mapfile -t args < <(python3 /tmp/titan-bench/titan_compare.py args "$OUT/plan.json" "$run" "$TITAN_STEPS") \
        && [ "${#args[@]}" -gt 0 ]; then
        fsdp=1; [ "${run%-amp}" != "$run" ] && fsdp=0
        (cd /tmp/titan-bench && TITAN_ONE_GPU_FSDP=$fsdp timeout -k 10 "$limit" python3 -m torch.distributed.run \
            --standalone --nproc-per-node 1 titan_train.py "${args[@]}") > "$OUT/titan-$run.log" 2>&1
        echo "torchtitan $run: exit $? after $((SECONDS - start)) s"
    else
        echo "torchtitan $run: no arguments (plan.json missing?)" | tee "$OUT/titan-$run.log"
    fi
    rm -rf "/tmp/titan-$run"
done

# 3. The table.
python3 /tmp/titan-bench/titan_compare.py report "$OUT"
