#!/usr/bin/env bash
# Start a one-node SLURM cluster on this machine (for tests/workflow/test_slurm.py in CI).
#
# As root: installs Debian's slurm-wlm + munge (if missing), writes /etc/slurm/slurm.conf for
# this host (CPUs, sockets, cores and memory as `slurmd -C` reports them; no accounting
# database; select/cons_tres; one default partition), creates the munge key, starts munged,
# slurmctld and slurmd, and waits until `sinfo` shows the node idle.
# Idempotent: run it again and it only starts what is not running (a changed slurm.conf
# restarts the SLURM daemons it started). Leaves out: cgroups (containers rarely allow them:
# memory is scheduled, not enforced), GPUs (GRES), accounting (job status comes from squeue,
# see profiles/slurm/config.yaml) and more than one node.
set -euo pipefail

CONF=/etc/slurm/slurm.conf
LOGS=(/var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log /var/log/munge/munged.log)
WAIT_S=${SLURM_UP_WAIT_S:-60}

fail() {
    echo "slurm_up.sh: ERROR: $*" >&2
    for log in "${LOGS[@]}"; do
        [[ -r $log ]] && { echo "---- last lines of $log" >&2; tail -n 25 "$log" >&2 || true; }
    done
    exit 1
}

# A daemon is running when its pid file names a live process of that program.
running() {  # running NAME PIDFILE
    local pid
    [[ -f $2 ]] || return 1
    pid=$(cat "$2" 2>/dev/null) || return 1
    [[ -n $pid && -r /proc/$pid/comm && $(cat "/proc/$pid/comm") == "$1" ]]
}

stop() {  # stop NAME PIDFILE: end the daemon that the pid file names (this script started it)
    local pid i
    running "$1" "$2" || return 0
    pid=$(cat "$2")
    kill "$pid"
    for i in $(seq 50); do running "$1" "$2" || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}

[[ $(id -u) -eq 0 ]] || fail "must run as root (it installs packages and starts daemons)"

# -- packages -------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
        || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    echo "slurm_up.sh: installing slurm-wlm and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || fail "apt-get update failed"
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null \
        || fail "apt-get install slurm-wlm munge failed"
fi

# -- munge ----------------------------------------------------------------------------------
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! running munged /run/munge/munged.pid; then
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged || fail "munged did not start"
fi
for _ in $(seq 50); do munge -n </dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
munge -n </dev/null | unmunge >/dev/null 2>&1 || fail "munge cannot encode/decode a credential"

# -- slurm.conf -----------------------------------------------------------------------------
host=$(hostname -s)
# `slurmd -C` prints this machine's node line: NodeName=... CPUs=... RealMemory=...
hardware=$(slurmd -C | head -n 1 | sed -E "s/^NodeName=[^ ]+ //")
[[ $hardware == CPUs=* ]] || fail "cannot read this machine's CPUs and memory from 'slurmd -C'"
new_conf=$(cat <<EOF
# Written by .ci/slurm_up.sh: a one-node cluster on this host for the workflow tests.
ClusterName=scalerl-ci
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# No cgroups: containers often mount them read-only or not at all. Processes are tracked
# through /proc, tasks are not bound to cores, memory is scheduled but not enforced.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No accounting database: sacct has nothing to report, so job status comes from squeue
# (profiles/slurm: slurm-status-command squeue). squeue shows a finished job for MinJobAge
# seconds; snakemake-executor-plugin-slurm keeps to squeue only while MinJobAge >= 3 x its
# init_seconds_before_status_checks (40 s by default).
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MinJobAge=300
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdTimeout=60
NodeName=${host} NodeAddr=127.0.0.1 ${hardware} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF
)
install -d /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
if [[ ! -f $CONF ]] || [[ $(cat "$CONF") != "$new_conf" ]]; then
    echo "slurm_up.sh: writing $CONF (node $host: $hardware)"
    printf '%s\n' "$new_conf" >"$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
    stop slurmd /run/slurmd.pid
    stop slurmctld /run/slurmctld.pid
fi

# -- daemons --------------------------------------------------------------------------------
if ! running slurmctld /run/slurmctld.pid; then
    /usr/sbin/slurmctld || fail "slurmctld did not start"
fi
if ! running slurmd /run/slurmd.pid; then
    /usr/sbin/slurmd || fail "slurmd did not start"
fi

state=""
for _ in $(seq $((WAIT_S * 2))); do
    state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
    case $state in
        idle | mixed | allocated | completing) break ;;
        down* | drain* | drained*) scontrol update nodename="$host" state=resume 2>/dev/null || true ;;
    esac
    sleep 0.5
done
case $state in
    idle | mixed | allocated | completing) ;;
    *) fail "node $host is '${state:-not listed}' after ${WAIT_S}s (expected idle)" ;;
esac
echo "slurm_up.sh: SLURM is up: $(sinfo -h -o '%P %a %D nodes %T %c CPUs %m MB')"
