#!/usr/bin/env bash
# Repeated, interleaved runs of the project's default job (through the CLI, as a user runs it) and torchtitan on one
# warm GPU machine, for issue 51's side-by-side and issue 48's measured constants. One device call runs the specs given,
# in order, under one `ray start`; split the rounds over calls (each call holding both sides) to stay inside 10 min.
#   OUT=<dir> bash bench/titan_rounds.sh SPEC...
#   SPEC  project:NAME[:key=value,key=value]   `ray-efa train` of the p5.4xlarge row (one H100) with those -c settings
#         titan:NAME:VARIANT[:MICRO]           bench/titan_train.py (fp8|bf16) at the plan's shape, or at micro MICRO
#                                              with the same global batch, from the project's initial weights
# Both sides: the default job's shape on the p5.4xlarge row (the micro-batch `ray-efa plan` picks there, MICRO to
# override; activation checkpointing and the loss chunk as the plan then decides), STEPS optimizer steps (default 21: 20
# steady after the compiling first) of ACCUM micro-batches (default: 65,536 tokens a step; the plan's own 524,288 would
# take ~9 s a step, and 3 runs a side of 20 steady steps would not fit the session's device time; the optimizer's share
# of a step is ~1% at 65,536 tokens, the same for both sides), the project's learning-rate schedule, a progress line every
# step. torchtitan runs the same plan.json: micro-batch, global batch, checkpointing (bench/titan_compare.py).
# MODEL_CONFIG=<config.json> (a path on the device machine; bench/configs/llama-3.2-1b-untied/config.json for issue 57):
# the project side trains that architecture (-c modelConfig=, in the plan too) and torchtitan runs TITAN_MODEL
# (bench/titan_compare.py's MODEL, llama3_shape:1B for it) from the same initial weights; unset: Qwen2.5-1.5B both sides.
# TITAN_MICRO=<n>: torchtitan's micro-batch for titan specs that name none (default: the plan's); TITAN_OOM_MICRO=<n>:
# where a torchtitan run runs out of memory (its full logits), it runs again at that micro-batch, the same global
# batch, as NAME-m<n>, and so do the titan runs after it.
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True as on the pods (core.pod_env).
# CAP_TOTAL_MIB=81559 on a larger card (an H200) holds the memory above an H100's for the whole call, both sides.
# Before the call, here: bench/titan_carry.sh fills .whl/; after the install line of ../shared/device/README.md.
# Writes $OUT/raw.tar.gz after every run (raw/: plan.json, gpu.txt, runs.txt, NAME.log, NAME.summary.json,
# NAME.metrics.jsonl), so a call cut at its limit still brings back the runs it finished, and
# prints one line per run; bench/titan_rounds_report.py makes the table from the unpacked raw/ folders.
set -u
OUT=${OUT:?set OUT to the folder for the results}
STEPS=${STEPS:-21}
BUDGET=${BUDGET:-570}  # s: no run starts with less than 80 s of it left; each is cut 10 s before it ends
HERE=$(cd "$(dirname "$0")" && pwd)
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
RAW=${RAW:-/tmp/raw}
MODEL_ROW=()
if [ -n "${MODEL_CONFIG:-}" ]; then
    MODEL_CONFIG=$(realpath "$MODEL_CONFIG") || exit 2
    MODEL_ROW=(-c modelConfig="$MODEL_CONFIG")
fi
TITAN_MODEL=${TITAN_MODEL:-qwen2_5_shape:1.5B}
mkdir -p /tmp/titan-bench "$RAW" && cp "$HERE/titan_train.py" "$HERE/titan_compare.py" /tmp/titan-bench/
cd /tmp  # never from a checkout: its ray_efa/ would shadow the installed wheel
if [ -z "${MICRO:-}" ]; then
    MICRO=$(python3 -m ray_efa.cli plan --json -c gpuInstanceType=p5.4xlarge -c gpuNodeCount=1 "${MODEL_ROW[@]}" \
        | python3 -c "import json, sys; print(json.load(sys.stdin)['deployment']['micro_batch'])") || exit 1
fi
ACCUM=${ACCUM:-$((32 / MICRO > 0 ? 32 / MICRO : 1))}
ROW=(-c gpuInstanceType=p5.4xlarge -c gpuNodeCount=1 -c checkpointEvery=0 -c gradAccumulation="$ACCUM"
     -c microBatch="$MICRO" -c steps="$STEPS" -c reportEvery=1 "${MODEL_ROW[@]}")
echo "micro-batch $MICRO x 2048, $ACCUM a step, $STEPS steps"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$RAW/gpu.txt"
# The versions and `ray start` run beside the first run's start (both done in ~15 s, long before its steady steps).
python3 -c "import torch, torchao, ray, importlib.metadata as m; print('torch', torch.__version__, 'torchao', \
torchao.__version__, 'ray', ray.__version__, 'torchtitan', m.version('torchtitan'), 'ray-efa-stack', \
m.version('ray-efa-stack'))" | tee -a "$RAW/gpu.txt" &
if [ -n "${CAP_TOTAL_MIB:-}" ]; then
    # A card larger than the H100: hold what lies above CAP_TOTAL_MIB (the H100's 81,559 MiB) for the whole call, so
    # that both sides run in the memory an H100 has. The holder's own CUDA context (~520 MiB) counts toward it.
    total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
    hold=$((total - CAP_TOTAL_MIB - 520))
    python3 -c "import torch, time; x = torch.empty($hold * 2**20, dtype=torch.uint8, device='cuda'); print('holding', $hold, 'MiB', flush=True); time.sleep(10**6)" &
    HOLDER=$!
    sleep 15
    nvidia-smi --query-gpu=memory.total,memory.used --format=csv,noheader | sed "s/^/capped at $CAP_TOTAL_MIB MiB: total, used: /" | tee -a "$RAW/gpu.txt"
fi
[ -f "$RAW/plan.json" ] || python3 -m ray_efa.cli plan --json "${ROW[@]}" > "$RAW/plan.json" || echo "plan: exit $?"
SEED=$(python3 -c "import json; print(json.load(open('$RAW/plan.json'))['settings']['seed']['value'])" 2>/dev/null || echo 0)
(timeout 90 ray start --head --num-gpus=1 --disable-usage-stats --include-dashboard=false >/dev/null \
    || echo "ray start failed") &
RAY_START=$!
export RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2.0  # Ray's own default, what a cluster's controller polls at

titan_run() {  # NAME VARIANT MICRO LEFT: one torchtitan run (MICRO 0: the plan's), cut 10 s before LEFT ends
    mapfile -t args < <(python3 /tmp/titan-bench/titan_compare.py args "$RAW/plan.json" "$2" "$STEPS" "$3" \
        "$TITAN_MODEL")
    (cd /tmp/titan-bench && TITAN_INIT_SEED=$SEED TITAN_PROJECT_CONFIG=${MODEL_CONFIG:-} TITAN_ONE_GPU_FSDP=1 \
        timeout -k 10 $(($4 - 10)) python3 -m torch.distributed.run --standalone --nproc-per-node 1 titan_train.py \
        "${args[@]}") > "$RAW/$1.log" 2>&1
    local rc=$?
    rm -rf "/tmp/titan-$2"
    return $rc
}
pack() {  # $OUT/raw.tar.gz after every run, so a call cut at its limit still brings back the runs done
    tar -czf "$OUT/raw.tar.gz.tmp" -C "$(dirname "$RAW")" "$(basename "$RAW")" && mv "$OUT/raw.tar.gz.tmp" "$OUT/raw.tar.gz"
}
TITAN_MICRO=${TITAN_MICRO:-0}

for spec in "$@"; do
    left=$((BUDGET - SECONDS))
    if [ "$left" -lt 80 ]; then echo "$spec: not run, $left s left" | tee -a "$RAW/runs.txt"; continue; fi
    IFS=: read -r kind name a b <<< "$spec"
    start=$SECONDS
    case $kind in
    project)
        wait "$RAY_START" 2>/dev/null  # the first project run: Ray is up
        left=$((BUDGET - SECONDS))
        extra=()
        IFS=, read -ra pairs <<< "${a:-}"
        for kv in "${pairs[@]}"; do [ -n "$kv" ] && extra+=(-c "$kv"); done
        timeout -k 10 $((left - 10)) python3 -m ray_efa.cli train "${ROW[@]}" "${extra[@]}" --name "$name" \
            > "$RAW/$name.log" 2>&1
        rc=$?
        cp ~/ray_results/"$name"/summary.json "$RAW/$name.summary.json" 2>/dev/null
        cp ~/ray_results/"$name"/metrics.jsonl "$RAW/$name.metrics.jsonl" 2>/dev/null
        rm -rf ~/ray_results/"$name"/checkpoint_*  # a final checkpoint of the 1.5B model is 19 GB
        ;;
    titan)
        titan_run "$name" "$a" "${b:-$TITAN_MICRO}" "$left"
        rc=$?
        if [ "$rc" -ne 0 ] && [ -n "${TITAN_OOM_MICRO:-}" ] && grep -aq "CUDA out of memory" "$RAW/$name.log" \
            && [ $((BUDGET - SECONDS)) -ge 80 ]; then
            # torchtitan's full logits did not fit at this micro-batch: the same global batch at TITAN_OOM_MICRO, for
            # this run and the titan runs after it
            echo "$spec: out of memory at micro ${b:-$TITAN_MICRO} (0: the plan's); again at $TITAN_OOM_MICRO" \
                | tee -a "$RAW/runs.txt"
            TITAN_MICRO=$TITAN_OOM_MICRO name=$name-m$TITAN_OOM_MICRO
            spec=titan:$name:$a:$TITAN_MICRO
            titan_run "$name" "$a" "$TITAN_MICRO" $((BUDGET - SECONDS))
            rc=$?
        fi
        ;;
    *) echo "unknown spec $spec" >&2; rc=2 ;;
    esac
    echo "$spec: exit $rc after $((SECONDS - start)) s" | tee -a "$RAW/runs.txt"
    grep -aE "step +[0-9]+/|step: *[0-9]+ " "$RAW/$name.log" | tail -n 2
    pack
done
timeout 30 ray stop --force >/dev/null 2>&1
[ -n "${HOLDER:-}" ] && kill "$HOLDER"
pack
