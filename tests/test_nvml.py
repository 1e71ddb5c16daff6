"""NVML: without a driver it says so in one line; with one it reads real telemetry."""

import pytest

from kerntune.engine import nvml


def test_reason_bits_are_named():
    assert nvml.reasons(0x1 | 0x4 | 0x40) == ("idle", "software power cap", "hardware thermal")
    assert nvml.reasons(0) == ()


def test_describe_all_never_raises():
    lines = nvml.describe_all()
    assert lines and all(isinstance(line, str) and "\n" not in line for line in lines)


@pytest.mark.gpu
def test_telemetry_reads_the_device():
    ident, tel = nvml.identity(0), nvml.telemetry(0)
    assert ident.name and ident.uuid.startswith("GPU-")
    assert ident.memory_total > 0 and tel.power_limit_w > 0
    assert 0 < tel.sm_clock_mhz <= ident.max_sm_clock_mhz
    assert tel.temperature_c > 0 and tel.slowdown_temp_c > tel.temperature_c
