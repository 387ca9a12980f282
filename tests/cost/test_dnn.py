"""Layer tables derived from published architectures: torchvision's parameter counts exactly, its MAC counts."""

import pytest

from aitrinity import catalog
from aitrinity.cost.dnn import layer_table
from aitrinity.spec._base import validate
from aitrinity.spec.edge import DnnSpec

# torchvision's model docs: GFLOPS there are multiply-accumulates (GMACs) at 224x224
PUBLISHED_GMACS = {"alexnet": 0.71, "vgg-16": 15.47, "resnet-50": 4.09, "mobilenet-v2": 0.30}


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS))
def test_params_and_macs_match_the_published_figures(name):
    spec = catalog.dnn(name)
    t = layer_table(spec)
    assert t.params == spec.published_params
    assert t.flops / 2 / 1e9 == pytest.approx(PUBLISHED_GMACS[name], abs=0.006)
    assert t.layers[-1].out_shape == (1000,)


def test_shapes_propagate_and_bytes_follow_the_activation_dtype():
    t = layer_table(catalog.dnn("resnet-50"))
    by = {x.name: x for x in t.layers}
    assert by["conv1"].out_shape == (64, 112, 112)
    assert by["pool1"].out_shape == (64, 56, 56)
    assert by["layer1_3"].out_shape == (256, 56, 56)
    assert by["layer4_3"].out_shape == (2048, 7, 7)
    assert by["avgpool"].out_bytes == 2048 * 4
    assert t.input_bytes == 3 * 224 * 224  # an uint8 frame
    assert [x.name for x in t.layers][:4] == ["conv1", "pool1", "layer1_1", "layer1_2"]


def test_a_window_that_does_not_fit_is_a_clear_error():
    spec = validate(
        DnnSpec,
        {
            "name": "tiny",
            "source": "test",
            "input_shape": [1, 4, 4],
            "layers": [{"name": "c", "op": "conv", "out": 2, "k": 7}],
        },
    )
    with pytest.raises(ValueError, match="tiny: c: a 7x7 window"):
        layer_table(spec)


def test_bad_specs_are_rejected_naming_the_field():
    from aitrinity.errors import SpecError

    with pytest.raises(SpecError, match=r"layers\.0"):
        validate(
            DnnSpec, {"name": "x", "source": "s", "input_shape": [1, 8, 8], "layers": [{"name": "c", "op": "conv"}]}
        )
    with pytest.raises(SpecError, match="input_shape"):
        validate(
            DnnSpec, {"name": "x", "source": "s", "input_shape": [8, 8], "layers": [{"name": "p", "op": "maxpool"}]}
        )
