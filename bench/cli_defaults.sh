#!/usr/bin/env bash
# The user's path on one GPU node (p5.4xlarge row; one H200 stands in): `ray start` + `ray-efa train` with the
# plan's defaults, against the old fixed defaults (2 x 2048, bf16, no accumulation), in one call.
# Run on the GPU machine after the wheel install of ../shared/device/README.md; writes under $OUT (8 files):
#   new.log old.log (the CLI's output, last 4000 lines), new/ old/ (metrics.jsonl, summary.json), plan-new.json, plan-old.json
# OLD_STEPS: the old run's steps; 128 old steps see the tokens of one new step (4,096 against 524,288 tokens).
set -u
OUT=${OUT:?set OUT to the folder for the results}
OLD_STEPS=${OLD_STEPS:-384}
ROW=(-c gpuInstanceType=p5.4xlarge -c gpuNodeCount=1 -c checkpointEvery=0)
OLD=(-c microBatch=2 -c seqLen=2048 -c precision=bf16 -c gradAccumulation=1)
cd /tmp  # never from a checkout: its ray_efa/ would shadow the installed wheel
ray start --head --num-gpus=1 --disable-usage-stats --include-dashboard=false >/dev/null || exit 1
export RAY_TRAIN_HEALTH_CHECK_INTERVAL_S=2.0  # Ray's own default, what a cluster's controller polls at

train() {  # name, then extra arguments
    local name=$1; shift
    local start=$SECONDS
    python3 -m ray_efa.cli train "${ROW[@]}" --name "$name" "$@" > "/tmp/$name.log" 2>&1
    echo "$name: exit $? after $((SECONDS - start)) s"
    tail -n 4000 "/tmp/$name.log" > "$OUT/$name.log"
    mkdir -p "$OUT/$name"
    cp ~/ray_results/"$name"/{metrics.jsonl,summary.json} "$OUT/$name/" 2>/dev/null
    rm -rf ~/ray_results/"$name"/checkpoint_*  # a final checkpoint of the 1.5B model is 19 GB
}

python3 -m ray_efa.cli plan --json "${ROW[@]}" > "$OUT/plan-new.json"
python3 -m ray_efa.cli plan --json "${ROW[@]}" "${OLD[@]}" -c steps="$OLD_STEPS" > "$OUT/plan-old.json"
train new
train old "${OLD[@]}" -c steps="$OLD_STEPS"
ray stop >/dev/null
