#!/bin/bash
# Session 18 device run: the GPU part of the e2e suite, then a fresh cuda calibration
# (collect + fit, cost model v8), then tuned row kernels if time is left. Writes under $OUT.
export PYTHONPATH=$PWD/src:$PWD
unset TRITON_INTERPRET
start=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
timeout 150 python -m pytest -o addopts="" -q -n 12 -p no:cacheprovider tests/cuda \
  tests/unit/test_driver.py tests/e2e/test_{examples,contracts,shapes,narrow_dtypes}.py \
  -k "cuda or static or launcher or cubin or plain" > $OUT/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -1 $OUT/gpu_tests.log) at $(( $(date +%s) - start )) s"
timeout 330 python -m benchmarks.calibrate --target cuda --collect --fit --budget ${CAL_BUDGET:-12} \
  --db $OUT/calibration.sqlite3 --profiles $OUT/profiles > $OUT/calibrate.log 2>&1
echo "calibrate rc=$? at $(( $(date +%s) - start )) s"; tail -25 $OUT/calibrate.log
for f in benchmarks/results/calibration-cuda-*; do [ $f -nt $OUT/gpu_tests.log ] && cp $f $OUT/; done
left=$(( 560 - ($(date +%s) - start) ))
if [ $left -gt 90 ]; then
  timeout $left python -m benchmarks.cuda_suite --out $OUT --only softmax,layernorm,rmsnorm \
    --tune 20 --budget-s $(( left - 80 )) > $OUT/suite_rows.log 2>&1
  echo "rows suite rc=$? at $(( $(date +%s) - start )) s"
fi
