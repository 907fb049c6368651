"""Platform profiles: the shipped values, their validation, and overrides."""

import pytest

from ratc.platform import PlatformError, list_platforms, load_platform, parse_platform
from ratc.platform.loader import PROFILE_DIR
from ratc.platform.schema import MAX_REGISTERS

MT3000 = (PROFILE_DIR / "mt3000.toml").read_text()


def test_shipped_profiles_load():
    assert {"mt3000", "a800"} <= set(list_platforms())
    for name in list_platforms():
        assert load_platform(name).name == name


def test_mt3000_holds_the_reviews_measured_numbers():
    p = load_platform("mt3000")
    assert p.cluster.dsps == 24
    assert p.cluster.memory_budget == 20 * 10**9
    assert p.cluster.ddr_bandwidth == 30e9
    assert p.network.inter_node_bandwidth == 3.7e9
    assert (p.dsp.sm_size, p.dsp.am_size) == (64 * 1024, 768 * 1024)
    # "8.1 TFLOPS FP16" per cluster at 2 FLOPs per MAC; Table 5's 64.96 % is 5.26 / 8.1.
    assert 2 * p.cluster.peak_mac_rate == 8.1e12
    assert 5.26e12 / (2 * p.cluster.peak_mac_rate) == pytest.approx(0.6496, abs=5e-4)
    # the DSP model issues exactly that peak: 256 MAC per cycle on each of the 24 DSPs
    assert p.cluster.dsps * p.vliw.vmac_rows * p.vliw.vector_lanes * p.dsp.clock == p.cluster.peak_mac_rate


@pytest.mark.parametrize("edit,message", [
    (lambda t: t + "\n[turbo]\nboost = 1\n", "unknown section [turbo]"),
    (lambda t: t.replace("dsps = 24", "dsps = 24\ncores = 3"), "[cluster]: unknown key 'cores'"),
    (lambda t: t.replace('ddr_bandwidth = "30GB/s"', ""), "[cluster]: missing key 'ddr_bandwidth'"),
    (lambda t: t.replace('memory_budget = "20GB"', 'memory_budget = "20 parsecs"'), "[cluster].memory_budget"),
    (lambda t: t.replace('ddr_bandwidth = "30GB/s"', 'ddr_bandwidth = "30GB"'), "bandwidth in bytes per second"),
    (lambda t: t.replace("dsps = 24", 'dsps = "24"'), "expected int"),
    (lambda t: t.replace('[network]', '[network'), "invalid TOML"),
    (lambda t: t.replace('name = "mt3000"', ''), "missing [platform] table with a 'name'"),
    (lambda t: t.replace('vmac_rows = 4', 'vmac_rows = 8'), "peak_mac_rate is 4.05e+12 MAC/s but the DSP model issues 8.1e+12"),
    # amounts must be positive, durations may be zero but not negative, numbers finite
    (lambda t: t.replace('memory_budget = "20GB"', 'memory_budget = "0GB"'), "[cluster].memory_budget: must be positive, got '0GB'"),
    (lambda t: t.replace('ddr_bandwidth = "30GB/s"', 'ddr_bandwidth = "-30GB/s"'), "[cluster].ddr_bandwidth: must be positive"),
    (lambda t: t.replace("clusters_per_node = 4", "clusters_per_node = 0"), "[network].clusters_per_node: must be positive"),
    (lambda t: t.replace('intra_node_latency = "10us"', 'intra_node_latency = "-10us"'), "must not be negative, got '-10us'"),
    (lambda t: t.replace("vmac_latency = 4", "vmac_latency = -4"), "[vliw].vmac_latency: must not be negative"),
    (lambda t: t.replace("vector_registers = 64", "vector_registers = 100000000000"), f"must be at most {MAX_REGISTERS}"),
    (lambda t: t.replace("vector_lanes = 64", "vector_lanes = -64").replace("vmac_rows = 4", "vmac_rows = -4"),
     "[vliw].vector_lanes: must be positive"),
    (lambda t: t.replace("[cluster]", "[[cluster]]"), "[cluster] must be one table of keys, got list"),
    (lambda t: t.replace('name = "mt3000"', "name = 5"), "[platform].name must be a string"),
])
def test_bad_profiles_say_what_and_where(edit, message):
    with pytest.raises(PlatformError, match=None) as info:
        parse_platform(edit(MT3000), "custom.toml")
    assert str(info.value).startswith("custom.toml")
    assert message in str(info.value)


def test_unknown_name_lists_the_shipped_profiles():
    with pytest.raises(PlatformError, match="shipped: .*mt3000"):
        load_platform("mt9000")


def test_overrides_parse_like_the_toml():
    p = load_platform("mt3000").with_overrides(memory_budget="30GB", **{"network.inter_node_bandwidth": "1GB/s"})
    assert p.cluster.memory_budget == 30 * 10**9
    assert p.network.inter_node_bandwidth == 1e9
    with pytest.raises(PlatformError, match="unknown platform parameter"):
        load_platform("mt3000").with_overrides(warp_drive="1")
    with pytest.raises(PlatformError, match="memory_budget"):
        load_platform("mt3000").with_overrides(memory_budget="lots")
    # a peak the DSP model does not issue is refused; the clock moves with it
    with pytest.raises(PlatformError, match="with overrides: .*peak_mac_rate is 8.1e.12 MAC/s"):
        load_platform("mt3000").with_overrides(peak_mac_rate="8.1T MAC/s")
    fast = load_platform("mt3000").with_overrides(peak_mac_rate="8.1T MAC/s", clock="1.318359375GHz")
    assert fast.cluster.peak_mac_rate == 8.1e12


def test_a_profile_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_bytes(MT3000.replace("# MT-3000", "# MT-3000 \xff", 1).encode("latin-1"))
    with pytest.raises(PlatformError, match="bad.toml: not a UTF-8 text file"):
        load_platform(path)


def test_shipped_zero_durations_are_allowed():
    """A latency of 0 is a physical idealization, not an error (an amount of 0 is)."""
    p = load_platform("mt3000").with_overrides(intra_node_latency="0us", branch_penalty=0)
    assert (p.network.intra_node_latency, p.vliw.branch_penalty) == (0.0, 0)
    with pytest.raises(PlatformError, match="must be positive"):
        load_platform("mt3000").with_overrides(ddr_bandwidth="0GB/s")
