#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for testing quill under srun (issue 44): Debian's slurm-wlm
# (slurmctld + slurmd) and munge, every file under one state directory, the daemons as root on ports of
# its choosing, so that it runs beside anything else and leaves nothing behind after `stop`.
#   scripts/slurm/one-node-cluster.sh start DIR [CPUS]   # prints the SLURM_CONF to export; waits until the node is idle
#   scripts/slurm/one-node-cluster.sh stop DIR
# Needs: apt-get install slurm-wlm munge (setup.sh's test set-up installs them). Launch MPI programs with
# `SLURM_CONF=DIR/slurm.conf srun --mpi=pmix -n N ...`: Open MPI 4.1 finds Slurm's PMIx server (mpi/pmix).
# CPUS (default 8) is the node's declared CPU count: more than the machine has, so that 4 ranks start on a
# 2-core runner (SlurmdParameters=config_overrides lets slurmd accept the declared count).
set -euo pipefail
cmd=${1:?start|stop}; dir=${2:?state directory}
stop_cluster() {
  for p in slurmd slurmctld munged; do
    [ -f "$dir/$p.pid" ] && kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
  done
  sleep 1
  for p in slurmd slurmctld munged; do
    [ -f "$dir/$p.pid" ] && kill -9 "$(cat "$dir/$p.pid")" 2>/dev/null || true
    rm -f "$dir/$p.pid"
  done
}
if [ "$cmd" = stop ]; then stop_cluster; exit 0; fi
[ "$cmd" = start ] || { echo "one-node-cluster.sh: unknown command '$cmd' (start|stop)" >&2; exit 2; }
for b in slurmctld slurmd munged srun sinfo; do
  command -v "$b" >/dev/null || { echo "one-node-cluster.sh: $b not found (apt-get install slurm-wlm munge)" >&2; exit 3; }
done
cpus=${3:-8}
dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chmod 700 "$dir/munge"
# A private munge key and daemon: the machine's own munged (if any) and key are left alone.
[ -f "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none; chmod 400 "$dir/munge/munge.key"; }
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" 2>>"$dir/munged.log"
# Two free ports for the controller and the node daemon.
read -r ctl_port node_port < <(python3 - <<'PY' 2>/dev/null || echo "26817 26818"
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])
PY
)
host=$(hostname -s)
cat > "$dir/slurm.conf" <<CONF
ClusterName=quilltest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctl_port
SlurmdPort=$node_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=10
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF" -i 2>>"$dir/slurmctld.log"
slurmd -f "$SLURM_CONF" 2>>"$dir/slurmd.log"
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %t 2>/dev/null | head -1 || true)
  [ "$state" = idle ] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.5
done
echo "one-node-cluster.sh: the node did not become idle in 30 s (state '${state:-none}'); logs:" >&2
tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
stop_cluster
exit 1
