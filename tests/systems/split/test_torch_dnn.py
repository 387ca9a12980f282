"""The torch build of each catalog DNN: per-node FLOPs equal FlopCounterMode, output bytes the tensor's bytes."""

import pytest

torch = pytest.importorskip("torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from aitrinity import catalog  # noqa: E402
from aitrinity.cost.dnn import layer_table  # noqa: E402
from aitrinity.systems.split.torch_dnn import build  # noqa: E402


@pytest.mark.parametrize("name", ["alexnet", "vgg-16", "resnet-50", "mobilenet-v2", "digits-cnn"])
def test_profiled_nodes_match_the_layer_table(name):
    spec = catalog.dnn(name)
    t = layer_table(spec)
    torch.manual_seed(0)
    nodes = build(spec, [spec.input_shape, *(x.out_shape for x in t.layers[:-1])]).eval()
    assert sum(p.numel() for p in nodes.parameters()) == t.params
    x = torch.rand(1, *spec.input_shape)
    with torch.no_grad():
        for row, node in zip(t.layers, nodes, strict=True):
            with FlopCounterMode(display=False) as fc:
                x = node(x)
            assert fc.get_total_flops() == row.flops, row.name
            assert tuple(x.shape[1:]) == row.out_shape, row.name
            assert x[0].nbytes == row.out_bytes, row.name
            assert sum(p.numel() for p in node.parameters()) == row.params, row.name
