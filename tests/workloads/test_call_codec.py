"""A captured call's JSON form: every value kind round-trips, and only torch's operators resolve."""

import json

import pytest
import torch
import torch.nn.functional as F

from harness.workloads.call_codec import NotEncodable, decode, encode, qualified_name, resolve, tensor_names
from harness.workloads.params import WorkloadError


def test_values_round_trip_through_json():
    x, y = torch.randn(2, 3), torch.randn(4)
    value = [x, (1, 2.5, None, True), torch.bool, torch.channels_last, slice(0, None, 2), Ellipsis,
             float("-inf"), {"weight": y, "name": "a"}, torch.device("cpu"), torch.Size([2, 3]), x]
    tensors: dict[str, torch.Tensor] = {}
    names: dict[int, str] = {}
    encoded = json.loads(json.dumps(encode(value, tensors, lambda t: names.setdefault(id(t), f"arg{len(names)}"))))
    assert tensor_names(encoded) == ["arg0", "arg1"]  # x twice is one tensor
    back = decode(encoded, tensors, "cpu")
    assert back[0] is x and back[10] is x and back[7]["weight"] is y and back[7]["name"] == "a"
    assert back[1] == (1, 2.5, None, True) and back[2] is torch.bool and back[3] == torch.channels_last
    assert back[4] == slice(0, None, 2) and back[5] is Ellipsis and back[6] == float("-inf")
    assert back[8] == torch.device("cpu") and back[9] == (2, 3)


def test_an_argument_without_a_json_form_is_not_encodable():
    with pytest.raises(NotEncodable, match="object"):
        encode(object(), {}, lambda t: "arg0")


@pytest.mark.parametrize("fn", [F.linear, F.group_norm, torch.cat, torch.Tensor.add, torch.Tensor.__getitem__,
                                F.interpolate, torch.conv3d])
def test_torch_functions_resolve_to_themselves(fn):
    assert resolve(qualified_name(fn)) is fn


@pytest.mark.parametrize("name", ["os.system", "torch.save", "torch.load", "torch.hub.load", "torch.compile",
                                  "torch.Tensor.__class__", "torch.Tensor.__reduce_ex__", "builtins.eval"])
def test_anything_but_a_torch_operator_is_refused(name):
    with pytest.raises(WorkloadError, match="not an operator of the torch package"):
        resolve(name)
