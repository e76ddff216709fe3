"""framework=ray on the emulated cluster: a Ray cluster over the job's hosts (head on the first trainer host), Ray Data
decoding the WebDataset shards on every CPU, Ray Train training; each sample once per epoch, every host (and every Ray
process and temp folder) gone at the end, also when a host dies, freezes or gets SIGTERM, each survivor out by itself
naming the host that failed; the cluster refuses clients without the job's token and trains through a flood of
connections and garbage on every port. How fast each host goes is the fault bench's to measure (bench/faults.py)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading

import psutil
import pytest

from pipeline.emulator.hosts import HOST_NAME
from pipeline.emulator.job import EmulatedJob
from tests.support.harness import (
    by_role,
    confinement_breaches,
    fault,
    host_processes,
    job_processes,
    listeners,
    ray_folders,
    temp_left,
    two_group_request,
)

pytestmark = pytest.mark.e2e


def _left_behind(job) -> dict:
    """What a Ray job left: processes (by the marker every process of its hosts inherits) and temp folders (a host's
    TMPDIR, a Ray node's folder); and Ray node folders outside their host's TMPDIR (in the machine's /tmp)."""
    outside = [
        str(f) for host in job.hosts for f in ray_folders(job.job_dir).get(host.name, []) if host.temp_dir not in f.parents
    ]
    return {k: v for k, v in {"processes": _ray_processes(job), "temp": temp_left(job), "outside": outside}.items() if v}


def _ray_processes(*jobs) -> list[str]:
    """Processes the jobs' hosts started that are still there (Ray's GCS, raylets and workers among them), found by the
    marker each inherits (`tests.support.harness.job_processes`): Ray's workers rename themselves, so their command lines name
    no node folder; another job's (another test run's) processes are not counted."""
    found = []
    for p in job_processes(*jobs):
        try:
            found.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:  # exited meanwhile
            continue
    return found


def _ray_request(tmp_path, shards, code_uri, *, data: int, dnn: int = 1, **hyperparameters) -> dict:
    """The pipeline's Ray layout (`tests.support.harness.ray_layout`): the train channel replicated to both groups."""
    return two_group_request(
        tmp_path,
        shards,
        code_uri,
        data=data,
        dnn=dnn,
        hyperparameters={
            "framework": "ray",
            "epochs": 2,
            "batch_size": 16,
            "workload_options": {"blur_passes": 0},
            "heartbeat_s": 0.5,
            "silence_timeout_s": 10,
            "connect_timeout_s": 120,
            **hyperparameters,
        },
    )


def _start(tmp_path, shards, code_uri, *, data: int = 2, dnn: int = 1, grace_s: float = 60, **hyperparameters) -> EmulatedJob:
    training = threading.Event()
    request = _ray_request(tmp_path, shards, code_uri, data=data, dnn=dnn, epochs=1000, log_every=1, **hyperparameters)
    job = EmulatedJob(
        name="job",
        request=request,
        job_dir=tmp_path / "job",
        grace_s=grace_s,
        timeout_s=240,
        on_line=lambda host, line: "step_time_ms=" in line and training.set(),
    )
    job.start()
    if not training.wait(180):
        job.close()
        raise RuntimeError(f"training never started: see the hosts' logs under {tmp_path / 'job'}")
    return job


def _connect_without_the_token(address: str) -> str:
    """A Ray driver's output as it tries to join the cluster without the token, up to the cluster's first refusal (a
    refused driver retries for about 20 s before it gives up: the first refusal says all there is to say)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    code = f"import ray; ray.init(address='{address}'); print('CONNECTED', flush=True)"
    lines = []
    with subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as attempt:
        timer = threading.Timer(120, attempt.kill)
        timer.start()
        try:
            for line in attempt.stdout:
                lines.append(line)
                if "InvalidAuthToken" in line or "CONNECTED" in line:
                    break
        finally:
            timer.cancel()
            attempt.kill()
    return "".join(lines)


def test_the_ray_cluster_is_confined_refuses_a_client_without_the_token_and_a_killed_head_takes_every_host_down(
    tmp_path, shards, code_uri, no_leftovers
):
    job = _start(tmp_path, shards, code_uri)
    with job:
        assert not confinement_breaches(job, host_local=("127.0.0.1",))  # Ray's minimal dashboard: also loopback
        head = by_role(job, "trainer")[0]
        address = re.search(r"\[ray\] \S+: head at (\S+) ", (head.base_dir / "output" / "host.log").read_text()).group(1)
        output = _connect_without_the_token(address)
        assert "CONNECTED" not in output and "InvalidAuthToken" in output, output[-3000:]
        # no Ray client server (ray://, it runs drivers for remote clients): the image has no grpc, so Ray starts none
        lines = [" ".join(p.cmdline()) for p in psutil.Process(head.process.pid).children(recursive=True)]
        assert not [line for line in lines if "ray.util.client.server" in line]
        fault(head, signal.SIGKILL)  # the instance: the driver, its Ray node and workers
        result = job.wait()
    assert not result.ok and HOST_NAME.search(result.failure).group() == head.name
    for host in by_role(job, "data"):
        assert not host.stopped_by_emulator, f"{host.name} had to be stopped by the emulator"
        assert host.exit_code != 0 and HOST_NAME.search(host.failure).group() == head.name, host.failure
    assert not _left_behind(job)


def test_two_data_hosts_and_a_trainer_on_ray_flooded_on_every_port_train_to_the_end_with_each_sample_once(
    tmp_path, shards, code_uri, no_leftovers
):
    """Two data hosts and a trainer (each sample once per epoch, from whichever node decoded it) while an outside
    client on the cluster network holds silent connections open on every port of every host and, on each, sends garbage
    (an HTTP request, random bytes) and closes the socket. The job trains as if nothing happened."""
    samples = json.loads((shards / "manifest.json").read_text())["splits"]["train"]["samples"]
    training = threading.Event()
    # blur: steps slow enough that the flood, which starts at the first step, hits a cluster that trains
    request = _ray_request(tmp_path, shards, code_uri, data=2, epochs=5, log_every=1, workload_options={"blur_passes": 2})
    job = EmulatedJob(
        name="job",
        request=request,
        job_dir=tmp_path / "job",
        grace_s=30,
        timeout_s=400,
        on_line=lambda host, line: "step_time_ms=" in line and training.set(),
    )
    held = []
    try:
        with job:
            job.start()
            assert training.wait(240), f"training never started: see the hosts' logs under {tmp_path / 'job'}"
            ports = listeners(p for host in job.hosts for p in host_processes(host))
            assert len(ports) > 10  # Ray's servers on every host, not only ours
            noise = random.Random(7)
            for address in sorted(ports):
                for _ in range(8):
                    try:
                        held.append(socket.create_connection(address, timeout=5))
                    except OSError:
                        pass
                for payload in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", noise.randbytes(65536)):
                    try:
                        with socket.create_connection(address, timeout=5) as garbage:
                            garbage.sendall(payload)
                    except OSError:  # the server cut it: that is fine
                        pass
            assert all(h.process.poll() is None for h in job.hosts)  # the flood hit a training cluster
            result = job.wait()
    finally:
        for held_socket in held:
            held_socket.close()
    assert result.ok, result.failure
    metrics = json.loads((result.model_dir / "metrics.json").read_text())
    assert [(e["samples"], e["distinct"], e["duplicates"]) for e in metrics["sample_ledger"]["epochs"]] == [
        (samples, samples, 0)
    ] * 5
    assert all(h.exit_code == 0 for h in job.hosts)
    assert not _ray_processes(job)


def test_a_killed_ray_data_host_ends_or_survives_with_every_host_exiting_by_itself(tmp_path, shards, code_uri, no_leftovers):
    job = _start(tmp_path, shards, code_uri)
    with job:
        victim = by_role(job, "data")[0]
        fault(victim, signal.SIGKILL)
        result = job.wait()
    head = by_role(job, "trainer")[0]
    assert not result.ok and not head.stopped_by_emulator and head.exit_code != 0
    for host in (h for h in job.hosts if h is not victim):  # each survivor's failure leads with the lost host
        assert not host.stopped_by_emulator and host.exit_code != 0 and HOST_NAME.search(host.failure).group() == victim.name, (
            host.failure
        )
    assert not _left_behind(job)


def test_a_killed_ray_trainer_host_that_is_not_the_head_ends_the_job_naming_it(tmp_path, shards, code_uri, no_leftovers):
    job = _start(tmp_path, shards, code_uri, data=1, dnn=2)
    with job:
        head, victim = by_role(job, "trainer")
        fault(victim, signal.SIGKILL)  # the instance: its Ray node, its Ray Train worker
        result = job.wait()
    assert not result.ok and victim.name in head.failure
    assert all(not h.stopped_by_emulator and h.exit_code != 0 for h in job.hosts if h is not victim)
    assert not _left_behind(job)


@pytest.mark.parametrize("role", ["trainer", "data"])
def test_a_frozen_ray_host_is_named_first_by_every_other_host_which_exits_by_itself(
    role, tmp_path, shards, code_uri, no_leftovers
):
    """SIGSTOP to every process of one host (the head, or a data host): it never exits by itself. Every other host notices
    the silence and exits non-zero on its own, each naming the frozen host first, as does the job's failure (its first
    error line), though a peer failed first; the emulator ends the frozen host after its grace; nothing is left."""
    job = _start(tmp_path, shards, code_uri, grace_s=10, silence_timeout_s=5)
    with job:
        victim = by_role(job, role)[0]
        fault(victim, signal.SIGSTOP)
        result = job.wait()
    others = [h for h in job.hosts if h is not victim]
    assert not result.ok and HOST_NAME.search(result.failure).group() == victim.name, result.failure
    for host in others:
        assert not host.stopped_by_emulator, f"{host.name} had to be stopped by the emulator: {host.failure}"
        assert host.exit_code not in (0, None) and HOST_NAME.search(host.failure).group() == victim.name, host.failure
        assert "silent" in host.failure or "sent nothing" in host.failure or "STOP from" in host.failure, host.failure
    assert victim.stopped_by_emulator and not victim.failure  # frozen to the end: it wrote nothing
    assert not _left_behind(job)


@pytest.mark.parametrize("to", ["entry process", "process group"])
def test_sigterm_to_every_ray_host_ends_each_by_itself_with_its_failure_file(tmp_path, shards, code_uri, no_leftovers, to):
    """StopTrainingJob, or a spot interruption: SIGTERM to each host's entry process (as SageMaker stops a container), or
    to its whole process group (as the local run's stop does). Each, the head (a Ray driver, whose SIGTERM handler Ray
    replaces) included, writes its failure file and exits 143 by itself; its Ray node goes with it. The node leads a
    process group of its own, so the group's signal is the host's to act on: a raylet that went with it could end the
    driver from Ray's C++ before it said why."""
    job = _start(tmp_path, shards, code_uri, grace_s=30)
    with job:
        assert _ray_starts_leading_their_own_group(job) == {h.name: True for h in job.hosts}
        for host in job.hosts:
            if to == "entry process":
                host.process.send_signal(signal.SIGTERM)
            else:
                os.killpg(host.process.pid, signal.SIGTERM)
        result = job.wait()
    assert not result.ok
    for host in job.hosts:
        assert not host.stopped_by_emulator, f"{host.name} had to be stopped by the emulator"
        assert host.exit_code == 143 and host.failure.startswith("terminated: SIGTERM"), (host.name, host.exit_code, host.failure)
    assert not _left_behind(job)


def _ray_starts_leading_their_own_group(job) -> dict[str, bool]:
    """Host -> whether its ``ray start`` leads a process group of its own, in the host's session (where the emulator's
    kill of a host's session still finds it)."""
    leads = {}
    for host in job.hosts:
        for p in host_processes(host):
            try:
                if "ray.scripts.scripts" in p.cmdline() and "start" in p.cmdline():
                    leads[host.name] = os.getpgid(p.pid) == p.pid and os.getsid(p.pid) == os.getsid(host.process.pid)
            except (psutil.Error, ProcessLookupError):
                continue
    return leads
