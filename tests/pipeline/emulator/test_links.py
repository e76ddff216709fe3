"""Link faults on one emulated host (`pipeline.emulator.links`): what a fault spec reads as, and, where the machine allows
it (root, nft, iptables, cgroup2), the rules themselves on real sockets: a delayed, lossy or cut link acts on the
traffic of the host's cgroup alone, never on traffic inside the host, and leaves nothing when closed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from pipeline.emulator.links import LinkFault, Links, unavailable
from pipeline.errors import UserError


@pytest.mark.parametrize(
    "text, fault",
    [
        ("cut", LinkFault(cut=True)),
        ("loss=2%", LinkFault(loss=0.02)),
        ("delay=50ms", LinkFault(delay_ms=50)),
        ("loss=2%,delay=50ms", LinkFault(loss=0.02, delay_ms=50)),
        (" delay=12.5 , loss=0.5 ", LinkFault(loss=0.005, delay_ms=12.5)),
    ],
)
def test_a_fault_spec_reads_as_written(text, fault):
    assert LinkFault.parse(text) == fault


@pytest.mark.parametrize("text", ["loss=2ms", "delay=5%", "jitter=3ms", "loss=2%,loss=3%", "loss=", "loss=100%", "cut,loss=1%"])
def test_a_bad_fault_spec_names_itself_and_the_form(text):
    with pytest.raises(UserError) as caught:
        LinkFault.parse(text)
    assert repr(text) in str(caught.value) and "loss=2%,delay=50ms" in str(caught.value) or "below 1" in str(caught.value)


def test_a_fault_says_what_it_does():
    assert str(LinkFault(loss=0.02, delay_ms=50)) == "loss 2.0%, delay 50 ms each way"
    assert str(LinkFault(cut=True)) == "cut off"


SERVER = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
while True:
    connection, _ = server.accept()
    connection.sendall(connection.recv(16))
    connection.close()
"""


def _echo(address: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as connection:
            connection.sendall(b"ping")
            return connection.recv(16) == b"ping"
    except OSError:
        return False


e2e = pytest.mark.e2e  # real sockets, rules and a delay process: seconds each, outside the fast lane


@pytest.fixture
def host():
    """A host's server in its own cgroup on its own address, and the job's links; all gone after."""
    reason = unavailable()
    if reason:
        pytest.skip(f"link faults cannot be emulated on this machine: {reason}")
    links = Links.open()
    address = "127.77.0.2"
    procs = links.cgroup_procs("algo-2", address)

    def enter():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    server = subprocess.Popen([sys.executable, "-c", SERVER, address], stdout=subprocess.PIPE, text=True, preexec_fn=enter)
    port = int(server.stdout.readline())
    try:
        yield links, address, port, procs
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
        links.close()
        tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
        chains = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout
        assert links.table not in tables and links.chain not in chains
        assert not links.root.exists()
        assert not [
            p for p in psutil.Process().children(recursive=True) if "pipeline.emulator.link_delay" in " ".join(p.cmdline())
        ]


@e2e
def test_a_delayed_link_holds_the_hosts_packets_and_lets_each_through(host):
    links, address, port, _ = host
    links.set("algo-2", LinkFault(delay_ms=20))
    assert all(_echo(address, port) for _ in range(3))
    assert links.counters()["algo-2"]["delayed"] >= 3 * 4  # SYN, SYN-ACK, the request and the reply at least


@e2e
def test_a_lossy_link_drops_some_packets_and_tcp_carries_on(host):
    links, address, port, _ = host
    links.set("algo-2", LinkFault(loss=0.1))
    assert all([_echo(address, port, timeout=30) for _ in range(15)])  # a lost SYN is sent again 1 s later, then 2, 4...
    assert links.counters()["algo-2"]["lost"] > 0


@e2e
def test_a_cut_host_is_unreachable_and_healthy_again_when_mended(host):
    links, address, port, _ = host
    links.set("algo-2", LinkFault(cut=True))
    assert not _echo(address, port, timeout=1)
    assert links.counters()["algo-2"]["dropped"] > 0
    links.set("algo-2", None)
    assert _echo(address, port)


@e2e
def test_traffic_inside_a_host_does_not_cross_its_link(host):
    """A process of the cut host reaches the host's own server: only packets between it and the others are dropped."""
    links, address, port, procs = host
    links.set("algo-2", LinkFault(cut=True))
    probe = f"import socket; c = socket.create_connection(({address!r}, {port}), timeout=2); c.sendall(b'x'); print(c.recv(4))"
    inside = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        preexec_fn=lambda: open(procs, "w").write(str(os.getpid())),
    )
    assert inside.stdout.strip() == "b'x'", inside.stderr
    assert not _echo(address, port, timeout=1)  # from outside the host: cut


@e2e
def test_links_left_by_a_killed_run_are_removed_by_the_next(host):
    links, *_ = host
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = Links(f"{dead.pid}xdead")
    stale.root.mkdir(parents=True)
    subprocess.run(["nft", "add", "table", "inet", stale.table], check=True)
    subprocess.run(["iptables", "-w", "-N", stale.chain], check=True)
    Links.open().close()
    tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    assert stale.table not in tables and not stale.root.exists()
    assert stale.chain not in subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True).stdout


PARENT = """
import subprocess, sys, time
delayer = subprocess.Popen([sys.executable, "-m", "pipeline.emulator.link_delay", "--queue", sys.argv[1], "--delay-ms", "10"],
                           stdout=subprocess.PIPE, text=True)
assert delayer.stdout.readline().strip() == "ready"
print(delayer.pid, flush=True)
time.sleep(60)
"""


@e2e
def test_a_delay_process_ends_with_the_emulator_that_started_it_even_when_killed():
    reason = unavailable()
    if reason:
        pytest.skip(f"link faults cannot be emulated on this machine: {reason}")
    root = str(Path(__file__).resolve().parents[3])
    parent = subprocess.Popen([sys.executable, "-c", PARENT, "4099"], cwd=root, stdout=subprocess.PIPE, text=True)
    delayer = psutil.Process(int(parent.stdout.readline()))
    parent.kill()  # no close, no cleanup: as a SIGKILL of the run
    parent.wait()
    parent.stdout.close()
    try:
        delayer.wait(timeout=10)
    except psutil.TimeoutExpired:
        delayer.kill()
        pytest.fail("the delay process outlived the process that started it")
