"""Model sources (built-in, torchvision, ONNX, user factory), their named errors, and whole-model tuning and
compiling: resume after a kill, the numeric check, runtimes that are not available."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from tvm import relax

from tvm_transfer.cli import main
from tvm_transfer.networks import (
    LoadedModel,
    ModelSourceError,
    constant_bytes,
    conv_layout_of,
    import_passes,
    imported_module,
    load_model,
    model_slug,
    network_family,
    relax_module,
    split_model_names,
    with_conv_layout,
)
from tvm_transfer.networks.torchvision_models import classification_models
from tvm_transfer.runtimes import export_onnx
from tvm_transfer.tuning.compile import compile_network
from tvm_transfer.tuning.network import tune_network
from tvm_transfer.tuning.rounds import read_rounds
from tvm_transfer.tuning.run import RunConfig, extract_network_tasks
from tvm_transfer.tuning.workdir import WorkDir

SMALL_IMAGE = (1, 3, 32, 32)  # torchvision networks at a small input: the same layers, fast to run untuned

FACTORY_MODULE = """
import torch


class TwoInputs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x, y):
        return torch.relu(self.linear(x)) * y


def make():
    torch.manual_seed(0)
    return TwoInputs(), (torch.randn(2, 16), torch.randn(2, 8))


def broken():
    raise RuntimeError("weights file missing")


def wrong():
    return torch.nn.Linear(2, 2)


def unsupported():
    class Inverse(torch.nn.Module):
        def forward(self, x):
            return torch.special.erfinv(x)

    return Inverse(), torch.rand(4, 4)
"""


@pytest.fixture
def factory_dir(tmp_path, monkeypatch):
    """A working directory holding a user's module of model factories (``user_models``)."""
    (tmp_path / "user_models.py").write_text(FACTORY_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "user_models", raising=False)
    return tmp_path


def test_torchvision_classification_builders_load_without_its_extension():
    # torchvision's package __init__ fails with the CPU torch (its C++ extension links CUDA torch): the
    # builders must still come, and build, through tvm_transfer.networks.torchvision_models.
    names = classification_models()
    for name in ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
                 "regnet_y_400mf", "convnext_tiny", "vit_b_16"):  # fmt: skip
        assert name in names
    model = load_model("torchvision:resnet18", SMALL_IMAGE)
    assert model.kind == "torchvision" and model.inputs[0].shape == SMALL_IMAGE
    with torch.no_grad():
        output = model.torch_module(torch.from_numpy(model.inputs[0]))
    assert output.shape == (1, 1000)
    # Calibrated random weights: outputs of a realistic scale, so a numeric check can fail.
    assert 1e-2 < float(output.abs().max()) < 1e3


@pytest.mark.parametrize("name", ["torchvision:mobilenet_v2", "torchvision:vit_b_16"])
def test_seeded_torchvision_weights_do_not_vanish(name):
    # As initialised, these output ~1e-9 (mobilenet) or exactly 0 (ViT's zero head).
    model = load_model(name)
    with torch.no_grad():
        output = model.torch_module(torch.from_numpy(model.inputs[0]))
    assert float(output.std()) > 1e-3


def test_a_vision_transformer_is_built_for_the_input_size_it_is_given():
    # Its position embedding fixes the image size: 160x160 in patches of 32 is 25 patches and a class token.
    model = load_model("torchvision:vit_b_32@1,3,160,160")
    assert model.torch_module.seq_length == 26
    with torch.no_grad():
        output = model.torch_module(torch.from_numpy(model.inputs[0]))
    assert output.shape == (1, 1000)
    with pytest.raises(ModelSourceError, match="divisible by 32"):
        load_model("torchvision:vit_b_32@1,3,100,100")


def test_bert_base_is_a_twelve_layer_encoder_with_few_distinct_tasks(target):
    model = load_model("bert_base")
    assert model.inputs[0].shape == (1, 128, 768)
    assert len(model.torch_module.layers) == 12
    tasks = extract_network_tasks(model, target)
    # Twelve identical layers: each layer's operators are one task of weight >= 12.
    assert 5 <= len(tasks) <= 30
    assert max(float(t.weight) for t in tasks) >= 12


@pytest.mark.parametrize("name", ["mlp", "bert_small"])
def test_constant_bytes_are_the_weights_of_the_network(name):
    model = load_model(name)
    weights = sum(p.numel() * p.element_size() for p in model.torch_module.parameters())
    assert constant_bytes(relax_module(model)) == pytest.approx(weights, rel=1e-3)


def test_bert_small_is_four_bert_small_layers_whose_weights_outgrow_a_cpu_cache():
    layer, encoder = load_model("bert_small_layer"), load_model("bert_small")
    assert len(encoder.torch_module.layers) == 4 and encoder.inputs[0].shape == layer.inputs[0].shape
    # Where the layer's weights fit a 32 MB last-level cache, the encoder's do not.
    assert constant_bytes(relax_module(layer)) < 32 << 20 < constant_bytes(relax_module(encoder))


def test_weights_are_constants_marked_layout_free(target):
    model = load_model("resnet_block")
    mod = relax_module(model)
    assert len(mod["main"].params) == 1  # the input only: the weights are bound
    free = extract_network_tasks(model, target)
    assert all(len(t.dispatched[0]["main"].attrs["layout_free_buffers"]) for t in free)
    plain = extract_network_tasks(model, target, layout_free=False)
    assert all(t.dispatched[0]["main"].attrs.get("layout_free_buffers") is None for t in plain)


def test_an_onnx_file_exported_from_torchvision_tunes_and_compiles_against_onnx_runtime(
    target, small_options, tmp_path
):
    source = load_model("torchvision:mobilenet_v2", SMALL_IMAGE)
    path = export_onnx(source.torch_module, source.inputs, tmp_path / "mobilenet.onnx")
    model = load_model(str(path))
    assert model.kind == "onnx" and model.torch_module is None
    assert [x.shape for x in model.inputs] == [SMALL_IMAGE]
    assert model_slug(str(path)) == "mobilenet"
    work_dir = tmp_path / "work"
    tuned = tune_network(
        RunConfig.make(model, work_dir, target=target, options=replace(small_options, trials=8))
    )
    assert 8 <= sum(row[4] for row in tuned.tasks) <= 16  # the scheduler may finish its last batch
    compiled = compile_network(
        RunConfig.make(model, work_dir, target=target), runtimes=("onnxruntime",), rounds=1
    )
    names = [r.name for r in compiled.results]
    assert names == ["TVM", "ONNX Runtime"]
    assert all(r.status == "ok" for r in compiled.results)
    assert compiled.max_abs_error < 1e-3  # against ONNX Runtime: there is no PyTorch module


def test_a_user_factory_with_two_inputs_compiles_and_matches_pytorch(factory_dir, target, tmp_path):
    model = load_model("user_models:make")
    assert model.kind == "factory" and [x.shape for x in model.inputs] == [(2, 16), (2, 8)]
    compiled = compile_network(
        RunConfig.make(model, tmp_path / "work", target=target), runtimes=("eager",), rounds=1
    )
    assert compiled.results[1].status == "ok"
    assert compiled.max_abs_error < 1e-5


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_net", "not a built-in network"),
        ("torchvision:resnet19", "not a torchvision classification model; similar: resnet"),
        ("missing.onnx", "no such file"),
        ("damaged.onnx", "not a readable ONNX model"),
        ("no_such_module:make", "cannot import module 'no_such_module'"),
        ("user_models:absent", "has no attribute 'absent'"),
        ("user_models:broken", "the factory failed: RuntimeError: weights file missing"),
        (
            "user_models:wrong",
            "the factory returned Linear; it must return (torch.nn.Module, example_inputs)",
        ),
        (
            "user_models:unsupported",
            "TVM's PyTorch frontend cannot import it: AssertionError: Unsupported function types ['erfinv",
        ),
    ],
)
def test_bad_models_raise_one_named_error(factory_dir, name, message):
    (factory_dir / "damaged.onnx").write_bytes(b"\x08\x07this is not a protobuf" * 3)
    with pytest.raises(ModelSourceError) as raised:
        relax_module(load_model(name))
    assert str(raised.value).startswith(f"model {name!r}: ")
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_cli_names_a_bad_model_in_one_line_with_exit_status_2(capsys, tmp_path):
    assert main(["compile", "torchvision:resnet19", "--work-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tvm-transfer compile: error: model 'torchvision:resnet19': ")
    assert len(err.splitlines()) == 1


def test_a_dynamic_onnx_input_needs_an_input_shape(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    path = tmp_path / "dynamic.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(ModelSourceError, match="dynamic dimensions \\(batch\\): give --input-shape"):
        load_model(str(path))
    assert load_model(str(path), (3, 8)).inputs[0].shape == (3, 8)


def test_a_missing_comparison_runtime_is_reported_not_available(target, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    compiled = compile_network(
        RunConfig.make("mlp", tmp_path, target=target), runtimes=("eager", "onnxruntime"), rounds=1
    )
    statuses = {r.name: r.status for r in compiled.results}
    assert statuses["TVM"] == "ok" and statuses["PyTorch eager"] == "ok"
    assert statuses["ONNX Runtime"].startswith("not available")


def test_the_numeric_check_fails_the_command_when_outputs_differ(tmp_path, capsys):
    # No real program matches PyTorch bit for bit: a tolerance of 0 must make the check fail.
    argv = ["compile", "mlp", "--work-dir", str(tmp_path), "--runtimes", "eager", "--rounds", "1"]
    assert main([*argv, "--json", str(tmp_path / "c.json"), "--profile-network"]) == 0
    assert "TVM, function by function" in capsys.readouterr().out
    report = json.loads((tmp_path / "c.json").read_text())
    assert report["compile"]["results"][0]["name"] == "TVM" and report["tuning"] is None
    assert report["compile"]["profile"]["functions"]  # untuned: TVM's default lowering, no records
    assert main([*argv, "--tolerance", "0"]) == 1
    assert "output differs from the reference" in capsys.readouterr().err


def _records(work_dir: Path) -> list[str]:
    path = work_dir / "database_tuning_record.json"
    return path.read_text().splitlines() if path.exists() else []


def test_network_tuning_killed_half_way_resumes_and_loses_nothing(tmp_path):
    work_dir = tmp_path / "work"
    command = [
        sys.executable, "-m", "tvm_transfer.cli", "tune-network", "mlp", "--trials", "32",
        "--trials-per-iter", "8", "--population", "16", "--work-dir", str(work_dir), "--quiet",
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = subprocess.Popen(command, env=environment, start_new_session=True)
    deadline = time.monotonic() + 240
    while len(_records(work_dir)) < 8 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    kept = _records(work_dir)
    assert 8 <= len(kept) < 32, "the run must be killed half way for this test to mean anything"

    resumed = subprocess.run([*command, "--json", str(tmp_path / "r.json")], env=environment, timeout=600)
    assert resumed.returncode == 0
    records = _records(work_dir)
    # Nothing lost; MetaSchedule finishes the batch it is in, so the budget may be passed by under a batch.
    assert 32 <= len(records) < 32 + 8 and records[: len(kept)] == kept
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["new_trials"] == len(records) - len(kept)
    trials = [row["trials"] for row in read_rounds(work_dir)]
    assert trials == sorted(trials) and trials[-1] == len(records)  # the log continues across the kill


def test_a_budget_smaller_than_one_batch_per_task_still_tunes_every_task(target, small_options, tmp_path):
    # Two tasks, 8 trials, batches of 8: MetaSchedule alone would give the whole budget to the first task
    # and leave the other on TVM's unscheduled lowering.
    result = tune_network(
        RunConfig.make("resnet_block", tmp_path, target=target, options=replace(small_options, trials=8))
    )
    assert len(result.tasks) == 2
    assert all(trials >= 1 for *_, trials in result.tasks)
    assert np.isfinite(result.weighted_latency)


def test_factory_source_cannot_take_an_input_shape(factory_dir):
    with pytest.raises(ModelSourceError, match="drop --input-shape"):
        load_model("user_models:make", (1, 16))


def test_model_slug_is_a_file_name():
    assert model_slug("torchvision:resnet18") == "torchvision-resnet18"
    assert model_slug("pkg.models:make_net") == "pkg.models-make_net"
    assert model_slug("/data/models/bert.onnx", (1, 64)) == "bert-1x64"
    assert model_slug("torchvision:resnet50@1,3,160,160") == "torchvision-resnet50-1x3x160x160"


def test_a_list_of_model_names_keeps_each_input_shape_whole():
    names = "torchvision:resnet50@1,3,160,160@nhwc,bert_base,resnet_block@1,64,28,28,./m.onnx@1x64"
    assert split_model_names(names) == [
        "torchvision:resnet50@1,3,160,160@nhwc",
        "bert_base",
        "resnet_block@1,64,28,28",
        "./m.onnx@1x64",
    ]


def test_a_name_ending_in_a_shape_loads_that_shape_and_keeps_its_name(target):
    model = load_model("resnet_block@1,64,28,28")
    assert model.name == "resnet_block@1,64,28,28"
    assert model.inputs[0].shape == (1, 64, 28, 28)
    tasks = extract_network_tasks(model, target)
    # Every task's output (its last parameter) is the block's feature map at that size.
    assert tasks and all(
        [int(d) for d in t.dispatched[0]["main"].params[-1].shape] == [1, 64, 28, 28] for t in tasks
    )


@pytest.mark.parametrize(
    ("name", "shape", "message"),
    [
        ("torchvision:resnet18@1x3x160x160", None, "after '@': '1x3x160x160' is not a shape"),
        ("resnet_block@1,0,8,8", None, "is not a shape"),
        ("resnet_block@1,64,8,8", (1, 64, 8, 8), "already gives an input shape; drop --input-shape"),
    ],
)
def test_a_bad_shape_in_a_name_is_refused(name, shape, message):
    with pytest.raises(ModelSourceError, match=message):
        load_model(name, shape)


def test_batch_norm_folded_into_the_convolutions_leaves_their_count_and_the_output(target, tmp_path):
    plain = extract_network_tasks(load_model("mobilenet_v2_block"), target)
    model = load_model("mobilenet_v2_block")
    model.relax = imported_module(model, fold_batch_norm=True)
    folded = extract_network_tasks(model, target)
    # As imported, each of the block's three convolutions divides by batch norm's standard deviation.
    assert sum("conv2d" in t.task_name and "divide" in t.task_name for t in plain) == 3
    assert len(folded) == len(plain) and not any("divide" in t.task_name for t in folded)
    compiled = compile_network(RunConfig.make(model, tmp_path, target=target), runtimes=(), rounds=1)
    assert compiled.max_abs_error < 1e-4


def test_convolutions_imported_channels_last_keep_the_output(target, tmp_path):
    model = load_model("mobilenet_v2_block@nhwc")
    assert (model.name, model.conv_layout) == ("mobilenet_v2_block@nhwc", "NHWC")
    relax_module(model)
    convolutions = [
        call.attrs
        for func in model.relax.functions.values()
        for call in _calls(func)
        if getattr(call.op, "name", "") == "relax.nn.conv2d"
    ]
    assert len(convolutions) == 3
    assert {(str(a.data_layout), str(a.kernel_layout)) for a in convolutions} == {("NHWC", "OHWI")}
    # Channels last from the input to the output, its two ReLU6 included: the only transposes are the two
    # of the block's NCHW input and output.
    operators = [getattr(call.op, "name", "") for f in model.relax.functions.values() for call in _calls(f)]
    assert operators.count("relax.permute_dims") == 2 and "relax.clip" not in operators
    compiled = compile_network(RunConfig.make(model, tmp_path, target=target), runtimes=(), rounds=1)
    assert compiled.max_abs_error < 1e-4


class _PatchesIntoAttention(torch.nn.Module):
    """A vision transformer's first steps: a patch convolution, its patches as tokens, self-attention."""

    def __init__(self) -> None:
        super().__init__()
        self.patches = torch.nn.Conv2d(3, 8, 4, 4)
        self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patches(x).flatten(2).transpose(1, 2)
        return self.attention(tokens, tokens, tokens, need_weights=False)[0]


def test_attention_after_a_convolution_imports_channels_last_and_keeps_the_output(target, tmp_path):
    # PyTorch's attention squeezes an axis counted from the back, on which TVM's layout conversion fails.
    torch.manual_seed(0)
    model = LoadedModel(
        "patches",
        "factory",
        [np.random.default_rng(0).standard_normal((1, 3, 12, 12), np.float32)],
        torch_module=_PatchesIntoAttention().eval(),
        conv_layout="NHWC",
    )
    compiled = compile_network(RunConfig.make(model, tmp_path, target=target), runtimes=(), rounds=1)
    assert compiled.max_abs_error < 1e-4


def test_an_unknown_convolution_layout_is_refused():
    with pytest.raises(ValueError, match="unknown conv_layout 'NCHW16c': use one of NCHW, NHWC"):
        import_passes(conv_layout="NCHW16c")
    with pytest.raises(ModelSourceError, match="unknown conv layout 'NCHW16c': use one of NCHW, NHWC, AUTO"):
        load_model("mobilenet_v2_block", conv_layout="NCHW16c")
    with pytest.raises(ModelSourceError, match="the name asks for NHWC convolutions, not NCHW"):
        load_model("mobilenet_v2_block@nhwc", conv_layout="NCHW")


def test_the_auto_layout_is_channels_last_exactly_for_models_with_2d_convolutions(tmp_path):
    block = load_model("mobilenet_v2_block", conv_layout="auto")
    assert (block.name, block.conv_layout) == ("mobilenet_v2_block@nhwc", "NHWC")
    mlp = load_model("mlp", conv_layout="AUTO")
    assert (mlp.name, mlp.conv_layout) == ("mlp", "NCHW")
    assert load_model("mobilenet_v2_block@nchw", conv_layout="auto").conv_layout == "NCHW"  # the name wins
    assert load_model("mobilenet_v2_block").conv_layout == "NCHW"  # not asked: as the frontend imports it
    # An ONNX file says so by its Conv nodes: 2-d ones only.
    onnx_block = export_onnx(block.torch_module, block.inputs, tmp_path / "block.onnx")
    assert load_model(str(onnx_block), conv_layout="auto").conv_layout == "NHWC"
    conv1d = torch.nn.Sequential(torch.nn.Conv1d(4, 8, 3), torch.nn.ReLU()).eval()
    onnx_conv1d = export_onnx(conv1d, [np.ones((1, 4, 16), np.float32)], tmp_path / "conv1d.onnx")
    assert load_model(str(onnx_conv1d), conv_layout="auto").conv_layout == "NCHW"
    # kernel_shape is optional: the weight's rank tells.
    conv = onnx.helper.make_node("Conv", ["x", "w"], ["y"])
    graph = onnx.helper.make_graph(
        [conv],
        "bare_conv",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")],
    )
    onnx.save(onnx.helper.make_model(graph), tmp_path / "bare.onnx")
    assert load_model(str(tmp_path / "bare.onnx"), conv_layout="auto").conv_layout == "NHWC"


def test_the_commands_default_to_channels_last_and_point_at_an_nchw_work_dir_tuned_before(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    nchw = Path("work/mobilenet_v2_block-tvm-xgb")
    argv = ["mobilenet_v2_block", "--no-transfer"]
    assert main(["tune-network", *argv, "--conv-layout", "NCHW", "--trials", "8"]) == 0
    capsys.readouterr()
    assert main(["compile", *argv, "--runtimes", "eager", "--rounds", "1"]) == 0
    assert sorted(p.name for p in Path("work").iterdir()) == [nchw.name, "mobilenet_v2_block@nhwc-tvm-xgb"]
    assert f"note: {nchw} holds this model tuned with its convolutions NCHW" in capsys.readouterr().err
    # Given that work dir, the default layout is the one it was tuned with; another is refused, saying which.
    assert main(["compile", *argv, "--work-dir", str(nchw), "--runtimes", "none", "--rounds", "1"]) == 0
    assert "mobilenet_v2_block on" in capsys.readouterr().out  # not @nhwc
    assert main(["compile", *argv, "--work-dir", str(nchw), "--conv-layout", "NHWC"]) == 2
    refusal = "convolutions NCHW: tune and compile it with that layout (--conv-layout NCHW)"
    assert refusal in capsys.readouterr().err


def test_a_layout_is_named_by_a_suffix_after_the_shape_and_the_default_layout_by_none():
    model = load_model("resnet_block@1,64,28,28", conv_layout="NHWC")
    assert (model.name, model.conv_layout) == ("resnet_block@1,64,28,28@nhwc", "NHWC")
    assert model.inputs[0].shape == (1, 64, 28, 28)
    assert load_model("resnet_block@NCHW").name == "resnet_block"
    assert model_slug("torchvision:resnet50@1,3,160,160@nhwc") == "torchvision-resnet50-1x3x160x160@nhwc"
    assert model_slug("torchvision:resnet18", conv_layout="NHWC") == "torchvision-resnet18@nhwc"
    assert with_conv_layout("resnet_block", "nhwc") == "resnet_block@nhwc"
    with pytest.raises(ValueError, match="unknown conv layout 'AUTO'"):
        model_slug("resnet_block", conv_layout="AUTO")  # a name spells the layout picked, not the rule
    assert conv_layout_of("resnet_block@nhwc") == "NHWC" and conv_layout_of("resnet_block") == "NCHW"
    families = {network_family(n) for n in ("torchvision:resnet50@1,3,160,160@nhwc", "torchvision:resnet50")}
    assert families == {"torchvision:resnet50"}
    shaped = "torchvision:resnet50@1,3,160,160"
    assert with_conv_layout(shaped, "NHWC") == f"{shaped}@nhwc"
    assert with_conv_layout("resnet_block@nhwc", "NCHW") == "resnet_block"


def test_a_work_dir_tuned_in_one_layout_is_refused_for_the_other(target, tmp_path):
    tasks = extract_network_tasks(load_model("mobilenet_v2_block"), target)
    WorkDir(tmp_path).name_tasks("mobilenet_v2_block", tasks)  # names the work dir's network
    refusal = "tuned for 'mobilenet_v2_block', convolutions NCHW: tune and compile it with that layout"
    with pytest.raises(ValueError, match=refusal):
        compile_network(
            RunConfig.make("mobilenet_v2_block@nhwc", tmp_path, target=target), runtimes=(), rounds=1
        )
    assert main(["compile", "mobilenet_v2_block", "--conv-layout", "nhwc", "--work-dir", str(tmp_path)]) == 2


def _calls(func) -> list:
    calls = []
    relax.analysis.post_order_visit(func, lambda e: calls.append(e) if isinstance(e, relax.Call) else None)
    return calls


# MobileNet-V3 channels last: its hard swish and squeeze-excitation's hard sigmoid in NHWC.
@pytest.mark.parametrize("name", ["torchvision:resnet18", "torchvision:mobilenet_v3_large@nhwc"])
def test_untuned_torchvision_network_matches_pytorch(name, target, tmp_path):
    compiled = compile_network(
        RunConfig.make(load_model(name, SMALL_IMAGE), tmp_path, target=target), runtimes=(), rounds=1
    )
    assert np.isfinite(compiled.max_abs_error) and compiled.max_abs_error < 1e-3
