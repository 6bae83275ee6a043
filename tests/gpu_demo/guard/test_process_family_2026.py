"""The whole-process check on the 2026 family, on a CPU (the GPU played by ``gpu_fakes``).

Weights rebound after the capture (rule 14, at the replay after the sync), a host
counter the captured call advanced (rule 16, a warning when the capture ends,
before any replay), a graph's output kept over replays and read as a list
(rule 13, through the memory watch once the program serves), an op between
two graphs that hands the second a fresh tensor (rule 18), and a drafter's
replay over the target's logits kept as a weak reference (rule 11: the weak
reference, made from a pointer, is followed as a view). And the corpus's real
Hugging Face decode loop (where transformers is installed): with a sliding
window, the capture's end warns of both layers' host counts and rule 8 finds the
host count frozen into the positions; with full attention, nothing (its prefill
is another graph's call).
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext

import pytest

torch = pytest.importorskip("torch")

from gpu_fakes import FakeGraph, cuda_graph, fake_graph_methods, recording, streams  # noqa: E402

from gpu_demo import CaptureHazardWarning  # noqa: E402
from gpu_demo.guard.process import CaptureChecker  # noqa: E402
from simlib.checker.rules import (  # noqa: E402
    FROZEN_HOST_VALUE,
    GRAPHS_CLOBBER,
    HOST_STATE_BRANCH,
    INPUT_FRESH_BETWEEN_GRAPHS,
    OUTPUT_OVERWRITTEN,
    WEIGHTS_REBOUND,
)

__all__ = ["fake_graph_methods", "streams"]  # fixtures, used by name


def found(checker: CaptureChecker) -> list[tuple[str, str]]:
    """(what was checked, rule code) of every finding, in report order."""
    return [(report.text.split(" (capture-order check)")[0], f.code) for report in checker.reports
            for f in report.findings]


def whole_process(recorder) -> CaptureChecker:  # noqa: ANN001
    return CaptureChecker(recorder, on_hazard="warn", whole_process=True)


def test_a_weight_sync_that_rebinds_a_parameter_is_reported_at_the_replay_after_it(streams, fake_graph_methods):
    policy, x, graph = torch.nn.Linear(16, 16), torch.randn(4, 16), FakeGraph()
    with recording(streams) as recorder, torch.no_grad():
        checker = whole_process(recorder)
        with cuda_graph(graph, streams):
            policy(x)
        reference = policy.weight                                  # the trainer's KL reference: kept alive
        policy.weight = torch.nn.Parameter(reference + 0.1)       # the sync: a new tensor
        with pytest.warns(CaptureHazardWarning, match=WEIGHTS_REBOUND.code):
            torch.cuda.CUDAGraph.replay(graph)
    assert found(checker) == [("replay #0 of graph 0", WEIGHTS_REBOUND.code)]


def test_a_weight_sync_that_copies_in_place_is_clean(streams, fake_graph_methods):
    policy, x, graph = torch.nn.Linear(16, 16), torch.randn(4, 16), FakeGraph()
    with recording(streams) as recorder, torch.no_grad():
        checker = whole_process(recorder)
        with cuda_graph(graph, streams):
            policy(x)
        policy.weight.copy_(policy.weight + 0.1)
        torch.cuda.CUDAGraph.replay(graph)
    assert found(checker) == []


class SlidingWindow:
    def __init__(self) -> None:
        self.rows = torch.zeros(4, 16)
        self.cumulative_length_int = 0

    def update(self, row: torch.Tensor) -> torch.Tensor:
        if self.cumulative_length_int >= 4:
            self.rows.copy_(torch.cat((self.rows[1:], row)))
        else:
            self.rows.index_copy_(0, torch.tensor([self.cumulative_length_int]), row)
        self.cumulative_length_int += 1
        return self.rows


def test_a_host_counter_the_capture_advanced_warns_when_the_capture_ends(streams, fake_graph_methods):
    cache, x, graph = SlidingWindow(), torch.randn(1, 16), FakeGraph()
    with recording(streams) as recorder:
        checker = whole_process(recorder)
        for _ in range(2):
            cache.update(x)
        with cuda_graph(graph, streams):
            cache.update(x)
        assert found(checker) == [("capture of graph 0", HOST_STATE_BRANCH.code)]   # before any replay
        torch.cuda.CUDAGraph.replay(graph)
    (finding,) = [f for report in checker.reports for f in report.findings]
    assert finding.severity == "warning" and finding.label == "cache.cumulative_length_int"


def test_logits_kept_over_replays_and_stacked_are_read_after_the_replays_that_rewrote_them(
        streams, fake_graph_methods):
    head, hidden, graph = torch.nn.Linear(16, 32), torch.randn(2, 16), FakeGraph()
    with recording(streams) as recorder, torch.no_grad():
        checker = whole_process(recorder)
        with cuda_graph(graph, streams):
            logits = head(hidden)
        scores = []
        for step in range(3):
            hidden.copy_(torch.full((2, 16), float(step)))
            torch.cuda.CUDAGraph.replay(graph)
            scores.append(logits)                                  # no clone
        with pytest.warns(CaptureHazardWarning, match=OUTPUT_OVERWRITTEN.code):
            torch.stack(scores)
            checker.check_now()
    assert OUTPUT_OVERWRITTEN.code in {code for _, code in found(checker)}


def activation(h: torch.Tensor) -> torch.Tensor:
    """The eager op between the pieces, one call site for every step (as a piecewise runner's)."""
    return torch.relu(h)


def test_an_op_between_two_pieces_that_returns_a_fresh_tensor_is_a_fresh_input_of_the_next(
        streams, fake_graph_methods):
    up, down, x = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16), torch.randn(2, 16)
    first, second = FakeGraph(), FakeGraph()
    with recording(streams) as recorder, torch.no_grad():
        checker = whole_process(recorder)
        with cuda_graph(first, streams):
            h = up(x)
        act = activation(h)
        with cuda_graph(second, streams):
            down(act)
        with pytest.warns(CaptureHazardWarning, match=INPUT_FRESH_BETWEEN_GRAPHS.code):
            for _ in range(3):
                torch.cuda.CUDAGraph.replay(first)
                act = activation(h)                                # a fresh tensor each step
                torch.cuda.CUDAGraph.replay(second)
            checker.check_now()
    assert INPUT_FRESH_BETWEEN_GRAPHS.code in {code for _, code in found(checker)}


@pytest.mark.parametrize("program, hazardous", [("hf_sliding_window_decode", True),
                                                ("hf_full_attention_decode", False)])
def test_a_hugging_face_decode_step_captured_before_its_window_fills_is_reported_at_the_capture(
        program, hazardous, streams, fake_graph_methods):
    """The corpus script's loop: prefill and eager decode steps of the model and its eager twin,
    then the captured step. The prefill launches the decode's ops on 4 tokens (``arange(4)``,
    ``length.add_(4)``): another graph's call, never compared by rule 8."""
    pytest.importorskip("transformers")
    from gpu_demo.lab import corpus

    loop = corpus.load(program)
    pair = [loop.build(torch.device("cpu"), torch.float32, 0) for _ in range(2)]   # the model and its twin
    tokens = torch.randint(0, 256, (1, loop.PROMPT + 1))
    prompt = torch.arange(loop.PROMPT)
    ids, positions = tokens[:, loop.PROMPT:], prompt[-1:].clone()
    with recording(streams) as recorder, torch.no_grad():
        checker = whole_process(recorder)
        for model, cache in pair:
            loop.decode(model, cache, tokens[:, :loop.PROMPT], prompt)
        for step in range(loop.EAGER_STEPS):
            positions.fill_(loop.PROMPT + step)
            for model, cache in pair:
                loop.decode(model, cache, ids, positions)
        positions.fill_(loop.PROMPT + loop.EAGER_STEPS)
        model, cache = pair[0]
        # the user is told when the capture ends; a correct loop hears nothing
        told = pytest.warns(CaptureHazardWarning, match=HOST_STATE_BRANCH.code) if hazardous else nullcontext()
        with told, cuda_graph(FakeGraph(), streams):
            loop.decode(model, cache, ids, positions)
    found = {(f.code, f.label) for report in checker.reports for f in report.findings}
    layers = {(HOST_STATE_BRANCH.code, f"cache.layers[{i}].cumulative_length_int") for i in range(2)}
    if hazardous:   # the host count past the prompt, frozen into the mask's positions
        assert layers <= found and (FROZEN_HOST_VALUE.code, "add: other") in found
    else:
        assert found == set()


@pytest.mark.parametrize("copied, served, read", [(False, False, "softmax"), (True, False, "softmax"),
                                                 (False, True, "softmax"), (False, True, "clone")],
                         ids=["drafter_shared_pool", "fix_drafter_output_copied", "captured_once_serving",
                              "serving_copied_too_late"])
def test_a_drafters_replay_over_the_targets_logits_kept_as_a_weak_reference_is_a_clobber(
        copied, served, read, streams, fake_graph_methods):
    # drafter_shared_pool on fake graphs (vLLM #53488): the target's logits kept through the program's own
    # weak_ref (a storage made from their pointer: no op links it to them), and the draft's logits laid on
    # exactly their bytes in the shared pool. On the H200 the draft's capture is handed the freed block;
    # here its matmul writes a view of it (``out=``). The verification reads the weak reference after the
    # draft replayed: graph 1's bytes, unless the runner copied the target's logits out first. ``served``:
    # another graph replayed first, so the weak reference is made while the recorder stands aside.
    # ``read``: how the verification reads it; standing aside, a ``clone`` is recorded without the
    # dispatch stack (``OpRecorder.cloned``), and copying out after the draft replayed is too late.
    from gpu_demo.lab import corpus

    weak_ref = corpus.load("drafter_shared_pool").weak_ref
    target, draft = FakeGraph(), FakeGraph()
    w_target, w_draft = torch.randn(16, 32), torch.randn(16, 32)
    with recording(streams) as recorder, torch.no_grad():
        checker = whole_process(recorder)
        tokens, draft_hidden = torch.randn(4, 16), torch.randn(4, 16)
        if served:
            earlier = FakeGraph()
            with cuda_graph(earlier, streams):
                tokens.mul(2)
            torch.cuda.CUDAGraph.replay(earlier)
            assert checker.serving
        with cuda_graph(target, streams):
            logits = torch.matmul(tokens, w_target)
        target_logits = weak_ref(logits)
        with cuda_graph(draft, streams):
            torch.matmul(draft_hidden, w_draft, out=logits.view(4, 32))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CaptureHazardWarning)
            for _ in range(2):
                torch.cuda.CUDAGraph.replay(target)
                verified = target_logits.clone() if copied else target_logits
                draft_hidden.copy_(verified[:, :16])
                torch.cuda.CUDAGraph.replay(draft)
                verified.clone() if read == "clone" else verified.softmax(-1)   # rejection sampling reads it
            checker.check_now()
    assert [code for _, code in found(checker)] == ([] if copied else [GRAPHS_CLOBBER.code])


@pytest.mark.parametrize("kept", ["view", "clone"])
def test_a_served_loop_that_keeps_a_view_of_the_logits_per_step_is_caught_and_one_that_copies_is_clean(
        kept, streams, fake_graph_methods):
    # Serving, the recorder stands aside: a basic index of a graph's result (``logits[:, -1]``) is taken
    # down as a view without the dispatch stack, and still dates the view by its replay (rule 13, case a).
    head, hidden, graph = torch.nn.Linear(16, 32), torch.randn(2, 16), FakeGraph()
    with recording(streams) as recorder, torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checker = whole_process(recorder)
        with cuda_graph(graph, streams):
            logits = head(hidden)
        last = []
        for step in range(3):
            hidden.copy_(torch.full((2, 16), float(step)))
            torch.cuda.CUDAGraph.replay(graph)
            assert recorder.journal.aside
            last.append(logits[:, -1] if kept == "view" else logits[:, -1].clone())
        torch.stack(last)
        checker.check_now()
    assert (OUTPUT_OVERWRITTEN.code in {code for _, code in found(checker)}) == (kept == "view")
