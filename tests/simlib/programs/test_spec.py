"""The shared scenario description refuses bad input with messages that list the valid values."""

import pytest

from simlib.programs.spec import MATRIX, MoEConfig


@pytest.mark.parametrize("change, message", [
    (dict(order="sideways"), "order='sideways' is not a valid choice; use one of: 'shared_first', 'routed_first'"),
    (dict(shared_mode="fast"), "'plain', 'static_buffer', 'raw_kernel'"),
    (dict(dispose="sometimes"), "'always', 'skip_in_capture', 'own_buffer', 'never'"),
    (dict(top_k=9), "top_k=9 is larger than experts=8"),
    (dict(tokens=0), "tokens must be a positive integer, got 0"),
    (dict(layers=62), "use 1 to 61"),
    (dict(clone="yes"), "clone must be True or False"),
    (dict(dispose_kind="shred"), "'set_empty', 'set_scalar', 'resize_storage'"),
    (dict(capture_mode="lenient"), "'global', 'thread_local', 'relaxed'"),
    (dict(alt_delay_us=-1.0), "alt_delay_us must be a number of microseconds >= 0"),
    (dict(alt_delay_us=float("nan")), "alt_delay_us must be a number"),
    (dict(record_stream=1), "record_stream must be True or False"),
])
def test_invalid_configurations_are_refused(change, message):
    with pytest.raises(ValueError) as info:
        MoEConfig(**change)
    assert message in str(info.value)


def test_unknown_options_are_named():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['colour'\]"):
        MoEConfig().with_(colour="red")


def test_round_trip_and_names():
    cfg = MoEConfig(order="shared_first", clone=True, inputs="stale")
    assert MoEConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.name == "shared_first/static_buffer/always/clone/inputs=stale"


def test_matrix_is_large_unique_and_covers_every_option():
    assert len(MATRIX) >= 16 and len({c.name for c in MATRIX}) == len(MATRIX)
    for field, values in [("order", {"shared_first", "routed_first"}),
                          ("shared_mode", {"plain", "static_buffer", "raw_kernel"}),
                          ("dispose", {"always", "skip_in_capture", "own_buffer", "never"}),
                          ("inputs", {"fresh", "stale", "same_as_eager"})]:
        assert {getattr(c, field) for c in MATRIX} == values
    assert any(c.clone for c in MATRIX)
    assert len({c.capture_fault for c in MATRIX}) >= 6


def test_results_recorded_before_the_new_options_still_load():
    old = {k: v for k, v in MoEConfig().to_dict().items()
           if k not in ("dispose_kind", "capture_mode", "alt_delay_us", "record_stream")}
    assert MoEConfig.from_dict(old) == MoEConfig()


def test_new_options_show_in_the_name_only_when_set():
    assert MoEConfig().name == "routed_first/static_buffer/always"
    cfg = MoEConfig(order="shared_first", dispose_kind="set_scalar", capture_fault="missing_fork",
                    capture_mode="relaxed", record_stream=True, alt_delay_us=20.0, replays=200)
    assert cfg.name == ("shared_first/static_buffer/always/set_scalar/fault=missing_fork/mode=relaxed/"
                        "record_stream/alt_delay=20us/replays=200")
