"""Each emulated host's storage volume, sized as SageMaker sizes it and enforced: a write past it fails with ENOSPC.

Size: the instance type's NVMe instance store where it has one (SageMaker provisions no EBS volume for those types
and ignores ``VolumeSizeInGB``: API ResourceConfig), else ``ResourceConfig.VolumeSizeInGB``; times ``scale``, an
emulator option that stands a gigabyte for fewer bytes (a full disk without writing gigabytes).

File-mode channels are downloaded onto the volume before the code starts, so their bytes come off it first: a host
whose channels do not fit fails the job before it starts, as SageMaker fails it. FastFile and file-system channels
stream and take nothing. The rest is a tmpfs of that size mounted over the host's base folder in a user and mount
namespace that only the host's processes enter (`Volumes.enter`, in each host process before it executes): no root,
no mount outside it, a genuine ENOSPC from the write that does not fit. The emulator reads a live host's files
through ``/proc/<holder>/root`` (`Volumes.live_dir`) and, when the job ends, makes each host's folder what its volume
held. Where user namespaces are not allowed, hosts write to their plain folders and the emulator says so once; the
channel check still holds.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.sagemaker.instances import instance_storage_gb
from pipeline.stop import STOP
from steps.common.errors import VOLUME_PARAMETER, UserError

GIB = 2**30  # an EBS "GB" (VolumeSizeInGB) is a GiB
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
KEPT_ON_DISK = ("output/host.log",)  # the emulator's own file beside each host (a host's log goes to CloudWatch, not its volume)
VOLUME_FIX = f"raise the {VOLUME_PARAMETER} parameter (hetero run --volume-gb)"


@dataclass(frozen=True)
class Volume:
    host: str
    group: str
    instance_type: str
    gb: float | None  # None: the request sets no VolumeSizeInGB (not enforced)
    instance_store: bool
    channel_bytes: int  # File-mode channels downloaded onto it

    def size_bytes(self, scale: float) -> int | None:
        return None if self.gb is None else int(self.gb * GIB * scale)

    def describe(self, scale: float = 1.0) -> str:
        source = (
            f"{self.instance_type} NVMe instance store; VolumeSizeInGB does not apply"
            if self.instance_store
            else "VolumeSizeInGB"
        )
        size = self.size_bytes(scale)
        emulated = "" if scale == 1 or size is None else f"; {_mb(size)} here at volume scale {scale:g}"
        return f"{self.gb:g} GB ({source}{emulated})"


def plan(request: dict, hosts: list) -> list[Volume]:
    """Each host's volume (``hosts``: laid out, their channels provisioned)."""
    requested = request.get("ResourceConfig", {}).get("VolumeSizeInGB")
    volumes = []
    for host in hosts:
        store = instance_storage_gb(host.group.instance_type)
        volumes.append(
            Volume(
                host.name,
                host.group.name,
                host.group.instance_type,
                store or requested,
                bool(store),
                file_channel_bytes(host.base_dir),
            )
        )
    return volumes


def file_channel_bytes(base_dir: Path) -> int:
    """Bytes of the File-mode channels provisioned under ``base_dir`` (the objects their links name)."""
    config = base_dir / "input" / "config" / "inputdataconfig.json"
    channels = json.loads(config.read_text()) if config.is_file() else {}
    total = 0
    for name, spec in channels.items():
        folder = base_dir / "input" / "data" / name
        if spec.get("TrainingInputMode") != "File" or folder.is_symlink():  # a mounted file system: nothing downloaded
            continue
        total += sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return total


def check_downloads(volumes: list[Volume], scale: float, *, step: str) -> None:
    """Fail as SageMaker does when a host's File-mode channels do not fit its volume."""
    for v in volumes:
        size = v.size_bytes(scale)
        if size is not None and v.channel_bytes >= size:
            raise UserError(
                f"step {step}: host {v.host} ({v.group}): ClientError: Data download failed: insufficient disk space: "
                f"its File-mode channels hold {_mb(v.channel_bytes)} and its volume is {v.describe(scale)}: {_fix(v)}",
                headline="volume too small",
            )


def _mb(n: int) -> str:
    return f"{n / 2**20:,.1f} MB"


def full_volume(volume: Volume, scale: float) -> str:
    """What to add to a host's failure that a full volume caused (a fixed instance store takes another fix)."""
    return f"(its volume: {volume.describe(scale)}{': ' + _fix(volume) if volume.instance_store else ''})"


def _fix(v: Volume) -> str:
    if v.instance_store:
        return (
            f"its instance store is fixed: use a larger {v.instance_type.rsplit('.', 1)[0]} size, or FastFile input (InputMode)"
        )
    return f"{VOLUME_FIX}, or FastFile input (InputMode) so shards stream instead"


class Volumes:
    """The job's mounted volumes: one holder process owns the namespace they live in."""

    def __init__(self, holder: subprocess.Popen | None, namespaces: list[int], reason: str = "") -> None:
        self.holder = holder
        self._namespaces = namespaces  # fds of the holder's user and mount namespaces, opened here for `enter`
        self._setns = ctypes.CDLL(None, use_errno=True).setns  # looked up here: a forked child must not load libraries
        self.reason = reason  # why there are none

    @classmethod
    def mount(cls, volumes: list[Volume], hosts: list, scale: float) -> Volumes:
        """A tmpfs over each host's base folder, sized to its volume less its downloaded channels, holding what the
        folder holds."""
        dirs = {h.name: str(h.base_dir) for h in hosts}
        # a volume the request sizes (VolumeSizeInGB) is mounted; one it does not is not enforced
        mounts = [[dirs[v.host], max(4096, size - v.channel_bytes)] for v in volumes if (size := v.size_bytes(scale)) is not None]
        if not mounts:
            return cls(None, [], "no volume size in the request")
        holder = None
        try:
            with STOP.deferred():  # a stop now is raised once the holder's handle is kept: it goes below
                holder = subprocess.Popen(
                    [sys.executable, __file__],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            assert holder.stdin is not None and holder.stdout is not None  # both PIPE
            holder.stdin.write((json.dumps({"uid": os.getuid(), "gid": os.getgid(), "mounts": mounts}) + "\n").encode())
            holder.stdin.flush()
            answer = holder.stdout.readline().decode()
        except KeyboardInterrupt:  # the run's stop (`pipeline.stop`) while the volumes fill: the holder goes at once
            if holder is not None:
                holder.kill()
                _end(holder)
            raise
        try:
            reply = json.loads(answer)
        except json.JSONDecodeError:
            reply = {"error": answer.strip() or f"the volume holder exited with code {holder.wait()}"}
        if "error" in reply:
            _end(holder)
            if reply.get("full"):  # what the host holds before it starts does not fit
                v = next(v for v in volumes if dirs[v.host] == reply["full"])
                raise UserError(
                    f"host {v.host} ({v.group}): its code, configuration and restored checkpoints do not fit its "
                    f"volume of {v.describe(scale)} beside {_mb(v.channel_bytes)} of File-mode "
                    f"channels: {_fix(v)}",
                    headline="volume too small",
                )
            return cls(None, [], reply["error"])
        namespaces = [os.open(f"/proc/{holder.pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC) for kind in ("user", "mnt")]
        return cls(holder, namespaces)

    @property
    def enforced(self) -> bool:
        return self.holder is not None

    def live_dir(self, base_dir: Path) -> Path:
        """Where the emulator sees a host's folder as the host does."""
        return Path(f"/proc/{self.holder.pid}/root{base_dir}") if self.holder is not None else base_dir

    def enter(self, cwd: str) -> None:
        """In a host's process, after fork and before exec: join the volumes' namespaces (user first: it owns the mount
        namespace), then the working folder again, which is now on the host's volume."""
        if not self.enforced:
            return
        for fd, kind in zip(self._namespaces, (CLONE_NEWUSER, CLONE_NEWNS)):
            _check(self._setns(fd, kind), "setns")
        os.chdir(cwd)

    def unmount(self, hosts: list) -> None:
        """Make each host's folder what its volume holds (the emulator's own files kept), then end the namespace."""
        holder = self.holder
        if holder is None:  # not enforced
            return
        try:
            for host in hosts:
                _replace(host.base_dir, self.live_dir(host.base_dir))
        finally:
            for fd in self._namespaces:
                os.close(fd)
            self._namespaces = []
            _end(holder)
            self.holder = None


def _replace(folder: Path, volume: Path) -> None:
    """``folder``'s content becomes ``volume``'s. The folder itself stays: it is the volume's mount point, and removing it
    would detach the volume."""
    kept = {rel: (folder / rel).read_bytes() for rel in KEPT_ON_DISK if (folder / rel).is_file()}
    for child in folder.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    shutil.copytree(volume, folder, symlinks=True, dirs_exist_ok=True)
    for rel, data in kept.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def _end(holder: subprocess.Popen) -> None:
    if holder.stdin:
        holder.stdin.close()
    try:
        holder.wait(timeout=10)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait()
    if holder.stdout:
        holder.stdout.close()


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _hold() -> None:
    """The holder: a new user and mount namespace with a tmpfs over each folder, filled with what the folder held; it
    lives until its stdin closes. Answers one JSON line: {} or {"error": ..., "full": <folder that did not fit>}."""
    spec = json.loads(sys.stdin.readline())
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare (user and mount namespaces)")
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {spec['uid']} 1")
        Path("/proc/self/gid_map").write_text(f"0 {spec['gid']} 1")
        _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    except OSError as exc:
        print(json.dumps({"error": f"user namespaces are not allowed here ({exc})"}), flush=True)
        return
    for folder, size in spec["mounts"]:
        below = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)  # the folder's content, reachable once covered
        try:
            _check(libc.mount(b"hetero-volume", folder.encode(), b"tmpfs", 0, f"size={size},mode=0755".encode()), "mount tmpfs")
            shutil.copytree(f"/proc/self/fd/{below}", folder, symlinks=True, dirs_exist_ok=True)
        except shutil.Error as exc:  # copytree gathers each file's error
            print(json.dumps({"error": str(exc)[:500], **({"full": folder} if "No space left" in str(exc) else {})}), flush=True)
            return
        except OSError as exc:
            print(json.dumps({"error": f"{folder}: {exc}", **({"full": folder} if exc.errno == 28 else {})}), flush=True)
            return
        finally:
            os.close(below)
    print("{}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    _hold()
