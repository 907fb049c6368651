"""gc_paused: no automatic collection inside, the collector's state restored after."""

import gc

import pytest

from ratc.gcpause import gc_paused


def test_nested_pauses_restore_the_outer_state():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()          # the inner pause leaves it to the outer one
    assert gc.isenabled()


def test_enabled_again_after_an_error():
    with pytest.raises(ValueError):
        with gc_paused():
            raise ValueError("inside")
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_explicit_collection_still_frees_cycles_inside():
    class Node:
        pass

    with gc_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
        assert gc.collect() > 0


def test_what_a_pause_keeps_is_frozen_once_the_command_asks_for_it():
    import ratc.gcpause as gcpause

    gc.unfreeze()
    try:
        with gc_paused():
            kept = [[i] for i in range(1000)]
        assert gc.get_freeze_count() == 0          # the default (tests): scanned as usual
        gcpause.freeze_after_pauses()
        with gc_paused():
            kept += [[i] for i in range(1000)]
        assert gc.get_freeze_count() >= 2000       # in the permanent generation, not scanned again
        assert gc.isenabled()
    finally:
        gcpause._FREEZE_SURVIVORS[0] = False
        gc.unfreeze()
