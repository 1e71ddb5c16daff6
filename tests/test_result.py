"""Results read back from a file: the same result as written, and every bad field is one line."""

import dataclasses
import math

import numpy as np
import pytest

from kerntune.engine.result import Resources, Result


def full_result() -> Result:
    return Result(config={"B": 64, "VEC": True, "MODE": "fast", "SCALE": 0.5}, status="ok", message="",
                  times_us=(1.5, 1.25, 1.75), median_us=1.5, spread=0.1, min_us=1.25, compile_s=0.2,
                  verify_s=0.01, time_s=0.3, resources=Resources(registers=32, shared_static=4096, spills=1),
                  occupancy=0.75, bandwidth_gbs=900.0, gflops=12.5, sol_us=1.0, sol_fraction=0.66, max_error=0.01,
                  seeds=(1, 2), grid=(4, 1, 1), block=(256, 1, 1), cached=True, device="cuda:1")


def test_a_result_read_back_equals_the_one_written():
    r = full_result()
    back = Result.from_dict(r.to_dict())
    assert back == r
    assert back.to_dict() == r.to_dict()
    assert dataclasses.asdict(back) == dataclasses.asdict(r)
    assert dataclasses.replace(back, status="wrong_result").status == "wrong_result"
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.status = "x"  # type: ignore[misc]


def test_fields_left_out_take_their_defaults_and_unknown_ones_are_dropped():
    r = Result.from_dict({"config": {"B": 1}, "status": "compile_error", "message": "no", "from_the_future": 1})
    assert r == Result(config={"B": 1}, status="compile_error", message="no")
    assert r.times_us == () and r.median_us is None and r.resources is None and not r.ranked


def test_numbers_of_numpy_types_are_numbers():
    r = Result.from_dict({"config": {"B": 1}, "status": "ok", "median_us": np.float64(2.5)})
    assert r.median_us == 2.5 and r.ranked


@pytest.mark.parametrize("field, value, words", [
    ("median_us", "fast", "median_us must be a number, got 'fast'"),
    ("median_us", True, "median_us must be a number, got True"),
    ("times_us", [1.0, "x"], "times_us must be a list of numbers"),
    ("times_us", [1.0, False], "times_us must be a list of numbers"),
    ("seeds", 3, "seeds must be a list of numbers"),
    ("config", {"B": [1]}, "config must be a table of values"),
    ("config", [1], "config must be a table of values"),
    ("resources", {"registers": "many"}, "resources must be a table of numbers"),
    ("resources", {"registers": math.inf}, "resources must be finite numbers"),
    ("resources", {"registers": math.nan}, "resources must be finite numbers"),
    ("status", "fine", "unknown status 'fine'"),
    ("status", 3, "status must be a string"),
    ("message", None, "message must be a string"),
    ("cached", "yes", "cached must be true or false"),
])
def test_a_bad_field_is_refused_with_one_line(field, value, words):
    d = full_result().to_dict()
    d[field] = value
    with pytest.raises(ValueError) as info:
        Result.from_dict(d)
    assert str(info.value) == words


@pytest.mark.parametrize("missing", ["config", "status"])
def test_a_result_needs_its_config_and_status(missing):
    d = full_result().to_dict()
    del d[missing]
    with pytest.raises(ValueError, match="a result needs config and status"):
        Result.from_dict(d)


def test_one_formatter_writes_every_configuration_flags_as_0_and_1():
    from kerntune.engine.messages import Checked
    from kerntune.engine.result import ORIGINAL, config_key, config_label, config_text
    from kerntune.engine.space import Config

    config = {"BLOCK": 256, "FAST": True, "SCALE": 0.5}
    assert config_text(config) == "BLOCK=256 FAST=1 SCALE=0.5" == str(Config.of(config))
    assert config_key(config) == "BLOCK=256,FAST=1,SCALE=0.5"
    assert config_text(config, names={"BLOCK": "BL"}, text=str.lower) == "bl=256 fast=1 scale=0.5"
    assert config_label({}) == ORIGINAL == "original" and config_text({}) == ""
    assert Checked(False, "wrote_input", "x changed").message == "wrote_input: x changed"
    assert Checked(True).message == ""
