#!/usr/bin/env bash
# One host's share of a multi-host g3 run: the node folder of this host (from `g3 bundle`) on local disk, then
# torchrun from it. Started once per host: by g3-train.sbatch (srun, one task per node), or by hand.
#
#   g3-node.sh BUNDLE [g3 train options...]
#
# BUNDLE is the `g3 bundle` folder as this host sees it. When it is on a filesystem the host can read, this
# host's node-NNNNN folder is copied to local disk first; when there is no shared filesystem, copy
# node-NNNNN to $G3_LOCAL/node-NNNNN on each host beforehand and it is used as it is.
#
# Environment:
#   NODE, NNODES       this host's node number and the host count (default: SLURM_NODEID, SLURM_NNODES)
#   G3_RDZV            rendezvous endpoint HOST:PORT, the same on every host (required)
#   G3_JOB             rendezvous id, the same on every host (default: SLURM_JOB_ID, else "g3")
#   G3_LOCAL           local folder of the node folders (default: ${TMPDIR:-/tmp}/g3-$G3_JOB)
#   G3_RESULTS         where to copy this host's run folder when done, as RESULTS/node-NNNNN (default: none)
#   G3_MAX_RESTARTS    torchrun --max-restarts: restarts of the worker group after a failure (default 3)
#   G3_PYTHON          the Python that has g3 and torch installed (default: python)
#   G3_RDZV_IS_HOST    1 on the host that serves the rendezvous (default: 1 on node 0, else 0)
#   G3_LOCAL_ADDR      this host's address as the other hosts reach it (torchrun --local-addr; default: none,
#                      torchrun resolves the host name)
set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: g3-node.sh BUNDLE [g3 train options...]" >&2
    exit 2
fi
bundle=$1
shift
node=${NODE:-${SLURM_NODEID:?set NODE (or run under srun)}}
nnodes=${NNODES:-${SLURM_NNODES:?set NNODES (or run under srun)}}
rdzv=${G3_RDZV:?set G3_RDZV=HOST:PORT, the rendezvous endpoint shared by every host}
job=${G3_JOB:-${SLURM_JOB_ID:-g3}}
python=${G3_PYTHON:-python}
name=$(printf 'node-%05d' "$node")
local_root=${G3_LOCAL:-${TMPDIR:-/tmp}/g3-$job}
here=$local_root/$name

if [[ ! -d $here ]]; then
    if [[ ! -d $bundle/$name ]]; then
        echo "g3-node.sh: $bundle/$name not found, and no $here on this host" >&2
        exit 2
    fi
    mkdir -p "$local_root"
    cp -r "$bundle/$name" "$here.partial.$$"  # renamed only once complete: a retried job never sees half a copy
    mv "$here.partial.$$" "$here"
fi

read -r procs planned_nodes < <("$python" -c 'import json, sys; b = json.load(open(sys.argv[1]))["bundle"]
print(len(b["ranks"]), b["nodes"])' "$here/plan/plan.json")
if [[ $planned_nodes != "$nnodes" ]]; then
    echo "g3-node.sh: $here was bundled for $planned_nodes hosts, this job has $nnodes" >&2
    exit 2
fi
cd "$here"
status=0
# node 0 serves the rendezvous (g3-train.sbatch points G3_RDZV at the job's first host); said explicitly, since
# torchrun's guess compares host names, which do not always identify hosts. --local-addr: the address the other
# hosts reach this one at (G3_LOCAL_ADDR), where the host name does not resolve to it.
is_host=${G3_RDZV_IS_HOST:-$([[ $node == 0 ]] && echo 1 || echo 0)}
local_addr=()
[[ -n ${G3_LOCAL_ADDR:-} ]] && local_addr=(--local-addr "$G3_LOCAL_ADDR")
"$python" -m torch.distributed.run --nnodes "$nnodes" --nproc-per-node "$procs" \
    --rdzv-backend c10d --rdzv-endpoint "$rdzv" --rdzv-id "$job" --max-restarts "${G3_MAX_RESTARTS:-3}" \
    --rdzv-conf "is_host=$is_host" "${local_addr[@]}" \
    -m g3cli train plan -o run "$@" || status=$?
if [[ -n ${G3_RESULTS:-} ]]; then
    mkdir -p "$G3_RESULTS/$name"
    cp -r run/. "$G3_RESULTS/$name/"
fi
exit "$status"
