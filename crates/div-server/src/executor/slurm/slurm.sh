#!/bin/bash
# The batch script of one div run on Slurm, written by div-server (docs/slurm.md). It runs
# div's own supervisor once on each node of the job (one task a node), each in
# RUN_DIR/nodes/RANK with that node's rank and addresses, then gathers the nodes' ends into
# RUN_DIR/end.json: the run's exit code comes from the files written here, not from sacct.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export SLURM_EXPORT_ENV=ALL
RUN_DIR=@RUN_DIR@
SUPERVISE=(@SUPERVISE@)
# A run runs once. div submits with --no-requeue; should Slurm start this job again all the
# same (an administrator's `scontrol requeue`), nothing runs a second time.
if [ -e "$RUN_DIR/started" ]; then
  echo "div: Slurm started job $SLURM_JOB_ID again; a div run runs once, so nothing runs now" >&2
  exit 0
fi
# When the job started running: the run is billed from here, and its limits run from here on
# every node (docs/slurm.md).
date +%s%3N > "$RUN_DIR/started.partial" && mv "$RUN_DIR/started.partial" "$RUN_DIR/started"
# scancel and the time limit signal this shell too (maybe before srun starts): mark it and
# pass it on. The mark makes the run canceled: Slurm stopped the job from outside div (div's
# own stops and ceilings end the run before any signal from Slurm).
step=""
trap ': > "$RUN_DIR/slurm.signaled"; [ -n "$step" ] && kill -TERM "$step" 2>/dev/null' TERM INT USR1
addrs=""
hosts=""
for h in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do
  a="$(scontrol -o show node "$h" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')"
  if [ -z "$a" ] || [ "$a" = "$h" ]; then
    a="$(getent ahostsv4 "$h" | awk 'NR==1{print $1}')"
  fi
  addrs="${addrs:+$addrs,}${a:-$h}"
  hosts="${hosts:+$hosts,}$h"
done
# Where each node's slurmd keeps its pid (`%n`, `%h` filled in on the node): a node's
# supervisor says it is well only while that slurmd is there.
DIV_SLURMD_PID_FILE="$(scontrol show config 2>/dev/null | sed -n 's/^SlurmdPidFile *= *//p')"
export DIV_ADDRS="$addrs" DIV_HOSTS="$hosts" DIV_RUN_DIR="$RUN_DIR" DIV_SLURMD_PID_FILE
# A node whose run fails on its own exits non-zero, and srun then stops the others. A node
# stopped by the control plane's decision (div stop, the ceiling, the time limit, a lost
# node) exits 0: every node was told at the same moment, and none ends the others.
srun --kill-on-bad-exit=1 --ntasks-per-node=1 --nodes="$SLURM_JOB_NUM_NODES" /bin/bash -c '
  d="$DIV_RUN_DIR/nodes/$SLURM_NODEID"
  pf="$DIV_SLURMD_PID_FILE"
  pf="${pf//%n/${SLURMD_NODENAME:-}}"
  pf="${pf//%h/$(hostname -s)}"
  printf "rank=%s\nnodes=%s\naddrs=%s\nhosts=%s\ncuda=%s\njob=%s\nhost=%s\nslurmd_pid_file=%s\n" \
    "$SLURM_NODEID" "$SLURM_JOB_NUM_NODES" "$DIV_ADDRS" "$DIV_HOSTS" \
    "${CUDA_VISIBLE_DEVICES-}" "$SLURM_JOB_ID" "${SLURMD_NODENAME:-$(hostname)}" "$pf" > "$d/node.env"
  exec "$@" "$d"' div-node "${SUPERVISE[@]}" &
step=$!
# Wait for the nodes' supervisors to write their ends (a signal interrupts `wait`), then
# gather them.
while :; do
  wait "$step"
  rc=$?
  kill -0 "$step" 2>/dev/null || break
done
echo "$rc" > "$RUN_DIR/slurm.exit"
exec "${SUPERVISE[@]}" "$RUN_DIR"
