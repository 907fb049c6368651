"""The executor's loop between tasks as `ratc calibrate` measures it (ratc.calibrate.loop)."""

import time

import pytest
import torch

from ratc.calibrate import loop


def test_a_gap_belongs_to_the_task_before_it_forwards_and_recovers_alike_backwards_of_layers_only():
    us = 1000    # ns
    tasks = [("life.fwd", 0, 0, 10 * us), ("life.fwd", 1, 12 * us, 20 * us), ("life.recover", 1, 27 * us, 30 * us),
             ("life.bwd", 1, 31 * us, 40 * us), ("life.bwd", 0, 60 * us, 70 * us), ("life.update", 0, 75 * us, 80 * us),
             ("life.fwd", 0, 100 * us, 110 * us)]
    gaps = loop.gaps_after(tasks, range(1, 2))
    # after the Forwards 2 and 7 us, the Recover 1 us; after layer 1's Backward 20 us; the
    # embedding's Backward (unit 0), the update and the last task give none
    assert gaps["forward"] == pytest.approx([2e-6, 7e-6, 1e-6])
    assert gaps["backward"] == pytest.approx([20e-6])


def test_the_backward_loop_is_a_line_in_the_bytes_released_through_the_two_sizes():
    small, large = 1e5, 1.1e6

    def repeat(fwd_small, fwd_large, bwd_small, bwd_large) -> dict:
        figs = loop.loop_figures({("loop", small, "forward"): [fwd_small], ("loop", large, "forward"): [fwd_large],
                                  ("loop", small, "backward"): [bwd_small], ("loop", large, "backward"): [bwd_large]})
        return {key: fig.median for key, fig in figs.items()}
    # 20 us + 1 us per 100 KB released; the forward loop the two sizes' mean
    assert repeat(6e-6, 8e-6, 21e-6, 31e-6) == pytest.approx(
        {"loop_forward": 7e-6, "loop_backward": 20e-6, "release_bandwidth": 100e9})
    # a larger model's Backward that released faster (noise) is no negative release
    got = repeat(6e-6, 6e-6, 21e-6, 20e-6)
    assert got["loop_backward"] == pytest.approx(21e-6, rel=1e-3) and got["release_bandwidth"] > 1e14
    # each figure is the median of the repeats', with their quartiles
    times = {("loop", small, "forward"): [6e-6, 6e-6, 6e-6], ("loop", large, "forward"): [6e-6, 6e-6, 6e-6],
             ("loop", small, "backward"): [21e-6, 24e-6, 22e-6], ("loop", large, "backward"): [31e-6, 44e-6, 32e-6]}
    figs = loop.loop_figures(times)
    assert figs["loop_backward"].median == pytest.approx(21e-6)         # 20, 22 and 21 us at no bytes
    assert figs["release_bandwidth"].median == pytest.approx(100e9)     # 100, 50 and 100 GB/s


@pytest.fixture(scope="module")
def synthetic():
    torch.set_num_threads(1)
    return loop.loop_executor(*loop.SIZES[0])


def test_the_synthetic_model_trains_on_the_real_executor_and_its_gaps_fill_the_step(synthetic):
    executor, batch, saved = synthetic
    assert len(executor.units.units) == loop.LAYERS + 2
    # what the planner counts a layer saving (fp32 per sequence): at least the layer's input
    # and its attention's queries, keys, values and output
    width, seq = loop.SIZES[0]
    assert saved >= 5 * width * seq * 4
    losses = [executor.step(batch(i)) for i in range(3)]
    assert all(torch.isfinite(torch.tensor(losses)))
    got = loop.measure_loop(executor, batch, steps=2)
    assert 0 < got["forward"] < got["backward"] < 1e-3
    # the tasks' spans and the gaps between them are the step, less its start and end
    spans = []
    executor.on_task = lambda p, op, start, end: spans.append((start, end))
    start = time.perf_counter_ns()
    executor.step(batch(5))
    wall = time.perf_counter_ns() - start
    executor.on_task = None
    inside = spans[-1][1] - spans[0][0]
    assert inside <= wall and sum(e - s for s, e in spans) < inside
    assert wall - inside < 0.2 * wall
