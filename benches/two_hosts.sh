# shellcheck shell=bash
# Sourced by the benchmarks across two hosts: `two_hosts_up TAG` makes the network namespaces
# TAGa and TAGb ("hosts"), joined by a veth pair named veth0 on both sides, with the addresses
# 198.18.0.1/24 and 198.18.0.2/24 (198.18.0.0/15 is set aside for network benchmarks) and lo
# up; `two_hosts_down TAG` removes them, and with them the pair.
two_hosts_up() {
    local tag=$1 ns n i
    ip netns add "${tag}a"
    ip netns add "${tag}b"
    ip -n "${tag}a" link add veth0 type veth peer name veth0 netns "${tag}b"
    for ns in a:1 b:2; do
        n=${ns%%:*} i=${ns##*:}
        ip -n "${tag}$n" link set lo up
        ip -n "${tag}$n" addr add "198.18.0.$i/24" dev veth0
        ip -n "${tag}$n" link set veth0 up
    done
    # The link's state turns up asynchronously (the kernel's link watch): a program started
    # before then finds no usable interface (libfabric's tcp provider offers none).
    for i in $(seq 50); do
        if ip -n "${tag}a" -o link show veth0 | grep -q "state UP" &&
            ip -n "${tag}b" -o link show veth0 | grep -q "state UP"; then
            return 0
        fi
        sleep 0.1
    done
    echo "two_hosts_up: veth0 of ${tag}a/${tag}b not up within 5 s" >&2
    return 1
}

two_hosts_down() {
    ip netns del "${1}a" 2>/dev/null || true
    ip netns del "${1}b" 2>/dev/null || true
}
