#!/usr/bin/env bash
# Emulated hosts on one machine, for the multi-host tests and benchmarks (docs/multinode.md).
# Each host is a Linux network namespace ndt-hostN with its own UTS namespace (its own
# host name, ndt-hostN), joined by a veth link to the bridge ndtbr0; the addresses live
# only on those links (10.77.0.1 on the bridge, 10.77.0.(10+N) on host N). Open MPI
# launches ranks into the hosts through scripts/host-agent.sh (its rsh agent), and since
# they are different nodes to it, its ranks talk TCP between hosts. Needs root.
#
#   hosts.sh up N             create hosts 1..N (removing earlier idle ones first; refused
#                             while a process still runs in one after 15 s: another job
#                             is using them)
#   hosts.sh down             remove everything this script made
#   hosts.sh link N up|down   restore or cut host N's link
#   hosts.sh shape RATE DELAY every link at RATE (e.g. 1gbit) with DELAY (e.g. 0.5ms) each way
#   hosts.sh kill N           kill every process on host N (a lost machine)
#   hosts.sh mpirun-args N R  the mpirun options for R ranks on each of hosts 1..N
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bridge=ndtbr0
uts_dir=/run/ndt-hosts

host_ip() { echo "10.77.0.$((10 + $1))"; }

kill_host() {  # every process in the namespace, waited for (a namespace lives while they do)
  for _ in $(seq 50); do
    local pids; pids=$(ip netns pids "$1" 2>/dev/null || true)
    [ -z "$pids" ] && return 0
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
}

down() {
  for ns in $(ip netns list 2>/dev/null | awk '/^ndt-host[0-9]+/ {print $1}'); do
    kill_host "$ns"
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^ndtv[0-9]+$' || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  if mountpoint -q "$uts_dir"; then
    for f in "$uts_dir"/uts-host*; do [ -e "$f" ] && umount "$f" 2>/dev/null; rm -f "$f"; done
    umount "$uts_dir" 2>/dev/null || true
  fi
}

up() {
  local n="$1"
  for ns in $(ip netns list 2>/dev/null | awk '/^ndt-host[0-9]+/ {print $1}'); do
    # A job that just ended may leave its daemons a moment to exit: wait up to 15 s.
    for _ in $(seq 150); do
      [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break
      sleep 0.1
    done
    if [ -n "$(ip netns pids "$ns" 2>/dev/null)" ]; then
      echo "hosts.sh: $ns still runs processes ($(ip netns pids "$ns" | tr '\n' ' ')): another job is using the" \
           "emulated hosts; wait for it, or end it with hosts.sh down" >&2
      exit 1
    fi
  done
  down
  mkdir -p "$uts_dir"
  mount --bind "$uts_dir" "$uts_dir"
  mount --make-private "$uts_dir"
  ip link add "$bridge" type bridge
  ip addr add 10.77.0.1/24 dev "$bridge"
  ip link set "$bridge" up
  for i in $(seq "$n"); do
    ip netns add "ndt-host$i"
    ip link add "ndtv$i" type veth peer name eth0 netns "ndt-host$i"
    ip link set "ndtv$i" master "$bridge" up
    ip -n "ndt-host$i" addr add "$(host_ip "$i")/24" dev eth0
    ip -n "ndt-host$i" link set eth0 up
    ip -n "ndt-host$i" link set lo up
    touch "$uts_dir/uts-host$i"
    unshare --uts="$uts_dir/uts-host$i" hostname "ndt-host$i"
  done
}

# Shapes a link's egress: netem (rate and delay) where the kernel has it, else tbf (the
# rate only; this says so once).
shape_dev() {  # ns|"" dev rate delay
  local in=(); [ -n "$1" ] && in=(ip netns exec "$1")
  if ! "${in[@]}" tc qdisc replace dev "$2" root netem rate "$3" delay "$4" 2>/dev/null; then
    [ -n "${warned:-}" ] || echo "hosts.sh: this kernel has no netem: links shaped to $3 by tbf, without the $4 delay" >&2
    warned=1
    "${in[@]}" tc qdisc replace dev "$2" root tbf rate "$3" burst 256kb latency 100ms
  fi
}

shape() {
  for ns in $(ip netns list | awk '/^ndt-host[0-9]+/ {print $1}'); do
    local i="${ns#ndt-host}"
    shape_dev "" "ndtv$i" "$1" "$2"
    shape_dev "$ns" eth0 "$1" "$2"
  done
}

mpirun_args() {
  local n="$1" r="$2" hosts=""
  for i in $(seq "$n"); do hosts="$hosts${hosts:+,}$(host_ip "$i"):$r"; done
  echo "--mca plm_rsh_agent $here/host-agent.sh --mca oob_tcp_if_include 10.77.0.0/24" \
       "--mca btl_tcp_if_include 10.77.0.0/24 --host $hosts"
}

case "${1:-}" in
  up) up "${2:?how many hosts}" ;;
  down) down ;;
  link) ip link set "ndtv${2:?which host}" "${3:?up or down}" ;;
  shape) shape "${2:?rate}" "${3:?delay}" ;;
  kill) kill_host "ndt-host${2:?which host}" ;;
  mpirun-args) mpirun_args "${2:?hosts}" "${3:?ranks per host}" ;;
  *) echo "usage: hosts.sh up N | down | link N up|down | shape RATE DELAY | kill N | mpirun-args N R" >&2; exit 2 ;;
esac
