#!/bin/bash
# The GPU machine check of docs/training.md ("Tested with"): the GPU offered, one port space for
# two agents, torch's @record on CUDA, DDP over gloo with 8 workers on each of two nodes, and
# DDP over NCCL, against a built binary
# ($FTDRIVE_BIN, default target/release/ftdrive). Run from the repository root on a machine
# with one NVIDIA GPU and PyTorch: `bash scripts/gpu-check.sh`.
set -u
B=$(realpath "${FTDRIVE_BIN:-target/release/ftdrive}")
W=$(mktemp -d); export FTDRIVE_STATE_DIR=$W/state HOME=$W
R=${OUT:-$W}
say() { echo; echo "=== $*"; }
failed=0
fail() { echo "FAILED: $*"; failed=1; }
say env; nvidia-smi -L 2>&1 | head -3; python3 -c "import torch; print('torch', torch.__version__, torch.cuda.is_available())"
cat /proc/sys/kernel/random/boot_id; readlink /proc/self/ns/net
say real cluster: head + two agents on this machine, two jobs listening on MASTER_PORT
$B head --listen 127.0.0.1:0 --state-dir $W/head > $W/head.log 2>&1 & H=$!
for i in 1 2 3 4 5 6 7 8 9 10; do [ -s $W/head/head.url ] && break; sleep 0.5; done
export FTDRIVE_HEAD=$(cat $W/head/head.url) FTDRIVE_TOKEN=$(cat $W/head/token)
for n in n1 n2; do FTDRIVE_AGENT_TOKEN=$(cat $W/head/agent-token) $B node --name $n --resources cpu=1 --gpus none --state-dir $W/$n --work-dir $PWD > $W/$n.log 2>&1 & done
sleep 2; $B nodes
mkdir -p $W/ports
cat > $W/listen.py <<'EOF'
import os, pathlib, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", int(os.environ["MASTER_PORT"]))); s.listen()
out = pathlib.Path(sys.argv[1]); (out / os.environ["FTDRIVE_JOB_ID"]).write_text(os.environ["MASTER_PORT"])
t = time.time() + 20
while len(list(out.iterdir())) < 2 and time.time() < t: time.sleep(0.05)
EOF
for j in a b; do echo "{\"name\":\"$j\",\"command\":[\"python3\",\"$W/listen.py\",\"$W/ports\"],\"min_nodes\":1,\"max_nodes\":1,\"retries\":{\"user\":0}}" > $W/$j.json; $B submit --no-wait $W/$j.json; done
for j in j1 j2; do timeout 60 $B logs $j --actor $j/0 --follow >/dev/null 2>&1; echo "$j exit $?"; done
$B status; head -c 300 $W/ports/*; echo
[ -s $W/ports/j1 ] && [ -s $W/ports/j2 ] && [ "$(cat $W/ports/j1)" != "$(cat $W/ports/j2)" ] || fail "two jobs, two ports"
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
unset FTDRIVE_HEAD FTDRIVE_TOKEN
say "@record on CUDA: the worker's exception is the ledger's evidence"
cat > $W/rec.py <<'EOF'
import torch
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    x = torch.ones(4, device="cuda").sum()
    raise ValueError(f"loss is NaN on {torch.cuda.get_device_name(0)} after {x.item()}")
main()
EOF
echo "{\"name\":\"rec\",\"command\":[\"python3\",\"$W/rec.py\"],\"min_nodes\":1,\"max_nodes\":1,\"bundle\":{\"cpu\":1,\"gpu\":1},\"retries\":{\"user\":0}}" > $W/rec.json
timeout 120 $B submit --local-nodes 1 $W/rec.json > $W/rec.out 2>&1; echo "submit exit $?"; grep -E "EVIDENCE|user_error|ValueError" $W/rec.out | cut -c1-300
grep -q 'saying "ValueError: loss is NaN on NVIDIA' $W/rec.out || fail "the exception as evidence"
say "DDP over gloo, 8 workers on each of two nodes (a CPU bundle: no GPU visible)"
echo "{\"name\":\"ddp8\",\"command\":[\"python3\",\"examples/ddp_train.py\",\"--steps\",\"60\"],\"min_nodes\":2,\"max_nodes\":2,\"nproc_per_node\":8,\"bundle\":{\"cpu\":4},\"retries\":{\"user\":0}}" > $W/ddp8.json
timeout 180 $B submit --local-nodes 2 $W/ddp8.json > $W/ddp8.out 2>&1 || fail "8 workers on each of two nodes"; tail -3 $W/ddp8.out
ranks=$(find $W/state/local -path '*/logs/*' -name 'attempt-1.log' -exec cat {} + | grep -o '^\[rank[0-9]*\]' | sort -u | wc -l)
echo "ranks in the attempts' logs: $ranks"; [ "$ranks" = 16 ] || fail "16 ranks, each line behind its prefix"
say DDP on the GPU over NCCL, one rank
echo "{\"name\":\"ddp-gpu\",\"command\":[\"python3\",\"examples/ddp_train.py\",\"--steps\",\"100\"],\"min_nodes\":1,\"max_nodes\":1,\"bundle\":{\"cpu\":1,\"gpu\":1}}" > $W/ddp.json
timeout 180 $B submit --local-nodes 1 $W/ddp.json > $W/ddp.out 2>&1 || fail "DDP over NCCL"; tail -5 $W/ddp.out
grep -rh "(nccl" $W/state/local* 2>/dev/null | head -3
cp $W/*.out $W/*.log $R/ 2>/dev/null
echo; [ $failed = 0 ] && echo "all checks passed"
exit $failed
