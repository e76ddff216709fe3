"""Network faults on one emulated host's link: packets lost, packets delayed, or the host cut off.

The hosts of a job share the machine's loopback, each with an address of its own (`pipeline.emulator.job`), but the
address alone does not tell a host's packets apart: its outbound connections leave from 127.0.0.1. So every host
of a job opened with ``network_faults`` starts in a cgroup (v2) of its own, and every process it starts (DataLoader
workers, Ray's workers, tf.data's servers) stays there; nf_tables tells the host's packets by the cgroup of the
socket that sends or receives them (``socket cgroupv2``) and by the host's address (a SYN-ACK leaves from a socket
that is not yet a full one). A packet is judged once, where it arrives (the input hook): one that left the host
(``mark`` bit A) or reaches it (bit B), not both (traffic inside the host does not cross its link), is

- dropped, for a host cut off: its processes live, its peers hear nothing from it and it from them;
- dropped with probability ``loss`` (``numgen random``);
- held ``delay_ms`` by `pipeline.emulator.link_delay` (NFQUEUE; an ``iptables`` rule on the mark, as this kernel's nf_tables
  has no queue expression of its own), then let through.

So a degraded link adds ``delay_ms`` each way (``delay_ms`` x 2 to a round trip) and loses ``loss`` of the packets
of each direction. ``tc qdisc ... netem`` would do both on an interface of its own (network namespaces with veth
pairs), but the kernels this runs on may lack ``sch_netem`` (``unavailable`` says what is missing), and a namespace
per host would cut the hosts off the local S3 endpoint they share with the runner.

Needs root, ``nft`` and ``iptables`` (nftables backend) on PATH, and a cgroup2 hierarchy under /sys/fs/cgroup.
Every rule, cgroup and delay process is removed on `Links.close`; one left by a run that was killed is removed by
the next `Links.open` (named after the process that made it).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import UserError

CGROUP_FS = Path("/sys/fs/cgroup")  # where nft resolves ``socket cgroupv2`` paths
PREFIX = "hetero"
MAX_HOSTS = 8  # hosts with a fault at once: two mark bits each, in the mark's upper half
MARK_SHIFT = 16
LOSS_SCALE = 1_000_000  # loss is drawn as numgen random mod LOSS_SCALE < loss x LOSS_SCALE
DELAY_READY_S = 10.0


@dataclass(frozen=True)
class LinkFault:
    loss: float = 0.0  # of the packets of each direction, dropped
    delay_ms: float = 0.0  # added to each packet, each direction
    cut: bool = False  # every packet to or from the host dropped

    def __post_init__(self) -> None:
        if not 0 <= self.loss < 1:
            raise UserError(f"link loss {self.loss!r}: give a fraction of the packets, at least 0 and below 1 (0.02 for 2%)")
        if self.delay_ms < 0:
            raise UserError(f"link delay {self.delay_ms!r} ms: give 0 or more milliseconds")

    @classmethod
    def parse(cls, text: str) -> LinkFault:
        """``cut``, or ``loss=2%``, ``delay=50ms`` or both, comma-separated (``hetero run --link-fault``)."""
        if text.strip() == "cut":
            return cls(cut=True)
        fields = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = part.partition("=")
            number = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(%|ms)?", value.strip())
            unit = {"loss": "%", "delay": "ms"}.get(key.strip())
            if unit is None or number is None or number.group(2) not in (unit, None) or key.strip() in fields:
                raise UserError(
                    f"link fault {text!r}: write cut, or loss=<percent>%, delay=<milliseconds>ms or both, comma-separated "
                    "(loss=2%,delay=50ms)",
                    headline="bad option",
                )
            fields[key.strip()] = float(number.group(1))
        return cls(loss=fields.get("loss", 0.0) / 100, delay_ms=fields.get("delay", 0.0))

    def __str__(self) -> str:
        if self.cut:
            return "cut off"
        parts = [f"loss {self.loss:.1%}"] if self.loss else []
        parts += [f"delay {self.delay_ms:g} ms each way"] if self.delay_ms else []
        return ", ".join(parts) or "healthy"


def _cgroup2_root() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        if fields[separator + 1] == "cgroup2":
            return Path(fields[4])
    return None


def _own_cgroup() -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:].strip()
    return "/"


def unavailable() -> str | None:
    """Why per-host link faults cannot be set on this machine, or None."""
    if os.geteuid() != 0:
        return "they need root (nf_tables rules and cgroups)"
    missing = [tool for tool in ("nft", "iptables") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not on PATH (Debian: apt-get install nftables iptables)"
    root = _cgroup2_root()
    if root is None or not root.is_relative_to(CGROUP_FS):
        return f"no cgroup2 hierarchy under {CGROUP_FS} (found: {root})"
    return None


def _run(*command: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(command, input=stdin, capture_output=True, text=True)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done.stdout


class Links:
    """The link faults of one job: a cgroup per host, one nf_tables table and iptables chain, a delay process per
    delayed host."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.table = f"{PREFIX}_{tag}"
        self.chain = f"{PREFIX.upper()}_{tag}"
        cgroup2 = _cgroup2_root()
        if cgroup2 is None:  # Links.open checks unavailable() first
            raise RuntimeError(f"no cgroup2 hierarchy under {CGROUP_FS}")
        self.cgroup2 = cgroup2
        self.root = cgroup2 / _own_cgroup().lstrip("/") / f"{PREFIX}-{tag}"
        self.faults: dict[str, LinkFault] = {}
        self._addresses: dict[str, str] = {}
        self._slots: dict[str, int] = {}
        self._delayers: dict[str, tuple[subprocess.Popen, int, float]] = {}

    @classmethod
    def open(cls, tag: str | None = None) -> Links:
        reason = unavailable()
        if reason:
            raise UserError(f"network faults cannot be emulated here: {reason}", headline="network faults unavailable")
        _sweep()
        links = cls(tag or f"{os.getpid()}x{random.randrange(16**4):04x}")
        links.root.mkdir(parents=True, exist_ok=True)
        _run("iptables", "-w", "-N", links.chain)
        _run("iptables", "-w", "-I", "INPUT", "-j", links.chain)
        links._apply()
        return links

    # -- hosts ---------------------------------------------------------------
    def cgroup_procs(self, host: str, address: str) -> str:
        """The file a host's first process writes its pid to (before it executes) to put the host in its cgroup."""
        (self.root / host).mkdir(exist_ok=True)
        self._addresses[host] = address
        return str(self.root / host / "cgroup.procs")

    def set(self, host: str, fault: LinkFault | None) -> None:
        """``host``'s link from now on: ``fault``, or healthy (None)."""
        if host not in self._addresses:
            raise KeyError(f"{host} has no cgroup of this job's links")
        if fault is None or fault == LinkFault():
            self.faults.pop(host, None)
        else:
            if host not in self._slots:
                free = sorted(set(range(MAX_HOSTS)) - set(self._slots.values()))
                if not free:
                    raise UserError(f"at most {MAX_HOSTS} hosts of a job can have link faults at once")
                self._slots[host] = free[0]
            self.faults[host] = fault
        self._delay(host, fault.delay_ms if fault and not fault.cut else 0.0)
        self._apply()

    def counters(self) -> dict[str, dict[str, int]]:
        """Packets each host's rules acted on: ``{"algo-2": {"dropped": n, "lost": n, "delayed": n}}``."""
        found: dict[str, dict[str, int]] = {}
        listing = json.loads(_run("nft", "-j", "list", "table", "inet", self.table))
        for item in listing.get("nftables", []):
            rule = item.get("rule")
            if not rule or not rule.get("comment"):
                continue
            host, kind = rule["comment"].split()
            packets = next((e["counter"]["packets"] for e in rule["expr"] if "counter" in e), 0)
            found.setdefault(host, {}).setdefault(kind, 0)
            found[host][kind] += packets
        for line in _run("iptables", "-w", "-L", self.chain, "-v", "-x", "-n").splitlines():
            match = re.match(r"\s*(\d+)\s+\d+\s+NFQUEUE.*/\* (\S+) delayed \*/", line)
            if match:
                found.setdefault(match.group(2), {}).setdefault("delayed", 0)
                found[match.group(2)]["delayed"] += int(match.group(1))
        return found

    # -- rules ---------------------------------------------------------------
    def _bits(self, host: str) -> tuple[int, int]:
        slot = self._slots[host]
        return 1 << (MARK_SHIFT + 2 * slot), 1 << (MARK_SHIFT + 2 * slot + 1)

    def _match(self, host: str) -> str:
        path = self.root / host
        level = len(path.relative_to(self.cgroup2).parts)
        return f'socket cgroupv2 level {level} "{path.relative_to(CGROUP_FS)}"'

    def _ruleset(self) -> str:
        classify_out, classify_in, judge = [], [], []
        for host, fault in self.faults.items():
            left, reached = self._bits(host)
            both = left | reached
            address = self._addresses[host]
            classify_out += [f"{self._match(host)} meta mark set meta mark or {left:#x}"]
            classify_out += [f"ip saddr {address} meta mark set meta mark or {left:#x}"]
            classify_in += [f"{self._match(host)} meta mark set meta mark or {reached:#x}"]
            classify_in += [f"ip daddr {address} meta mark set meta mark or {reached:#x}"]
            for one in (left, reached):
                crossing = f"meta mark and {both:#x} == {one:#x}"
                if fault.cut:
                    judge.append(f'{crossing} counter drop comment "{host} dropped"')
                elif fault.loss:
                    threshold = round(fault.loss * LOSS_SCALE)
                    judge.append(f'{crossing} numgen random mod {LOSS_SCALE} < {threshold} counter drop comment "{host} lost"')
        out = "\n".join(f"    {r}" for r in classify_out)
        into = "\n".join(f"    {r}" for r in classify_in + judge)
        return (
            f"table inet {self.table} {{}}\nflush table inet {self.table}\n"
            f"table inet {self.table} {{\n"
            f"  chain leave {{\n    type filter hook output priority -150; policy accept;\n{out}\n  }}\n"
            f"  chain arrive {{\n    type filter hook input priority -150; policy accept;\n{into}\n  }}\n}}\n"
        )

    def _apply(self) -> None:
        _run("nft", "-f", "-", stdin=self._ruleset())
        _run("iptables", "-w", "-F", self.chain)
        for host, (_process, queue, _delay) in self._delayers.items():
            left, reached = self._bits(host)
            for one in (left, reached):
                _run(
                    "iptables", "-w", "-A", self.chain, "-m", "mark", "--mark", f"{one:#x}/{left | reached:#x}",
                    "-m", "comment", "--comment", f"{host} delayed",
                    "-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass",
                )  # fmt: skip

    def _delay(self, host: str, delay_ms: float) -> None:
        current = self._delayers.get(host)
        if current and current[2] == delay_ms:
            return
        if current:
            self._delayers.pop(host)
            _end(current[0])
        if delay_ms:
            self._delayers[host] = _start_delayer(delay_ms)

    # -- the end -------------------------------------------------------------
    def close(self) -> None:
        """Every rule, delay process and cgroup of these links gone. Safe to call twice."""
        _run("iptables", "-w", "-D", "INPUT", "-j", self.chain, check=False)
        _run("iptables", "-w", "-F", self.chain, check=False)
        _run("iptables", "-w", "-X", self.chain, check=False)
        _run("nft", "delete", "table", "inet", self.table, check=False)
        for process, _queue, _delay in self._delayers.values():
            _end(process)
        self._delayers.clear()
        _remove_cgroups(self.root)


def _start_delayer(delay_ms: float) -> tuple[subprocess.Popen, int, float]:
    """A `pipeline.emulator.link_delay` process on a queue no other process holds."""
    for _ in range(20):
        queue = random.randrange(1024, 65536)
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline.emulator.link_delay", "--queue", str(queue), "--delay-ms", str(delay_ms)],
            cwd=Path(__file__).resolve().parents[2],  # the folder that holds pipeline/
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert process.stdout is not None  # stdout=PIPE
        line = process.stdout.readline().strip()
        if line == "ready":
            return process, queue, delay_ms
        _end(process)
    raise RuntimeError(f"no free NFQUEUE queue for a link delay (last: {line})")


def _end(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout:
        process.stdout.close()


def _remove_cgroups(root: Path) -> None:
    """``root`` and the host cgroups under it, once their processes are gone (a cgroup holding one cannot go)."""
    deadline = time.monotonic() + 5
    for folder in sorted((p for p in root.glob("*") if p.is_dir()), reverse=True) + [root]:
        while folder.exists():
            try:
                folder.rmdir()
            except FileNotFoundError:
                break
            except OSError:  # a process still in it: the next `Links.open` removes it
                if time.monotonic() > deadline:
                    return
                time.sleep(0.05)


def _sweep() -> None:
    """Links whose process is gone: their rules, chains and cgroups."""
    stale = re.compile(rf"(?:{PREFIX}_|{PREFIX.upper()}_)((\d+)x[0-9a-f]+)\b")
    listed = _run("nft", "list", "tables", check=False) + _run("iptables", "-w", "-S", check=False)
    for tag, pid in sorted({m.groups() for m in stale.finditer(listed)}):
        if not Path(f"/proc/{pid}").exists():
            Links(tag).close()
