#!/bin/bash
# Session 19 device run: the GPU part of the e2e suite at HEAD (cuda cost model v9 was not
# run on the GPU before), then plain calls of the attention and row-kernel suites (no
# tuning). Keeps $OUT to a few files (the device returns at most ~8).
export PYTHONPATH=$PWD/src:$PWD
unset TRITON_INTERPRET
start=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
timeout 170 python -m pytest -o addopts="" -q -n 12 -p no:cacheprovider tests/cuda \
  tests/unit/test_driver.py tests/e2e/test_{examples,contracts,shapes,narrow_dtypes}.py \
  -k "cuda or static or launcher or cubin or plain" > $OUT/gpu_tests.log 2>&1
echo "tests rc=$? $(tail -1 $OUT/gpu_tests.log) at $(( $(date +%s) - start )) s"
left=$(( 570 - ($(date +%s) - start) ))
timeout $left python -m benchmarks.cuda_suite --out $OUT \
  --only ${ONLY:-attention,rmsnorm,layernorm,softmax,cross_entropy} \
  --budget-s $(( left - 40 )) > $OUT/suite.log 2>&1
echo "suite rc=$? at $(( $(date +%s) - start )) s"
grep -E "plain call|SDPA|torch.compile|hand-triton" $OUT/*.md | head -60
