"""``benchmarks/serving_overhead.py`` and ``benchmarks/generate_overhead.py`` (issue 34): on a CPU,
a served step against fake graphs, the timing per block, the repeats a time limit lets run, and the
arithmetic of the summaries on made-up runs; on a GPU, each benchmark run small, end to end."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_run import run_benchmark

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def serving() -> ModuleType:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        import serving_overhead
    return serving_overhead


@pytest.fixture(scope="module")
def generating(serving: ModuleType) -> ModuleType:
    pytest.importorskip("transformers")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        import generate_overhead
    return generate_overhead


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# -- a served step ---------------------------------------------------------------------------------

class EagerGraph:
    """Stands in for a captured graph on a CPU: a replay runs the stack on the static input into
    the static output, and says which batch size replayed."""

    def __init__(self, size: int, server, replayed: list[int]) -> None:  # noqa: ANN001
        self.size, self.server, self.replayed = size, server, replayed

    def replay(self) -> None:
        self.replayed.append(self.size)
        self.server.outputs[self.size].copy_(self.server.stack(self.server.inputs[self.size]))


def cpu_server(serving: ModuleType, sizes: tuple[int, ...], calls: list[int], replayed: list[int]):  # noqa: ANN201
    from gpu_demo.lab.measure.overhead_stacks import plain_stack
    from gpu_demo.lab.moe.settings import RunSettings

    stack, (example,) = plain_stack(1, RunSettings(device="cpu", dtype="float32"))

    def counted(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        return stack(x)

    server = serving.Server(counted, {}, {size: torch.zeros(size, example.shape[1]) for size in sizes},
                            {size: torch.zeros(size, example.shape[1]) for size in sizes})
    server.graphs = {size: EagerGraph(size, server, replayed) for size in sizes}
    return server, stack


def test_a_step_fills_its_buckets_input_replays_that_graph_samples_its_rows_and_prefills_every_tenth(serving):
    calls, replayed = [], []
    server, stack = cpu_server(serving, (8, 4, 1), calls, replayed)
    requests = [3, 8, 1, 4, 5, 2, 7, 1, 1, 6, 3, 8]
    with torch.no_grad():
        for step, n in enumerate(requests):
            size = server.bucket(n)
            before = server.inputs[size].clone()
            tokens = serving.serve_step(server, n, step)
            assert not torch.equal(server.inputs[size], before)   # a fresh input, in the static one
            want = torch.softmax(stack(server.inputs[size])[:n], dim=-1).argmax(dim=-1)
            assert torch.equal(tokens, want) and tokens.device.type == "cpu"
    assert replayed == [{1: 1, 2: 4, 3: 4, 4: 4, 5: 8, 6: 8, 7: 8, 8: 8}[n] for n in requests]
    assert [rows for rows in calls if rows == serving.PREFILL_TOKENS] == [serving.PREFILL_TOKENS] * 2   # steps 0, 10


def test_the_batch_sizes_are_one_sequence_in_every_mode_and_reach_the_largest_bucket(serving):
    sizes = serving.batch_sizes(2000, 32)
    assert sizes == serving.batch_sizes(2000, 32) and min(sizes) == 1 and max(sizes) == 32


# -- timing ---------------------------------------------------------------------------------------

def test_blocks_are_timed_per_step_between_synchronizations(serving):
    clock, synced = Clock(), []

    def step(i: int) -> None:
        clock.now += 0.5 if i < 10 else 1.0

    blocks, cut = serving.timed_blocks(step, 25, 10, deadline=1e9, note=lambda: {"at": clock.now},
                                       sync=lambda: synced.append(clock.now), clock=clock)
    assert [b["steps"] for b in blocks] == [10, 10, 5] and not cut
    assert [b["at"] for b in blocks] == [5.0, 15.0, 20.0]
    assert [b["per_step_s"] for b in blocks] == [0.5, 1.0, 1.0]
    assert len(synced) == 4 and all(b["rss_mb"] > 0 for b in blocks)
    peaks = [b["peak_rss_mb"] for b in blocks]
    assert peaks == sorted(peaks) and peaks[0] > 0


def test_a_run_past_its_deadline_stops_after_the_block_that_crossed_it(serving):
    clock = Clock()

    def step(i: int) -> None:
        clock.now += 1.0

    blocks, cut = serving.timed_blocks(step, 100, 10, deadline=15.0, sync=lambda: None, clock=clock)
    assert len(blocks) == 2 and cut
    blocks, cut = serving.timed_blocks(step, 20, 10, deadline=clock.now + 15.0, sync=lambda: None, clock=clock)
    assert len(blocks) == 2 and not cut   # the last block ends the run: nothing was cut


def test_a_sanitizer_run_counts_each_failing_step_keeps_the_first_and_goes_on(serving):
    ran, errors = [], {"count": 0, "first": []}

    def step(i: int) -> None:
        ran.append(i)
        if i % 2:
            raise RuntimeError(f"boom {i}\nmore")

    guarded = serving.tolerant(step, errors)
    for i in range(10):
        guarded(i)
    assert ran == list(range(10)) and errors["count"] == 5
    assert errors["first"] == [f"step {i}: boom {i}" for i in (1, 3, 5)]


def test_a_sanitizer_race_is_said_as_its_two_kernels_and_anything_else_by_its_first_line(serving):
    from types import SimpleNamespace

    raised = RuntimeError("detected 1 errors\nmore")
    assert serving.said(raised) == "detected 1 errors"
    raised.errors = [SimpleNamespace(current_access=SimpleNamespace(operator="aten::copy_", stream=7),
                                     previous_access=SimpleNamespace(operator="aten::mm", stream=9))]
    assert serving.said(raised) == "race: aten::copy_ on stream 7 after aten::mm on stream 9"


def test_repeats_stop_where_the_slowest_so_far_would_end_past_the_limit(serving, capsys):
    clock, lengths = Clock(), iter([10.0, 30.0, 20.0, 20.0, 20.0])

    def one_repeat() -> dict:
        clock.now += next(lengths)
        return {"at": clock.now}

    result = serving.timed_repeats(one_repeat, 7, 100.0, "bench", lambda runs, progress: {**progress, "runs": runs},
                                   None, clock=clock)
    # a fifth would end at 100 by the last repeat's 20 s, at 110 by the slowest's 30 s: not started
    assert [r["at"] for r in result["runs"]] == [10.0, 40.0, 60.0, 80.0]
    assert result["repeats_asked"] == 7 and result["repeats_done"] == 4 and result["finished"]
    said = capsys.readouterr()
    assert "the first repeat took 10 s, so 7 take about 70 s of the 100 s limit\n" in said.err
    assert json.loads(said.out)["repeats_done"] == 4


def test_each_repeat_leaves_the_result_so_far_and_the_first_says_when_all_would_not_fit(serving, capsys, tmp_path):
    clock, out, seen = Clock(), tmp_path / "r" / "result.json", []

    def one_repeat() -> dict:
        if out.exists():
            seen.append(json.loads(out.read_text()))
        clock.now += 40.0
        return {}

    serving.timed_repeats(one_repeat, 7, 100.0, "bench", lambda runs, progress: {**progress, "runs": len(runs)},
                          out, clock=clock)
    assert seen == [{"repeats_asked": 7, "repeats_done": 1, "time_limit_s": 100.0, "finished": False, "runs": 1}]
    assert json.loads(out.read_text())["finished"] and json.loads(out.read_text())["runs"] == 2
    assert ": cut --steps or --repeats" in capsys.readouterr().err


# -- the summary -----------------------------------------------------------------------------------

def run(per_step: list[float], peaks: list[float], startup: float = 1.0, **extra) -> dict:  # noqa: ANN003
    blocks = [{"steps": 500, "per_step_s": t, "rss_mb": p - 10, "peak_rss_mb": p} for t, p in zip(per_step, peaks)]
    return {"startup_s": startup, "blocks": blocks, "cut_short": False, **extra}


def test_the_summary_takes_medians_per_block_and_pairs_each_ratio_within_its_repeat(serving):
    runs = [   # the host runs slow in the second repeat: both modes
        {"plain": run([1.0, 1.0, 1.0, 1.0], [100, 100, 100, 100], 1.0),
         "checked": run([1.5, 1.5, 1.5, 1.8], [200, 210, 220, 250], 1.5)},
        {"plain": run([2.0, 2.0, 2.0, 2.0], [100, 100, 100, 100], 2.0),
         "checked": run([3.0, 3.0, 3.0, 3.0], [200, 210, 215, 230], 2.4)},
        {"plain": run([1.0, 1.0, 1.0, 1.0], [100, 100, 100, 100], 1.0),
         "checked": run([1.4, 1.4, 1.4, 1.4], [200, 205, 210, 211], 1.8)},
    ]
    summary = serving.summarize(runs, ("plain", "checked"))
    checked = summary["modes"]["checked"]
    assert [b["per_step_s"] for b in checked["blocks"]] == [1.5, 1.5, 1.5, 1.8]
    assert checked["blocks"][0] == {"steps": 500, "repeats": 3, "per_step_s": 1.5, "rss_mb": 190, "peak_rss_mb": 200}
    # paired: 1.5, 1.5, 1.4 per repeat, median 1.5 (medians over repeats first would give 1.5/1.0 too, but
    # the last block pairs 1.8, 1.5, 1.4 -> 1.5, where the median checked block over the median plain one is 1.8)
    assert summary["ratios"]["checked_over_plain"] == [1.5, 1.5, 1.5, 1.5]
    assert summary["ratios"]["startup_checked_over_plain"] == 1.5     # 1.5, 1.2, 1.8 (the medians: 1.8 over 1.0)
    assert checked["last_over_first"] == 1.0                           # 1.2, 1.0, 1.0
    assert checked["memory_growth_mb"] == 20                           # after block 2 (1,000 steps): 40, 20, 6
    assert summary["modes"]["plain"]["memory_growth_mb"] == 0
    targets = summary["targets"]
    assert targets["checked_last_block_over_plain"] == {"value": 1.5, "under": 2.0, "met": True}
    assert targets["checked_last_block_over_first"]["met"] and targets["startup_checked_over_plain"]["met"]
    assert targets["checked_memory_growth_mb"] == {"value": 20, "under": 50.0, "met": True}


def test_quiet_pairs_the_last_block_over_the_repeats_whose_two_runs_met_the_host_at_its_quickest(serving):
    def probed(per_step: list[float], probe_ms: float) -> dict:
        return run(per_step, [100] * len(per_step), host={"probe_s": probe_ms / 1000})

    runs = [{"plain": probed([1.0, 1.0], 6.5), "checked": probed([1.8, 1.6], 7.0)},    # quiet: 1.6
            {"plain": probed([1.0, 1.0], 6.6), "checked": probed([2.5, 2.4], 14.0)},   # its checked run was slow
            {"plain": probed([1.0, 1.1], 7.8), "checked": probed([2.0, 1.98], 6.5)},   # quiet (7.8 <= 1.2 x 6.5): 1.8
            {"plain": run([1.0, 1.0], [100, 100]), "checked": probed([3.0, 3.0], 6.5)}]   # plain reported no probe
    summary = serving.summarize(runs, ("plain", "checked"))
    assert summary["quiet"] == {"probe_within": 1.2, "repeats": 2, "checked_last_block_over_plain": pytest.approx(1.7)}
    assert summary["targets"]["checked_last_block_over_plain"]["value"] == pytest.approx(2.1)   # all: 1.6, 2.4, 1.8, 3.0
    slow = [{"plain": probed([1.0], 6.5), "checked": probed([2.0], 9.0)}]
    assert serving.summarize(slow, ("plain", "checked"))["quiet"]["checked_last_block_over_plain"] is None


def test_a_failed_run_is_listed_and_left_out_and_a_missing_value_misses_its_target(serving):
    runs = [{"plain": run([1.0, 1.0], [100, 100]), "checked": {"mode": "checked", "failed": "timed out"},
             "csan": {"mode": "csan", "startup_error": "race: aten::mm on stream 1 after aten::copy_ on stream 2"}},
            {"plain": run([1.0, 1.0], [100, 100]), "checked": run([3.0, 6.0], [100, 300]),
             "csan": run([20.0, 20.0], [100, 100])}]
    summary = serving.summarize(runs, ("plain", "checked", "csan"))
    assert summary["modes"]["checked"]["failed"] == ["timed out"]
    assert summary["modes"]["csan"]["failed"] == ["start-up: race: aten::mm on stream 1 after aten::copy_ on stream 2"]
    assert summary["ratios"]["checked_over_plain"] == [3.0, 6.0] and summary["ratios"]["csan_over_plain"] == [20.0, 20.0]
    targets = summary["targets"]
    assert targets["checked_last_block_over_first"] == {"value": 2.0, "under": 1.3, "met": False}
    assert targets["checked_memory_growth_mb"] == {"value": None, "under": 50.0, "met": False}   # 1,000 steps: no later block


def test_the_command_line_holds_the_acceptance_defaults_and_refuses_ratios_without_plain(serving, capsys):
    args = serving.parse([])
    assert (args.steps, args.block, args.repeats, args.modes) == (100_000, 1000, 7, ("plain", "checked", "csan"))
    with pytest.raises(SystemExit):
        serving.parse(["--modes", "checked", "csan"])
    assert "--modes must include plain" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        serving.parse(["--block", "0"])
    for uneven in (["--steps", "2500"], ["--block", "25", "--steps", "100"]):
        with pytest.raises(SystemExit):
            serving.parse(uneven)
        assert "every block times as many steps and prefills" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="what a machine without CUDA is told")
def test_without_cuda_the_benchmarks_say_they_need_it(serving, generating, capsys):
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "benchmarks"))
        import serving_layers
    assert serving.main(["--steps", "3000"]) == 2 and generating.main([]) == 2 and serving_layers.main([]) == 2
    err = capsys.readouterr().err
    assert "serving_overhead: needs CUDA" in err and "generate_overhead: needs CUDA" in err
    assert "serving_layers: needs CUDA" in err


# -- generate ---------------------------------------------------------------------------------------

def test_generate_makes_all_its_tokens_with_the_tiny_llama_on_the_cpu(generating):
    model, ids = generating.tiny_llama(torch.device("cpu"))
    seconds, made = generating.generate_once(model, ids)
    assert seconds > 0 and made == generating.NEW_TOKENS and ids.shape == (1, generating.PROMPT_TOKENS)
    again, _ = generating.tiny_llama(torch.device("cpu"))
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))   # one model in every run


def test_the_generate_ratio_pairs_each_checked_run_with_the_plain_run_of_its_repeat(generating):
    def ran(median: float, tokens: int = 32) -> dict:
        return {"median_s": median, "startup_s": 1.0, "new_tokens": [tokens]}

    runs = [{"plain": ran(0.1), "checked": ran(0.15)}, {"plain": ran(0.2), "checked": ran(0.5)},
            {"plain": ran(0.1), "checked": ran(0.18)}, {"plain": ran(0.1), "checked": {"failed": "boom"}}]
    summary = generating.summarize(runs)
    assert summary["ratio"] == pytest.approx(1.8) and summary["within_target"]   # 1.5, 2.5, 1.8
    assert summary["modes"]["checked"]["failed"] == ["boom"] and summary["modes"]["plain"]["new_tokens"] == [32]
    assert summary["modes"]["checked"]["median_s"] == 0.18 and summary["modes"]["plain"]["median_s"] == 0.1


# -- on a GPU, end to end ----------------------------------------------------------------------------

def benchmark(tmp_path: Path, script: str, *args: str) -> dict:
    return run_benchmark(script, *args, out=tmp_path / "result.json", timeout=540)


@pytest.mark.gpu
def test_the_serving_benchmark_serves_every_mode_block_by_block_on_a_gpu(tmp_path):
    result = benchmark(tmp_path, "serving_overhead.py", "--steps", "40", "--block", "20", "--repeats", "1",
                       "--layers", "1", "--sizes", "1", "2", "4")
    assert result["provenance"]["gpu"] and result["repeats_done"] == 1
    plain, checked = result["modes"]["plain"], result["modes"]["checked"]
    assert len(plain["blocks"]) == len(checked["blocks"]) == 2 and not plain["failed"] and not checked["failed"]
    checked_run = result["runs"][0]["checked"]   # checked at every replay; a copy-out after it is recorded by none
    assert checked_run["check_s"] > 0 and checked_run["records_kept"] >= 0 and checked_run["quiet"]
    assert len(result["ratios"]["checked_over_plain"]) == 2
    csan = result["runs"][0]["csan"]
    assert "blocks" in csan or "startup_error" in csan, csan   # the sanitizer served, or said why it could not
    assert set(result["targets"]) == {"checked_last_block_over_first", "checked_last_block_over_plain",
                                      "checked_memory_growth_mb", "startup_checked_over_plain"}


@pytest.mark.gpu
def test_the_generate_benchmark_times_both_modes_on_a_gpu(tmp_path):
    pytest.importorskip("transformers")
    result = benchmark(tmp_path, "generate_overhead.py", "--repeats", "1", "--generates", "1")
    # The start-up replayed its graphs, so the check serves: generate's eager work is not kept.
    assert result["ratio"] > 0 and result["runs"][0]["checked"]["records_kept"] == 0
    assert result["modes"]["plain"]["new_tokens"] == result["modes"]["checked"]["new_tokens"] != []
