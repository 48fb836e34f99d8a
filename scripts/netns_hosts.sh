# Hosts made of network namespaces on one machine, for tests and benchmarks that run sdp across
# hosts (tests/test_multihost.sh, bench/bandwidth.sh). Sourced, not run; needs root and iproute2.
#
#   hosts_up TAG          two hosts, TAG-h0 (PREFIX.1) and TAG-h1 (PREFIX.2), joined by a veth
#                         pair TAGv0-TAGv1; sets HOSTS_NET (a /24) and HOSTS_PREFIX
#   hosts_mpirun ARGS...  mpirun from the first host: 4 ranks, 2 per host, over TCP only, killed
#                         after HOSTS_TIMEOUT seconds (default 600)
#   hosts_limit RATE      caps each direction of the link with tbf (e.g. 100mbit; "none" lifts it)
#   hosts_link_down HOST  takes HOST's (h0 or h1) end of the link down
#   hosts_down            kills the hosts' processes, deletes the namespaces and the link
HOSTS_TAG=""

hosts_up() {
  HOSTS_TAG=$1
  HOSTS_PREFIX=10.77.$(($$ % 200))
  HOSTS_NET=$HOSTS_PREFIX.0/24
  ip netns add "$HOSTS_TAG-h0" || return 1
  ip netns add "$HOSTS_TAG-h1" || return 1
  ip link add "${HOSTS_TAG}v0" type veth peer name "${HOSTS_TAG}v1" || return 1
  local i ns
  for i in 0 1; do
    ns=$HOSTS_TAG-h$i
    ip link set "${HOSTS_TAG}v$i" netns "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$HOSTS_PREFIX.$((i + 1))/24" dev "${HOSTS_TAG}v$i"
    ip -n "$ns" link set "${HOSTS_TAG}v$i" up
  done
  # The rsh agent: "agent HOST command..." runs the command in HOST's namespace, as ssh would
  # run it on HOST. Each host also gets its own hostname (a UTS namespace): Open MPI names its
  # session directories and PMIx's shared-memory stores in /tmp after the hostname, so daemons
  # that all report this machine's name collide there and crash now and then.
  HOSTS_AGENT=$(mktemp /tmp/sdp-hosts-agent.XXXXXX)
  cat >"$HOSTS_AGENT" <<AGENT
#!/bin/sh
host=\$1; shift
exec ip netns exec "$HOSTS_TAG-\$host" unshare --uts /bin/sh -c "hostname \$host && \$*"
AGENT
  chmod +x "$HOSTS_AGENT"
}

# The keepalive settings are the README's for any multi-host run: a host whose link goes down
# is noticed in about 5 s (Open MPI's default: 300 s of silence, then 9 probes 20 s apart).
hosts_mpirun() {
  timeout "${HOSTS_TIMEOUT:-600}" ip netns exec "$HOSTS_TAG-h0" "${MPIEXEC:-mpirun}" --host h0:2,h1:2 -n 4 \
    --mca plm_rsh_agent "$HOSTS_AGENT" --mca btl tcp,self \
    --mca btl_tcp_if_include "$HOSTS_NET" --mca oob_tcp_if_include "$HOSTS_NET" \
    --mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1 \
    --mca oob_tcp_keepalive_probes 3 "$@"
}

# hosts_link_down HOST: takes HOST's end of the link down, as a pulled cable would.
hosts_link_down() {
  ip -n "$HOSTS_TAG-$1" link set "${HOSTS_TAG}v${1#h}" down
}

hosts_limit() {
  local rate=$1 i ns dev
  for i in 0 1; do
    ns=$HOSTS_TAG-h$i dev=${HOSTS_TAG}v$i
    tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    [ "$rate" = none ] && continue
    # A burst of 10 ms at the rate (at least 64 KiB), so the bucket refills faster than the
    # kernel's timer ticks at high rates.
    local bits=${rate%mbit} burst
    [ "$bits" = "$rate" ] && bits=$((${rate%gbit} * 1000))
    burst=$((bits * 1000000 / 8 / 100))
    [ "$burst" -lt 65536 ] && burst=65536
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms || return 1
  done
}

hosts_down() {
  [ -n "$HOSTS_TAG" ] || return 0
  local h ns
  for h in h0 h1; do
    ns=$HOSTS_TAG-$h
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "${HOSTS_TAG}v0" 2>/dev/null
  rm -f "${HOSTS_AGENT:-}"
  return 0
}
