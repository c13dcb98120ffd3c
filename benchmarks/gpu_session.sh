#!/usr/bin/env bash
# The GPU measurements that issues 13 and 14 still need, in priority order, as one
# command for a session that is lent a GPU machine (one `run` call of at most 10 min).
# Each step has its own time limit; a step cut short still leaves its JSON (the scripts
# write after every cell / round). Results are copied to $OUT (the device tool's folder)
# and also stay under benchmarks/results/.
#
# On the GPU machine `python3` has CUDA JAX, diffrax, equinox, optax, scipy, networkx,
# matplotlib, but not tqdm or pyarrow. Prepare here, once:
#     .venv/bin/pip install --target .gpu_site tqdm       # .gpu_site is git-ignored
# then call the device tool with carry [".gpu_site"] and the command
#     bash benchmarks/gpu_session.sh 540
# (the argument: seconds the whole script may take; default 540).
set -u
BUDGET=${1:-540}
START=$(date +%s)
export PYTHONPATH=.:.gpu_site
PY=${PY:-python3}  # the GPU machine's python; PY=.venv/bin/python to try it here
OUT=${OUT:-benchmarks/results/local/gpu}
mkdir -p "$OUT" benchmarks/results
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
step() {  # step LIMIT_SECONDS NAME COMMAND...
    local limit=$1 name=$2; shift 2
    local l; l=$(left)
    (( l < 60 )) && { echo "== $name: skipped (only ${l}s left)"; return; }
    (( limit > l )) && limit=$l
    echo "== $name (limit ${limit}s) $(date -u +%T)"
    timeout --signal=INT --kill-after=20 "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name: exit $? after $(( $(date +%s) - START ))s total"
    tail -n 15 "$OUT/$name.log"
}
"$PY" -c "import jax; print(jax.devices())" | tee "$OUT/devices.txt"
# issue 13: the plain engine (narrowing), the same without narrowing, naive vmap; 4096 inits
step 300 sweep_gpu_plain "$PY" benchmarks/sweep_throughput.py --inits 4096 \
    --arms engine engine-vmap-full naive --repeats 1 --no-error \
    --out benchmarks/results/sweep_throughput_gpu_plain.json
# issue 14: g with bias at the paper's grid, 100 seeds per r (vmap flow phase, batched Newton)
step 240 loss_levels_g_bias "$PY" benchmarks/channels_loss_levels.py --seeds 100 --activations g --biases 1 \
    --engine vmap --max-flow-steps 1000 --max-steps 2000 --max-minutes 3 --tag paper_g_bias_gpu_seeds100 \
    --out benchmarks/results/channels_loss_levels_paper_g_bias_gpu_seeds100.json
step 240 loss_levels_softplus_bias "$PY" benchmarks/channels_loss_levels.py --seeds 100 --activations softplus \
    --biases 1 --engine vmap --max-flow-steps 1000 --max-steps 2000 --max-minutes 3 \
    --tag paper_softplus_bias_gpu_seeds100 --out benchmarks/results/channels_loss_levels_paper_softplus_bias_gpu_seeds100.json
for s in 2 0.1 10 0.5; do
    step 240 roughness_s$s "$PY" benchmarks/channels_roughness.py --samples 10000 --teachers 4 --inits 25 \
        --scalings $s --engine vmap --max-flow-steps 1000 --max-steps 2000 --max-minutes 3 \
        --tag paper_s${s}_gpu_runs100 --out benchmarks/results/channels_roughness_paper_s${s}_gpu_runs100.json
done
cp benchmarks/results/*gpu*.json benchmarks/results/*gpu*.png "$OUT"/ 2>/dev/null
echo "== done after $(( $(date +%s) - START ))s"
