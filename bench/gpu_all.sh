#!/usr/bin/env bash
# Every GPU measurement the project keeps, in one run of eight to ten minutes on a GPU machine with 16 CPUs:
#
#     bench/gpu_all.sh OUT_DIR [PYTHON]
#
# Needs only torch, numpy and Pillow (a GPU machine's own Python will do: PYTHON, default python3). Each bench
# runs under its own time limit and writes its JSON into OUT_DIR as soon as it ends, so a bench that fails or
# runs out of time costs only its own figures; the log is OUT_DIR/gpu_all.log. Order: the trainer's GPU path
# (Precision, StreamsPerFlow, Compile), then hybrid decode, then the planner's accuracy.
set -u
out=${1:?usage: bench/gpu_all.sh OUT_DIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
log=$out/gpu_all.log
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."

bench() {  # bench NAME LIMIT_S SCRIPT ARGS...: one bench's JSON into OUT_DIR/NAME.json, its stderr into the log
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    echo "== $name: $*" >>"$log"
    # --out, not stdout: a line the step code prints (a retune decision) must not land inside the JSON
    timeout -k 10 "$limit" "$py" "$@" --out "$out/$name.json" >>"$log" 2>&1
    echo "== $name: exit $? in $((SECONDS - start)) s" >>"$log"
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    "$py" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'
    nproc
} >>"$log" 2>&1

gpu=$("$py" -c 'import torch; print(torch.cuda.get_device_name().split()[1].lower())' 2>/dev/null )
gpu=${gpu:-gpu}

# ResNet-50 at 224 px, a batch sized for a data-centre GPU; the anchor (GPU-resident) is in each run
r50=(bench/gpu_trainer.py --model resnet50 --size 224 --batch 256 --batches 40)
bench "gpu_trainer_resnet50_$gpu" 80 "${r50[@]}" --precision fp32,bf16 --compile off
bench "gpu_trainer_resnet50_streams2_$gpu" 50 "${r50[@]}" --precision bf16 --compile off --streams 2
bench "gpu_trainer_small_cnn_$gpu" 50 bench/gpu_trainer.py --model small_cnn --size 224 --batch 256 --batches 40 \
    --precision fp32,bf16 --compile off
# hybrid decode: a g5.2xlarge-like trainer (8 vCPUs + the GPU) beside one 4-vCPU data host
bench "hybrid_$gpu" 120 bench/hybrid.py --model resnet50 --trainer-cpus 8 --hosts 1 --host-cpus 4 --seconds 6 --repeats 2
# the planner: profile one data host, predict 1-3, measure them; both models at the default precision
bench "plan_accuracy_$gpu" 200 bench/plan_accuracy.py --models small_cnn,resnet50 --hosts 1,2,3 --trainer-cpus 2 \
    --host-cpus 3 --seconds 4 --repeats 1
# last: torch.compile's own compilation takes a minute or more
bench "gpu_trainer_resnet50_compile_$gpu" 130 "${r50[@]}" --precision bf16 --compile on
echo "== done in $SECONDS s" >>"$log"
