"""The one PyTorch train step and validation, and the probes that measure that step on a copy of the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steps.common.errors import UserError
from steps.formats.webdataset import write_shard
from steps.train.core.config import TrainConfig
from steps.train.frameworks.pytorch.dataset import Batch
from steps.train.frameworks.pytorch.step import (
    TrainStep,
    isolated_costs,
    loop_cpus,
    memory_format,
    require_compiler,
    resolve_precision,
    to_device,
    validate,
)
from steps.train.frameworks.pytorch.trainer import train_epochs
from tests.fixtures.tiny_workload import Tiny

CPU = torch.device("cpu")


class Plain(Tiny):
    """Sample ``i``'s pixels are all ``i % 256``: no image codec needed."""

    def decode(self, raw, *, train, rng):
        return np.full((16, 16, 3), int(raw) % 256, dtype=np.uint8)


class Parity(torch.nn.Module):
    """Predicts the parity of a sample's pixel value, and records each forward's autograd and train/eval mode."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.calls: list[tuple[bool, bool]] = []
        self.autocast: list[torch.dtype | None] = []

    def forward(self, x):
        self.calls.append((torch.is_grad_enabled(), self.training))
        self.autocast.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        odd = (x[:, 0, 0, 0] * 255).round().remainder(2)
        return torch.stack([1 - odd, odd], dim=1) * self.scale


def _shard(path, count: int, label=lambda i: i % 2):
    write_shard(path, [(i, label(i), "jpg", str(i).encode()) for i in range(count)])
    return path


def _batches(count: int, seed: int = 1) -> list[Batch]:
    gen = torch.Generator().manual_seed(seed)
    return [
        Batch(
            torch.randint(0, 256, (4, 16, 16, 3), dtype=torch.uint8, generator=gen),
            torch.randint(0, 2, (4,), generator=gen),
            torch.arange(4 * b, 4 * b + 4),
        )
        for b in range(count)
    ]


@pytest.mark.slow
def test_one_step_changes_the_weights_and_returns_the_loss_before_it():
    workload = Plain({"hidden": 4})
    torch.manual_seed(0)
    model = workload.build_model(2)
    (batch,) = _batches(1)
    with torch.no_grad():
        expected = float(torch.nn.functional.cross_entropy(model(workload.normalize(batch.pixels)), batch.labels))
    before = [p.detach().clone() for p in model.parameters()]
    step = TrainStep(workload, model, workload.optimizer(model.parameters(), 0.1), CPU)
    loss = step(batch.pixels, batch.labels)
    assert isinstance(loss, float) and loss == pytest.approx(expected, rel=1e-6)
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


@pytest.mark.slow  # a model built and stepped in each precision: 1-1.5 s each in the fast lane
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_one_step_in_each_precision_trains_on_the_cpu(precision):
    """fp16 included: torch's CPU autocast runs float16, so it is allowed on a CPU host (auto never picks it there)."""
    workload = Plain({"hidden": 4})
    torch.manual_seed(0)
    model = workload.build_model(2)
    (batch,) = _batches(1)
    before = [p.detach().clone() for p in model.parameters()]
    step = TrainStep(workload, model, workload.optimizer(model.parameters(), 0.1), CPU, resolve_precision(precision, CPU))
    seen = []
    model.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    loss = step(batch.pixels, batch.labels)
    assert step.precision == precision and step.scaler.is_enabled() == (precision == "fp16")
    assert seen == [{"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]]
    assert np.isfinite(loss)
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast computes in half, the weights stay fp32


def test_auto_trains_in_fp32_on_the_cpu():
    assert resolve_precision("auto", CPU) == "fp32"


def test_validate_runs_the_forward_in_the_precision_it_trained_in(tmp_path):
    shard = _shard(tmp_path / "validation-00000.tar", 8)
    model = Parity()
    validate(Plain({}), model, CPU, [shard], batch_size=8, num_workers=1, precision="bf16")
    validate(Plain({}), model, CPU, [shard], batch_size=8, num_workers=1)
    assert model.autocast == [torch.bfloat16, None]


def test_building_the_step_puts_the_model_in_training_mode():
    workload = Plain({})
    model = workload.build_model(2).eval()
    TrainStep(workload, model, workload.optimizer(model.parameters(), 0.1), CPU)
    assert model.training


def test_validate_runs_the_model_in_eval_mode_without_autograd_and_returns_it_to_training(tmp_path):
    shard = _shard(tmp_path / "validation-00000.tar", 20, label=lambda i: i % 2 if i < 15 else 1 - i % 2)
    model = Parity().train()
    accuracy, total = validate(Plain({}), model, CPU, [shard], batch_size=8, num_workers=1)
    assert (accuracy, total) == (0.75, 20)
    assert model.calls and set(model.calls) == {(False, False)}  # every forward: no graph, eval mode
    assert model.training


def test_validate_keeps_a_model_in_eval_mode_there_and_measures_nothing_without_shards(tmp_path):
    model = Parity().eval()
    validate(Plain({}), model, CPU, [_shard(tmp_path / "v.tar", 4)], batch_size=8, num_workers=1)
    assert not model.training
    assert validate(Plain({}), Parity(), CPU, [], batch_size=8, num_workers=1) == (None, 0)


class _Source:
    def __init__(self, batches: list[Batch]):
        self._batches = batches
        self.samples_per_epoch = sum(len(b) for b in batches)

    def batches(self, epoch: int):
        yield from self._batches


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_probes_copy_trains_exactly_as_the_trainers_loop(precision):
    """The cost probe and the hybrid-decode sizing measure `TrainStep.on_copy`: from the same weights, on the same
    batches, in the same precision, it must end where the trainer's loop ends, or the probes would measure another step."""
    workload = Plain({"hidden": 4})
    torch.manual_seed(0)
    model = workload.build_model(2)
    batches = _batches(3)
    cfg = TrainConfig(epochs=1, batch_size=4, learning_rate=0.05, precision=precision)
    initial = [p.detach().clone() for p in model.parameters()]
    probe = TrainStep.on_copy(workload, model, CPU, cfg.learning_rate, precision)
    for batch in batches:
        probe(batch.pixels, batch.labels)
    assert all(torch.equal(a, b) for a, b in zip(initial, model.parameters()))  # the probe trained its copy only
    progress = train_epochs(cfg, workload, model, _Source(batches), CPU)
    stats, corrupt = progress.stats, progress.corrupt
    assert stats.steps == 3 and corrupt == []
    assert not any(torch.equal(a, b) for a, b in zip(initial, model.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(probe.model.parameters(), model.parameters()))


def test_loop_cpus_measures_on_a_copy(tmp_path):
    workload = Plain({"hidden": 4})
    model = workload.build_model(2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    busy = loop_cpus(workload, model, CPU, np.zeros((16, 16, 3), np.uint8), batch_size=4, learning_rate=0.1, steps=2)
    assert busy > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_costs_are_measured_per_batch_without_touching_the_model(tmp_path):
    shard = _shard(tmp_path / "validation-00000.tar", 20)
    workload = Plain({"hidden": 4})
    model = workload.build_model(2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    costs = isolated_costs(workload, model, CPU, [shard], batch_size=8, learning_rate=0.1, batches=3)
    assert costs["batches"] == 3 and costs["batch_size"] == 8 and costs["device"] == "cpu"  # 20 samples, read again as needed
    assert costs["decode_s_per_batch"] > 0 and costs["step_s_per_batch"] > 0
    assert costs["decode_s_per_batch"] == costs["decode_cpu_s_per_batch"] / costs["cpus"]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_no_shards_no_costs():
    assert isolated_costs(Plain({}), Plain({}).build_model(2), CPU, [], batch_size=8, learning_rate=0.1) is None


class Convolutional(Plain):
    """A model with a 2-D convolution, whose forward records whether torch.compile traced it and its input's layout."""

    def build_model(self, num_classes):
        return Recording(num_classes)


class Recording(torch.nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.head = torch.nn.Linear(4, num_classes)
        self.compiling: list[bool] = []
        self.channels_last: list[bool] = []

    def forward(self, x):
        self.compiling.append(torch.compiler.is_compiling())
        self.channels_last.append(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
        return self.head(torch.relu(self.conv(x)).amax(dim=(2, 3)))


@pytest.mark.parametrize(
    ("device_type", "convolutional", "layout"),
    [
        ("cuda", True, torch.channels_last),
        ("cpu", True, torch.channels_last),  # measured faster there too (CHANNELS_LAST_DEVICES)
        ("mps", True, torch.contiguous_format),
        ("cuda", False, torch.contiguous_format),
        ("cpu", False, torch.contiguous_format),
    ],
)
def test_channels_last_is_chosen_for_a_convolutional_model_on_the_devices_it_was_measured_faster_on(
    device_type, convolutional, layout
):
    workload = Convolutional({}) if convolutional else Plain({"hidden": 4})
    assert memory_format(workload.build_model(2), device_type) == layout


def test_the_step_trains_a_convolutional_model_and_its_batches_channels_last_and_a_dense_one_as_built():
    conv, dense = Convolutional({}), Plain({"hidden": 4})
    conv_model, dense_model = conv.build_model(2), dense.build_model(2)
    assert conv_model.conv.weight.is_contiguous()  # as built: the step chooses the layout
    (batch,) = _batches(1)
    TrainStep(conv, conv_model, conv.optimizer(conv_model.parameters(), 0.1), CPU)(batch.pixels, batch.labels)
    assert conv_model.conv.weight.is_contiguous(memory_format=torch.channels_last) and conv_model.channels_last == [True]
    x, _ = TrainStep(dense, dense_model, dense.optimizer(dense_model.parameters(), 0.1), CPU).inputs(batch.pixels, batch.labels)
    assert x.is_contiguous()  # Tiny's normalize hands a channels-last view; a Flatten would copy it back anyway
    assert to_device(conv.build_model(2), CPU).conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_validate_feeds_a_convolutional_model_channels_last(tmp_path):
    model = to_device(Convolutional({}).build_model(2), CPU)
    validate(Convolutional({}), model, CPU, [_shard(tmp_path / "v.tar", 4)], batch_size=4, num_workers=1)
    assert model.channels_last == [True]


@pytest.mark.slow
def test_compile_on_trains_a_step_through_torch_compile_on_the_cpu_and_the_probes_stay_eager():
    """Compile=on: the step's forward is traced by torch.compile (inductor builds C++ with this machine's g++), trains,
    and keeps the model's own state_dict keys; the probes' copy runs eager (`TrainStep.on_copy`)."""
    workload = Convolutional({})
    torch.manual_seed(0)
    model = workload.build_model(2)
    (batch,) = _batches(1)
    before = [p.detach().clone() for p in model.parameters()]
    step = TrainStep(workload, model, workload.optimizer(model.parameters(), 0.1), CPU, "fp32", "on")
    loss = step(batch.pixels, batch.labels)
    assert model.compiling[0] is True and np.isfinite(loss)
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert set(model.state_dict()) == {"conv.weight", "conv.bias", "head.weight", "head.bias"}
    probe = TrainStep.on_copy(workload, model, CPU, 0.1)
    probe.model.compiling.clear()
    probe(batch.pixels, batch.labels)
    assert probe.model.compiling == [False]


def test_compile_on_without_a_compiler_is_refused_at_the_start_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder with no compiler in it
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    require_compiler("off", torch.device("cuda"))  # nothing to build
    for device in (CPU, torch.device("cuda")):
        with pytest.raises(UserError, match=r"^Compile=on: torch.compile needs a C/C\+\+ compiler .* g\+\+ .*Compile=off$"):
            require_compiler("on", device)
    (tmp_path / "g++").write_text("#!/bin/sh\n")
    (tmp_path / "g++").chmod(0o755)
    require_compiler("on", CPU)
    with pytest.raises(UserError, match=r"and clang is not on its PATH"):  # a GPU's Triton also needs a C compiler
        require_compiler("on", torch.device("cuda"))
