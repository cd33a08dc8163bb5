#!/bin/bash
# The trainer end to end on a CUDA machine: `python -m training` on a built version with
# TRAIN_COMPILE=true (AMP and channels_last left on auto), SIGKILLed as soon as its first
# checkpoint is committed, then rerun with the same RUN_ID, which must resume and finish.
# Needs only torch, numpy and matplotlib where it runs (no store: the version is given by id).
#   bench/gpu_e2e.sh DATA_ROOT DATASET VERSION OUT_DIR
# e.g. after `laketrain sample-lake && laketrain build digits` here, with DATA_ROOT copied over.
set -u
data_root=$(realpath "$1") dataset=$2 version=$3 out=$(realpath "$4")
ckpt=$out/ckpt
export PYTHONUNBUFFERED=1 DATA_ROOT=$data_root DATASET_NAME=$dataset DATASET_VERSION=$version
export CHECKPOINT_URL=file://$ckpt RUN_ID=gpu-e2e
export TRAIN_EPOCHS=${TRAIN_EPOCHS:-40} TRAIN_CHECKPOINT_EVERY=${TRAIN_CHECKPOINT_EVERY:-100}
export TRAIN_COMPILE=${TRAIN_COMPILE:-true}
unset METADATA_DB_URL
py=${PYTHON:-python3}
(timeout 120 "$py" -m training >"$out/e2e_first.log" 2>&1) &
first=$!
for _ in $(seq 1 1200); do [ -e "$ckpt/$RUN_ID/latest" ] && break; sleep 0.1; done
pkill -9 -f -- "-m training"
wait "$first"
echo "killed with: $(ls "$ckpt/$RUN_ID" | tr '\n' ' ')"
timeout 120 "$py" -m training >"$out/e2e_resume.log" 2>&1
rc=$?
echo "resume exit code $rc"
grep -hE "resuming|model |epoch [0-9]+:" "$out/e2e_first.log" "$out/e2e_resume.log" | sed -n '1,3p;$p' | cut -c1-240
cp "$ckpt/$RUN_ID/result.json" "$out/e2e_result.json" 2>/dev/null
grep -q "resuming from checkpoint" "$out/e2e_resume.log" && [ $rc -eq 0 ]
