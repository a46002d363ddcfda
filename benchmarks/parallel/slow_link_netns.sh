#!/usr/bin/env bash
# Flat vs hierarchical all-to-all over an emulated slow inter-node link, on one machine.
#
# Two network namespaces act as two "nodes", joined by a veth pair whose both ends are throttled
# with a tc token bucket (tbf: a rate limit; netem, for added delay, is often not in the kernel). mpirun starts in the first namespace; the ranks of the second
# are launched through `ip netns exec` (an rsh agent), so OpenMPI sees two hosts: ranks on the
# same node talk through shared memory (vader), ranks on different nodes through TCP over the
# throttled veth, and MPI_COMM_TYPE_SHARED finds the two real nodes. Each namespace also gets its
# own UTS namespace and hostname (sy-a2a-node0/1), since OpenMPI tells nodes apart by name. Addresses are 10.231.77.1
# and .2, inside the namespaces this script creates (and deletes on exit); nothing else is
# touched. Needs root (CAP_NET_ADMIN).
#
#   benchmarks/parallel/slow_link_netns.sh [build-dir] [rate, default 1gbit]
#                                          [extra sy_all_to_all_bench flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
rate=${2:-1gbit}
shift $(( $# < 2 ? $# : 2 ))
bench="$(pwd)/$build/benchmarks/parallel/sy_all_to_all_bench"
[[ -x "$bench" ]] || { echo "missing $bench (configure with -DSY_BUILD_BENCHMARKS=ON)" >&2; exit 1; }

ns0=sy_a2a_node0
ns1=sy_a2a_node1
work=$(mktemp -d)
cleanup() {
  ip netns del "$ns0" 2>/dev/null || true
  ip netns del "$ns1" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$ns0"
ip netns add "$ns1"
ip link add sya2a0 netns "$ns0" type veth peer name sya2a1 netns "$ns1"
ip -n "$ns0" addr add 10.231.77.1/24 dev sya2a0
ip -n "$ns1" addr add 10.231.77.2/24 dev sya2a1
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set sya2a0 up
ip -n "$ns1" link set sya2a1 up
tc -n "$ns0" qdisc add dev sya2a0 root tbf rate "$rate" burst 256kb latency 50ms
tc -n "$ns1" qdisc add dev sya2a1 root tbf rate "$rate" burst 256kb latency 50ms

# The rsh agent: "host" 10.231.77.2 is the second namespace.
cat >"$work/agent.sh" <<AGENT
#!/usr/bin/env bash
host=\$1; shift
case "\$host" in
  10.231.77.2) exec ip netns exec $ns1 unshare --uts /bin/sh -c "hostname sy-a2a-node1; \$*" ;;
  *) exec ip netns exec $ns0 unshare --uts /bin/sh -c "hostname sy-a2a-node0; \$*" ;;
esac
AGENT
chmod +x "$work/agent.sh"
printf '10.231.77.1 slots=2\n10.231.77.2 slots=2\n' >"$work/hosts"

echo "## slow link: tbf rate $rate each way, $(date -u '+%Y-%m-%d %H:%M UTC')"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ip netns exec "$ns0" unshare --uts /bin/sh -c 'hostname sy-a2a-node0; exec "$@"' sh \
  mpirun --hostfile "$work/hosts" -np 4 --map-by slot --bind-to none \
  --mca plm_rsh_agent "$work/agent.sh" \
  --mca btl self,vader,tcp --mca btl_tcp_if_include 10.231.77.0/24 \
  --mca oob_tcp_if_include 10.231.77.0/24 \
  "$bench" --ranks-per-node 0 "$@"
