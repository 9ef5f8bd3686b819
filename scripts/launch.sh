#!/usr/bin/env bash
# Launches ndtrain on several hosts (docs/multinode.md): under Open MPI from a hostfile,
# or under Slurm with srun. It places R ranks on each node (tp innermost in the mesh, so
# tp groups of up to R ranks stay inside a node), gives every rank one thread per core
# it gets (runtime.threads = 0 then divides each node's cores by its own ranks), and
# passes the environment ndtrain needs.
#
#   scripts/launch.sh --hostfile HOSTS --ranks-per-node R [--mpirun-args "..."] [--dry-run] -- ndtrain ARGS...
#   scripts/launch.sh --slurm [--dry-run] -- ndtrain ARGS...     (inside an allocation: sbatch / salloc)
#
# HOSTS is Open MPI's hostfile ("host-a slots=8" per line). --mpirun-args adds options
# (e.g. "--mca btl_tcp_if_include eth0" to choose the network). Under Slurm the rank
# layout comes from the allocation (SLURM_NTASKS_PER_NODE, SLURM_CPUS_PER_TASK); srun
# starts the ranks through PMIx. --dry-run prints the command instead of running it.
set -euo pipefail
mode="" hostfile="" per_node="" extra="" dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hostfile) mode=hostfile; hostfile="$2"; shift 2 ;;
    --slurm) mode=slurm; shift ;;
    --ranks-per-node) per_node="$2"; shift 2 ;;
    --mpirun-args) extra="$2"; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; break ;;
    *) echo "launch.sh: unknown option $1 (see the comment at the top)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "launch.sh: give the ndtrain command after --" >&2; exit 2; }
case "$mode" in
  hostfile)
    [ -r "$hostfile" ] || { echo "launch.sh: --hostfile $hostfile cannot be read" >&2; exit 2; }
    [[ "$per_node" =~ ^[1-9][0-9]*$ ]] || { echo "launch.sh: --ranks-per-node must be a positive number, got '$per_node'" >&2; exit 2; }
    nodes=$(grep -cvE '^\s*(#|$)' "$hostfile")
    cmd=(mpirun --hostfile "$hostfile" -np $((nodes * per_node)) --map-by "ppr:$per_node:node" --bind-to none
         -x PATH -x LD_LIBRARY_PATH)
    [ "$(id -u)" -eq 0 ] && cmd+=(--allow-run-as-root)
    # shellcheck disable=SC2206
    [ -n "$extra" ] && cmd+=($extra)
    ;;
  slurm)
    [ -n "${SLURM_JOB_ID:-}" ] || { echo "launch.sh: --slurm runs inside a Slurm allocation (sbatch or salloc)" >&2; exit 2; }
    cmd=(srun --mpi=pmix --cpu-bind=none)
    ;;
  *) echo "launch.sh: choose --hostfile FILE or --slurm" >&2; exit 2 ;;
esac
cmd+=("$@")
if [ "$dry" -eq 1 ]; then printf '%q ' "${cmd[@]}"; echo; else exec "${cmd[@]}"; fi
