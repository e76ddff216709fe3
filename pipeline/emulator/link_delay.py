"""The delay half of a degraded link: hold every packet nf_tables queues here for a fixed time, then let it go.

    python -m pipeline.emulator.link_delay --queue N --delay-ms 50

`pipeline.emulator.links` sends each packet to or from a degraded host to queue N (``queue flags bypass to N``: with no
reader bound the packets pass undelayed); this process binds that queue over netlink (NFQUEUE, copy mode "meta":
no payload crosses to user space) and, once a packet has waited ``delay_ms``, accepts it and every packet queued
before it with one batch verdict (``NFQNL_MSG_VERDICT_BATCH``: ids are sequential per queue and the delay is the
same for all, so release order is arrival order). It prints ``ready`` once bound; on SIGTERM it lets every held
packet go and exits. It stands in for ``tc qdisc ... netem delay``, which kernels without ``sch_netem`` lack.

The protocol is written out here (``linux/netfilter/nfnetlink_queue.h``): the bindings on PyPI (NetfilterQueue) come
as a source distribution that needs a C toolchain and libnetfilter-queue's headers, for the three messages used.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import errno
import os
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
MSG_PACKET, MSG_CONFIG, MSG_VERDICT_BATCH = 0, 2, 3
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN, CFG_MASK, CFG_FLAGS = 1, 2, 3, 4, 5
CMD_BIND = 1
COPY_META = 1
CFG_F_FAIL_OPEN = 1  # a full queue lets packets through rather than dropping them: the loss is the loss rule's alone
ATTR_PACKET_HDR = 1
ATTR_VERDICT_HDR = 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NLA_TYPE_MASK = 0x3FFF  # without the nested / byte-order flags
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
QUEUE_MAXLEN = 65536
RECEIVE_BUFFER = 8 << 20
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _attribute(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _message(kind: int, queue: int, attributes: list[bytes], sequence: int, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack(">H", queue) + b"".join(attributes)  # nfgenmsg
    return HEADER.pack(HEADER.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, sequence, 0) + body


def _messages(data: bytes):
    """(type, payload after nfgenmsg) of each netlink message in ``data``."""
    offset = 0
    while offset + HEADER.size <= len(data):
        length, kind, _flags, _sequence, _port = HEADER.unpack_from(data, offset)
        if length < HEADER.size:
            return
        yield kind, data[offset + HEADER.size : offset + length]
        offset += (length + 3) & ~3


def _attributes(payload: bytes) -> dict[int, bytes]:
    found, offset = {}, 0
    while offset + 4 <= len(payload):
        length, kind = struct.unpack_from("=HH", payload, offset)
        if length < 4:
            break
        found[kind & NLA_TYPE_MASK] = payload[offset + 4 : offset + length]
        offset += (length + 3) & ~3
    return found


class Queue:
    """One NFQUEUE queue, bound for this process."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, RECEIVE_BUFFER)  # SO_RCVBUFFORCE (root)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self.sock.bind((0, 0))
        self._sequence = 0
        self._configure([_attribute(CFG_CMD, struct.pack(">BxH", CMD_BIND, 0))])
        self._configure(
            [
                _attribute(CFG_PARAMS, struct.pack(">IB", 0, COPY_META)),
                _attribute(CFG_QUEUE_MAXLEN, struct.pack(">I", QUEUE_MAXLEN)),
                _attribute(CFG_FLAGS, struct.pack(">I", CFG_F_FAIL_OPEN)),
                _attribute(CFG_MASK, struct.pack(">I", CFG_F_FAIL_OPEN)),
            ]
        )
        self.sock.setblocking(False)

    def _configure(self, attributes: list[bytes]) -> None:
        self._sequence += 1
        self.sock.send(_message(MSG_CONFIG, self.number, attributes, self._sequence, NLM_F_REQUEST | NLM_F_ACK))
        for kind, payload in _messages(self.sock.recv(65536)):
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", payload)[0]  # nlmsgerr: the error, then the request's header
                if code:
                    raise OSError(code, f"binding NFQUEUE queue {self.number}: {os.strerror(code)}")

    def received(self) -> list[int]:
        """The ids of the packets queued since the last call (none: nothing waiting)."""
        ids: list[int] = []
        while True:
            try:
                data = self.sock.recv(RECEIVE_BUFFER)
            except BlockingIOError:
                return ids
            except OSError as e:
                if e.errno == errno.ENOBUFS:  # notifications lost: their packets go with the next batch verdict
                    continue
                raise
            for kind, payload in _messages(data):
                if kind == (NFNL_SUBSYS_QUEUE << 8) | MSG_PACKET:
                    header = _attributes(payload[4:]).get(ATTR_PACKET_HDR)
                    if header:
                        ids.append(struct.unpack_from(">I", header)[0])

    def accept_through(self, packet_id: int) -> None:
        """Accept every packet queued with an id up to ``packet_id``."""
        self._sequence += 1
        verdict = _attribute(ATTR_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet_id))
        self.sock.send(_message(MSG_VERDICT_BATCH, self.number, [verdict], self._sequence))


def hold(queue: Queue, delay_s: float, stopping) -> None:
    """Release each packet ``delay_s`` after it was queued until ``stopping()``, then release all."""
    waiting: collections.deque[tuple[float, int]] = collections.deque()
    last = None
    try:
        while not stopping():
            timeout = max(0.0, waiting[0][0] - time.monotonic()) if waiting else 0.5
            select.select([queue.sock], [], [], timeout)
            arrived = time.monotonic()
            waiting.extend((arrived + delay_s, i) for i in queue.received())
            due = None
            while waiting and waiting[0][0] <= time.monotonic():
                due = waiting.popleft()[1]
            if due is not None:
                queue.accept_through(due)
                last = due
    finally:
        if waiting:
            queue.accept_through(waiting[-1][1])
        elif last is not None:
            queue.accept_through(last)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    args = parser.parse_args(argv)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the emulator killed: this ends too
    if os.getppid() != parent:  # it died before that took hold
        return
    try:
        queue = Queue(args.queue)
    except OSError as e:
        print(f"error: {e}", flush=True)
        sys.exit(2)
    print("ready", flush=True)
    hold(queue, args.delay_ms / 1000, lambda: bool(stop))


if __name__ == "__main__":
    main()
