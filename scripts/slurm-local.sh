#!/usr/bin/env bash
# Stand up (or stop) a single-node SLURM cluster on this machine, to run the workflow's SLURM
# profile for real in tests. Debian/Ubuntu, root; works without systemd and without cgroups.
#
#   bash scripts/slurm-local.sh install   # apt-get the daemons (slurmctld, slurmd, munge, clients)
#   bash scripts/slurm-local.sh start     # write the config, start munged, slurmctld, slurmd
#   bash scripts/slurm-local.sh status    # daemons and sinfo
#   bash scripts/slurm-local.sh stop      # stop the daemons this script started
#
# Every subcommand is idempotent. The node offers all CPUs, the memory slurmd detects and two fake
# GPUs (character devices, enough for the scheduler to place `--gpus=1` jobs and set
# CUDA_VISIBLE_DEVICES), in two partitions, cpu (the default) and gpu, as the workflow's SLURM
# profile expects. State, logs and pid files live in $FEDKD_SLURM_DIR (default
# /var/tmp/fedkd-slurm). The config goes to /etc/slurm (where sbatch/squeue look for it); an
# existing slurm.conf that this script did not write is never touched.
set -euo pipefail

STATE_DIR="${FEDKD_SLURM_DIR:-/var/tmp/fedkd-slurm}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
GRES_CONF="$CONF_DIR/gres.conf"
MARKER="# written by fedkd scripts/slurm-local.sh"
PACKAGES=(slurmctld slurmd slurm-client munge)

say() { echo "slurm-local: $*"; }
die() {
  echo "slurm-local: error: $*" >&2
  exit 1
}

need_root() {
  [ "$(id -u)" = "0" ] || die "must run as root (it installs packages and starts system daemons)"
}

alive() { # pid file → true when its process is running
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

cmd_install() {
  need_root
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
    command -v sbatch >/dev/null && command -v munged >/dev/null; then
    say "packages already installed ($(slurmctld -V))"
    return 0
  fi
  command -v apt-get >/dev/null || die "apt-get not found: install ${PACKAGES[*]} by hand"
  say "installing ${PACKAGES[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
  say "installed $(slurmctld -V)"
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "munged already running"
    return 0
  fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 0755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  runuser -u munge -- /usr/sbin/munged
  touch "$STATE_DIR/munged.started-here"
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && {
      say "munged started"
      return 0
    }
    sleep 0.1
  done
  die "munged did not come up (see /var/log/munge/munged.log)"
}

write_config() {
  if [ -f "$CONF" ] && ! grep -qF "$MARKER" "$CONF"; then
    die "$CONF exists and was not written by this script; refusing to replace a real cluster's config"
  fi
  mkdir -p "$CONF_DIR" "$STATE_DIR"/{ctld,spool,log,gpu}
  # fake GPUs: gres.conf only accepts character devices (1,3 is /dev/null's major/minor)
  for i in 0 1; do
    [ -c "$STATE_DIR/gpu/gpu$i" ] || mknod "$STATE_DIR/gpu/gpu$i" c 1 3
  done
  local cpus mem
  cpus="$(nproc)"
  mem="$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')"
  [ -n "$mem" ] || die "could not read RealMemory from 'slurmd -C'"
  cat >"$CONF" <<EOF
$MARKER
ClusterName=fedkd-local
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# no systemd, no usable cgroups, no accounting database on a test machine
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# keep finished jobs visible to squeue (the executor's status command) for 10 minutes
MinJobAge=600
StateSaveLocation=$STATE_DIR/ctld
SlurmdSpoolDir=$STATE_DIR/spool
SlurmctldPidFile=$STATE_DIR/slurmctld.pid
SlurmdPidFile=$STATE_DIR/slurmd.pid
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd.log
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN
# the partitions profiles/slurm names, both on this one node
PartitionName=cpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=localhost MaxTime=INFINITE State=UP
EOF
  cat >"$GRES_CONF" <<EOF
$MARKER
NodeName=localhost Name=gpu File=$STATE_DIR/gpu/gpu[0-1]
EOF
  say "wrote $CONF ($cpus CPUs, ${mem} MB, 2 fake GPUs, partitions cpu and gpu)"
}

wait_for_node() {
  for _ in $(seq 60); do
    state="$(sinfo -h -N -n localhost -o %T 2>/dev/null | head -n 1 || true)"
    case "$state" in
    idle* | mixed* | allocated*)
      say "node localhost is $state"
      return 0
      ;;
    esac
    sleep 0.5
  done
  die "node did not become idle (state '${state:-unknown}'); see $STATE_DIR/log/"
}

cmd_start() {
  need_root
  command -v slurmctld >/dev/null || die "SLURM is not installed: run '$0 install' first"
  mkdir -p "$STATE_DIR"
  start_munge
  if alive "$STATE_DIR/slurmctld.pid" && alive "$STATE_DIR/slurmd.pid"; then
    say "slurmctld and slurmd already running"
    wait_for_node
    return 0
  fi
  write_config
  if ! alive "$STATE_DIR/slurmctld.pid"; then
    slurmctld -c # -c: start clean, dropping stale job state from a previous cluster
  fi
  if ! alive "$STATE_DIR/slurmd.pid"; then
    slurmd -N localhost # the node name differs from the host name
  fi
  wait_for_node
}

stop_pid() { # name pidfile
  if alive "$2"; then
    local pid
    pid="$(cat "$2")"
    kill "$pid"
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    say "stopped $1 (pid $pid)"
  else
    say "$1 not running"
  fi
}

cmd_stop() {
  need_root
  stop_pid slurmd "$STATE_DIR/slurmd.pid"
  stop_pid slurmctld "$STATE_DIR/slurmctld.pid"
  # munged only if this script started it (another service may rely on a munged it found running)
  if [ -f "$STATE_DIR/munged.started-here" ]; then
    stop_pid munged /run/munge/munged.pid
    rm -f "$STATE_DIR/munged.started-here"
  fi
}

cmd_status() {
  local rc=0
  for d in slurmctld slurmd; do
    if alive "$STATE_DIR/$d.pid"; then
      echo "$d: running (pid $(cat "$STATE_DIR/$d.pid"))"
    else
      echo "$d: stopped"
      rc=1
    fi
  done
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then echo "munged: running"; else
    echo "munged: stopped"
    rc=1
  fi
  [ "$rc" = 0 ] && sinfo
  return "$rc"
}

case "${1:-}" in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
  echo "usage: $0 {install|start|stop|status}" >&2
  exit 2
  ;;
esac
